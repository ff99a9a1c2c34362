package coordinator

import (
	"strings"
	"testing"
	"time"

	"github.com/isched/isched/internal/lifecycle"
	"github.com/isched/isched/internal/report"
)

// TestPreemptionFlow is rule 8 through the coordinator: alice's long run
// (job 20, 100 000 steps at 500 ms) holds the gpu node her short run (job
// 21, 20 min asked) waits for. The long run checkpoints, is requeued
// held (yielding), is released once job 21 runs, and its next attempt
// counts a preemption, not a move; every step goes through the
// lifecycle's table (newEnv fails on a refused one).
func TestPreemptionFlow(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.c.cfg.Policy.PreemptForShort = true
	long := job(20, 1001, "alice", "RUNNING", "gpu", report.Plan{Lineage: "P-long", Ideal: "gpu", Total: 100000}.FormatComment())
	long.Gres, long.StartMS = "gpu:1", e.now.Add(-time.Hour).UnixMilli()
	short := job(21, 1001, "alice", "PENDING", "gpu", report.Plan{Lineage: "P-short", Ideal: "gpu", Total: 100}.FormatComment())
	lim := int64(20)
	short.Gres, short.Reason, short.SubmitMS, short.TimeLimitMin = "gpu:1", "Resources", e.now.Add(-5*time.Minute).UnixMilli(), &lim
	e.publish([]report.Job{long, short}, labPartitions(false))
	w := e.wrapper(20, 1001, "alice", "P-long", "gpu")
	e.start(w)
	for i := int64(0); i < 5; i++ {
		e.sample(w, 1+i*20, 20, 500)
	}
	e.rounds(2) // the round that reads the samples, then the one that decides
	acts := e.actions()
	if len(acts) != 1 || acts[0].Type != report.ActionSignal || acts[0].JobID != 20 {
		t.Fatalf("want a checkpoint request to job 20, got %+v", acts)
	}
	if d := e.status("P-long").Decisions; !strings.Contains(d[len(d)-1].Reason, "preempt: isched's job 21 waits on gpu with 20m left, behind isched's job 20") {
		t.Errorf("decision %+v", d[len(d)-1])
	}
	e.result(acts[0].ID, report.StatusOK)
	ck := report.NewEnvelope(report.KindCheckpoint, e.now)
	step := int64(100)
	ck.Checkpoint = &report.Checkpoint{Path: "/ck/step100.pt", Size: 10, Step: &step, MTimeMS: e.now.UnixMilli(), Complete: true}
	e.now = e.now.Add(2 * time.Second)
	e.send(w, ck)
	e.publish([]report.Job{long, short}, labPartitions(false))
	e.rounds(2)
	acts = e.actions()
	if len(acts) != 2 || acts[1].Type != report.ActionRequeue || !acts[1].Hold || acts[1].Partition != "gpu" {
		t.Fatalf("want a held requeue onto gpu, got %+v", acts)
	}
	e.result(acts[1].ID, report.StatusOK)
	long.State, long.Reason, long.RestartCount = "PENDING", "JobHeldUser", 1
	e.now = e.now.Add(time.Second)
	e.publish([]report.Job{long, short}, labPartitions(false))
	e.rounds(1)
	if l := e.lineage("P-long"); l.Phase != lifecycle.Yielding || l.YieldTo != 21 {
		t.Fatalf("phase %s yield to %d, want yielding to 21", l.Phase, l.YieldTo)
	}
	if n := len(e.actions()); n != 2 {
		t.Fatalf("%d actions while job 21 still waits, want 2", n)
	}
	short.State, short.Reason, short.StartMS = "RUNNING", "None", e.now.UnixMilli()
	e.now = e.now.Add(time.Second)
	e.publish([]report.Job{long, short}, labPartitions(false))
	e.rounds(1)
	acts = e.actions()
	if len(acts) != 3 || acts[2].Type != report.ActionRelease || acts[2].JobID != 20 {
		t.Fatalf("want job 20 released once job 21 runs, got %+v", acts)
	}
	e.result(acts[2].ID, report.StatusOK)
	e.rounds(1)
	if l := e.lineage("P-long"); l.Phase != lifecycle.RequeueIssued {
		t.Fatalf("phase %s after the release, want requeue-issued", l.Phase)
	}
	w2 := e.wrapper(20, 1001, "alice", "P-long", "gpu")
	w2.job.Attempt = 1
	e.start(w2)
	e.rounds(1)
	if l := e.lineage("P-long"); l.Phase != lifecycle.Idle || l.Preempts != 1 || l.Moves != 0 || l.Conts != 0 {
		t.Errorf("after the new attempt: phase %s preemptions %d moves %d continuations %d", l.Phase, l.Preempts, l.Moves, l.Conts)
	}
}
