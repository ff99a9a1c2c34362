package procstat

import (
	"bytes"
	"errors"
	"fmt"
	"path"
	"strconv"
	"strings"
)

// memCgroup is the memory cgroup of a process, resolved to directories.
type memCgroup struct {
	v2   bool
	path string   // as /proc/<pid>/cgroup shows it
	dirs []string // the cgroup's directory first, then its ancestors up to the hierarchy's mount point
}

// cgroupStat is what one sample reads from the memory cgroup.
type cgroupStat struct {
	path  string
	peak  int64 // bytes; 0 when the kernel has no peak file
	limit int64 // bytes; 0 when no limit is set on the path
	mem   CgroupMemStat
}

// cgroupResolver finds the memory cgroup directory of a process. It caches
// the answer against the content of /proc/<pid>/cgroup, so mountinfo is read
// again only when the process moves.
type cgroupResolver struct {
	procRoot, sysRoot string

	key    []byte
	cached *memCgroup
}

// stat reads the peak and the effective limit of pid's memory cgroup. A
// process without a memory cgroup, or a kernel without the files, gives a zero
// cgroupStat and no error.
func (c *cgroupResolver) stat(r *reader, pid int32) (cgroupStat, error) {
	cg, err := c.resolve(r, pid)
	if err != nil || cg == nil {
		return cgroupStat{}, err
	}
	return readMemCgroup(r, cg)
}

// readMemCgroup reads the peak and the effective limit of a resolved memory
// cgroup.
func readMemCgroup(r *reader, cg *memCgroup) (cgroupStat, error) {
	st := cgroupStat{path: cg.path}
	peakFile, limitFile := "memory.max_usage_in_bytes", "memory.limit_in_bytes"
	if cg.v2 {
		// memory.peak exists since Linux 5.19.
		peakFile, limitFile = "memory.peak", "memory.max"
	}
	var errs []error
	if v, ok, err := readCgroupValue(r, cg.dirs[0]+"/"+peakFile); err != nil {
		errs = append(errs, err)
	} else if ok {
		st.peak = v
	}
	if b, err := r.read(cg.dirs[0] + "/memory.stat"); err == nil {
		m, perr := ParseMemoryStat(b, cg.v2)
		if perr != nil {
			errs = append(errs, fmt.Errorf("%s: %w", cg.dirs[0], perr))
		}
		st.mem = m
	} else if !vanished(err) {
		errs = append(errs, err)
	}
	// A limit anywhere above the process's cgroup applies to it: Slurm's
	// task/cgroup sets the limit on job_<id> and step_<id>, not on task_<n>.
	for _, dir := range cg.dirs {
		v, ok, err := readCgroupValue(r, dir+"/"+limitFile)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		if ok && (st.limit == 0 || v < st.limit) {
			st.limit = v
		}
	}
	return st, errors.Join(errs...)
}

// unlimitedV1 is the smallest value treated as "no limit" in cgroup v1, which
// reports an unlimited memory.limit_in_bytes as PAGE_COUNTER_MAX*PAGE_SIZE
// (9223372036854771712 on 4 KiB pages).
const unlimitedV1 = 1 << 62

// readCgroupValue reads a one-number cgroup file. ok is false for a missing
// file and for "max" or the v1 unlimited value.
func readCgroupValue(r *reader, file string) (v int64, ok bool, err error) {
	b, err := r.read(file)
	if err != nil {
		if vanished(err) {
			return 0, false, nil
		}
		return 0, false, err
	}
	b = bytes.TrimSpace(b)
	if string(b) == "max" {
		return 0, false, nil
	}
	u, err := parseUint(b)
	if err != nil {
		return 0, false, err
	}
	if u >= unlimitedV1 {
		return 0, false, nil
	}
	return int64(u), true, nil
}

func (c *cgroupResolver) resolve(r *reader, pid int32) (*memCgroup, error) {
	b, err := r.read(c.procRoot + "/" + strconv.Itoa(int(pid)) + "/cgroup")
	if err != nil {
		if vanished(err) {
			return nil, nil
		}
		return nil, err
	}
	if c.key != nil && bytes.Equal(b, c.key) {
		return c.cached, nil
	}
	c.key = append(c.key[:0], b...)
	c.cached = nil
	v1Path, v2Path, v1, v2 := parseProcCgroup(b)
	if !v1 && !v2 {
		return nil, nil
	}
	var mounts []cgroupMount
	if mi, err := r.read(c.procRoot + "/self/mountinfo"); err == nil {
		mounts = parseMountinfo(mi)
	} else {
		// Without mountinfo, assume the usual layout.
		mounts = []cgroupMount{
			{v2: false, root: "/", mountPoint: "/sys/fs/cgroup/memory"},
			{v2: true, root: "/", mountPoint: "/sys/fs/cgroup"},
		}
	}
	// Prefer the v1 memory hierarchy: on a hybrid host the v2 hierarchy is
	// mounted too but does not have the memory controller.
	if v1 {
		if cg := c.match(mounts, false, v1Path); cg != nil {
			c.cached = cg
			return cg, nil
		}
	}
	if v2 {
		if cg := c.match(mounts, true, v2Path); cg != nil {
			c.cached = cg
		}
	}
	return c.cached, nil
}

// match finds the mount of the hierarchy that shows cgPath and builds its
// directories.
func (c *cgroupResolver) match(mounts []cgroupMount, v2 bool, cgPath string) *memCgroup {
	for _, m := range mounts {
		if m.v2 != v2 {
			continue
		}
		rel, ok := relTo(m.root, cgPath)
		if !ok {
			continue
		}
		mp := c.rebase(m.mountPoint)
		cg := &memCgroup{v2: v2, path: cgPath}
		for {
			cg.dirs = append(cg.dirs, path.Join(mp, rel))
			if rel == "/" {
				break
			}
			rel = path.Dir(rel)
		}
		return cg
	}
	return nil
}

// relTo returns p relative to root, as an absolute path, when p is root or
// below it. A mount whose root is not above p does not show p (for example a
// container's mount of its own cgroup).
func relTo(root, p string) (string, bool) {
	root, p = path.Clean(root), path.Clean(p)
	if root == "/" {
		return p, true
	}
	if p == root {
		return "/", true
	}
	if strings.HasPrefix(p, root+"/") {
		return p[len(root):], true
	}
	return "", false
}

// rebase maps a mount point under /sys to the sampler's SysRoot, so fixture
// trees can stand in for sysfs.
func (c *cgroupResolver) rebase(mp string) string {
	if c.sysRoot == "/sys" {
		return mp
	}
	if mp == "/sys" || strings.HasPrefix(mp, "/sys/") {
		return c.sysRoot + mp[len("/sys"):]
	}
	return mp
}

// parseProcCgroup reads /proc/<pid>/cgroup lines "id:controllers:path" and
// returns the path in the v1 hierarchy that has the memory controller and the
// path in the v2 hierarchy ("0::path").
func parseProcCgroup(b []byte) (v1Path, v2Path string, v1, v2 bool) {
	for _, line := range strings.Split(string(b), "\n") {
		id, rest, ok := strings.Cut(line, ":")
		if !ok {
			continue
		}
		ctrls, p, ok := strings.Cut(rest, ":")
		if !ok {
			continue
		}
		if id == "0" && ctrls == "" {
			v2Path, v2 = p, true
			continue
		}
		for _, ctrl := range strings.Split(ctrls, ",") {
			if ctrl == "memory" {
				v1Path, v1 = p, true
			}
		}
	}
	return v1Path, v2Path, v1, v2
}

type cgroupMount struct {
	v2         bool
	root       string // the cgroup shown at the mount point
	mountPoint string
}

// parseMountinfo returns the cgroup2 mounts and the cgroup v1 mounts that
// carry the memory controller (proc(5), /proc/<pid>/mountinfo).
func parseMountinfo(b []byte) []cgroupMount {
	var out []cgroupMount
	for _, line := range strings.Split(string(b), "\n") {
		pre, post, ok := strings.Cut(line, " - ")
		if !ok {
			continue
		}
		f := strings.Fields(pre)
		g := strings.Fields(post)
		if len(f) < 5 || len(g) < 1 {
			continue
		}
		m := cgroupMount{root: unescapeMount(f[3]), mountPoint: unescapeMount(f[4])}
		switch g[0] {
		case "cgroup2":
			m.v2 = true
		case "cgroup":
			if len(g) < 3 || !hasOption(g[2], "memory") {
				continue
			}
		default:
			continue
		}
		out = append(out, m)
	}
	return out
}

func hasOption(opts, want string) bool {
	for _, o := range strings.Split(opts, ",") {
		if o == want {
			return true
		}
	}
	return false
}

// unescapeMount undoes mountinfo's octal escapes (\040 for a space).
func unescapeMount(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var sb strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+4 <= len(s) {
			if v, err := strconv.ParseUint(s[i+1:i+4], 8, 8); err == nil {
				sb.WriteByte(byte(v))
				i += 3
				continue
			}
		}
		sb.WriteByte(s[i])
	}
	return sb.String()
}
