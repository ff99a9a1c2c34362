package procstat

import (
	"bytes"
	"errors"
	"fmt"
	"strconv"
)

// MemCgroup is the memory cgroup of a process, resolved while the process
// lives so that it can still be read after the process has exited: the
// kernel keeps a cgroup's peak and OOM-kill counter after its processes are
// gone, and the process that was OOM-killed is precisely the one whose
// /proc/<pid>/cgroup can no longer be read.
type MemCgroup struct {
	cg *memCgroup
}

// CgroupMemory is one reading of a memory cgroup. Zero values mean unknown.
type CgroupMemory struct {
	// Path is the cgroup as /proc/<pid>/cgroup showed it.
	Path string
	// PeakBytes is the kernel's peak memory use of the cgroup (v2
	// memory.peak, Linux 5.19+; v1 memory.max_usage_in_bytes); 0 when the
	// kernel has no such file.
	PeakBytes int64
	// LimitBytes is the tightest memory limit on the cgroup or any of its
	// ancestors (v2 memory.max, v1 memory.limit_in_bytes); 0 when unlimited.
	LimitBytes int64
	// OOMKills is how many processes the kernel's OOM killer has killed in
	// the cgroup since it was created (v2 memory.events oom_kill, which also
	// counts descendants; v1 memory.oom_control oom_kill, Linux 4.13+).
	// OOMKillsKnown is false when the kernel does not count them.
	OOMKills      int64
	OOMKillsKnown bool
	// Stat is the cgroup's charge split into anonymous memory and page
	// cache (memory.stat) at the time of the reading.
	Stat CgroupMemStat
}

// OpenMemCgroup resolves the memory cgroup of pid, reading procRoot
// ("/proc") and the cgroup mounts under sysRoot ("/sys"). It returns nil and
// no error when the process has no memory cgroup (none mounted, or not
// visible from here) or has already vanished.
func OpenMemCgroup(procRoot, sysRoot string, pid int32) (*MemCgroup, error) {
	c := cgroupResolver{procRoot: procRoot, sysRoot: sysRoot}
	var r reader
	cg, err := c.resolve(&r, pid)
	if err != nil {
		return nil, fmt.Errorf("procstat: memory cgroup of pid %d: %w", pid, err)
	}
	if cg == nil {
		return nil, nil
	}
	return &MemCgroup{cg: cg}, nil
}

// Path is the cgroup as /proc/<pid>/cgroup showed it.
func (m *MemCgroup) Path() string { return m.cg.path }

// Read reads the cgroup's peak, limit and OOM-kill counter. A missing file
// (an old kernel, a cgroup removed meanwhile) leaves its value unknown and is
// not an error; the error reports files that could not be read or parsed,
// next to whatever was read.
func (m *MemCgroup) Read() (CgroupMemory, error) {
	var r reader
	out := CgroupMemory{Path: m.cg.path}
	st, err := readMemCgroup(&r, m.cg)
	out.PeakBytes, out.LimitBytes, out.Stat = st.peak, st.limit, st.mem
	errs := []error{err}
	eventsFile, key := "memory.oom_control", "oom_kill"
	if m.cg.v2 {
		eventsFile = "memory.events"
	}
	b, err := r.read(m.cg.dirs[0] + "/" + eventsFile)
	switch {
	case err != nil && !vanished(err):
		errs = append(errs, err)
	case err == nil:
		v, ok, perr := keyedValue(b, key)
		if perr != nil {
			errs = append(errs, fmt.Errorf("%s/%s: %w", m.cg.dirs[0], eventsFile, perr))
		}
		out.OOMKills, out.OOMKillsKnown = v, ok
	}
	return out, errors.Join(errs...)
}

// keyedValue finds "key value" among the lines of a flat-keyed cgroup file
// (memory.events, memory.oom_control).
func keyedValue(b []byte, key string) (int64, bool, error) {
	for _, line := range bytes.Split(b, []byte("\n")) {
		k, v, ok := bytes.Cut(bytes.TrimSpace(line), []byte(" "))
		if !ok || string(k) != key {
			continue
		}
		n, err := strconv.ParseInt(string(bytes.TrimSpace(v)), 10, 64)
		if err != nil || n < 0 {
			return 0, false, fmt.Errorf("%s: bad value %q", key, truncateBytes(v, 32))
		}
		return n, true, nil
	}
	return 0, false, nil
}

func truncateBytes(b []byte, n int) string {
	if len(b) > n {
		b = b[:n]
	}
	return string(b)
}
