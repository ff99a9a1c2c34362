package coordinator

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/isched/isched/internal/lifecycle"
	"github.com/isched/isched/internal/report"
)

// sampleTotal sends n iterations from fromStep, each carrying the loop's
// own total.
func (e *env) sampleTotal(w *wrapperSession, fromStep, n, total int64) {
	env := report.NewEnvelope(report.KindSample, e.now)
	env.Sample = &report.Sample{}
	for i := int64(0); i < n; i++ {
		env.Sample.Iters = append(env.Sample.Iters, report.Iter{Step: fromStep + i, AtMS: e.now.UnixMilli(), DurMS: 100,
			Source: report.SourcePattern, Total: total})
	}
	e.send(w, env)
}

// The loop's own total (step N/T) wins over the one the plan computed from
// --samples/--epochs/--batch; both stay in the status.
func TestLoopTotalWinsOverThePlans(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	const lin = "lab-60"
	plan := report.Plan{Lineage: lin, Ideal: "cpu", Total: 57}
	e.publish([]report.Job{job(60, 1001, "alice", "RUNNING", "cpu", plan.FormatComment())}, nil)
	w := e.attemptWrapper(60, lin, 0)
	e.start(w)
	e.sample(w, 1, 10, 100)
	e.rounds(1)
	if st := e.status(lin); st.TotalIters != 57 || st.PlanTotal != 57 || st.LoopTotal != 0 {
		t.Fatalf("before the loop says: total %d plan %d loop %d, want the plan's 57", st.TotalIters, st.PlanTotal, st.LoopTotal)
	}
	e.sampleTotal(w, 11, 223, 3000)
	e.rounds(1)
	st := e.status(lin)
	if st.TotalIters != 3000 || st.PlanTotal != 57 || st.LoopTotal != 3000 {
		t.Errorf("total %d plan %d loop %d, want the loop's 3000 (plan 57)", st.TotalIters, st.PlanTotal, st.LoopTotal)
	}
	if st.Step != 233 {
		t.Errorf("step %d, want 233", st.Step)
	}
}

func decisionKinds(st report.JobStatus) []string {
	var k []string
	for _, d := range st.Decisions {
		k = append(k, d.Kind)
	}
	return k
}

func (e *env) checkpoint(w *wrapperSession, path string, step int64) {
	ck := report.NewEnvelope(report.KindCheckpoint, e.now)
	ck.Checkpoint = &report.Checkpoint{Path: path, Size: 10, Step: &step, MTimeMS: e.now.UnixMilli(), Complete: true}
	e.send(w, ck)
}

// startResumed sends w's start report resuming from path.
func (e *env) startResumed(w *wrapperSession, path string) {
	env := report.NewEnvelope(report.KindStart, e.now)
	env.Start = &report.Start{Argv: []string{"python3", "train.py"}, Host: "h", PID: 1, Cred: w.cred, GPUs: []string{}, ResumeFrom: path}
	e.send(w, env)
}

// savedAndExited runs attempt 0 of job id on cpu (lineage lin, 3000
// steps): 294 steps, a checkpoint at 294, exit 0. It returns the job.
func (e *env) savedAndExited(id uint64, lin string) report.Job {
	plan := report.Plan{Lineage: lin, Ideal: "cpu", Total: 3000}
	j := job(id, 1001, "alice", "RUNNING", "cpu", plan.FormatComment())
	e.publish([]report.Job{j}, nil)
	w := e.attemptWrapper(id, lin, 0)
	e.start(w)
	e.sampleTotal(w, 1, 294, 3000)
	e.checkpoint(w, "/ck/ckpt-294.pt", 294)
	e.end(w, 0)
	e.rounds(1)
	return j
}

// Issue 14's run: USR1 -> save -> exit 0 with steps left, Slurm says
// COMPLETED. The run is continued (a requeue of the ended job, same job
// id) from its checkpoint, once per attempt that made progress; an
// attempt that crashes with no new checkpoint is not continued, and the
// status says why.
func TestContinueAfterAnEndWithWorkLeft(t *testing.T) {
	t.Parallel()
	for _, slurmState := range []string{"COMPLETED", "TIMEOUT", "FAILED", "NODE_FAIL"} {
		e := newEnv(t)
		const lin = "lab-61"
		j := e.savedAndExited(61, lin)
		if acts := e.actions(); len(acts) != 0 {
			t.Fatalf("%s: acted before Slurm's final state: %+v", slurmState, acts)
		}
		e.now = e.now.Add(time.Second)
		j.State = slurmState
		e.publish([]report.Job{j}, nil)
		e.rounds(1)
		acts := e.actions()
		if len(acts) != 1 || acts[0].Type != report.ActionRequeue || !acts[0].Ended || acts[0].JobID != 61 || acts[0].Partition != "cpu" {
			t.Fatalf("%s: actions %+v, want one requeue of the ended job 61 onto cpu", slurmState, acts)
		}
		st := e.status(lin)
		if st.State == "ENDED" || st.EndedMS != 0 {
			t.Fatalf("%s: the lineage ended (%s) with 2706 steps left", slurmState, st.State)
		}
		if d := st.Decisions[len(st.Decisions)-1]; !strings.HasPrefix(d.Reason, "continue: the attempt ended "+slurmState) ||
			!strings.Contains(d.Reason, "the checkpoint at step 294") {
			t.Errorf("%s: decision %q", slurmState, d.Reason)
		}
		e.rounds(2)
		if n := len(e.actions()); n != 1 {
			t.Errorf("%s: %d actions while the first is out, want 1 (no double action)", slurmState, n)
		}
		// the agent requeued it: attempt 1 resumes from the checkpoint
		e.result(acts[0].ID, report.StatusOK)
		e.now = e.now.Add(5 * time.Second)
		j.State, j.RestartCount = "RUNNING", 1
		e.publish([]report.Job{j}, nil)
		w1 := e.attemptWrapper(61, lin, 1)
		e.startResumed(w1, "/ck/ckpt-294.pt")
		e.sampleTotal(w1, 295, 10, 3000)
		e.rounds(1)
		if l := e.lineage(lin); l.Conts != 1 || l.Phase != lifecycle.Idle {
			t.Errorf("%s: continuations %d phase %q after the new attempt started", slurmState, l.Conts, l.Phase)
		}
		// attempt 1 crashes with no new checkpoint: not continued blindly
		e.end(w1, 1)
		e.rounds(1)
		e.now = e.now.Add(time.Second)
		j.State = "FAILED"
		e.publish([]report.Job{j}, nil)
		e.rounds(1)
		if n := len(e.actions()); n != 1 {
			t.Errorf("%s: a crash without a new checkpoint was continued (%d actions)", slurmState, n)
		}
		st = e.status(lin)
		if st.State != "ENDED" || st.ExitStatus == nil || *st.ExitStatus != 1 {
			t.Errorf("%s: after the crash: state %s exit %v", slurmState, st.State, st.ExitStatus)
		}
		if d := st.Decisions[len(st.Decisions)-1]; d.Kind != "not-continued" || !strings.Contains(d.Reason, "a crash (exit 1) with no new checkpoint") {
			t.Errorf("%s: last decision %+v", slurmState, d)
		}
		if len(st.History) != 2 || st.History[1].StartStep != 294 {
			t.Errorf("%s: history %+v", slurmState, st.History)
		}
	}
}

// TestContinuedJobCancelledBeforeItStarts: the run was continued (its
// ended job requeued) and the user cancels the requeued job while it is
// pending (isched stop between attempts). It never starts again: the run
// ends CANCELLED at once, not after RequeueWait, and is not continued.
func TestContinuedJobCancelledBeforeItStarts(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	const lin = "lab-64"
	j := e.savedAndExited(64, lin)
	e.now = e.now.Add(time.Second)
	j.State = "FAILED"
	e.publish([]report.Job{j}, nil)
	e.rounds(1)
	acts := e.actions()
	if len(acts) != 1 || acts[0].Type != report.ActionRequeue {
		t.Fatalf("actions %+v, want the continuation's requeue", acts)
	}
	e.result(acts[0].ID, report.StatusOK)
	e.now = e.now.Add(time.Second)
	j.State, j.RestartCount = "PENDING", 1
	e.publish([]report.Job{j}, nil)
	e.rounds(1)
	if st := e.status(lin); st.EndedMS != 0 {
		t.Fatalf("ended (%s) while the requeued job waits to start", st.State)
	}
	e.now = e.now.Add(time.Second)
	j.State = "CANCELLED"
	e.publish([]report.Job{j}, nil)
	e.rounds(2)
	st := e.status(lin)
	if st.EndedMS == 0 || st.State != "CANCELLED" {
		t.Fatalf("state %s ended %d after the requeued job was cancelled; want CANCELLED, ended", st.State, st.EndedMS)
	}
	if d := st.Decisions[len(st.Decisions)-1]; d.Kind != "not-continued" || !strings.Contains(d.Reason, "cancelled (scancel)") {
		t.Errorf("last decision %+v, want not-continued: cancelled", d)
	}
	if n := len(e.actions()); n != 1 {
		t.Errorf("%d actions, want only the first requeue", n)
	}
	if l := e.lineage(lin); l.Phase != lifecycle.Ended {
		t.Errorf("phase %q after the end", l.Phase)
	}
}

// A CANCELLED job is the user's word: never continued. An attempt that
// checkpointed nothing new since it resumed is not continued either.
func TestNoContinuationWhenCancelledOrWithoutProgress(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name, state string
		newCkpt     bool
		want        string
	}{
		{"cancelled", "CANCELLED", true, "cancelled (scancel)"},
		{"no-progress", "TIMEOUT", false, "no progress since the previous attempt"},
	} {
		e := newEnv(t)
		const lin = "lab-62"
		plan := report.Plan{Lineage: lin, Ideal: "cpu", Total: 3000}
		j := job(62, 1001, "alice", "RUNNING", "cpu", plan.FormatComment())
		j.RestartCount = 1
		e.publish([]report.Job{j}, nil)
		w := e.attemptWrapper(62, lin, 0)
		e.start(w)
		e.sampleTotal(w, 1, 100, 3000)
		e.checkpoint(w, "/ck/ckpt-100.pt", 100)
		e.rounds(1)
		w1 := e.attemptWrapper(62, lin, 1)
		e.startResumed(w1, "/ck/ckpt-100.pt")
		e.sampleTotal(w1, 101, 50, 3000)
		if tc.newCkpt {
			e.checkpoint(w1, "/ck/ckpt-150.pt", 150)
		}
		end := report.NewEnvelope(report.KindEnd, e.now) // killed at the time limit
		end.End = &report.End{ExitCode: 143, Signal: "SIGTERM", Reason: report.EndSignaled}
		e.send(w1, end)
		e.rounds(1)
		e.now = e.now.Add(time.Second)
		j.State = tc.state
		e.publish([]report.Job{j}, nil)
		e.rounds(1)
		if acts := e.actions(); len(acts) != 0 {
			t.Errorf("%s: continued: %+v", tc.name, acts)
		}
		st := e.status(lin)
		if st.EndedMS == 0 {
			t.Errorf("%s: not ended", tc.name)
		}
		if d := st.Decisions[len(st.Decisions)-1]; d.Kind != "not-continued" || !strings.Contains(d.Reason, tc.want) {
			t.Errorf("%s: last decision %+v, want %q", tc.name, d, tc.want)
		}
	}
}

// A script that requeues itself after saving (Lightning's auto-requeue):
// no second requeue, but the pending job gets the time limit the rest of
// the run needs, once.
func TestSelfRequeuedJobGetsTheRestsTimeLimit(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	const lin = "lab-63"
	plan := report.Plan{Lineage: lin, Ideal: "cpu", Total: 900}
	j := job(63, 1001, "alice", "RUNNING", "cpu", plan.FormatComment())
	one := int64(1)
	j.TimeLimitMin = &one
	e.publish([]report.Job{j}, nil)
	w := e.attemptWrapper(63, lin, 0)
	e.start(w)
	e.sampleTotal(w, 1, 30, 900)
	e.checkpoint(w, "/ck/ckpt-30.pt", 30)
	e.end(w, 0)
	e.rounds(1)
	e.now = e.now.Add(time.Second)
	j.State, j.RestartCount = "PENDING", 1
	e.publish([]report.Job{j}, nil)
	e.rounds(1)
	acts := e.actions()
	if len(acts) != 1 || acts[0].Type != report.ActionUpdate || acts[0].TimeLimitMin <= 1 || acts[0].JobID != 63 {
		t.Fatalf("actions %+v, want one update of the pending job's time limit", acts)
	}
	st := e.status(lin)
	if d := st.Decisions[len(st.Decisions)-1]; !strings.Contains(d.Reason, "the job requeued itself (restart 1): no second requeue") {
		t.Errorf("decision %q", d.Reason)
	}
	e.result(acts[0].ID, report.StatusOK)
	e.now = e.now.Add(time.Second)
	e.publish([]report.Job{j}, nil)
	e.rounds(2)
	if n := len(e.actions()); n != 1 {
		t.Errorf("%d actions, want 1", n)
	}
	if st := e.status(lin); st.Continuations != 1 || st.EndedMS != 0 {
		t.Errorf("continuations %d ended %d", st.Continuations, st.EndedMS)
	}
}

// A run whose job slurmctld forgot before the coordinator settled its end
// (the coordinator was down past MinJobAge) is continued by a resubmission
// of its batch script: a new job id, the same lineage; the status follows
// the new job and lists both. A failed resubmission ends the run.
func TestResubmitWhenSlurmForgotTheJob(t *testing.T) {
	t.Parallel()
	for _, ok := range []bool{true, false} {
		e := newEnv(t)
		e.c.cfg.EndGrace = 30 * time.Second
		const lin = "lab-u1001-train-ab12"
		e.savedAndExited(63, lin)
		plan := report.Plan{Lineage: lin, Ideal: "cpu", Total: 3000}
		// the coordinator was down: the next table no longer lists job 63
		e.now = e.now.Add(10 * time.Minute)
		e.publish(nil, nil)
		e.rounds(1)
		acts := e.actions()
		if len(acts) != 1 || acts[0].Type != report.ActionResubmit || acts[0].JobID != 63 || acts[0].Partition != "cpu" || acts[0].TimeLimitMin <= 0 ||
			acts[0].Lineage != lin || acts[0].User != "alice" {
			t.Fatalf("actions %+v, want one resubmit of job 63 onto cpu", acts)
		}
		st := e.status(lin)
		if d := st.Decisions[len(st.Decisions)-1]; d.Kind != "resubmit" || !strings.Contains(d.Reason, "slurmctld no longer holds the job (MinJobAge): resubmitting") {
			t.Errorf("decision %+v", d)
		}
		e.rounds(2)
		if n := len(e.actions()); n != 1 {
			t.Fatalf("%d actions while the resubmit is out, want 1", n)
		}
		if !ok {
			e.result(acts[0].ID, report.StatusRefused)
			e.rounds(1)
			st := e.status(lin)
			if st.EndedMS == 0 || len(e.actions()) != 1 {
				t.Errorf("a refused resubmit: ended %d, %d actions", st.EndedMS, len(e.actions()))
			}
			continue
		}
		// the table may list the new job before the agent's result comes
		j2 := job(70, 1001, "alice", "PENDING", "cpu", plan.FormatComment())
		e.publish([]report.Job{j2}, nil)
		e.rounds(1)
		e.resultNewJob(acts[0].ID, report.StatusOK, 70)
		e.rounds(1)
		st = e.status(lin)
		if st.JobID != 70 || st.State != "PENDING" || st.EndedMS != 0 {
			t.Fatalf("after the resubmit: job %d state %s ended %d, want pending job 70", st.JobID, st.State, st.EndedMS)
		}
		if ev := st.Events[len(st.Events)-1]; ev.Kind != "resubmitted" || !strings.Contains(ev.Message, "job 63") || !strings.Contains(ev.Message, "job 70") {
			t.Errorf("last event %+v", ev)
		}
		// the new job runs and resumes from the lineage's checkpoint
		e.now = e.now.Add(5 * time.Second)
		j2.State = "RUNNING"
		e.publish([]report.Job{j2}, nil)
		w2 := e.attemptWrapper(70, lin, 0)
		e.startResumed(w2, "/ck/ckpt-294.pt")
		e.sampleTotal(w2, 295, 10, 3000)
		e.rounds(3)
		l := e.lineage(lin)
		if l.Conts != 1 || l.Phase != lifecycle.Idle || len(e.actions()) != 1 {
			t.Errorf("continuations %d phase %q actions %d after the new job started", l.Conts, l.Phase, len(e.actions()))
		}
		st = e.status(lin)
		if len(st.History) != 2 || st.History[0].JobID != 63 || st.History[1].JobID != 70 || st.History[1].StartStep != 294 {
			t.Errorf("history %+v, want job 63 then job 70 from step 294", st.History)
		}
	}
}

// A run Slurm completed while reports were trimmed unread from the ingest
// stream (issue 26: bob's MAXLEN 0 deleted alice's end report; her 100/100
// run was seen at step 33, requeued and recorded as ending there): with a
// loss during its attempt, the run is not continued and the decision says
// its last seen step may be stale. A loss before the attempt began changes
// nothing: the run is continued from its checkpoint as usual.
func TestCompletedWhileReportsLostIsNotContinued(t *testing.T) {
	t.Parallel()
	for _, during := range []bool{true, false} {
		e := newEnv(t)
		e.c.cfg.EndGrace = 30 * time.Second
		const lin = "lab-u1001-lost"
		if !during {
			e.c.lossMS = e.now.Add(-time.Hour).UnixMilli()
		}
		plan := report.Plan{Lineage: lin, Ideal: "cpu", Total: 3000}
		j := job(81, 1001, "alice", "RUNNING", "cpu", plan.FormatComment())
		e.publish([]report.Job{j}, nil)
		w := e.attemptWrapper(81, lin, 0)
		e.start(w)
		e.sampleTotal(w, 1, 294, 3000)
		e.checkpoint(w, "/ck/ckpt-294.pt", 294)
		e.rounds(1)
		if during {
			e.c.lossMS = e.now.UnixMilli() // checkLag found reports trimmed unread
		}
		// no end report arrives: Slurm says COMPLETED, the grace passes
		e.now = e.now.Add(time.Second)
		j.State = "COMPLETED"
		e.publish([]report.Job{j}, nil)
		e.rounds(1)
		e.now = e.now.Add(31 * time.Second)
		e.publish([]report.Job{j}, nil)
		e.rounds(1)
		st := e.status(lin)
		acts := e.actions()
		if !during {
			if len(acts) != 1 || acts[0].Type != report.ActionRequeue {
				t.Fatalf("a loss before the attempt: actions %+v, want the usual requeue from step 294", acts)
			}
			continue
		}
		if len(acts) != 0 {
			t.Fatalf("reports lost during the attempt: actions %+v, want none (a finished run must not be requeued)", acts)
		}
		if st.EndedMS == 0 || st.State != "COMPLETED" {
			t.Fatalf("state %s ended %d, want COMPLETED and ended", st.State, st.EndedMS)
		}
		d := st.Decisions[len(st.Decisions)-1]
		if d.Kind != "reports-lost" || !strings.Contains(d.Reason, "last step seen (294) may be stale") {
			t.Errorf("last decision %+v, want reports-lost naming the stale step", d)
		}
		for _, d := range st.Decisions {
			if d.Kind == "not-continued" {
				t.Errorf("decision %+v: the run is not known to have ended short", d)
			}
		}
	}
}

// TestRunFinishedWhileItsRequeueWasOut: the checkpoint a move asked for
// lands at step 100, the requeue goes out, and the loop meanwhile runs to
// its last step and saves it, then either exits 0 before Slurm requeues
// the job, or is killed by the requeue right after that save (seen in CI,
// TestConventionHelper: the requeued attempt resumed at 900 of 900 with
// nothing to do). The attempt after the requeue resumes from the final
// checkpoint and ends at once: the run ends at its total, ENDED, with one
// span per attempt and nothing continued.
func TestRunFinishedWhileItsRequeueWasOut(t *testing.T) {
	t.Parallel()
	for _, killed := range []bool{false, true} {
		runFinishedWhileRequeueOut(t, killed)
	}
}

func runFinishedWhileRequeueOut(t *testing.T, killed bool) {
	e := newEnv(t)
	const lin, total = "L1", int64(20000)
	plan := report.Plan{Lineage: lin, Ideal: "gpu", IdealGres: "gpu:1", Fallbacks: []string{"cpu"}, Total: total, Migrate: true}
	j := job(40, 1001, "alice", "RUNNING", "cpu", plan.FormatComment())
	j.StartMS = e.now.Add(-time.Minute).UnixMilli()
	e.publish([]report.Job{j}, labPartitions(true))
	w := e.attemptWrapper(40, lin, 0)
	e.start(w)
	e.sampleTotal(w, 1, 100, total)
	e.rounds(2)
	acts := e.actions()
	if len(acts) != 1 || acts[0].Type != report.ActionSignal {
		t.Fatalf("killed %v: want a checkpoint request to move onto the idle gpu, got %+v", killed, acts)
	}
	e.result(acts[0].ID, report.StatusOK)
	e.now = e.now.Add(2 * time.Second)
	e.checkpoint(w, "/ck/ckpt-100.pt", 100)
	e.rounds(2)
	acts = e.actions()
	if len(acts) != 2 || acts[1].Type != report.ActionRequeue {
		t.Fatalf("killed %v: want the requeue after the checkpoint, got %+v", killed, acts)
	}
	// the loop reaches its last step and saves it before the requeue lands
	e.now = e.now.Add(time.Second)
	for from := int64(101); from <= total; from += 500 {
		e.sampleTotal(w, from, min(500, total-from+1), total)
	}
	e.checkpoint(w, "/ck/ckpt-20000.pt", total)
	if !killed {
		e.end(w, 0)
	}
	e.rounds(1)
	e.result(acts[1].ID, report.StatusOK)
	e.now = e.now.Add(3 * time.Second)
	if killed {
		end := report.NewEnvelope(report.KindEnd, e.now)
		end.End = &report.End{ExitCode: 143, Reason: report.EndSignaled, Signal: "SIGTERM"}
		e.send(w, end)
	}
	j.State, j.Partition, j.RestartCount = "RUNNING", "gpu", 1
	e.publish([]report.Job{j}, labPartitions(false))
	e.rounds(1)
	w1 := e.attemptWrapper(40, lin, 1)
	e.startResumed(w1, "/ck/ckpt-20000.pt")
	e.end(w1, 0)
	e.rounds(1)
	e.now = e.now.Add(time.Second)
	j.State = "COMPLETED"
	e.publish([]report.Job{j}, labPartitions(false))
	e.rounds(2)
	st := e.status(lin)
	if st.State != "ENDED" || st.Step != total || st.EndedMS == 0 {
		t.Errorf("killed %v: state %s at step %d (ended %d), want ENDED at %d; decisions %v", killed, st.State, st.Step, st.EndedMS, total, decisionKinds(st))
	}
	if len(st.History) != 2 || st.History[1].StartStep != total {
		t.Errorf("killed %v: history %s, want two spans, the second from %d", killed, spans(st), total)
	}
	if n := len(e.actions()); n != 2 {
		t.Errorf("killed %v: %d actions, want no continuation of a finished run", killed, n)
	}
}

// TestKilledAfterSavingItsLastStep: Slurm's time limit kills the attempt
// right after the loop saved its last step, before the reports of its
// last steps went out. The run is done: not continued (a requeue would
// start an attempt with nothing to do), and its status says the
// checkpoint's step, not the last one reported.
func TestKilledAfterSavingItsLastStep(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	const lin = "lab-62"
	plan := report.Plan{Lineage: lin, Ideal: "cpu", Total: 300}
	j := job(62, 1001, "alice", "RUNNING", "cpu", plan.FormatComment())
	e.publish([]report.Job{j}, nil)
	w := e.attemptWrapper(62, lin, 0)
	e.start(w)
	e.sampleTotal(w, 1, 280, 300)
	e.checkpoint(w, "/ck/ckpt-300.pt", 300)
	end := report.NewEnvelope(report.KindEnd, e.now)
	end.End = &report.End{ExitCode: 143, Reason: report.EndSignaled, Signal: "SIGTERM"}
	e.send(w, end)
	e.rounds(1)
	e.now = e.now.Add(time.Second)
	j.State = "TIMEOUT"
	e.publish([]report.Job{j}, nil)
	e.rounds(2)
	if acts := e.actions(); len(acts) != 0 {
		t.Errorf("a finished run was continued: %+v", acts)
	}
	st := e.status(lin)
	if st.EndedMS == 0 || st.Step != 300 {
		t.Errorf("state %s at step %d (ended %d), want ended at 300; decisions %v", st.State, st.Step, st.EndedMS, decisionKinds(st))
	}
	for _, d := range st.Decisions {
		if d.Kind == "not-continued" {
			t.Errorf("decision %q: the run is not short of its total", d.Reason)
		}
	}
}

// TestEndedAtTotalBeforeItsLastStepReport (ci53, TestConventionSIGTERMOnly):
// a last attempt of one iteration saves its last step and exits 0, and its
// end report is applied while the last step seen is one short. Slurm's
// COMPLETED then settles it: the run ended by itself at its total, so its
// state is ENDED (not Slurm's COMPLETED) at the checkpoint's step, and it
// is not continued.
func TestEndedAtTotalBeforeItsLastStepReport(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	const lin = "lab-63"
	plan := report.Plan{Lineage: lin, Ideal: "cpu", Total: 900}
	j := job(63, 1001, "alice", "RUNNING", "cpu", plan.FormatComment())
	e.publish([]report.Job{j}, nil)
	w := e.attemptWrapper(63, lin, 0)
	e.start(w)
	e.sampleTotal(w, 700, 200, 900) // steps 700 to 899
	e.checkpoint(w, "/ck/ckpt-900.pt", 900)
	end := report.NewEnvelope(report.KindEnd, e.now)
	end.End = &report.End{ExitCode: 0, Reason: report.EndExited}
	e.send(w, end)
	e.rounds(1)
	e.now = e.now.Add(time.Second)
	j.State = "COMPLETED"
	e.publish([]report.Job{j}, nil)
	e.rounds(1)                         // Slurm's COMPLETED seen
	e.now = e.now.Add(10 * time.Minute) // past EndGrace: no other report settles it
	e.publish([]report.Job{j}, nil)
	e.rounds(2)
	if acts := e.actions(); len(acts) != 0 {
		t.Errorf("a finished run was continued: %+v", acts)
	}
	st := e.status(lin)
	if st.State != "ENDED" || st.Step != 900 || st.EndedMS == 0 {
		t.Errorf("state %s at step %d (ended %d), want ENDED at 900; decisions %v", st.State, st.Step, st.EndedMS, decisionKinds(st))
	}
}

// The loss the loop reports reaches the status: the last, the lowest and
// the trend, and a NaN is counted, not lost.
func TestLossReachesTheStatus(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	const lin = "lab-61"
	plan := report.Plan{Lineage: lin, Ideal: "cpu", Total: 100}
	e.publish([]report.Job{job(61, 1001, "alice", "RUNNING", "cpu", plan.FormatComment())}, nil)
	w := e.attemptWrapper(61, lin, 0)
	e.start(w)
	e.sample(w, 1, 5, 100) // no loss yet
	e.rounds(1)
	if st := e.status(lin); st.Loss != nil {
		t.Fatalf("a loss before any was reported: %+v", st.Loss)
	}
	env := report.NewEnvelope(report.KindSample, e.now)
	env.Sample = &report.Sample{}
	for s := int64(6); s <= 25; s++ {
		loss := 10 / float64(s)
		it := report.Iter{Step: s, AtMS: e.now.UnixMilli(), DurMS: 100, Source: report.SourceHelper, Loss: &loss}
		if s == 20 {
			it.Loss, it.LossNonFinite = nil, true
		}
		env.Sample.Iters = append(env.Sample.Iters, it)
	}
	e.send(w, env)
	e.rounds(1)
	l := e.status(lin).Loss
	if l == nil || l.N != 19 || l.NonFinite != 1 || l.Last != 10.0/25 || l.Step != 25 || l.Min != l.Last || l.Trend >= -0.5 {
		t.Errorf("loss status %+v; want 19 values to 0.4 at step 25, one NaN, falling", l)
	}
}

// A series point carries the last loss of its sample's iterations.
func TestSeriesPointLoss(t *testing.T) {
	t.Parallel()
	a, b := 0.9, 0.7
	iters := []report.Iter{{Step: 1, AtMS: 10, DurMS: 5, Loss: &a}, {Step: 2, AtMS: 20, DurMS: 5, Loss: &b}, {Step: 3, AtMS: 30, DurMS: 5, LossNonFinite: true}}
	var p report.SeriesPoint
	if err := json.Unmarshal(seriesPoint(0, 3, 1, 0, iters), &p); err != nil {
		t.Fatal(err)
	}
	if p.Loss == nil || *p.Loss != b || p.Step != 3 {
		t.Errorf("point %+v, want the loss %v of step 2", p, b)
	}
	var none report.SeriesPoint
	if err := json.Unmarshal(seriesPoint(0, 3, 1, 0, iters[2:]), &none); err != nil || none.Loss != nil {
		t.Errorf("a sample without a finite loss: %+v %v", none, err)
	}
}
