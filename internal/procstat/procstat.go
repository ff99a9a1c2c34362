// Package procstat samples the CPU and memory use of a process tree: the
// training process started by the wrapper and all its descendants (PyTorch
// DataLoader workers, launchers' worker processes).
//
// Sampling is best effort and bounded. A process that vanishes between
// listing and reading is skipped, never an error. Any other read failure, a
// sample that outlives its timeout, or a panic makes the sample a gap: it is
// counted in Stat.Gaps and returned as an error next to whatever was measured.
// Sample never exits the program.
//
// Everything is read from procfs and cgroupfs directly, with one reused buffer
// and no *os.File per read; the per-process cache is keyed by PID and
// starttime (the create time), so a reused PID is a new process. gopsutil,
// which this package owns, lists the PIDs when the kernel has no children
// files. Its per-process accessors are not used on the hot path: Times and
// CreateTime each re-read /proc/<pid>/stat, which the sample reads anyway and
// must read fresh to notice PID reuse (a gopsutil handle caches nothing else
// this sample needs); VmHWM is not exposed; Process.Children scans all of /proc
// for every process asked about; MemoryMaps falls back to the full smaps.
package procstat

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"sync/atomic"
	"time"
)

// Stat is one sample of a process tree.
type Stat struct {
	// At is when the sample started.
	At time.Time
	// PIDs of the live processes of the tree, ascending; zombies excluded.
	PIDs []int32
	// Procs is len(PIDs); 0 when the root has exited.
	Procs int
	// RSSBytes is the sum of the processes' resident set sizes. Pages shared
	// between processes (fork's copy-on-write pages in DataLoader workers,
	// shared libraries) are counted once per process, so this over-counts;
	// PSSBytes does not.
	RSSBytes int64
	// PSSBytes is the sum of the proportional set sizes (smaps_rollup's Pss)
	// from the last PSS pass, at PSSAt; see Sampler.PSSInterval. A process
	// whose smaps_rollup could not be read counts with its RSS, an upper bound
	// of its PSS. 0 when no process's smaps_rollup was readable (kernels
	// before 4.14) or PSS is disabled.
	PSSBytes int64
	// PSSAt is when PSSBytes was measured; zero if never.
	PSSAt time.Time
	// PeakRSSBytes is the largest tree RSS seen since the Sampler was created:
	// the maximum over samples of max(RSSBytes, each process's VmHWM).
	//
	// It is a lower bound of the tree's true peak. A sum of RSS between two
	// samples is not seen; VmHWM catches the peak of each single process even
	// between samples (the spike before an OOM kill), but not the moment
	// several processes peaked together, and a process that exits between two
	// samples takes its VmHWM with it. CgroupPeakBytes is measured by the
	// kernel and has none of these holes.
	PeakRSSBytes int64
	// CPUPercent is the tree's CPU use since the previous sample, 100 per
	// busy core (two busy cores give 200): the user+system time each process
	// gained, over the wall time between its two readings. A process born
	// since the previous sample counts with all its CPU time. The CPU time a
	// process used between its last sample and its exit is not seen. 0 on the
	// first sample.
	CPUPercent float64
	// CgroupPath is the root process's memory cgroup, as /proc/<pid>/cgroup
	// shows it (cgroup v1 memory hierarchy, else v2); empty when none is
	// found.
	CgroupPath string
	// CgroupPeakBytes is that cgroup's peak memory use as kept by the kernel
	// (v2 memory.peak, Linux 5.19+; v1 memory.max_usage_in_bytes). It counts
	// every process in the cgroup and page cache (the checkpoints the job
	// wrote stay cached): it is not the job's memory need, PeakRSSBytes is.
	// 0 when not available.
	CgroupPeakBytes int64
	// CgroupMem is the cgroup's current charge split into anonymous memory,
	// page cache and unreclaimable kernel memory (memory.stat); Known is
	// false when not available.
	CgroupMem CgroupMemStat
	// CgroupLimitBytes is the tightest memory limit on the cgroup or any of its
	// ancestors (v2 memory.max, v1 memory.limit_in_bytes): under Slurm the
	// limit is set on the job and step cgroups above the task's. 0 when
	// unlimited or not available.
	CgroupLimitBytes int64
	// Gaps counts the samples of this Sampler that failed in part or whole,
	// this one included.
	Gaps int
}

// Sampler samples one process tree. Create it with New, adjust the exported
// fields before the first Sample, and call Sample periodically. Sample may be
// called from any goroutine; a call made while another sample is still
// running is a gap.
type Sampler struct {
	// ProcRoot is the procfs mount point. Default "/proc".
	ProcRoot string
	// SysRoot is the sysfs mount point; cgroup mount points found in
	// mountinfo under /sys are read from under it. Default "/sys".
	SysRoot string
	// Timeout bounds one Sample. A sample still reading when it expires is
	// abandoned and counted as a gap; the next Sample is a gap too until the
	// abandoned read returns (a /proc read can block on a process stuck
	// inside the kernel). Default 500ms.
	Timeout time.Duration
	// PSSInterval is how often the sample also reads smaps_rollup for PSS.
	// That read walks the page tables of every process under its mmap lock,
	// about 3 ms per GiB resident, so it is not done every second by
	// default. 0 reads PSS on every sample; negative disables it. Default 30s.
	PSSInterval time.Duration
	// MaxProcs bounds the tree; a larger tree is truncated and the sample
	// counted as a gap. Default 4096.
	MaxProcs int

	root int32
	sem  chan struct{} // held by the goroutine that owns st
	gaps atomic.Int64
	peak atomic.Int64 // copy of st.peak for samples that time out
	st   *state
}

// Default field values.
const (
	DefaultTimeout     = 500 * time.Millisecond
	DefaultPSSInterval = 30 * time.Second
	DefaultMaxProcs    = 4096
)

// New returns a Sampler of the tree rooted at pid.
func New(pid int32) *Sampler {
	return &Sampler{
		ProcRoot:    "/proc",
		SysRoot:     "/sys",
		Timeout:     DefaultTimeout,
		PSSInterval: DefaultPSSInterval,
		MaxProcs:    DefaultMaxProcs,
		root:        pid,
		sem:         make(chan struct{}, 1),
		st: &state{
			procs: make(map[int32]*entry),
			now:   time.Now,
		},
	}
}

var errBusy = errors.New("previous sample still running")

type result struct {
	stat Stat
	err  error
}

// Sample measures the tree once. It always returns a usable Stat; a non-nil
// error means the sample is a gap (counted in Stat.Gaps): the Stat then holds
// what could be measured, possibly nothing but At, Gaps and PeakRSSBytes.
func (s *Sampler) Sample(ctx context.Context) (Stat, error) {
	start := time.Now()
	timeout := s.Timeout
	if timeout <= 0 {
		timeout = DefaultTimeout
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	select {
	case s.sem <- struct{}{}:
	default:
		return s.gap(start, fmt.Errorf("procstat: sample of pid %d: %w", s.root, errBusy))
	}
	done := make(chan result, 1) // buffered: an abandoned sample must not block
	go func() {
		var res result
		defer func() {
			// Sampling parses kernel output; a parser bug must cost a gap,
			// not the wrapper (and with it the job's monitoring).
			if p := recover(); p != nil {
				res = result{stat: Stat{At: start, PeakRSSBytes: s.peak.Load()},
					err: fmt.Errorf("procstat: panic while sampling pid %d: %v", s.root, p)}
			}
			<-s.sem // release before reporting, so the next Sample finds it free
			done <- res
		}()
		res.stat, res.err = s.st.sample(ctx, s)
		s.peak.Store(s.st.peak)
	}()
	select {
	case res := <-done:
		if res.err != nil {
			res.stat.Gaps = int(s.gaps.Add(1))
			return res.stat, fmt.Errorf("procstat: sample of pid %d: %w", s.root, res.err)
		}
		res.stat.Gaps = int(s.gaps.Load())
		return res.stat, nil
	case <-ctx.Done():
		return s.gap(start, fmt.Errorf("procstat: sample of pid %d: %w", s.root, ctx.Err()))
	}
}

func (s *Sampler) gap(at time.Time, err error) (Stat, error) {
	n := s.gaps.Add(1)
	return Stat{At: at, PeakRSSBytes: s.peak.Load(), Gaps: int(n)}, err
}

// state is the Sampler's memory between samples. Only the goroutine holding
// Sampler.sem touches it.
type state struct {
	r    reader
	disc discovery
	cg   cgroupResolver
	now  func() time.Time

	procs     map[int32]*entry // by PID; entry.start tells PID reuse apart
	gen       uint64
	havePrev  bool
	prevAt    time.Time
	prevUp    uint64 // uptime in ticks at prevAt
	rootStart uint64 // root's starttime, 0 until first seen
	peak      int64
	pss       int64
	pssAt     time.Time // when pss was measured
	pssTried  time.Time // when a PSS pass last started
}

// entry is the CPU baseline of one process.
type entry struct {
	start uint64    // starttime: with the PID, the process's identity
	cpu   uint64    // utime+stime ticks at the last reading
	at    time.Time // time of the last reading
	seen  uint64    // generation of the last sample that saw it
}

func (st *state) sample(ctx context.Context, s *Sampler) (Stat, error) {
	st.disc.procRoot, st.cg.procRoot, st.cg.sysRoot = s.ProcRoot, s.ProcRoot, s.SysRoot
	maxProcs := s.MaxProcs
	if maxProcs <= 0 {
		maxProcs = DefaultMaxProcs
	}
	now := st.now()
	var errs []error

	up, upErr := st.uptime(s.ProcRoot)
	if upErr != nil {
		errs = append(errs, upErr)
	}
	members, err := st.disc.walk(ctx, &st.r, s.root, maxProcs)
	if err != nil {
		errs = append(errs, err)
	}
	complete := err == nil

	st.gen++
	pssDue := st.pssDue(s.PSSInterval, now)
	t, readErrs, ok := st.readMembers(ctx, s.ProcRoot, members, pssDue, now, upErr == nil)
	errs = append(errs, readErrs...)
	complete = complete && ok
	if complete {
		for pid, e := range st.procs {
			if e.seen != st.gen {
				delete(st.procs, pid)
			}
		}
	}
	st.havePrev = upErr == nil
	st.prevAt, st.prevUp = now, up

	out := st.stat(s.PSSInterval, t, now, pssDue && complete)
	if out.Procs > 0 {
		cg, err := st.cg.stat(&st.r, s.root)
		if err != nil {
			errs = append(errs, err)
		}
		out.CgroupPath, out.CgroupPeakBytes, out.CgroupLimitBytes, out.CgroupMem = cg.path, cg.peak, cg.limit, cg.mem
	}
	return out, errors.Join(errs...)
}

// pssDue says whether this sample reads PSS, and notes the attempt. It is
// scheduled from the last attempt, not the last success: a pass that
// cannot finish within Timeout (huge processes) costs one gap per
// interval, not one per sample.
func (st *state) pssDue(interval time.Duration, now time.Time) bool {
	due := interval >= 0 && (st.pssTried.IsZero() || now.Sub(st.pssTried) >= interval)
	if due {
		st.pssTried = now
	}
	return due
}

// stat is the sample's Stat from the tally t (cgroup figures aside);
// pssDone: t holds a complete PSS pass.
func (st *state) stat(pssInterval time.Duration, t tally, now time.Time, pssDone bool) Stat {
	out := Stat{At: now, PIDs: t.pids, RSSBytes: t.rss}
	slices.Sort(out.PIDs)
	out.Procs = len(out.PIDs)
	out.CPUPercent = t.cpu * 100
	if pssDone {
		st.pss, st.pssAt = 0, now
		if t.pssRead > 0 {
			st.pss = t.pssSum
		}
	}
	if pssInterval >= 0 {
		out.PSSBytes, out.PSSAt = st.pss, st.pssAt
	}
	st.peak = max(st.peak, out.RSSBytes, t.maxHWM)
	out.PeakRSSBytes = st.peak
	return out
}

// tally sums one sample's readings of the tree's processes.
type tally struct {
	pids           []int32
	rss            int64
	cpu            float64 // CPU-seconds per second
	maxHWM, pssSum int64
	pssRead        int
}

// readMembers reads the tree's processes, the root first; complete is
// false when one could not be read (or ctx ended), so that the baselines
// of processes not seen are kept.
func (st *state) readMembers(ctx context.Context, procRoot string, members []member, pssDue bool, now time.Time, upOK bool) (t tally, errs []error, complete bool) {
	complete = true
	for i, m := range members {
		if err := ctx.Err(); err != nil {
			errs = append(errs, err)
			complete = false
			break
		}
		p, ok, err := st.readProc(procRoot, m, pssDue)
		if err != nil {
			errs = append(errs, err)
			complete = false
		}
		if i == 0 {
			// The root: gone, a zombie, or its PID now belongs to another
			// process. Its former children have been reparented away.
			if !ok || (st.rootStart != 0 && p.stat.startTime != st.rootStart) {
				t.pids = t.pids[:0]
				break
			}
			st.rootStart = p.stat.startTime
		}
		if !ok {
			continue
		}
		t.pids = append(t.pids, m.pid)
		t.rss += p.status.rss
		t.maxHWM = max(t.maxHWM, p.status.hwm)
		switch {
		case p.pssOK:
			t.pssSum += p.pss
			t.pssRead++
		case pssDue:
			t.pssSum += p.status.rss // an upper bound of its PSS
		}
		t.cpu += st.cpuRate(m.pid, p.stat, now, upOK)
	}
	return t, errs, complete
}

// procReading is what one sample reads of one process.
type procReading struct {
	stat   procStat
	status procStatus
	pss    int64
	pssOK  bool
}

// readProc reads one process. ok is false when it vanished or is a zombie.
func (st *state) readProc(procRoot string, m member, wantPSS bool) (p procReading, ok bool, err error) {
	dir := procRoot + "/" + strconv.Itoa(int(m.pid))
	p.stat = m.stat
	if !m.haveStat {
		b, err := st.r.read(dir + "/stat")
		if err == nil {
			p.stat, err = parseStat(b)
		}
		if err != nil {
			if vanished(err) {
				return p, false, nil
			}
			return p, false, err
		}
	}
	if p.stat.state == 'Z' || p.stat.state == 'X' {
		return p, false, nil
	}
	b, err := st.r.read(dir + "/status")
	if err == nil {
		p.status, err = parseStatus(b)
	}
	if err != nil {
		if vanished(err) {
			return p, false, nil
		}
		return p, false, err
	}
	if wantPSS {
		b, err := st.r.read(dir + "/smaps_rollup")
		if err == nil {
			p.pss, err = parsePSS(b)
		}
		switch {
		case err == nil:
			p.pssOK = true
		case errors.Is(err, errVanished):
			return p, false, nil
		}
		// Other errors (EACCES for a non-dumpable process, ENOENT on a
		// kernel without smaps_rollup) leave this process without PSS; they
		// are not gaps.
	}
	return p, true, nil
}

// cpuRate returns the CPU-seconds per second the process used since its last
// reading and records this reading as the next baseline.
func (st *state) cpuRate(pid int32, ps procStat, now time.Time, upOK bool) float64 {
	var rate float64
	e := st.procs[pid]
	switch {
	case e == nil || e.start != ps.startTime:
		// New to the sampler, or the PID was reused. If the process was born
		// after the previous sample, all its CPU time falls in this interval;
		// otherwise (first sample, or a process discovery missed last time)
		// this reading is only a baseline.
		if e == nil {
			e = &entry{}
			st.procs[pid] = e
		}
		*e = entry{start: ps.startTime}
		if st.havePrev && upOK && ps.startTime >= st.prevUp {
			if dt := now.Sub(st.prevAt).Seconds(); dt > 0 {
				rate = float64(ps.cpuTicks) / userHZ / dt
			}
		}
	case ps.cpuTicks >= e.cpu:
		if dt := now.Sub(e.at).Seconds(); dt > 0 {
			rate = float64(ps.cpuTicks-e.cpu) / userHZ / dt
		}
	}
	e.cpu, e.at, e.seen = ps.cpuTicks, now, st.gen
	return rate
}

// uptime reads the time since boot in ticks, the clock of a process's
// starttime.
func (st *state) uptime(procRoot string) (uint64, error) {
	b, err := st.r.read(procRoot + "/uptime")
	if err != nil {
		return 0, err
	}
	return parseUptime(b)
}
