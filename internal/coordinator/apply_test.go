package coordinator

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/isched/isched/internal/lifecycle"
	"github.com/isched/isched/internal/report"
)

func (e *env) end(w *wrapperSession, code int) {
	env := report.NewEnvelope(report.KindEnd, e.now)
	env.End = &report.End{ExitCode: code, Reason: report.EndExited}
	e.send(w, env)
}

func (e *env) receipts() []string {
	e.t.Helper()
	l, err := e.store.List(context.Background(), "isched:lab:coord:receipts")
	if err != nil {
		e.t.Fatal(err)
	}
	var out []string
	for _, b := range l {
		out = append(out, string(b))
	}
	return out
}

func (e *env) lineage(name string) *lineage {
	e.t.Helper()
	l, ok := e.c.lineages[name]
	if !ok {
		e.t.Fatalf("lineage %s not in memory", name)
	}
	return l
}

func spans(st report.JobStatus) string {
	s := ""
	for _, sp := range st.History {
		s += fmt.Sprintf("[%d/%d %s %d..%d end %d %s]", sp.JobID, sp.Attempt, sp.Partition, sp.StartStep, sp.EndStep, sp.EndMS, sp.Reason)
	}
	return s
}

// A preempted job (PreemptMode=REQUEUE): its trainer saves on SIGTERM and
// exits 0, with no total known, which reads like the run's end; Slurm
// requeues the job. The lineage must never show ENDED in between, and ends
// once, with one receipt, after the second attempt.
func TestPreemptedAttemptDoesNotEndTheLineage(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	plan := report.Plan{Lineage: "P1", Ideal: "cpu", Fallbacks: []string{"scavenger"}, Model: "m1"}
	j := job(70, 1001, "alice", "RUNNING", "scavenger", plan.FormatComment())
	j.StartMS = e.now.UnixMilli()
	e.publish([]report.Job{j}, nil)
	w := e.wrapper(70, 1001, "alice", "P1", "scavenger")
	e.start(w)
	e.sample(w, 1, 40, 100)
	e.rounds(1)

	e.now = e.now.Add(time.Second)
	e.end(w, 0) // after the SIGTERM checkpoint
	e.rounds(1)
	var seen []string
	look := func() {
		st := e.status("P1")
		if len(seen) == 0 || seen[len(seen)-1] != st.State {
			seen = append(seen, st.State)
		}
	}
	look()
	// Slurm: still running (the table of this very moment), completing, requeued
	for _, s := range []struct {
		state    string
		restarts int
	}{{"RUNNING", 0}, {"COMPLETING", 0}, {"PENDING", 1}} {
		e.now = e.now.Add(time.Second)
		j.State, j.RestartCount = s.state, s.restarts
		e.publish([]report.Job{j}, nil)
		e.rounds(1)
		look()
	}
	// past any grace: a requeued job is not an ended one
	e.now = e.now.Add(2 * time.Minute)
	e.publish([]report.Job{j}, nil)
	e.rounds(1)
	look()
	if slices.Contains(seen, "ENDED") {
		t.Fatalf("lineage states %v: ENDED while Slurm requeued the job", seen)
	}
	if l := e.lineage("P1"); l.End != nil || l.ended() || l.Moves != 0 {
		t.Errorf("after the requeue: end %+v ended %v moves %d", l.End, l.ended(), l.Moves)
	}

	j.State, j.StartMS = "RUNNING", e.now.UnixMilli()
	e.publish([]report.Job{j}, nil)
	w2 := e.wrapper(70, 1001, "alice", "P1", "scavenger")
	w2.job.Attempt = 1
	e.start(w2)
	e.sample(w2, 41, 60, 100)
	e.rounds(1)
	e.now = e.now.Add(time.Second)
	e.end(w2, 0)
	e.rounds(1)
	if st := e.status("P1"); st.State == "ENDED" {
		t.Fatal("ENDED while the job table still shows the job running")
	}
	e.now = e.now.Add(time.Second)
	j.State = "COMPLETED"
	e.publish([]report.Job{j}, nil)
	e.rounds(1)
	st := e.status("P1")
	if st.State != "ENDED" || st.ExitStatus == nil || *st.ExitStatus != 0 || st.Attempt != 1 || st.Step != 100 {
		t.Fatalf("after Slurm's COMPLETED: state %s exit %v attempt %d step %d, want ENDED exit 0 attempt 1 step 100",
			st.State, st.ExitStatus, st.Attempt, st.Step)
	}
	if len(st.History) != 2 || st.History[0].Attempt != 0 || st.History[0].EndStep != 40 ||
		st.History[1].Attempt != 1 || st.History[1].EndStep != 100 || st.History[1].EndMS == 0 {
		t.Errorf("history %s, want attempt 0 to step 40 and attempt 1 to step 100", spans(st))
	}
	if r := e.receipts(); len(r) != 1 {
		t.Errorf("receipts %v, want one for the whole run", r)
	} else if !strings.Contains(r[0], `"uid":1001`) {
		t.Errorf("receipt %s: the owner's uid not recorded", r[0])
	}
	if !slices.ContainsFunc(st.Events, func(ev report.StatusEvent) bool { return ev.Kind == "requeued" }) {
		t.Errorf("events %+v: no \"requeued\"", st.Events)
	}
}

// A finished run whose job the table no longer lists (MinJobAge passed, or
// the table is missing it) ends after EndGrace, not before.
func TestEndSettlesAfterGraceWhenTheJobLeavesTheTable(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.c.cfg.EndGrace = 30 * time.Second
	plan := report.Plan{Lineage: "P2", Ideal: "cpu", Total: 10}
	j := job(71, 1001, "alice", "RUNNING", "cpu", plan.FormatComment())
	e.publish([]report.Job{j}, nil)
	w := e.wrapper(71, 1001, "alice", "P2", "cpu")
	e.start(w)
	e.sample(w, 1, 10, 100)
	e.end(w, 3) // failed on its own: the run's end too
	e.rounds(1)
	e.now = e.now.Add(time.Second)
	e.publish(nil, nil)
	e.rounds(1)
	if st := e.status("P2"); st.State == "ENDED" {
		t.Fatal("ENDED at once although the job merely left the table")
	}
	e.now = e.now.Add(30 * time.Second)
	e.publish(nil, nil)
	e.rounds(1)
	st := e.status("P2")
	if st.State != "ENDED" || st.ExitStatus == nil || *st.ExitStatus != 3 {
		t.Fatalf("after the grace: state %s exit %v, want ENDED exit 3", st.State, st.ExitStatus)
	}
}

// An attempt's end that is not the run's end (exit 0 short of the total)
// followed by Slurm's TIMEOUT: the lineage ends with the exit status the
// end report gave.
func TestSlurmEndAfterAnUnfinishedAttemptKeepsItsExit(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	plan := report.Plan{Lineage: "P3", Ideal: "cpu", Total: 1000}
	j := job(72, 1001, "alice", "RUNNING", "cpu", plan.FormatComment())
	e.publish([]report.Job{j}, nil)
	w := e.wrapper(72, 1001, "alice", "P3", "cpu")
	e.start(w)
	e.sample(w, 1, 10, 100)
	e.end(w, 0)
	e.rounds(1)
	e.now = e.now.Add(time.Second)
	j.State = "TIMEOUT"
	e.publish([]report.Job{j}, nil)
	e.rounds(1)
	st := e.status("P3")
	if st.State != "TIMEOUT" || st.ExitStatus == nil || *st.ExitStatus != 0 || st.EndedMS == 0 {
		t.Fatalf("state %s exit %v ended %d, want TIMEOUT with exit 0", st.State, st.ExitStatus, st.EndedMS)
	}
	if l := e.lineage("P3"); !l.ended() || l.End != nil {
		t.Errorf("ended %v end %+v", l.ended(), l.End)
	}
}

// Slurm's final state can reach the coordinator before a delayed end
// report: the lineage ends with Slurm's state, and the report, when it
// comes, fills in the exit status without ending the lineage twice.
func TestLateEndReportFillsTheExitStatus(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	plan := report.Plan{Lineage: "P4", Ideal: "cpu", Total: 1000, Model: "m4"}
	j := job(74, 1001, "alice", "RUNNING", "cpu", plan.FormatComment())
	e.publish([]report.Job{j}, nil)
	w := e.wrapper(74, 1001, "alice", "P4", "cpu")
	e.start(w)
	e.sample(w, 1, 10, 100)
	e.rounds(1)
	e.now = e.now.Add(time.Second)
	j.State = "FAILED"
	e.publish([]report.Job{j}, nil)
	e.rounds(1)
	if st := e.status("P4"); st.State != "FAILED" || st.ExitStatus != nil {
		t.Fatalf("state %s exit %v, want FAILED with no exit status yet", st.State, st.ExitStatus)
	}
	e.end(w, 2)
	e.rounds(1)
	st := e.status("P4")
	if st.State != "FAILED" || st.ExitStatus == nil || *st.ExitStatus != 2 {
		t.Errorf("after the late end report: state %s exit %v, want FAILED exit 2", st.State, st.ExitStatus)
	}
	if r := e.receipts(); len(r) != 0 {
		t.Errorf("receipts %v for a failed run", r)
	}
}

// A two-rank job whose rank 1 speaks first: one span per attempt, closed by
// rank 0 only, at rank 0's last step; the status's peak RSS is at least the
// job's RSS (both ranks summed).
func TestGangOneSpanPerAttemptAndJobPeak(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	plan := report.Plan{Lineage: "G1", Ideal: "cpu", Total: 100}
	j := job(73, 1001, "alice", "RUNNING", "cpu", plan.FormatComment())
	e.publish([]report.Job{j}, nil)
	r1 := e.wrapper(73, 1001, "alice", "G1", "cpu")
	r1.job.Rank, r1.job.NRanks, r1.job.Node = 1, 2, "cpu2"
	r0 := e.wrapper(73, 1001, "alice", "G1", "cpu")
	r0.job.NRanks = 2
	e.start(r1)
	e.start(r0)
	for _, w := range []*wrapperSession{r1, r0} {
		s := report.NewEnvelope(report.KindSample, e.now)
		s.Sample = &report.Sample{CPU: &report.CPUStat{RSSBytes: 100 << 20, PeakRSSBytes: 110 << 20, Procs: 1}}
		if w == r0 {
			s.Sample.Iters = []report.Iter{{Step: 1, AtMS: e.now.UnixMilli(), DurMS: 100, Source: report.SourceFile}}
		}
		e.send(w, s)
	}
	e.rounds(1)
	st := e.status("G1")
	if len(st.History) != 1 || st.History[0].Node != "cpu1" || st.History[0].Ranks != 2 {
		t.Fatalf("history %s (ranks %d), want one span (rank 0's node cpu1) of 2 ranks", spans(st), st.History[0].Ranks)
	}
	if st.RSSBytes != 200<<20 || st.PeakRSSBytes < st.RSSBytes {
		t.Errorf("RSS %d MiB peak %d MiB, want 200 MiB and a peak at least that", st.RSSBytes>>20, st.PeakRSSBytes>>20)
	}
	// rank 1 ends first; rank 0 still has iterations to report
	e.end(r1, 0)
	e.sample(r0, 2, 20, 100)
	e.rounds(1)
	if st := e.status("G1"); st.History[0].EndMS != 0 {
		t.Fatalf("rank 1's end closed the span: %s", spans(st))
	}
	e.end(r0, 0)
	e.rounds(1)
	st = e.status("G1")
	if len(st.History) != 1 || st.History[0].EndMS == 0 || st.History[0].EndStep != 21 {
		t.Errorf("history %s, want one span closed by rank 0 at step 21", spans(st))
	}
}

// The checkpoint duration the policy plans with is 0 (its configured
// default) until a requested checkpoint was measured; an unrequested
// checkpoint measures nothing.
func TestCkptDurUnsetUntilMeasured(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	l := &lineage{}
	if d := e.c.policyJob(l, e.now).CkptDur; d != 0 {
		t.Errorf("CkptDur %s before any measurement, want 0 (the policy's default_ckpt)", d)
	}
	l.Phase = lifecycle.AwaitingCheckpoint
	ck := report.NewEnvelope(report.KindCheckpoint, e.now)
	ck.Checkpoint = &report.Checkpoint{Path: "/ck/a.pt", Size: 1, MTimeMS: e.now.UnixMilli(), Complete: true}
	e.c.lineages["C1"] = l
	if err := e.c.apply(context.Background(), ck, &session{Lineage: "C1"}, nil, e.now); err != nil {
		t.Fatal(err)
	}
	if d := e.c.policyJob(l, e.now).CkptDur; l.Status.CkptMS != 0 || d != 0 {
		t.Errorf("after an unrequested checkpoint: CkptMS %v CkptDur %s, want both 0", l.Status.CkptMS, d)
	}
	l.Ckpt.Requested(e.now.Add(-4 * time.Second))
	ck2 := report.NewEnvelope(report.KindCheckpoint, e.now)
	ck2.Checkpoint = &report.Checkpoint{Path: "/ck/b.pt", Size: 1, MTimeMS: e.now.UnixMilli(), Complete: true}
	if err := e.c.apply(context.Background(), ck2, &session{Lineage: "C1"}, nil, e.now); err != nil {
		t.Fatal(err)
	}
	if d := e.c.policyJob(l, e.now).CkptDur; d < 4*time.Second || l.Status.CkptMS < 4000 {
		t.Errorf("after a 4 s checkpoint: CkptDur %s CkptMS %v", d, l.Status.CkptMS)
	}
}

// TestCheckpointSeenByTwoRanks: every rank's wrapper watches the
// checkpoint directory; rank 1's, without progress lines, reports rank
// 0's file with no step. The step rank 0 reported stands, and the one
// checkpoint counts once.
func TestCheckpointSeenByTwoRanks(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	l := &lineage{}
	e.c.lineages["C2"] = l
	step := int64(134)
	for _, s := range []*int64{&step, nil} {
		ck := report.NewEnvelope(report.KindCheckpoint, e.now)
		ck.Checkpoint = &report.Checkpoint{Path: "/ck/isched-last.ckpt", Size: 10, Step: s, MTimeMS: e.now.UnixMilli(), Complete: true}
		if err := e.c.apply(context.Background(), ck, &session{Lineage: "C2"}, nil, e.now); err != nil {
			t.Fatal(err)
		}
	}
	if cp := l.Status.LastCheckpoint; cp == nil || cp.Step == nil || *cp.Step != 134 || l.Ckpts != 1 {
		t.Errorf("last checkpoint %+v, %d counted; want step 134, counted once", cp, l.Ckpts)
	}
	// the file rewritten in place later, reported without a step: a new
	// version, whose step is not the old one's
	ck := report.NewEnvelope(report.KindCheckpoint, e.now)
	ck.Checkpoint = &report.Checkpoint{Path: "/ck/isched-last.ckpt", Size: 10, MTimeMS: e.now.Add(time.Minute).UnixMilli(), Complete: true}
	if err := e.c.apply(context.Background(), ck, &session{Lineage: "C2"}, nil, e.now); err != nil {
		t.Fatal(err)
	}
	if cp := l.Status.LastCheckpoint; cp.Step != nil || l.Ckpts != 2 {
		t.Errorf("a new version: step %v, %d counted; want no step, 2", cp.Step, l.Ckpts)
	}
}

// A run that reached its known total is over at its end report: no wait
// for the job table.
func TestRunAtItsTotalEndsAtOnce(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	plan := report.Plan{Lineage: "P5", Ideal: "cpu", Total: 10, Model: "m5"}
	j := job(75, 1001, "alice", "RUNNING", "cpu", plan.FormatComment())
	e.publish([]report.Job{j}, nil)
	w := e.wrapper(75, 1001, "alice", "P5", "cpu")
	e.start(w)
	e.sample(w, 1, 10, 100)
	e.rounds(1)
	e.now = e.now.Add(time.Second)
	e.end(w, 0)
	e.rounds(1)
	st := e.status("P5")
	if st.State != "ENDED" || st.ExitStatus == nil || *st.ExitStatus != 0 || len(st.History) != 1 || st.History[0].EndMS == 0 {
		t.Fatalf("state %s exit %v history %s, want ENDED exit 0 with its span closed", st.State, st.ExitStatus, spans(st))
	}
	e.now = e.now.Add(time.Second)
	j.State = "COMPLETED"
	e.publish([]report.Job{j}, nil)
	e.rounds(1)
	if st := e.status("P5"); st.State != "ENDED" || st.EndedMS != e.now.Add(-time.Second).UnixMilli() {
		t.Errorf("after Slurm's COMPLETED: state %s ended %d", st.State, st.EndedMS)
	}
	if r := e.receipts(); len(r) != 1 {
		t.Errorf("receipts %v, want one", r)
	}
}

// A job Slurm reports COMPLETED with no end report from its wrapper (the
// wrapper was killed, or was not the batch script's last step): the
// lineage ends COMPLETED after EndGrace, not at once (the report may be
// late) and not never. With an attempt's end short of the total (and no
// checkpoint to continue from) the end report and Slurm's state settle it
// at once, its exit status kept.
func TestCompletedWithoutEndReportEndsAfterGrace(t *testing.T) {
	t.Parallel()
	for _, withEnd := range []bool{false, true} {
		e := newEnv(t)
		e.c.cfg.EndGrace = 30 * time.Second
		plan := report.Plan{Lineage: "P9", Ideal: "cpu", Total: 1000}
		j := job(79, 1001, "alice", "RUNNING", "cpu", plan.FormatComment())
		e.publish([]report.Job{j}, nil)
		w := e.wrapper(79, 1001, "alice", "P9", "cpu")
		e.start(w)
		e.sample(w, 1, 10, 100)
		if withEnd {
			e.end(w, 0) // exit 0 short of the total: not the run's end by itself
		}
		e.rounds(1)
		e.now = e.now.Add(time.Second)
		j.State = "COMPLETED"
		e.publish([]report.Job{j}, nil)
		e.rounds(1)
		if withEnd {
			// the end report and Slurm's final state settle it at once:
			// short of its total, but with no checkpoint to continue from
			st := e.status("P9")
			if st.State != "COMPLETED" || st.EndedMS == 0 || st.ExitStatus == nil || *st.ExitStatus != 0 {
				t.Fatalf("end report and COMPLETED: state %s ended %d exit %v, want COMPLETED exit 0", st.State, st.EndedMS, st.ExitStatus)
			}
			if k := decisionKinds(st); len(k) == 0 || k[len(k)-1] != "not-continued" {
				t.Errorf("decisions %v, want not-continued last", k)
			}
			continue
		}
		e.now = e.now.Add(20 * time.Second)
		e.publish([]report.Job{j}, nil)
		e.rounds(1)
		if st := e.status("P9"); st.EndedMS != 0 {
			t.Fatalf("end report %v: ended (%s) 20 s after Slurm's COMPLETED, within the 30 s grace", withEnd, st.State)
		}
		e.now = e.now.Add(15 * time.Second)
		e.publish([]report.Job{j}, nil)
		e.rounds(1)
		st := e.status("P9")
		if st.State != "COMPLETED" || st.EndedMS == 0 {
			t.Fatalf("end report %v: state %s ended %d after the grace, want COMPLETED", withEnd, st.State, st.EndedMS)
		}
		if withEnd != (st.ExitStatus != nil) || withEnd && *st.ExitStatus != 0 {
			t.Errorf("end report %v: exit status %v", withEnd, st.ExitStatus)
		}
		if l := e.lineage("P9"); !l.ended() {
			t.Errorf("end report %v: lineage not ended", withEnd)
		}
	}
}
