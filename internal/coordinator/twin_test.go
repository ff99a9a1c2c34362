package coordinator

import (
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/isched/isched/internal/lifecycle"
	"github.com/isched/isched/internal/report"
)

// twinRun is alice's run (job 40) on cpu, off its ideal gpu, which bob's
// jobs fill; rule 10 is on and the run has reported 100 steps at 500 ms.
type twinRun struct {
	e    *env
	run  report.Job
	w    *wrapperSession
	plan report.Plan
}

func newTwinRun(t *testing.T) *twinRun {
	e := newEnv(t)
	e.c.cfg.Policy.KeepPlace = true
	plan := report.Plan{Lineage: "K1", Ideal: "gpu", IdealGres: "gpu:1", IdealCPUs: 2, Fallbacks: []string{"cpu"}, Total: 100000, Migrate: true}
	r := &twinRun{e: e, plan: plan, run: job(40, 1001, "alice", "RUNNING", "cpu", plan.FormatComment())}
	r.run.StartMS = e.now.Add(-time.Minute).UnixMilli()
	e.publish([]report.Job{r.run}, labPartitions(false))
	r.w = e.wrapper(40, 1001, "alice", "K1", "cpu")
	e.start(r.w)
	for i := int64(0); i < 5; i++ {
		e.sample(r.w, 1+i*20, 20, 500)
	}
	return r
}

// twin is job 41, the run's twin, in state on gpu.
func (r *twinRun) twin(state, reason string) report.Job {
	j := job(41, 1001, "alice", state, "gpu", r.plan.FormatComment())
	j.Gres, j.Reason = "gpu:1", reason
	if state == "RUNNING" {
		j.StartMS = r.e.now.UnixMilli()
	}
	return j
}

// table publishes the job table (gpu full) a second later and runs n rounds.
func (r *twinRun) table(n int, jobs ...report.Job) {
	r.e.now = r.e.now.Add(time.Second)
	r.e.publish(jobs, labPartitions(false))
	r.e.rounds(n)
}

// submitTwin runs the rounds until the twin's submission and returns it,
// answered by the agent with job 41.
func (r *twinRun) submitTwin(t *testing.T) report.Action {
	t.Helper()
	r.e.rounds(2)
	acts := r.e.actions()
	if len(acts) != 1 || acts[0].Type != report.ActionTwin || acts[0].JobID != 40 || acts[0].Partition != "gpu" || acts[0].Gres != "gpu:1" ||
		acts[0].CPUs != 2 || acts[0].TimeLimitMin <= 0 || acts[0].Lineage != "K1" {
		t.Fatalf("want a twin of job 40 on gpu with gpu:1, 2 CPUs and a time limit, got %+v", acts)
	}
	if l := r.e.lineage("K1"); l.Phase != lifecycle.TwinPending {
		t.Fatalf("phase %s after the twin's submission, want twin-pending", l.Phase)
	}
	r.e.resultNewJob(acts[0].ID, report.StatusOK, 41)
	r.table(2, r.run, r.twin("PENDING", "Priority"))
	return acts[0]
}

// TestKeepPlaceFlow is rule 10 through the coordinator: a twin pending on
// gpu keeps alice's place there while her run goes on on cpu; it is never
// taken for the run's job. When Slurm starts it, the run checkpoints, the
// agent hands over (job 40 ends once its twin runs), the lineage follows
// job 41, and the twin's start from the checkpoint counts a move. Every
// step goes through the lifecycle's table (newEnv fails on a refused one).
func TestKeepPlaceFlow(t *testing.T) {
	t.Parallel()
	r := newTwinRun(t)
	e := r.e
	r.submitTwin(t)
	l := e.lineage("K1")
	if l.Twin != 41 || l.TwinReason != "Priority" || e.status("K1").JobID != 40 {
		t.Fatalf("twin %d (%q), run's job %d: want twin 41 (Priority) apart from job 40", l.Twin, l.TwinReason, e.status("K1").JobID)
	}
	r.table(2, r.run, r.twin("PENDING", "Priority"))
	if n := len(e.actions()); n != 1 {
		t.Fatalf("%d actions while the twin waits, want 1", n)
	}
	// Slurm starts the twin: the run checkpoints
	r.table(2, r.run, r.twin("RUNNING", "None"))
	acts := e.actions()
	if len(acts) != 2 || acts[1].Type != report.ActionSignal || acts[1].JobID != 40 || acts[1].Signal != "SIGUSR1" {
		t.Fatalf("want a checkpoint request to job 40 once its twin runs, got %+v", acts)
	}
	if l := e.lineage("K1"); l.Phase != lifecycle.HandingOver {
		t.Fatalf("phase %s, want handing-over", l.Phase)
	}
	e.result(acts[1].ID, report.StatusOK)
	ck := report.NewEnvelope(report.KindCheckpoint, e.now)
	step := int64(100)
	ck.Checkpoint = &report.Checkpoint{Path: "/ck/step100.pt", Size: 10, Step: &step, MTimeMS: e.now.UnixMilli(), Complete: true}
	e.send(r.w, ck)
	r.table(2, r.run, r.twin("RUNNING", "None"))
	acts = e.actions()
	if len(acts) != 3 || acts[2].Type != report.ActionHandover || acts[2].JobID != 40 || acts[2].TwinJobID != 41 {
		t.Fatalf("want a handover of job 40 to twin 41 after the checkpoint, got %+v", acts)
	}
	e.result(acts[2].ID, report.StatusOK)
	r.run.State = "CANCELLED"
	r.table(1, r.run, r.twin("RUNNING", "None"))
	st := e.status("K1")
	if l := e.lineage("K1"); l.Phase != lifecycle.RequeueIssued || st.JobID != 41 || l.Twin != 0 {
		t.Fatalf("after the handover: phase %s, job %d, twin %d; want requeue-issued on job 41, no twin", l.Phase, st.JobID, l.Twin)
	}
	w2 := e.wrapper(41, 1001, "alice", "K1", "gpu")
	e.start(w2)
	r.table(1, r.run, r.twin("RUNNING", "None"))
	st = e.status("K1")
	if l := e.lineage("K1"); l.Phase != lifecycle.Idle || l.Moves != 1 || l.Conts != 0 {
		t.Errorf("after the twin's start: phase %s, moves %d, continuations %d; want idle, one move", l.Phase, l.Moves, l.Conts)
	}
	if len(st.History) != 2 || st.History[0].JobID != 40 || st.History[0].Partition != "cpu" || st.History[1].JobID != 41 || st.History[1].Partition != "gpu" {
		t.Errorf("history %+v", st.History)
	}
	if n := len(e.actions()); n != 3 {
		t.Errorf("%d actions after the handover, want 3 (nothing to cancel)", n)
	}
}

// TestTwinStartBeforeHandoverResult: the twin's wrapper saw job 40 gone
// and started before the coordinator read the handover's result: its start
// report completes the handover, and the late result changes nothing.
func TestTwinStartBeforeHandoverResult(t *testing.T) {
	t.Parallel()
	r := newTwinRun(t)
	e := r.e
	r.submitTwin(t)
	r.table(2, r.run, r.twin("RUNNING", "None"))
	acts := e.actions()
	e.result(acts[1].ID, report.StatusOK)
	step := int64(100)
	ck := report.NewEnvelope(report.KindCheckpoint, e.now)
	ck.Checkpoint = &report.Checkpoint{Path: "/ck/step100.pt", Size: 10, Step: &step, MTimeMS: e.now.UnixMilli(), Complete: true}
	e.send(r.w, ck)
	r.table(2, r.run, r.twin("RUNNING", "None"))
	acts = e.actions()
	if len(acts) != 3 || acts[2].Type != report.ActionHandover {
		t.Fatalf("want a handover, got %+v", acts)
	}
	e.start(e.wrapper(41, 1001, "alice", "K1", "gpu"))
	r.run.State = "CANCELLED"
	r.table(1, r.run, r.twin("RUNNING", "None"))
	e.result(acts[2].ID, report.StatusOK)
	r.table(1, r.run, r.twin("RUNNING", "None"))
	if l, st := e.lineage("K1"), e.status("K1"); l.Phase != lifecycle.Idle || st.JobID != 41 || l.Moves != 1 {
		t.Errorf("phase %s, job %d, moves %d; want idle on job 41 after one move", l.Phase, st.JobID, l.Moves)
	}
}

// TestNoTwinLeftBehind: every way out of the twin phases cancels the twin
// (or finds it gone), and the run goes on where it was.
func TestNoTwinLeftBehind(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name string
		// act makes the fault and returns the job table after it
		act  func(r *twinRun) []report.Job
		want string // the reason of the cancel, "" when none is needed
	}{
		{"the run ends", func(r *twinRun) []report.Job {
			end := report.NewEnvelope(report.KindEnd, r.e.now)
			end.End = &report.End{ExitCode: 1, Reason: "exited"}
			r.e.send(r.w, end)
			r.run.State = "FAILED"
			return []report.Job{r.run, r.twin("PENDING", "Priority")}
		}, "before its twin started"},
		{"someone cancels the twin", func(r *twinRun) []report.Job {
			tw := r.twin("CANCELLED", "None")
			return []report.Job{r.run, tw}
		}, ""},
		{"the handover is refused", func(r *twinRun) []report.Job {
			r.table(2, r.run, r.twin("RUNNING", "None"))
			acts := r.e.actions()
			r.e.result(acts[len(acts)-1].ID, report.StatusOK)
			step := int64(100)
			ck := report.NewEnvelope(report.KindCheckpoint, r.e.now)
			ck.Checkpoint = &report.Checkpoint{Path: "/ck/step100.pt", Size: 10, Step: &step, MTimeMS: r.e.now.UnixMilli(), Complete: true}
			r.e.send(r.w, ck)
			r.table(2, r.run, r.twin("RUNNING", "None"))
			acts = r.e.actions()
			if acts[len(acts)-1].Type != report.ActionHandover {
				r.e.t.Fatalf("want a handover, got %+v", acts)
			}
			r.e.result(acts[len(acts)-1].ID, report.StatusRefused)
			return []report.Job{r.run, r.twin("RUNNING", "None")}
		}, "job 41 of the run outlived its handover"},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			r := newTwinRun(t)
			e := r.e
			r.submitTwin(t)
			before := len(e.actions())
			jobs := c.act(r)
			r.table(2, jobs...)
			acts := e.actions()
			cancel := acts[len(acts)-1]
			if c.want == "" {
				if l := e.lineage("K1"); l.Twin != 0 || l.Phase != lifecycle.Idle {
					t.Errorf("twin %d, phase %s: want none, idle", l.Twin, l.Phase)
				}
				if len(acts) != before {
					t.Errorf("actions %+v after the twin was cancelled by someone else, want none", acts[before:])
				}
				return
			}
			if cancel.Type != report.ActionCancel || cancel.JobID != 41 || !strings.Contains(cancel.Reason, c.want) {
				t.Fatalf("want the twin 41 cancelled (~%q), got %+v", c.want, cancel)
			}
			e.result(cancel.ID, report.StatusOK)
			jobs[1].State = "CANCELLED"
			r.table(1, jobs...)
			if l := e.lineage("K1"); l.Twin != 0 || e.status("K1").JobID != 40 {
				t.Errorf("twin %d, job %d after the cancel", l.Twin, e.status("K1").JobID)
			}
		})
	}
}

// TestTwinStartedBesideTheRun: the twin's wrapper did not wait (its
// --handover-wait 0) and its command started while job 40 still ran: the
// run follows the twin (a move), and job 40 is cancelled.
func TestTwinStartedBesideTheRun(t *testing.T) {
	t.Parallel()
	r := newTwinRun(t)
	e := r.e
	r.submitTwin(t)
	e.start(e.wrapper(41, 1001, "alice", "K1", "gpu"))
	r.table(2, r.run, r.twin("RUNNING", "None"))
	// the table may show the twin running before its start report: the
	// checkpoint for a handover is asked first; its result, then the cancel
	acts := e.actions()
	if last := acts[len(acts)-1]; last.Type == report.ActionSignal {
		e.result(last.ID, report.StatusOK)
		r.table(2, r.run, r.twin("RUNNING", "None"))
		acts = e.actions()
	}
	last := acts[len(acts)-1]
	if last.Type != report.ActionCancel || last.JobID != 40 || !strings.Contains(last.Reason, "job 40 of the run outlived its handover") {
		t.Fatalf("want job 40 cancelled, got %+v", acts)
	}
	if l, st := e.lineage("K1"), e.status("K1"); st.JobID != 41 || l.Moves != 1 || l.Phase != lifecycle.Idle {
		t.Errorf("job %d, moves %d, phase %s: want the run on job 41 after one move", st.JobID, l.Moves, l.Phase)
	}
	e.result(last.ID, report.StatusOK)
	r.run.State = "CANCELLED"
	r.table(2, r.run, r.twin("RUNNING", "None"))
	if l := e.lineage("K1"); l.Twin != 0 || len(e.actions()) != len(acts) {
		t.Errorf("twin %d and %d actions after job 40's cancel, want none more", l.Twin, len(e.actions())-len(acts))
	}
	if kinds := eventKindsOf(e.status("K1")); !slices.Contains(kinds, "two-attempts") {
		t.Errorf("events %v: no two-attempts", kinds)
	}
}

func eventKindsOf(st report.JobStatus) []string {
	var out []string
	for _, ev := range st.Events {
		out = append(out, ev.Kind)
	}
	return out
}

// TestEndedRunKeptUntilItsTwinIsGone: a run that ended with its twin still
// queued stays tracked past endedLinger, its twin's cancel asked again
// after a failure, and leaves once the job table shows the twin gone.
func TestEndedRunKeptUntilItsTwinIsGone(t *testing.T) {
	t.Parallel()
	r := newTwinRun(t)
	e := r.e
	r.submitTwin(t)
	end := report.NewEnvelope(report.KindEnd, e.now)
	end.End = &report.End{ExitCode: 0, Iters: 100000, Reason: report.EndExited}
	e.sample(r.w, 101, 1, 500)
	st := int64(100000)
	ck := report.NewEnvelope(report.KindSample, e.now)
	ck.Sample = &report.Sample{Iters: []report.Iter{{Step: st, AtMS: e.now.UnixMilli(), DurMS: 500, Source: report.SourceFile}}}
	e.send(r.w, ck)
	e.send(r.w, end)
	r.run.State = "COMPLETED"
	r.table(2, r.run, r.twin("PENDING", "Priority"))
	if got := e.status("K1").State; got != "ENDED" {
		t.Fatalf("run %s, want ENDED", got)
	}
	acts := e.actions()
	if last := acts[len(acts)-1]; last.Type != report.ActionCancel || last.JobID != 41 {
		t.Fatalf("want the twin cancelled, got %+v", last)
	}
	e.result(acts[len(acts)-1].ID, report.StatusFailed)
	e.now = e.now.Add(11 * time.Minute)
	r.table(2, r.run, r.twin("PENDING", "Priority"))
	if _, ok := e.c.lineages["K1"]; !ok {
		t.Fatal("the ended run was evicted with its twin still queued")
	}
	if n := len(e.actions()); n <= len(acts) {
		t.Errorf("no new cancel of the twin after the failed one (%d actions)", n)
	}
	r.table(2, r.run, r.twin("CANCELLED", "None"))
	e.now = e.now.Add(11 * time.Minute)
	r.table(2, r.run)
	if _, ok := e.c.lineages["K1"]; ok {
		t.Error("the ended run still in memory once its twin is gone")
	}
}
