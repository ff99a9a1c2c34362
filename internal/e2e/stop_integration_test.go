//go:build integration

package e2e

import (
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/isched/isched/internal/report"
	"github.com/isched/isched/internal/testutil"
)

// TestStopOnCluster: isched stop on the real cluster, between two attempts.
// bob cannot stop root's run (refused, nothing cancelled). The trainer
// SIGKILLs itself at step 60 (the job FAILED), the coordinator continues
// the run, and isched stop — run as soon as Slurm logged the failed
// attempt — cancels the continued job, waiting for it if the coordinator
// has not yet continued: the job ends CANCELLED and the run is over,
// never continued again.
func TestStopOnCluster(t *testing.T) {
	besideOthers(t)
	w := newWorld(t, fastPolicy)
	lineage := fmt.Sprintf("stop%d", time.Now().UnixNano()%1e6)
	const total = 3000
	plan := report.Plan{Lineage: lineage, Ideal: "cpu", Total: total}
	job := w.submitTrainer(plan, []string{"-p", "cpu", "-t", "10"},
		"--steps", fmt.Sprint(total), "--period", "0.1", "--ckpt-every", "20", "--crash-at", "60")
	cli := testutil.Binary(t, "isched", "./isched")
	waitFor(t, w, 2*time.Minute, "the run's first reports", func() bool {
		st, ok := w.status(lineage)
		return ok && st.Step >= 5
	})
	if _, errOut, err := runCLIResult(w, cli, "bob", "stop", "--wait", "0", job.id); err == nil || !strings.Contains(errOut, "not to you") {
		t.Errorf("bob's isched stop of root's job: %v, %q; want refused as not his", err, errOut)
	}
	if s := slurmJob(job.id)["JobState"]; s != "RUNNING" {
		t.Fatalf("root's job %s after bob's stop, want RUNNING", s)
	}

	waitFor(t, w, 2*time.Minute, "attempt 0 to fail (the trainer kills itself at step 60)", func() bool {
		return len(jobcompRuns(job.id)) >= 1
	})
	out, errOut, err := runCLIResult(w, cli, "root", "stop", "--wait", "2m", "--interval", "500ms", job.id)
	t.Logf("isched stop: %v\nstdout: %s\nstderr: %s", err, out, errOut)
	if err != nil || !strings.Contains(out, "cancelled job ") {
		t.Fatalf("isched stop between attempts: %v: %s %s\n%s", err, out, errOut, w.logs())
	}
	st, _ := w.status(lineage)
	current := strconv.FormatUint(st.JobID, 10)
	if !strings.Contains(out, "cancelled job "+current+" ") {
		t.Errorf("stop said %q, but the run's current job is %s", out, current)
	}
	s := waitJobEnd(t, w, current, 2*time.Minute)
	if s["JobState"] != "CANCELLED" {
		t.Fatalf("job %s ended %s after isched stop, want CANCELLED", current, s["JobState"])
	}
	for deadline := time.Now().Add(time.Minute); ; time.Sleep(time.Second) {
		if st, _ = w.status(lineage); st.EndedMS != 0 {
			break
		}
		if time.Now().After(deadline) {
			ls, _ := w.lineageState(lineage)
			t.Fatalf("the run did not end within 1 min of its job's CANCELLED: state %s, phase %q, job %d attempt %d, events %+v, decisions %+v\n%s",
				st.State, ls.Phase, st.JobID, st.Attempt, st.Events, st.Decisions, w.logs())
		}
	}
	restarts := slurmJob(current)["Restarts"]
	// nothing may continue a cancelled run: watched until the agent has
	// published fresh snapshots for several of the coordinator's 1 s ticks
	// to decide on, failing as soon as the run moves on
	mon := w.monitorSnapshots()
	endedMS := time.Now().UnixMilli()
	deadline := time.Now().Add(time.Minute)
	for n := 0; n < 5; time.Sleep(500 * time.Millisecond) {
		if s := slurmJob(current); s["JobState"] != "CANCELLED" || s["Restarts"] != restarts {
			t.Fatalf("job %s %s (restarts %s, were %s) after the run ended: continued after isched stop", current, s["JobState"], s["Restarts"], restarts)
		}
		if st2, _ := w.status(lineage); st2.JobID != st.JobID {
			t.Fatalf("the run moved on to job %d after isched stop cancelled job %d", st2.JobID, st.JobID)
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d snapshots taken within a minute of the run's end, want 5\n%s", n, w.logs())
		}
		n = mon.countTakenAfter(endedMS)
	}
	t.Logf("run ended %s at step %d after %d attempt(s): %s", st.State, st.Step, len(st.History), spansText(st))
}
