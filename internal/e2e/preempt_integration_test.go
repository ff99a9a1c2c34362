//go:build integration

package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/isched/isched/internal/report"
	"github.com/isched/isched/internal/testutil"
)

// TestPreemptionFromScavenger: the training job runs on scavenger, alone on
// its node; a job of the node's own partition (cpu or gpu) preempts it (PreemptMode=REQUEUE,
// GraceTime=0: Slurm sends SIGTERM to the steps and requeues the job). The
// trainer checkpoints on SIGTERM (isched.install_signal_handlers), the job
// restarts from that checkpoint and finishes at the right step with no lost
// iterations. The coordinator issued nothing: the lineage must stay one
// consistent story (never "ended" at the preemption, two spans, one end,
// one receipt).
//
// Two jobs run side by side, one per node: one whose loop tells isched
// its total step count, and one that does not (the plan has no total
// either): its attempt ends with exit 0 after the SIGTERM save, which must
// not read as "the run is done".
func TestPreemptionFromScavenger(t *testing.T) {
	testutil.ClaimPartitions(t, "cpu", "gpu", "scavenger") // its victims hold whole cpu and gpu nodes exclusively
	w := newWorld(t, fastPolicy)
	// Each victim holds a whole idle node of scavenger (--exclusive), so no
	// one else's job can land there meanwhile and a one-CPU job of the
	// node's own partition can only start by preempting it.
	nodes := idleNodes(t, w, 3*time.Minute, 2, "cpu1", "cpu2", "gpu1", "gpu2")
	const total = 150
	type victim struct {
		name, node, lineage string
		knownTotal          bool
		job                 trainJob
		preemptor           string
		states              []string
	}
	vs := []*victim{{name: "total known", node: nodes[0], knownTotal: true}, {name: "total unknown", node: nodes[1]}}
	for i, v := range vs {
		v.lineage = fmt.Sprintf("pre%d%d", time.Now().UnixNano()%1e6, i)
		// cpu is not faster than scavenger in fastPolicy: rule 2 never moves
		// it, so every requeue of this job is Slurm's.
		plan := report.Plan{Lineage: v.lineage, Ideal: "cpu", Fallbacks: []string{"scavenger"}, Migrate: true, Model: v.lineage}
		args := []string{"--steps", fmt.Sprint(total), "--period", "0.2", "--ckpt-every", "0"}
		if v.knownTotal {
			plan.Total = total
		} else {
			args = append(args, "--no-total")
		}
		// pinned to an idle node, so the preemptor below needs exactly
		// this node and finds no one else's job on it
		v.job = w.submitTrainer(plan, []string{"-p", "scavenger", "-w", v.node, "--exclusive", "-t", "10"}, args...)
	}
	for _, v := range vs {
		waitFor(t, w, 90*time.Second, v.name+": training on scavenger", func() bool {
			st, ok := w.status(v.lineage)
			return ok && st.Partition == "scavenger" && st.State == "RUNNING" && st.Step >= 30
		})
	}
	preemptedAt := time.Now()
	for _, v := range vs {
		part := strings.TrimRight(v.node, "0123456789") // cpu1 → cpu, gpu2 → gpu
		v.preemptor = w.sbatch("-J", "isched-e2e-preemptor", "-p", part, "-w", v.node, "-n", "1", "-t", "1", "--wrap", "sleep 10")
	}

	// Until the jobs run again, watch what the coordinator says about them.
	waitFor(t, w, 90*time.Second, "both jobs requeued by the preemption and running again", func() bool {
		done := true
		for _, v := range vs {
			if st, ok := w.status(v.lineage); ok && (len(v.states) == 0 || v.states[len(v.states)-1] != st.State) {
				v.states = append(v.states, st.State)
			}
			s := slurmJob(v.job.id)
			done = done && s["Restarts"] == "1" && s["JobState"] == "RUNNING"
		}
		return done
	})
	t.Logf("preempted and running again after %s", time.Since(preemptedAt).Round(100*time.Millisecond))
	for _, v := range vs {
		t.Logf("%s: lineage states between the preemption and the restart: %v", v.name, v.states)
		if slices.Contains(v.states, "ENDED") {
			t.Errorf("%s: the lineage was marked ENDED while Slurm requeued the preempted job (states %v): "+
				"applyEnd (internal/coordinator/apply.go) takes exit 0 with an unknown total for the end of the run", v.name, v.states)
		}
		if p := slurmJob(v.preemptor); p["JobState"] != "RUNNING" && p["JobState"] != "COMPLETED" && p["JobState"] != "COMPLETING" {
			t.Errorf("%s: preemptor %s is %s (%s)", v.name, v.preemptor, p["JobState"], p["Reason"])
		}
	}

	for _, v := range vs {
		t.Run(v.name, func(t *testing.T) { checkPreempted(t, w, v.job, v.lineage, total) })
	}
}

func checkPreempted(t *testing.T, w *world, job trainJob, lineage string, total int64) {
	s := waitJobEnd(t, w, job.id, 2*time.Minute)
	if s["JobState"] != "COMPLETED" || s["Restarts"] != "1" {
		t.Fatalf("job ended %s with %s restarts, want COMPLETED after exactly 1\n%s\n%s", s["JobState"], s["Restarts"], job.output(), w.logs())
	}
	runs := jobcompRuns(job.id)
	t.Logf("jobcomp runs: %v", jobcompStates(runs))
	if len(runs) != 2 || runs[1]["JobState"] != "COMPLETED" || runs[0]["JobState"] != "PREEMPTED" {
		t.Errorf("jobcomp runs %v, want one PREEMPTED run then one COMPLETED", jobcompStates(runs))
	}

	first, second := job.attemptFacts(t, 0, 0), job.attemptFacts(t, 0, 1)
	stopped := num(first, "stopped")
	t.Logf("attempt 0: stopped at %d (SIGTERM), checkpoint %v; attempt 1: start %d end %d on %v",
		stopped, first["requested_ckpt"], num(second, "start"), num(second, "end"), second["node"])
	if stopped <= 0 || first["requested"] != true || num(first, "end") != stopped {
		t.Errorf("attempt 0 did not checkpoint and stop on SIGTERM: %v", first)
	}
	if num(second, "start") != stopped {
		t.Errorf("attempt 1 started at step %d, attempt 0 saved step %d on SIGTERM: %d iterations lost",
			num(second, "start"), stopped, stopped-num(second, "start"))
	}
	if num(second, "end") != total || second["restart"] != "1" {
		t.Errorf("attempt 1: %v", second)
	}

	var st report.JobStatus
	waitFor(t, w, 20*time.Second, "the lineage to end", func() bool {
		st, _ = w.status(lineage)
		return st.State == "ENDED" && st.Attempt == 1
	})
	t.Logf("spans %s; events %v; decisions %v", spansText(st), eventKinds(st), decisionKinds(st))
	if len(st.History) != 2 || st.History[0].Partition != "scavenger" || st.History[1].Partition != "scavenger" ||
		st.History[0].Attempt != 0 || st.History[1].Attempt != 1 {
		t.Errorf("history %s, want two spans on scavenger (attempts 0 and 1)", spansText(st))
	}
	if len(st.History) == 2 && (st.History[0].EndStep != stopped || st.History[1].StartStep != stopped || st.History[1].EndStep != total) {
		t.Errorf("history %s does not match the trainer (stopped at %d, finished at %d)", spansText(st), stopped, total)
	}
	lostIterations(t, st)
	if st.ExitStatus == nil || *st.ExitStatus != 0 || st.Step != total {
		t.Errorf("lineage end: exit %v, step %d", st.ExitStatus, st.Step)
	}
	// The only trace of the preemption the coordinator can have is the
	// wrapper's signal report (the span's reason is the trainer's exit).
	if !slices.Contains(eventKinds(st), "signal") {
		t.Errorf("no \"signal\" event: the wrapper's report that SIGTERM reached the job never arrived " +
			"(internal/wrapper/run.go OnSignal sets Forwarded to child.Delivery.String(), \"TERM\", which report validation " +
			"rejects: the wrapper logs \"report not encodable; dropped\" and every signal report is lost)")
	}
	for _, d := range st.Decisions {
		if d.ActionID != "" {
			t.Errorf("the coordinator acted on a job only Slurm moved: %+v", d)
		}
	}
	if ls, ok := w.lineageState(lineage); ok && (ls.Moves != 0 || ls.Conts != 0 || ls.underWay()) {
		t.Errorf("lineage bookkeeping after a preemption: moves %d continuations %d phase %q", ls.Moves, ls.Conts, ls.Phase)
	}
	if ids := jobsOfLineage(lineage); len(ids) != 1 || ids[0] != job.id {
		t.Errorf("jobs carrying the lineage: %v, want only %s", ids, job.id)
	}
	// One run, one receipt for the planner, with the whole run in it.
	var receipts []report.Receipt
	if c, err := w.client("coordinator"); err == nil {
		if l, err := c.List(context.Background(), c.Keys().Receipts()); err == nil {
			for _, b := range l {
				var r report.Receipt
				if json.Unmarshal(b, &r) == nil && r.Model == lineage {
					receipts = append(receipts, r)
				}
			}
		}
		c.Close()
	}
	if len(receipts) != 1 || receipts[0].Iters != total {
		t.Errorf("receipts for the run: %+v, want one with %d iterations", receipts, total)
	}
}
