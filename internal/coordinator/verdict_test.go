package coordinator

import (
	"strings"
	"testing"
	"time"

	"github.com/isched/isched/internal/report"
)

func TestMoveLoss(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name  string
		h     []report.Span
		iter  float64
		moves int
		lost  float64
	}{
		{name: "one attempt", h: []report.Span{{StartMS: 0, EndMS: 60_000}}},
		{name: "a move: 30 s between, 20 iterations redone at 500 ms", iter: 500,
			h:     []report.Span{{StartMS: 0, EndMS: 60_000, EndStep: 120}, {StartMS: 90_000, StartStep: 100, EndStep: 300}},
			moves: 1, lost: 30 + 10},
		{name: "resumed exactly where it stopped", iter: 500,
			h:     []report.Span{{EndMS: 10_000, EndStep: 50}, {StartMS: 15_000, StartStep: 50}},
			moves: 1, lost: 5},
		{name: "open span before: not counted",
			h: []report.Span{{StartMS: 0}, {StartMS: 10_000}}},
	}
	for _, tt := range tests {
		moves, lost := moveLoss(tt.h, tt.iter)
		if moves != tt.moves || lost != tt.lost {
			t.Errorf("%s: %d moves, %.1f s lost; want %d, %.1f", tt.name, moves, lost, tt.moves, tt.lost)
		}
	}
}

// TestJudgeUsesJobTableRequest: the verdict compares the process peak (not
// the cgroup's, which counts page cache) with the job table's --mem, and the
// CPU time over the attempts' cores × wall.
func TestJudgeUsesJobTableRequest(t *testing.T) {
	t.Parallel()
	l := &lineage{}
	st := &l.Status
	st.StartedMS, st.EndedMS, st.Step = 1_000, 601_000, 1200
	st.MemLimitBytes = 32 << 30
	l.Use.requested(report.Job{MemPerNodeBytes: 32 << 30})
	(&Coordinator{}).applyEndMemory(l, &report.End{WallMS: 600_000, PeakRSSBytes: 6<<30 + 100<<20, CgroupPeakBytes: 20 << 30,
		PageCachePeakBytes: 14 << 30, CPUSeconds: 600, Cores: 8, MemRequestBytes: 16 << 30}, time.UnixMilli(601_000))
	l.judge()
	v := st.Verdict
	if v == nil {
		t.Fatal("no verdict")
	}
	if v.MemRequestBytes != 32<<30 || v.AskMemBytes != 8<<30 || v.Cores != 8 || v.CPUEfficiency != 0.125 {
		t.Errorf("verdict %+v", *v)
	}
	if !strings.Contains(v.Recommendation, "asked 32 GiB, used 6.1 GiB peak: ask --mem=8G next time") {
		t.Errorf("recommendation %q", v.Recommendation)
	}
}

// TestAdminCommentAction: with admin_comment on, the end of a run sends the
// agent an annotate action carrying the verdict (one printable line) for
// the job; off, nothing is sent.
func TestAdminCommentAction(t *testing.T) {
	t.Parallel()
	for _, on := range []bool{true, false} {
		e := newEnv(t)
		e.c.cfg.AdminComment = on
		plan := report.Plan{Lineage: "L80", Ideal: "cpu", Total: 10}
		j := job(80, 1001, "alice", "RUNNING", "cpu", plan.FormatComment())
		j.MemPerNodeBytes = 32 << 30
		e.publish([]report.Job{j}, nil)
		w := e.wrapper(80, 1001, "alice", "L80", "cpu")
		e.start(w)
		e.sample(w, 1, 10, 100)
		e.rounds(1)
		end := report.NewEnvelope(report.KindEnd, e.now)
		end.End = &report.End{ExitCode: 0, Reason: report.EndExited, Iters: 10, WallMS: 1000, PeakRSSBytes: 6<<30 + 100<<20,
			CgroupPeakBytes: 20 << 30, CPUSeconds: 1, Cores: 8}
		e.send(w, end)
		e.rounds(2)
		var got []report.Action
		for _, a := range e.actions() {
			if a.Type == report.ActionAnnotate {
				got = append(got, a)
			}
		}
		if !on {
			if len(got) != 0 {
				t.Errorf("admin_comment off: %d annotate actions", len(got))
			}
			continue
		}
		if len(got) != 1 {
			t.Fatalf("%d annotate actions, want 1 (all: %+v)", len(got), e.actions())
		}
		a := got[0]
		if a.JobID != 80 || a.User != "alice" || !strings.HasPrefix(a.AdminComment, "isched: asked 32 GiB, used 6.1 GiB peak: ask --mem=8G next time") ||
			!strings.Contains(a.AdminComment, "CPU efficiency") {
			t.Errorf("annotate action %+v", a)
		}
		if err := a.Validate(); err != nil {
			t.Errorf("annotate action invalid: %v", err)
		}
	}
}

// TestApplyGPUCountsTheJobsProcesses: a sample's GPU memory is the job's
// processes' where the wrapper's NVML listed them, not the whole device's
// (other jobs' processes, the driver), and the device's where it listed none.
func TestApplyGPUCountsTheJobsProcesses(t *testing.T) {
	t.Parallel()
	const mib = 1 << 20
	c := &Coordinator{}
	c.cfg.Limits.DeviceIDs = 8
	st := &report.JobStatus{}
	used := c.applyGPU(st, &report.GPUStat{Devices: []report.GPUDevice{{UUID: "GPU-A", Name: "H200", UsedBytes: 5000 * mib}},
		Procs: []report.GPUProc{{PID: 10, Device: "GPU-A", UsedBytes: 1420 * mib}}}, false)
	if used != 1420*mib || st.GPUBytes["GPU-A"] != 1420*mib || st.PeakGPUBytes["GPU-A"] != 1420*mib {
		t.Errorf("with the job's process listed: used %d, status %v / %v; want 1420 MiB", used/mib, st.GPUBytes, st.PeakGPUBytes)
	}
	used = c.applyGPU(st, &report.GPUStat{Devices: []report.GPUDevice{{UUID: "GPU-A", Name: "H200", UsedBytes: 1000 * mib}}}, false)
	if used != 1000*mib || st.GPUBytes["GPU-A"] != 1000*mib || st.PeakGPUBytes["GPU-A"] != 1420*mib {
		t.Errorf("with none listed: used %d, status %v / %v; want the device's 1000 MiB, peak 1420", used/mib, st.GPUBytes, st.PeakGPUBytes)
	}
}
