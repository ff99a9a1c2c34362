package wrapper

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"

	"github.com/isched/isched/internal/child"
	"github.com/isched/isched/internal/procstat"
	"github.com/isched/isched/internal/report"
)

const mib = 1 << 20

func TestJudgeEnd(t *testing.T) {
	t.Parallel()
	killed := child.Exit{Code: -1, Signal: syscall.SIGKILL, Signaled: true}
	counted := func(n, peak, limit int64) procstat.CgroupMemory {
		return procstat.CgroupMemory{Path: "/task_0", OOMKills: n, OOMKillsKnown: true, PeakBytes: peak, LimitBytes: limit}
	}
	tests := []struct {
		name          string
		reason        string
		exit          child.Exit
		before, after procstat.CgroupMemory
		haveCg        bool
		sPeak, sLimit int64
		risk          int64 // unreclaimable peak (memory.stat), 0 unknown
		want          memVerdict
	}{{
		name: "counter rose, last sample far below the limit", reason: report.EndSignaled, exit: killed,
		before: counted(0, 20*mib, 300*mib), after: counted(1, 300*mib, 300*mib), haveCg: true, sPeak: 20 * mib, sLimit: 300 * mib,
		want: memVerdict{reason: report.EndOOM, peak: 300 * mib, limit: 300 * mib},
	}, {
		name: "counter rose from an earlier attempt's kills", reason: report.EndSignaled, exit: killed,
		before: counted(2, 0, 0), after: counted(3, 280*mib, 300*mib), haveCg: true,
		want: memVerdict{reason: report.EndOOM, peak: 280 * mib, limit: 300 * mib},
	}, {
		name: "SIGKILL from Slurm, counter unchanged, peak near the limit", reason: report.EndSignaled, exit: killed,
		before: counted(0, 0, 0), after: counted(0, 299*mib, 300*mib), haveCg: true,
		want: memVerdict{reason: report.EndSignaled, peak: 299 * mib, limit: 300 * mib},
	}, {
		name: "SIGKILL by our own escalation", reason: report.EndSignaled, exit: child.Exit{Code: -1, Signal: syscall.SIGKILL, Signaled: true, Escalated: true},
		before: counted(0, 0, 0), after: counted(1, 300*mib, 300*mib), haveCg: true,
		want: memVerdict{reason: report.EndSignaled, peak: 300 * mib, limit: 300 * mib},
	}, {
		name: "a worker was OOM-killed but the child exited 1", reason: report.EndExited, exit: child.Exit{Code: 1},
		before: counted(0, 0, 0), after: counted(1, 300*mib, 300*mib), haveCg: true,
		want: memVerdict{reason: report.EndExited, peak: 300 * mib, limit: 300 * mib},
	}, {
		name: "SIGTERM", reason: report.EndSignaled, exit: child.Exit{Code: -1, Signal: syscall.SIGTERM, Signaled: true},
		before: counted(0, 0, 0), after: counted(1, 300*mib, 300*mib), haveCg: true,
		want: memVerdict{reason: report.EndSignaled, peak: 300 * mib, limit: 300 * mib},
	}, {
		name: "no counter (v1 before 4.13): peak within 5% of the limit", reason: report.EndSignaled, exit: killed,
		before: procstat.CgroupMemory{}, after: procstat.CgroupMemory{PeakBytes: 290 * mib, LimitBytes: 300 * mib}, haveCg: true,
		want: memVerdict{reason: report.EndOOM, peak: 290 * mib, limit: 300 * mib},
	}, {
		name: "no counter, peak at the limit from page cache, unreclaimable far below", reason: report.EndSignaled, exit: killed,
		after: procstat.CgroupMemory{PeakBytes: 299 * mib, LimitBytes: 300 * mib}, haveCg: true, risk: 120 * mib,
		want: memVerdict{reason: report.EndSignaled, peak: 299 * mib, limit: 300 * mib},
	}, {
		name: "no counter, unreclaimable at the limit", reason: report.EndSignaled, exit: killed,
		after: procstat.CgroupMemory{PeakBytes: 300 * mib, LimitBytes: 300 * mib}, haveCg: true, risk: 290 * mib,
		want: memVerdict{reason: report.EndOOM, peak: 300 * mib, limit: 300 * mib},
	}, {
		name: "no counter, peak far below", reason: report.EndSignaled, exit: killed,
		after: procstat.CgroupMemory{PeakBytes: 100 * mib, LimitBytes: 300 * mib}, haveCg: true,
		want: memVerdict{reason: report.EndSignaled, peak: 100 * mib, limit: 300 * mib},
	}, {
		name: "no cgroup: samples only", reason: report.EndSignaled, exit: killed, sPeak: 299 * mib, sLimit: 300 * mib,
		want: memVerdict{reason: report.EndOOM, peak: 299 * mib, limit: 300 * mib},
	}, {
		name: "no cgroup, nothing known", reason: report.EndSignaled, exit: killed,
		want: memVerdict{reason: report.EndSignaled},
	}, {
		name: "cgroup files gone at the end: keep what the samples saw", reason: report.EndExited, exit: child.Exit{},
		before: counted(0, 10*mib, 300*mib), after: procstat.CgroupMemory{Path: "/task_0"}, haveCg: true, sPeak: 50 * mib, sLimit: 300 * mib,
		want: memVerdict{reason: report.EndExited, peak: 50 * mib, limit: 300 * mib},
	}}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			got := judgeEnd(tt.reason, tt.exit, tt.before, tt.after, tt.haveCg, tt.sPeak, tt.sLimit, tt.risk)
			if got != tt.want {
				t.Errorf("judgeEnd = %+v, want %+v", got, tt.want)
			}
		})
	}
}

// fakeCgroup answers its readings in turn, then repeats the last.
type fakeCgroup struct {
	mu    sync.Mutex
	reads []procstat.CgroupMemory
	n     int
}

func (f *fakeCgroup) Read() (procstat.CgroupMemory, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	r := f.reads[min(f.n, len(f.reads)-1)]
	f.n++
	return r, nil
}

// endSink keeps the envelopes the wrapper delivers.
type endSink struct {
	mu  sync.Mutex
	got []*report.Envelope
}

func (s *endSink) Append(_ context.Context, _ string, payload []byte, _ string, _ int64) (string, error) {
	env, err := report.Decode(payload)
	if err != nil {
		return "", err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.got = append(s.got, env)
	return "1-0", nil
}

// TestRunReportsOOMKill: a child killed by SIGKILL while its cgroup's
// OOM-kill counter rose ends "oom", and the end report and the summary carry
// the cgroup's peak and limit although no sample saw them. The wrapper's
// temporary directory is gone afterwards.
func TestRunReportsOOMKill(t *testing.T) {
	tmp := t.TempDir()
	env := map[string]string{"SLURM_JOB_ID": "42", "SLURM_CLUSTER_NAME": "lab", "SLURM_JOB_USER": "alice", "SLURM_JOB_UID": "1001",
		"SLURM_PROCID": "0", "SLURM_NTASKS": "1", "SLURM_JOB_PARTITION": "cpu", "SLURMD_NODENAME": "cpu1", "SLURM_STEP_ID": "0", "TMPDIR": tmp}
	getenv := func(k string) string { return env[k] }
	sumPath := filepath.Join(t.TempDir(), "summary.json")
	opts, err := ParseArgs([]string{"--summary-json", sumPath, "--", "/bin/sh", "-c", "kill -KILL $$"}, getenv, &bytes.Buffer{})
	if err != nil {
		t.Fatal(err)
	}
	// The sampler reads the real cgroup of the test (a peak of gigabytes
	// under -race): the fake's values are above anything it can see, so the
	// end report must carry exactly them.
	const limit = 64 << 40
	cg := &fakeCgroup{reads: []procstat.CgroupMemory{
		{Path: "/task_0", OOMKills: 0, OOMKillsKnown: true, PeakBytes: 2 * mib, LimitBytes: limit},
		{Path: "/task_0", OOMKills: 1, OOMKillsKnown: true, PeakBytes: limit, LimitBytes: limit},
	}}
	var opened []int32
	sink := &endSink{}
	var stderr bytes.Buffer
	code := Run(context.Background(), opts, Deps{
		Getenv: getenv, Stdout: &bytes.Buffer{}, Stderr: &stderr, Logger: quiet,
		Connect:   func(context.Context, string) (appender, error) { return sink, nil },
		MemCgroup: func(pid int32) (MemCgroup, error) { opened = append(opened, pid); return cg, nil },
	})
	if code != 137 {
		t.Fatalf("exit %d, want 137\n%s", code, stderr.String())
	}
	if len(opened) != 1 || opened[0] <= 0 {
		t.Errorf("cgroup opened for %v, want once for the child's pid", opened)
	}
	if !strings.Contains(stderr.String(), "cgroup_peak=67108864.0 MiB") || !strings.Contains(stderr.String(), "reason=oom") {
		t.Errorf("summary line: %s", stderr.String())
	}
	var sum Summary
	b, err := os.ReadFile(sumPath)
	if err == nil {
		err = json.Unmarshal(b, &sum)
	}
	if err != nil || sum.Reason != report.EndOOM || sum.CgroupPeak != limit || sum.CgroupLimit != limit {
		t.Errorf("summary json %+v (%v)", sum, err)
	}
	var end *report.End
	sink.mu.Lock()
	for _, e := range sink.got {
		if e.Kind == report.KindEnd {
			end = e.End
		}
	}
	sink.mu.Unlock()
	if end == nil {
		t.Fatal("no end report delivered")
	}
	if end.Reason != report.EndOOM || end.Signal != "SIGKILL" || end.ExitCode != 137 || end.CgroupPeakBytes != limit || end.MemLimitBytes != limit {
		t.Errorf("end report %+v", *end)
	}
	left, _ := os.ReadDir(tmp)
	for _, e := range left {
		t.Errorf("left behind in TMPDIR: %s", e.Name())
	}
}

// TestRunWithoutCgroup: no memory cgroup (or an error resolving it) changes
// nothing about the child's end and adds no cgroup fields.
func TestRunWithoutCgroup(t *testing.T) {
	for name, open := range map[string]OpenMemCgroup{
		"none":  func(int32) (MemCgroup, error) { return nil, nil },
		"error": func(int32) (MemCgroup, error) { return nil, errors.New("mountinfo: permission denied") },
	} {
		t.Run(name, func(t *testing.T) {
			tmp := t.TempDir()
			getenv := func(k string) string {
				if k == "TMPDIR" {
					return tmp
				}
				return ""
			}
			opts, err := ParseArgs([]string{"--no-report", "--", "/bin/sh", "-c", "kill -KILL $$"}, getenv, &bytes.Buffer{})
			if err != nil {
				t.Fatal(err)
			}
			var stderr bytes.Buffer
			code := Run(context.Background(), opts, Deps{Getenv: getenv, Stdout: &bytes.Buffer{}, Stderr: &stderr, Logger: quiet, MemCgroup: open})
			if code != 137 || !strings.Contains(stderr.String(), "reason=signaled") {
				t.Errorf("exit %d, summary %s", code, stderr.String())
			}
			left, _ := os.ReadDir(tmp)
			for _, e := range left {
				t.Errorf("left behind in TMPDIR: %s", e.Name())
			}
		})
	}
}

func TestSystemMemCgroupNoTypedNil(t *testing.T) {
	t.Parallel()
	// pid 0 has no /proc entry: no cgroup, and the interface must be nil
	// rather than a nil *procstat.MemCgroup.
	cg, err := SystemMemCgroup(0)
	if cg != nil || err != nil {
		t.Errorf("SystemMemCgroup(0) = %v, %v; want nil, nil", cg, err)
	}
}

// TestRemoveTmp: a directory the wrapper created goes entirely; one that was
// there before (a previous attempt's, with its spool of undelivered reports)
// loses only the wrapper's own files.
func TestRemoveTmp(t *testing.T) {
	t.Parallel()
	base := t.TempDir()
	job := report.JobRef{JobID: 7, StepID: "0", Rank: 0}
	getenv := func(k string) string {
		if k == "TMPDIR" {
			return base
		}
		return ""
	}
	dir, created := jobTmpDir(getenv, job, true, quiet)
	if !created || dir == "" {
		t.Fatalf("jobTmpDir = %q, %v", dir, created)
	}
	progress, spool := filepath.Join(dir, "progress"), filepath.Join(dir, "reports.spool")
	for _, p := range []string{progress, spool} {
		if err := os.WriteFile(p, []byte("x"), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	again, created2 := jobTmpDir(getenv, job, true, quiet)
	if again != dir || created2 {
		t.Fatalf("second jobTmpDir = %q, %v; want %q, false", again, created2, dir)
	}
	removeTmp(again, created2, []string{progress, "/elsewhere/progress"}, quiet)
	if _, err := os.Stat(progress); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("progress file left: %v", err)
	}
	if _, err := os.Stat(spool); err != nil {
		t.Errorf("the previous attempt's spool was removed: %v", err)
	}
	removeTmp(dir, true, nil, quiet)
	if _, err := os.Stat(dir); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("created directory left: %v", err)
	}
}
