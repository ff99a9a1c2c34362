package procstat

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"
)

// fakeProc is one process of a fixture /proc.
type fakeProc struct {
	pid, ppid    int32
	state        byte  // default 'S'
	cpu          int   // utime ticks; stime is set to 0
	start        int   // starttime ticks
	rssKB, hwmKB int64 // status VmRSS, VmHWM
	pssKB        int64 // smaps_rollup Pss; -1: no smaps_rollup
	forker       int32 // thread of the parent that forked it; default the parent's main thread
	ghosts       []int32
}

// fakeProcFS writes a /proc for the sampler: per process stat, status,
// smaps_rollup and, when children is set, task/<tid>/children derived from the
// parent links (ghosts are listed as children but have no directory, like a
// child that exited after the list was read).
type fakeProcFS struct {
	t        *testing.T
	dir      string
	children bool
}

func (f *fakeProcFS) write(uptime int, procs ...fakeProc) {
	f.t.Helper()
	old, _ := filepath.Glob(filepath.Join(f.dir, "[0-9]*"))
	for _, d := range old {
		if err := os.RemoveAll(d); err != nil {
			f.t.Fatal(err)
		}
	}
	f.file("uptime", fmt.Sprintf("%d.%02d 1.00\n", uptime/100, uptime%100))
	kids := map[int32]map[int32][]int32{} // parent -> thread -> children
	for _, p := range procs {
		tid := p.forker
		if tid == 0 {
			tid = p.ppid
		}
		if kids[p.ppid] == nil {
			kids[p.ppid] = map[int32][]int32{}
		}
		kids[p.ppid][tid] = append(kids[p.ppid][tid], p.pid)
	}
	for _, p := range procs {
		d := strconv.Itoa(int(p.pid))
		state := p.state
		if state == 0 {
			state = 'S'
		}
		// A comm with a space and a parenthesis, as prctl(PR_SET_NAME) allows.
		f.file(d+"/stat", fmt.Sprintf("%d (w) %d) %c %d %d %d 0 -1 4194560 10 0 0 0 %d 0 0 0 20 0 1 0 %d 1000 10 18446744073709551615\n",
			p.pid, p.pid, state, p.ppid, p.pid, p.pid, p.cpu, p.start))
		f.file(d+"/status", fmt.Sprintf("Name:\tw\nState:\t%c (sleeping)\nPPid:\t%d\nVmPeak:\t  999999 kB\nVmHWM:\t%8d kB\nVmRSS:\t%8d kB\nThreads:\t1\n",
			state, p.ppid, p.hwmKB, p.rssKB))
		if p.pssKB >= 0 {
			f.file(d+"/smaps_rollup", fmt.Sprintf("00400000-7fff0000 ---p 00000000 00:00 0 [rollup]\nRss:\t%d kB\nPss:\t%d kB\nPss_Dirty:\t1 kB\n", p.rssKB, p.pssKB))
		}
		if !f.children {
			f.file(d+"/task/"+d+"/stat", "")
			continue
		}
		threads := kids[p.pid]
		if threads == nil {
			threads = map[int32][]int32{}
		}
		threads[p.pid] = append(threads[p.pid], p.ghosts...)
		for tid, cs := range threads {
			var sb strings.Builder
			for _, c := range cs {
				fmt.Fprintf(&sb, "%d ", c)
			}
			f.file(d+"/task/"+strconv.Itoa(int(tid))+"/children", sb.String())
		}
	}
}

func (f *fakeProcFS) file(name, content string) {
	f.t.Helper()
	writeFile(f.t, filepath.Join(f.dir, name), content)
}

func writeFile(t *testing.T, path, content string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
}

// fakeClock is the sampler's clock in fixture tests.
type fakeClock struct{ t time.Time }

func (c *fakeClock) now() time.Time { return c.t }

func newFixtureSampler(t *testing.T, children bool) (*Sampler, *fakeProcFS, *fakeClock) {
	t.Helper()
	root := t.TempDir()
	f := &fakeProcFS{t: t, dir: filepath.Join(root, "proc"), children: children}
	clk := &fakeClock{t: time.Date(2025, 1, 2, 3, 4, 5, 0, time.UTC)}
	s := New(100)
	s.ProcRoot, s.SysRoot = f.dir, filepath.Join(root, "sys")
	s.Timeout = 10 * time.Second // a loaded CI machine must not turn a fixture test into a gap
	s.PSSInterval = 0
	s.st.now = clk.now
	return s, f, clk
}

func TestFixtureTree(t *testing.T) {
	t.Parallel()
	for _, children := range []bool{true, false} {
		name := "scan"
		if children {
			name = "children-files"
		}
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			s, f, clk := newFixtureSampler(t, children)
			const kB = 1024
			// 100 is the training process, with a second thread 101 that
			// forked 200; 200 forked 300. 250 is a zombie child, 999 a child
			// that vanished after being listed, 500 is not in the tree.
			f.write(10000,
				fakeProc{pid: 1, ppid: 0, cpu: 5, start: 1, rssKB: 10, hwmKB: 10, pssKB: 10},
				fakeProc{pid: 100, ppid: 1, cpu: 1000, start: 5000, rssKB: 1000, hwmKB: 1500, pssKB: 900, ghosts: []int32{999}},
				fakeProc{pid: 200, ppid: 100, forker: 101, cpu: 300, start: 6000, rssKB: 200, hwmKB: 200, pssKB: 100},
				fakeProc{pid: 250, ppid: 100, state: 'Z', cpu: 7, start: 6500},
				fakeProc{pid: 300, ppid: 200, cpu: 50, start: 7000, rssKB: 300, hwmKB: 4000, pssKB: -1},
				fakeProc{pid: 500, ppid: 1, cpu: 9, start: 8000, rssKB: 77, hwmKB: 77, pssKB: 77},
			)
			st := sampleOK(t, s)
			want := Stat{
				At:           clk.t,
				PIDs:         []int32{100, 200, 300},
				Procs:        3,
				RSSBytes:     1500 * kB,
				PSSBytes:     (900 + 100 + 300) * kB, // 300 has no smaps_rollup: its RSS
				PSSAt:        clk.t,
				PeakRSSBytes: 4000 * kB, // 300's VmHWM is above the sum
			}
			assertStat(t, "first", st, want)

			// Two seconds later: 100 used 1s of CPU, 200 2s; 300 exited and
			// its PID was reused by a new process (born after the previous
			// sample: all of its 0.1s counts); 400 is new too (0.5s); 450
			// was started before the previous sample but missed by it, so it
			// is only a baseline.
			clk.t = clk.t.Add(2 * time.Second)
			f.write(10200,
				fakeProc{pid: 1, ppid: 0, cpu: 5, start: 1, rssKB: 10, hwmKB: 10, pssKB: 10},
				fakeProc{pid: 100, ppid: 1, cpu: 1100, start: 5000, rssKB: 1000, hwmKB: 1500, pssKB: 900},
				fakeProc{pid: 200, ppid: 100, forker: 101, cpu: 500, start: 6000, rssKB: 200, hwmKB: 200, pssKB: 100},
				fakeProc{pid: 300, ppid: 200, cpu: 10, start: 10100, rssKB: 30, hwmKB: 30, pssKB: 30},
				fakeProc{pid: 400, ppid: 300, cpu: 50, start: 10050, rssKB: 40, hwmKB: 40, pssKB: 40},
				fakeProc{pid: 450, ppid: 100, cpu: 80, start: 9000, rssKB: 50, hwmKB: 50, pssKB: 50},
			)
			st = sampleOK(t, s)
			want = Stat{
				At:           clk.t,
				PIDs:         []int32{100, 200, 300, 400, 450},
				Procs:        5,
				RSSBytes:     1320 * kB,
				PSSBytes:     1120 * kB,
				PSSAt:        clk.t,
				PeakRSSBytes: 4000 * kB,
				CPUPercent:   50 + 100 + 5 + 25,
			}
			assertStat(t, "second", st, want)

			// 200 exits; 300 and 400 are reparented to init and leave the tree.
			clk.t = clk.t.Add(time.Second)
			f.write(10300,
				fakeProc{pid: 1, ppid: 0, cpu: 5, start: 1, rssKB: 10, hwmKB: 10, pssKB: 10},
				fakeProc{pid: 100, ppid: 1, cpu: 1150, start: 5000, rssKB: 1000, hwmKB: 1500, pssKB: 900},
				fakeProc{pid: 300, ppid: 1, cpu: 10, start: 10100, rssKB: 30, hwmKB: 30, pssKB: 30},
				fakeProc{pid: 450, ppid: 100, cpu: 180, start: 9000, rssKB: 50, hwmKB: 50, pssKB: 50},
			)
			st = sampleOK(t, s)
			want = Stat{
				At:           clk.t,
				PIDs:         []int32{100, 450},
				Procs:        2,
				RSSBytes:     1050 * kB,
				PSSBytes:     950 * kB,
				PSSAt:        clk.t,
				PeakRSSBytes: 4000 * kB,
				CPUPercent:   50 + 100,
			}
			assertStat(t, "third", st, want)
			if got := len(s.st.procs); got != 2 {
				t.Errorf("cache holds %d processes, want the 2 live ones", got)
			}
		})
	}
}

func sampleOK(t *testing.T, s *Sampler) Stat {
	t.Helper()
	st, err := s.Sample(context.Background())
	if err != nil {
		t.Fatalf("Sample: %v", err)
	}
	return st
}

func assertStat(t *testing.T, name string, got, want Stat) {
	t.Helper()
	if d := got.CPUPercent - want.CPUPercent; d > 1e-9 || d < -1e-9 {
		t.Errorf("%s: CPUPercent = %v, want %v", name, got.CPUPercent, want.CPUPercent)
	}
	got.CPUPercent = want.CPUPercent
	if fmt.Sprintf("%+v", got) != fmt.Sprintf("%+v", want) {
		t.Errorf("%s:\n got %+v\nwant %+v", name, got, want)
	}
}

func TestFixturePSSInterval(t *testing.T) {
	t.Parallel()
	s, f, clk := newFixtureSampler(t, false)
	s.PSSInterval = 10 * time.Second
	procs := []fakeProc{{pid: 100, ppid: 1, start: 5, rssKB: 100, hwmKB: 100, pssKB: 60}}
	f.write(100, procs...)
	first := sampleOK(t, s)
	if first.PSSBytes != 60*1024 || first.PSSAt != clk.t {
		t.Fatalf("first: PSS %d at %v, want 60 KiB now", first.PSSBytes, first.PSSAt)
	}
	procs[0].pssKB = 80
	f.write(200, procs...)
	clk.t = clk.t.Add(time.Second)
	if st := sampleOK(t, s); st.PSSBytes != first.PSSBytes || st.PSSAt != first.PSSAt {
		t.Errorf("1s later: PSS %d at %v, want the first pass's", st.PSSBytes, st.PSSAt)
	}
	clk.t = clk.t.Add(10 * time.Second)
	if st := sampleOK(t, s); st.PSSBytes != 80*1024 || st.PSSAt != clk.t {
		t.Errorf("11s later: PSS %d at %v, want a new pass", st.PSSBytes, st.PSSAt)
	}
	s.PSSInterval = -1
	if st := sampleOK(t, s); st.PSSBytes != 0 || !st.PSSAt.IsZero() {
		t.Errorf("disabled: PSS %d at %v, want none", st.PSSBytes, st.PSSAt)
	}
}

func TestFixtureReadErrorIsGap(t *testing.T) {
	t.Parallel()
	s, f, _ := newFixtureSampler(t, true)
	f.write(100,
		fakeProc{pid: 100, ppid: 1, start: 5, rssKB: 100, hwmKB: 100, pssKB: 60},
		fakeProc{pid: 200, ppid: 100, start: 6, rssKB: 100, hwmKB: 100, pssKB: 60},
	)
	// A status that cannot be parsed is neither a vanished process nor data.
	f.file("200/status", "VmRSS:\tlots kB\n")
	st, err := s.Sample(context.Background())
	if err == nil || !strings.Contains(err.Error(), "lots") {
		t.Fatalf("err = %v, want the status parse error", err)
	}
	if st.Gaps != 1 || st.Procs != 1 || st.RSSBytes != 100*1024 {
		t.Errorf("Gaps = %d, Procs = %d, RSS = %d; want 1 gap and the readable process", st.Gaps, st.Procs, st.RSSBytes)
	}
	f.write(100, fakeProc{pid: 100, ppid: 1, start: 5, rssKB: 100, hwmKB: 100, pssKB: 60})
	st = sampleOK(t, s)
	if st.Gaps != 1 {
		t.Errorf("Gaps after a good sample = %d, want it to stay 1", st.Gaps)
	}
}

func TestFixtureMaxProcs(t *testing.T) {
	t.Parallel()
	for _, children := range []bool{true, false} {
		s, f, _ := newFixtureSampler(t, children)
		s.MaxProcs = 3
		procs := []fakeProc{{pid: 100, ppid: 1, start: 5}}
		for i := range int32(5) {
			procs = append(procs, fakeProc{pid: 200 + i, ppid: 100, start: 6})
		}
		f.write(100, procs...)
		st, err := s.Sample(context.Background())
		if err == nil || st.Procs != 3 || st.Gaps != 1 {
			t.Errorf("children=%v: Procs = %d, Gaps = %d, err = %v; want 3, a gap, an error", children, st.Procs, st.Gaps, err)
		}
	}
}

func TestFixtureRootPIDReused(t *testing.T) {
	t.Parallel()
	s, f, _ := newFixtureSampler(t, false)
	f.write(100, fakeProc{pid: 100, ppid: 1, start: 5, rssKB: 100, hwmKB: 100})
	if st := sampleOK(t, s); st.Procs != 1 {
		t.Fatalf("Procs = %d, want 1", st.Procs)
	}
	// The training process exited and an unrelated process got its PID.
	f.write(200, fakeProc{pid: 100, ppid: 1, start: 150, rssKB: 100, hwmKB: 100},
		fakeProc{pid: 101, ppid: 100, start: 160, rssKB: 100, hwmKB: 100})
	if st := sampleOK(t, s); st.Procs != 0 {
		t.Errorf("after PID reuse: PIDs = %v, want none", st.PIDs)
	}
}

func TestFixtureNoProc(t *testing.T) {
	t.Parallel()
	s, _, _ := newFixtureSampler(t, false)
	st, err := s.Sample(context.Background())
	if err == nil || st.Procs != 0 || st.Gaps != 1 {
		t.Errorf("empty proc root: Procs = %d, Gaps = %d, err = %v; want a gap", st.Procs, st.Gaps, err)
	}
}

func TestCgroup(t *testing.T) {
	t.Parallel()
	const (
		hybridMounts = "31 23 0:28 / /sys/fs/cgroup rw - tmpfs tmpfs rw,mode=755\n" +
			"32 31 0:29 / /sys/fs/cgroup/cpu,cpuacct rw - cgroup cgroup rw,cpu,cpuacct\n" +
			"35 31 0:32 / /sys/fs/cgroup/memory rw,relatime shared:9 - cgroup cgroup rw,memory\n" +
			"41 31 0:38 / /sys/fs/cgroup/unified rw - cgroup2 cgroup2 rw\n"
		v2Mounts   = "30 23 0:26 / /sys/fs/cgroup rw,nosuid - cgroup2 cgroup2 rw,nsdelegate\n"
		unlimited1 = "9223372036854771712\n"
		gib        = 1 << 30
	)
	slurmV1 := "/sys/fs/cgroup/memory/slurm_cpu1/uid_0/job_367/step_0/task_0"
	slurmV2 := "/sys/fs/cgroup/system.slice/slurmstepd.scope/job_5/step_0/user/task_0"
	tests := []struct {
		name      string
		procCg    string
		mountinfo string // "" for none
		files     map[string]string
		want      cgroupStat
	}{{
		name:      "slurm v1 limit on job",
		procCg:    "9:name=systemd:/\n4:memory:/slurm_cpu1/uid_0/job_367/step_0/task_0\n1:cpu,cpuacct:/slurm_cpu1/uid_0/job_367\n0::/\n",
		mountinfo: hybridMounts,
		files: map[string]string{
			slurmV1 + "/memory.max_usage_in_bytes":                                        "123456\n",
			slurmV1 + "/memory.limit_in_bytes":                                            unlimited1,
			"/sys/fs/cgroup/memory/slurm_cpu1/uid_0/job_367/step_0/memory.limit_in_bytes": "8589934592\n",
			"/sys/fs/cgroup/memory/slurm_cpu1/uid_0/job_367/memory.limit_in_bytes":        "4294967296\n",
			"/sys/fs/cgroup/memory/slurm_cpu1/uid_0/memory.limit_in_bytes":                unlimited1,
			"/sys/fs/cgroup/memory/memory.limit_in_bytes":                                 unlimited1,
		},
		want: cgroupStat{path: "/slurm_cpu1/uid_0/job_367/step_0/task_0", peak: 123456, limit: 4 * gib},
	}, {
		name:      "slurm v2",
		procCg:    "0::/system.slice/slurmstepd.scope/job_5/step_0/user/task_0\n",
		mountinfo: v2Mounts,
		files: map[string]string{
			slurmV2 + "/memory.peak": "777\n",
			slurmV2 + "/memory.max":  "max\n",
			"/sys/fs/cgroup/system.slice/slurmstepd.scope/job_5/step_0/memory.max": "max\n",
			"/sys/fs/cgroup/system.slice/slurmstepd.scope/job_5/memory.max":        "2147483648\n",
		},
		want: cgroupStat{path: "/system.slice/slurmstepd.scope/job_5/step_0/user/task_0", peak: 777, limit: 2 * gib},
	}, {
		name:      "v2 before memory.peak",
		procCg:    "0::/a\n",
		mountinfo: v2Mounts,
		files:     map[string]string{"/sys/fs/cgroup/a/memory.max": "1000\n"},
		want:      cgroupStat{path: "/a", limit: 1000},
	}, {
		name:      "hybrid without a v1 memory line uses v2",
		procCg:    "0::/b\n",
		mountinfo: hybridMounts,
		files:     map[string]string{"/sys/fs/cgroup/unified/b/memory.peak": "5\n"},
		want:      cgroupStat{path: "/b", peak: 5},
	}, {
		name:      "v1 memory among other controllers, container mount root",
		procCg:    "4:cpu,memory:/docker/abc\n",
		mountinfo: "35 31 0:32 /docker/abc /sys/fs/cgroup/memory\\040x ro - cgroup cgroup rw,cpu,memory\n",
		files: map[string]string{
			"/sys/fs/cgroup/memory x/memory.max_usage_in_bytes": "9\n",
			"/sys/fs/cgroup/memory x/memory.limit_in_bytes":     "10\n",
		},
		want: cgroupStat{path: "/docker/abc", peak: 9, limit: 10},
	}, {
		name:      "cgroup outside the mounted subtree",
		procCg:    "4:memory:/other\n",
		mountinfo: "35 31 0:32 /docker/abc /sys/fs/cgroup/memory ro - cgroup cgroup rw,memory\n",
		want:      cgroupStat{},
	}, {
		name:   "no mountinfo: usual layout",
		procCg: "4:memory:/c\n",
		files:  map[string]string{"/sys/fs/cgroup/memory/c/memory.max_usage_in_bytes": "3\n"},
		want:   cgroupStat{path: "/c", peak: 3},
	}, {
		name:      "no memory controller anywhere",
		procCg:    "1:cpu:/x\n",
		mountinfo: hybridMounts,
		want:      cgroupStat{},
	}}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			root := t.TempDir()
			writeFile(t, filepath.Join(root, "proc/100/cgroup"), tt.procCg)
			if tt.mountinfo != "" {
				writeFile(t, filepath.Join(root, "proc/self/mountinfo"), tt.mountinfo)
			}
			for name, content := range tt.files {
				writeFile(t, filepath.Join(root, name), content)
			}
			c := cgroupResolver{procRoot: filepath.Join(root, "proc"), sysRoot: filepath.Join(root, "sys")}
			var r reader
			for i := range 2 { // the second call answers from the cache
				got, err := c.stat(&r, 100)
				if err != nil {
					t.Fatalf("call %d: %v", i, err)
				}
				if got != tt.want {
					t.Errorf("call %d: got %+v, want %+v", i, got, tt.want)
				}
			}
		})
	}
}

func TestCgroupBadValueIsError(t *testing.T) {
	t.Parallel()
	root := t.TempDir()
	writeFile(t, filepath.Join(root, "proc/100/cgroup"), "0::/a\n")
	writeFile(t, filepath.Join(root, "proc/self/mountinfo"), "30 23 0:26 / /sys/fs/cgroup rw - cgroup2 cgroup2 rw\n")
	writeFile(t, filepath.Join(root, "sys/fs/cgroup/a/memory.peak"), "12\n")
	writeFile(t, filepath.Join(root, "sys/fs/cgroup/a/memory.max"), "lots\n")
	c := cgroupResolver{procRoot: filepath.Join(root, "proc"), sysRoot: filepath.Join(root, "sys")}
	var r reader
	got, err := c.stat(&r, 100)
	if err == nil {
		t.Fatal("no error for a memory.max of \"lots\"")
	}
	if got.peak != 12 || got.path != "/a" {
		t.Errorf("got %+v, want the peak despite the bad limit", got)
	}
}

func TestCgroupFollowsMove(t *testing.T) {
	t.Parallel()
	root := t.TempDir()
	writeFile(t, filepath.Join(root, "proc/self/mountinfo"), "30 23 0:26 / /sys/fs/cgroup rw - cgroup2 cgroup2 rw\n")
	writeFile(t, filepath.Join(root, "sys/fs/cgroup/a/memory.peak"), "1\n")
	writeFile(t, filepath.Join(root, "sys/fs/cgroup/b/memory.peak"), "2\n")
	c := cgroupResolver{procRoot: filepath.Join(root, "proc"), sysRoot: filepath.Join(root, "sys")}
	var r reader
	var got []int64
	for _, cg := range []string{"a", "b"} {
		writeFile(t, filepath.Join(root, "proc/100/cgroup"), "0::/"+cg+"\n")
		st, err := c.stat(&r, 100)
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, st.peak)
	}
	if !slices.Equal(got, []int64{1, 2}) {
		t.Errorf("peaks = %v, want [1 2]: the resolver must notice the move", got)
	}
}
