package procstat

import (
	"context"
	"errors"
	"math"
	"os"
	"slices"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/shirou/gopsutil/v4/process"
)

const mib = 1 << 20

// sample takes one sample and fails the test on a gap.
func sample(t *testing.T, s *Sampler) Stat {
	t.Helper()
	st, err := s.Sample(context.Background())
	if err != nil {
		t.Fatalf("Sample: %v", err)
	}
	return st
}

func sorted(p []int32) []int32 {
	p = slices.Clone(p)
	slices.Sort(p)
	return p
}

// statmRSS sums RSS as gopsutil reads it (from statm), an independent check
// of the sampler's reading of status.
func statmRSS(t *testing.T, pids []int32) int64 {
	t.Helper()
	var sum int64
	for _, pid := range pids {
		p, err := process.NewProcess(pid)
		if err != nil {
			t.Fatalf("gopsutil NewProcess(%d): %v", pid, err)
		}
		mi, err := p.MemoryInfo()
		if err != nil {
			t.Fatalf("gopsutil MemoryInfo(%d): %v", pid, err)
		}
		sum += int64(mi.RSS)
	}
	return sum
}

func TestSampleTreeMemory(t *testing.T) {
	t.Parallel()
	// The training process (50 MiB) and three DataLoader-like workers (20 MiB each).
	h := runHelper(t, "50", "3", "20")
	// The kernel's children files when it has them, and the /proc scan that
	// replaces them on kernels without CONFIG_PROC_CHILDREN.
	for _, mode := range []int{modeUnknown, modeScan} {
		s := New(h.pids[0])
		s.PSSInterval = 0 // every sample
		s.st.disc.mode = mode
		st := sample(t, s)
		t.Logf("discovery mode %d: RSS %d MiB, PSS %d MiB, peak %d MiB, cgroup %q peak %d MiB limit %d", s.st.disc.mode,
			st.RSSBytes/mib, st.PSSBytes/mib, st.PeakRSSBytes/mib, st.CgroupPath, st.CgroupPeakBytes/mib, st.CgroupLimitBytes)

		if got, want := st.PIDs, sorted(h.pids); !slices.Equal(got, want) {
			t.Fatalf("PIDs = %v, want %v", got, want)
		}
		if st.Procs != 4 {
			t.Errorf("Procs = %d, want 4", st.Procs)
		}
		const allocated = 110 * mib
		// Each process also has the Go runtime and the test binary resident.
		if st.RSSBytes < allocated || st.RSSBytes > allocated+4*64*mib {
			t.Errorf("RSSBytes = %d MiB, want 110 MiB plus a runtime overhead below 256 MiB", st.RSSBytes/mib)
		}
		if ref := statmRSS(t, h.pids); math.Abs(float64(st.RSSBytes-ref)) > 8*mib {
			t.Errorf("RSSBytes = %d, gopsutil's statm sum = %d: differ by more than 8 MiB", st.RSSBytes, ref)
		}
		if st.PeakRSSBytes < st.RSSBytes {
			t.Errorf("PeakRSSBytes = %d < RSSBytes = %d", st.PeakRSSBytes, st.RSSBytes)
		}
		// The allocations are private, so their PSS is their full size;
		// shared text pages make the tree's PSS smaller than its RSS (give or
		// take what the runtimes touch between the two reads).
		if st.PSSBytes < allocated || st.PSSBytes > st.RSSBytes+4*mib {
			t.Errorf("PSSBytes = %d MiB, want between 110 MiB and RSSBytes (%d MiB)", st.PSSBytes/mib, st.RSSBytes/mib)
		}
		if st.PSSAt != st.At {
			t.Errorf("PSSAt = %v, want the sample's At %v", st.PSSAt, st.At)
		}
		if st.CPUPercent != 0 {
			t.Errorf("CPUPercent on the first sample = %v, want 0", st.CPUPercent)
		}
		if st.Gaps != 0 {
			t.Errorf("Gaps = %d, want 0", st.Gaps)
		}
		if hasMemoryCgroup(t) {
			if st.CgroupPath == "" || st.CgroupPeakBytes <= 0 {
				t.Errorf("CgroupPath = %q, CgroupPeakBytes = %d; want the memory cgroup and its peak", st.CgroupPath, st.CgroupPeakBytes)
			}
		}
	}
}

// hasMemoryCgroup reports whether this machine exposes a memory cgroup peak
// for this process, so the cgroup assertions run only where they can hold.
func hasMemoryCgroup(t *testing.T) bool {
	t.Helper()
	var r reader
	c := cgroupResolver{procRoot: "/proc", sysRoot: "/sys"}
	cg, err := c.resolve(&r, int32(os.Getpid()))
	if err != nil || cg == nil {
		return false
	}
	file := "/memory.max_usage_in_bytes"
	if cg.v2 {
		file = "/memory.peak"
	}
	_, err = os.Stat(cg.dirs[0] + file)
	return err == nil
}

// TestSampleCPU: an idle root with one busy child, sampled twice. The
// tree's CPUPercent must agree with gopsutil's reading of the same processes
// over the same interval. Each sample is bracketed by two gopsutil readings
// of the same counters, so the CPU time the sampler saw lies between the
// inner and the outer pair's difference: an exact check, however busy the
// machine. The interval ends once the tree has gained busyCPU seconds (a
// condition, not a duration), so a starved child only makes the test wait.
//
// It is not parallel: on a small machine the other tests' helpers would
// compete with the busy loop for the cores and make it wait longer.
func TestSampleCPU(t *testing.T) {
	const busyCPU = 1.0 // seconds: 100 ticks, so a tick is 1 % of the reading
	h := runHelper(t, "0", "1", "busy")
	s := New(h.pids[0])
	first := bracketedSample(t, s, h.pids)
	awaitCPU(t, h.pids, first.after+busyCPU, 2*time.Minute)
	last := bracketedSample(t, s, h.pids)

	got := last.st.CPUPercent
	wall := last.st.At.Sub(first.st.At).Seconds()
	lo := (last.before - first.after) / wall * 100 // at least busyCPU over wall
	hi := (last.after - first.before) / wall * 100
	t.Logf("CPUPercent %.2f over %.2f s; gopsutil's readings around the samples give %.2f to %.2f", got, wall, lo, hi)
	const eps = 1e-6 // float rounding only: both read the same tick counters
	if got < lo*(1-eps) || got > hi*(1+eps) {
		t.Errorf("CPUPercent = %.3f, %.4f of gopsutil's %.3f over the same interval (bounds %.3f to %.3f)",
			got, got/((lo+hi)/2), (lo+hi)/2, lo, hi)
	}
}

// bracketed is a sample with gopsutil's CPU seconds of the same processes
// read just before and just after it.
type bracketed struct {
	before, after float64
	st            Stat
}

func bracketedSample(t *testing.T, s *Sampler, pids []int32) bracketed {
	t.Helper()
	var b bracketed
	b.before = gopsutilCPU(t, pids)
	b.st = sample(t, s)
	b.after = gopsutilCPU(t, pids)
	return b
}

// awaitCPU waits until pids have used want CPU seconds in all, as gopsutil
// reads them; it fails after patience, saying how far they got.
func awaitCPU(t *testing.T, pids []int32, want float64, patience time.Duration) {
	t.Helper()
	deadline := time.Now().Add(patience)
	for {
		cpu := gopsutilCPU(t, pids)
		if cpu >= want {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("the busy tree's CPU time is %.2f s after waiting %s, want %.2f s: is the child spinning?", cpu, patience, want)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// gopsutilCPU sums user+system seconds of pids as gopsutil reads them.
func gopsutilCPU(t *testing.T, pids []int32) float64 {
	t.Helper()
	var sum float64
	for _, pid := range pids {
		p, err := process.NewProcess(pid)
		if err != nil {
			t.Fatalf("gopsutil NewProcess(%d): %v", pid, err)
		}
		ts, err := p.Times()
		if err != nil {
			t.Fatalf("gopsutil Times(%d): %v", pid, err)
		}
		sum += ts.User + ts.System
	}
	return sum
}

func TestPeakKeptAfterFree(t *testing.T) {
	t.Parallel()
	h := runHelper(t, "80")
	s := New(h.pids[0])
	before := sample(t, s)
	if before.RSSBytes < 80*mib {
		t.Fatalf("RSSBytes = %d MiB before free, want >= 80 MiB", before.RSSBytes/mib)
	}
	if ans, err := h.command("free"); err != nil || ans != "freed" {
		t.Fatalf("free: %q, %v", ans, err)
	}
	after := sample(t, s)
	if after.RSSBytes > before.RSSBytes-60*mib {
		t.Errorf("RSSBytes = %d MiB after freeing 80 MiB, was %d MiB", after.RSSBytes/mib, before.RSSBytes/mib)
	}
	if after.PeakRSSBytes < before.RSSBytes {
		t.Errorf("PeakRSSBytes = %d MiB after free, want >= %d MiB", after.PeakRSSBytes/mib, before.RSSBytes/mib)
	}
}

func TestPeakKeptAfterChildExits(t *testing.T) {
	t.Parallel()
	// The child's VmHWM leaves with it; the run maximum must not.
	h := runHelper(t, "0", "1", "60")
	s := New(h.pids[0])
	before := sample(t, s)
	if before.Procs != 2 || before.RSSBytes < 60*mib {
		t.Fatalf("before: Procs = %d, RSSBytes = %d MiB; want 2 and >= 60 MiB", before.Procs, before.RSSBytes/mib)
	}
	child := h.pids[1]
	killAndAwaitReap(t, child)
	after := sample(t, s)
	if after.Procs != 1 || !slices.Equal(after.PIDs, h.pids[:1]) {
		t.Errorf("after: PIDs = %v, want %v", after.PIDs, h.pids[:1])
	}
	if after.RSSBytes >= 60*mib {
		t.Errorf("after: RSSBytes = %d MiB, want the child's 60 MiB gone", after.RSSBytes/mib)
	}
	if after.PeakRSSBytes < before.RSSBytes {
		t.Errorf("after: PeakRSSBytes = %d MiB, want >= %d MiB", after.PeakRSSBytes/mib, before.RSSBytes/mib)
	}
}

// killAndAwaitReap kills a helper's child and waits until its parent has
// reaped it, so it is gone from /proc.
func killAndAwaitReap(t *testing.T, pid int32) {
	t.Helper()
	if err := syscall.Kill(int(pid), syscall.SIGKILL); err != nil {
		t.Fatalf("kill %d: %v", pid, err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		if _, err := os.Stat("/proc/" + strconv.Itoa(int(pid))); errors.Is(err, os.ErrNotExist) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("pid %d not reaped after 10s", pid)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func TestVanishingChildren(t *testing.T) {
	t.Parallel()
	// The root keeps up to four children that live 0-30ms each: PIDs appear
	// and vanish between listing and reading.
	h := runHelper(t, "churn")
	s := New(h.pids[0])
	s.PSSInterval = 0
	deadline := time.Now().Add(1500 * time.Millisecond)
	n, sawChildren := 0, false
	for time.Now().Before(deadline) {
		st, err := s.Sample(context.Background())
		if err != nil {
			t.Fatalf("sample %d: %v", n, err)
		}
		if !slices.Contains(st.PIDs, h.pids[0]) {
			t.Fatalf("sample %d: PIDs = %v, want the root %d", n, st.PIDs, h.pids[0])
		}
		if st.Procs > 1 {
			sawChildren = true
		}
		if st.CPUPercent < 0 || math.IsNaN(st.CPUPercent) || math.IsInf(st.CPUPercent, 0) {
			t.Fatalf("sample %d: CPUPercent = %v", n, st.CPUPercent)
		}
		if st.Gaps != 0 {
			t.Fatalf("sample %d: Gaps = %d", n, st.Gaps)
		}
		n++
		time.Sleep(20 * time.Millisecond)
	}
	if !sawChildren {
		t.Errorf("no sample of %d saw a child", n)
	}
	if got := len(s.st.procs); got > 1+4+4 {
		t.Errorf("sampler caches %d processes; vanished ones are not forgotten", got)
	}
}

func TestRootGone(t *testing.T) {
	t.Parallel()
	for _, reap := range []bool{false, true} {
		t.Run("reaped="+strconv.FormatBool(reap), func(t *testing.T) {
			t.Parallel()
			h, err := startHelper([]string{"0", "1", "0"})
			if err != nil {
				t.Fatal(err)
			}
			defer h.stop()
			s := New(h.pids[0])
			if st := sample(t, s); st.Procs != 2 {
				t.Fatalf("Procs = %d, want 2", st.Procs)
			}
			if err := h.proc.Signal(syscall.SIGKILL); err != nil {
				t.Fatal(err)
			}
			if reap {
				h.wait()
			} else {
				awaitZombie(t, h.pids[0])
			}
			st := sample(t, s)
			if st.Procs != 0 || len(st.PIDs) != 0 {
				t.Errorf("after the root died: PIDs = %v, want none", st.PIDs)
			}
			if st.PeakRSSBytes == 0 {
				t.Errorf("PeakRSSBytes forgotten when the root died")
			}
		})
	}
}

func awaitZombie(t *testing.T, pid int32) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		b, err := os.ReadFile("/proc/" + strconv.Itoa(int(pid)) + "/stat")
		if err == nil {
			if ps, err := parseStat(b); err == nil && ps.state == 'Z' {
				return
			}
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Fatalf("pid %d did not become a zombie", pid)
}

func TestSampleTimeout(t *testing.T) {
	t.Parallel()
	s := New(int32(os.Getpid()))
	s.Timeout = time.Nanosecond
	st, err := s.Sample(context.Background())
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Sample with a 1ns timeout: err = %v, want DeadlineExceeded", err)
	}
	if st.Gaps != 1 {
		t.Errorf("Gaps = %d, want 1", st.Gaps)
	}
	// The abandoned sample finishes in the background; then sampling works
	// again, and the gap stays counted.
	s.Timeout = 5 * time.Second
	deadline := time.Now().Add(5 * time.Second)
	for {
		st, err = s.Sample(context.Background())
		if err == nil {
			break
		}
		if !errors.Is(err, errBusy) || time.Now().After(deadline) {
			t.Fatalf("Sample after the timeout: %v", err)
		}
		time.Sleep(time.Millisecond)
	}
	if st.Procs < 1 || st.Gaps < 1 {
		t.Errorf("after recovery: Procs = %d, Gaps = %d; want >= 1 and >= 1", st.Procs, st.Gaps)
	}
}

func TestSampleCanceled(t *testing.T) {
	t.Parallel()
	s := New(int32(os.Getpid()))
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	st, err := s.Sample(ctx)
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("err = %v, want Canceled", err)
	}
	if st.Gaps != 1 {
		t.Errorf("Gaps = %d, want 1", st.Gaps)
	}
}

// BenchmarkSample16 measures one full sample of a 16-process tree (a root,
// three children, four grandchildren each), without the PSS pass.
func BenchmarkSample16(b *testing.B) {
	benchmarkSample(b, -1, modeUnknown)
}

// BenchmarkSample16PSS is BenchmarkSample16 with a PSS pass on every sample.
func BenchmarkSample16PSS(b *testing.B) {
	benchmarkSample(b, 0, modeUnknown)
}

// BenchmarkSample16Scan is BenchmarkSample16 on a kernel without children
// files: its cost grows with the number of processes on the machine.
func BenchmarkSample16Scan(b *testing.B) {
	benchmarkSample(b, -1, modeScan)
}

func benchmarkSample(b *testing.B, pssInterval time.Duration, mode int) {
	h := runHelper(b, "0", "3", "0", "4", "0")
	if len(h.pids) != 16 {
		b.Fatalf("tree has %d processes, want 16", len(h.pids))
	}
	s := New(h.pids[0])
	s.PSSInterval = pssInterval
	s.st.disc.mode = mode
	ctx := context.Background()
	if st, err := s.Sample(ctx); err != nil || st.Procs != 16 {
		b.Fatalf("Sample: Procs = %d, err = %v", st.Procs, err)
	}
	b.ReportAllocs()
	for b.Loop() {
		if _, err := s.Sample(ctx); err != nil {
			b.Fatal(err)
		}
	}
}
