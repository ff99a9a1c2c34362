package coordinator

import (
	"strings"
	"testing"
	"time"

	"github.com/isched/isched/internal/lifecycle"
	"github.com/isched/isched/internal/report"
)

// oneGPUBusy is the lab's gpu partition with one of its four GPUs in use
// (job on gpu1), and jobs waiting on it or not.
func oneGPUBusy() []report.Partition {
	gpu := report.Partition{Name: "gpu", State: "UP", NodesAlloc: 1, NodesIdle: 1, NodesTotal: 2,
		GPUs: []report.GPUCount{{Type: "gpu", Alloc: 1, Idle: 3, Total: 4}}, Mixed: []report.Room{{GPUs: 1, CPUs: 3, Nodes: 1}}}
	return []report.Partition{gpu, {Name: "cpu", State: "UP", NodesIdle: 2, NodesTotal: 2}}
}

// TestElasticFlow is rule 9 through the coordinator: alice's elastic run
// (--gpus 1-2, job 30) grows onto the idle GPUs by a checkpoint and a
// requeue at 2 tasks, its next attempt at 2 ranks counts a resize and
// keeps the rate it had at 1; when bob's job waits for the GPU it holds
// above its base it shrinks back to 1 the same way, and a job waiting
// for more than a shrink would free shrinks nothing. Every step goes through the
// lifecycle's table.
func TestElasticFlow(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.c.cfg.Policy.Elastic = true
	plan := report.Plan{Lineage: "E-1", Ideal: "gpu", IdealGres: "gpu:1", Total: 100000, Elastic: &report.Elastic{Min: 1, Max: 2}}
	run := job(30, 1001, "alice", "RUNNING", "gpu", plan.FormatComment())
	run.Gres, run.NodeCount, run.Nodes, run.StartMS = "gpu:1", 1, "gpu1", e.now.Add(-time.Hour).UnixMilli()
	e.publish([]report.Job{run}, oneGPUBusy())
	w := e.wrapper(30, 1001, "alice", "E-1", "gpu")
	e.start(w)
	for i := int64(0); i < 5; i++ {
		e.sample(w, 1+i*20, 20, 500)
	}
	e.rounds(2)
	acts := e.actions()
	if len(acts) != 1 || acts[0].Type != report.ActionSignal || acts[0].JobID != 30 {
		t.Fatalf("want a checkpoint request to job 30, got %+v", acts)
	}
	if d := e.status("E-1").Decisions; !strings.Contains(d[len(d)-1].Reason, "elastic: 3 GPUs idle on gpu and no job waits there; job 30 at 2 GPUs") {
		t.Errorf("decision %+v", d[len(d)-1])
	}
	acts = e.resizeByCheckpoint(w, run, oneGPUBusy(), acts)
	if a := acts[len(acts)-1]; a.Type != report.ActionRequeue || a.Gres != "gpu:2" || a.Tasks != 2 || a.Nodes != 1 || a.Partition != "gpu" {
		t.Fatalf("want a requeue at 2 tasks with gpu:2, got %+v", a)
	}
	run.Gres, run.RestartCount, run.StartMS = "gpu:2", 1, e.now.UnixMilli()
	w2 := e.wrapper(30, 1001, "alice", "E-1", "gpu")
	w2.job.Attempt, w2.job.NRanks = 1, 2
	e.start(w2)
	e.rounds(1)
	l := e.lineage("E-1")
	if l.Phase != lifecycle.Idle || l.Resizes != 1 || l.Moves != 0 || l.Conts != 0 || l.Rates[1] < 1.9 || l.Rates[1] > 2.1 {
		t.Fatalf("after the growth: phase %s resizes %d moves %d continuations %d rates %v; want idle, 1 resize, 2 steps/s at 1 GPU",
			l.Phase, l.Resizes, l.Moves, l.Conts, l.Rates)
	}
	if h := e.status("E-1").History; len(h) != 2 || h[1].Ranks != 2 {
		t.Errorf("history %+v, want a second attempt at 2 ranks", h)
	}

	// bob's job waiting for a whole node, which no shrink would free,
	// shrinks nothing; his job waiting for the GPU alice's run holds above
	// its base does
	full := labPartitions(false)
	e.now = e.now.Add(time.Minute)
	whole := job(32, 1002, "bob", "PENDING", "gpu", "")
	whole.Gres, whole.Reason, whole.NodeCount = "gpu:4", "Resources", 1
	e.publish([]report.Job{run, whole}, full)
	e.rounds(2)
	if n := len(e.actions()); n != 2 {
		t.Fatalf("a job waiting for 4 GPUs on a node, which no shrink frees, shrank the run: %+v", e.actions()[2:])
	}
	bob := job(31, 1002, "bob", "PENDING", "gpu", "")
	bob.Gres, bob.Reason, bob.NodeCount = "gpu:1", "Resources", 1
	e.now = e.now.Add(time.Minute)
	e.publish([]report.Job{run, bob, whole}, full)
	e.rounds(2)
	acts = e.actions()
	if a := acts[len(acts)-1]; a.Type != report.ActionSignal || a.JobID != 30 {
		t.Fatalf("want a checkpoint request for the shrink, got %+v", a)
	}
	if d := e.status("E-1").Decisions; !strings.Contains(d[len(d)-1].Reason, "elastic: jobs wait on gpu for 1 GPUs with 0 idle; job 30 holds 2 GPUs, 1 above its base") {
		t.Errorf("decision %+v", d[len(d)-1])
	}
	acts = e.resizeByCheckpoint(w2, run, full, acts, bob, whole)
	if a := acts[len(acts)-1]; a.Type != report.ActionRequeue || a.Gres != "gpu:1" || a.Tasks != 1 {
		t.Fatalf("want a requeue back at 1 task with gpu:1, got %+v", a)
	}
}

// resizeByCheckpoint answers the checkpoint request acts ends with: the
// checkpoint lands, and the round after asks for the requeue; it returns
// the actions then.
func (e *env) resizeByCheckpoint(w *wrapperSession, run report.Job, parts []report.Partition, acts []report.Action, others ...report.Job) []report.Action {
	e.t.Helper()
	e.result(acts[len(acts)-1].ID, report.StatusOK)
	ck := report.NewEnvelope(report.KindCheckpoint, e.now)
	step := int64(100)
	ck.Checkpoint = &report.Checkpoint{Path: "/ck/step100.pt", Size: 10, Step: &step, MTimeMS: e.now.UnixMilli(), Complete: true}
	e.now = e.now.Add(2 * time.Second)
	e.send(w, ck)
	e.publish(append([]report.Job{run}, others...), parts)
	e.rounds(2)
	out := e.actions()
	if len(out) != len(acts)+1 {
		e.t.Fatalf("after the checkpoint: %d actions, want %d: %+v", len(out), len(acts)+1, out)
	}
	e.result(out[len(out)-1].ID, report.StatusOK)
	return out
}

func TestFreeBeside(t *testing.T) {
	t.Parallel()
	run := report.Job{JobID: 1, State: "RUNNING", Nodes: "gpu2", NodeCount: 1, Gres: "gpu:1"}
	jobs := map[uint64]report.Job{
		1: run,
		2: {JobID: 2, State: "RUNNING", Nodes: "gpu[1-2]", NodeCount: 2, Gres: "gpu:1"},
		3: {JobID: 3, State: "RUNNING", Nodes: "gpu1", NodeCount: 1, Gres: "gpu:2"},
		4: {JobID: 4, State: "PENDING", Gres: "gpu:4"},
	}
	if got := countGPUs(jobs).freeBeside(run, 4); got != 2 {
		t.Errorf("4 GPUs on gpu2, its own 1 and job 2's 1 in use: %d free, want 2", got)
	}
	if got := countGPUs(jobs).freeBeside(jobs[2], 4); got != 0 {
		t.Errorf("a job on two nodes: %d, want 0", got)
	}
	jobs[5] = report.Job{JobID: 5, State: "RUNNING", Nodes: "gpu[2", Gres: "gpu:1"}
	if got := countGPUs(jobs).freeBeside(run, 4); got != 0 {
		t.Errorf("an unreadable host list: %d, want 0", got)
	}
}

// TestElasticWaitingShrinks: an elastic run queued above its base (isched
// submit sized it onto GPUs that others took before it started) goes back
// to its base by an update of the pending job once it has waited
// min_pending for resources, not before, and not when a hold keeps it.
func TestElasticWaitingShrinks(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.c.cfg.Policy.Elastic, e.c.cfg.Policy.MinPending = true, time.Minute
	plan := report.Plan{Lineage: "E-2", Ideal: "gpu", IdealGres: "gpu:1", Total: 100000, Elastic: &report.Elastic{Min: 1, Max: 4}}
	held := report.Plan{Lineage: "E-3", Ideal: "gpu", IdealGres: "gpu:1", Total: 100000, Elastic: &report.Elastic{Min: 1, Max: 4}}
	wait := job(40, 1001, "alice", "PENDING", "gpu", plan.FormatComment())
	wait.Gres, wait.Reason, wait.NodeCount, wait.SubmitMS = "gpu:2", "Resources", 1, e.now.Add(-30*time.Second).UnixMilli()
	hold := job(41, 1001, "alice", "PENDING", "gpu", held.FormatComment())
	hold.Gres, hold.Reason, hold.NodeCount, hold.SubmitMS = "gpu:2", "JobHeldUser", 1, e.now.Add(-time.Hour).UnixMilli()
	full := labPartitions(false)
	e.publish([]report.Job{wait, hold}, full)
	e.rounds(2)
	if acts := e.actions(); len(acts) != 0 {
		t.Fatalf("within min_pending, or held: want nothing, got %+v", acts)
	}
	e.now = e.now.Add(time.Minute)
	e.publish([]report.Job{wait, hold}, full)
	e.rounds(2)
	acts := e.actions()
	if len(acts) != 1 || acts[0].Type != report.ActionUpdate || acts[0].JobID != 40 || acts[0].Gres != "gpu:1" || acts[0].Tasks != 1 || acts[0].Nodes != 1 {
		t.Fatalf("want job 40 updated back to 1 task with gpu:1, got %+v", acts)
	}
	if d := e.status("E-2").Decisions; len(d) != 1 || !strings.Contains(d[0].Reason, "job 40 has waited 1m30s at 2 GPUs") {
		t.Errorf("decisions %+v", d)
	}
}
