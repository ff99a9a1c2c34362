//go:build integration

package e2e

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/isched/isched/internal/report"
	"github.com/isched/isched/internal/testutil"
)

// devChunkPolicy is fastPolicy plus what rule 3 and a quick return need on
// the lab: a job pending 5 s is worth a dev chunk, dev (2 small CPUs) is
// half as fast as cpu so rule 2 moves the job back once cpu has room, and
// hysteresis is seconds, not minutes.
const devChunkPolicy = `{"margin": "15s", "move_cost": "3s", "min_interval": "5s", "min_pending": "5s",
 "speed": {"gpu": 8, "gpu-dev": 8, "cpu": 1, "dev": 0.5, "scavenger": 1}, "dev_partitions": ["dev", "gpu-dev"]}`

// TestDevChunk: cpu is full (blocker jobs), a job planned for cpu with dev
// among its fallbacks pends there; after min_pending the coordinator moves
// it to dev (rule 3, MovePending), it runs on dev1; when cpu frees the
// coordinator requeues it onto cpu (rule 2: cpu is faster than dev) and it
// resumes from its checkpoint and finishes with no lost iterations.
//
// The other way off a dev chunk, rule 1 checkpointing before dev's time
// limit, would need the 2 h MaxTime of the lab's dev partition to run out
// (or a dev window closing within minutes): it is left to the policy's
// table tests and to TestTimeLimitContinuation, which exercises rule 1.
func TestDevChunk(t *testing.T) {
	testutil.ClaimPartitions(t, "cpu", "dev", "gpu") // its blocker holds both cpu nodes exclusively
	w := newWorld(t, devChunkPolicy)
	waitNodesIdle(t, w, 3*time.Minute, "dev1")
	blocker := w.sbatch("-J", "isched-e2e-blocker", "-p", "cpu", "-N", "2", "--exclusive", "-t", "5", "--wrap", "sleep 300")
	waitFor(t, w, 3*time.Minute, "blocker running on cpu", func() bool { return slurmJob(blocker)["JobState"] == "RUNNING" })

	lineage := fmt.Sprintf("dev%d", time.Now().UnixNano()%1e6)
	const total = 300
	plan := report.Plan{Lineage: lineage, Ideal: "cpu", Fallbacks: []string{"dev"}, Total: total, Migrate: true}
	job := w.submitTrainer(plan, []string{"-p", "cpu", "-t", "10"},
		"--steps", fmt.Sprint(total), "--period", "0.2", "--ckpt-every", "10")
	submitted := time.Now()
	waitFor(t, w, 60*time.Second, "the pending job moved to dev and running on dev1", func() bool {
		s := slurmJob(job.id)
		return s["JobState"] == "RUNNING" && s["Partition"] == "dev" && s["NodeList"] == "dev1"
	})
	t.Logf("running on dev1 %s after submission", time.Since(submitted).Round(100*time.Millisecond))
	if s := slurmJob(blocker); s["JobState"] != "RUNNING" {
		t.Fatalf("the cpu blocker is %s: the job may not have needed a dev chunk", s["JobState"])
	}
	var st report.JobStatus
	var move *report.Decision
	waitFor(t, w, 20*time.Second, "the move's result from the agent", func() bool {
		st, _ = w.status(lineage)
		move = nil
		for i := range st.Decisions {
			if st.Decisions[i].Kind == "move-pending" {
				move = &st.Decisions[i]
			}
		}
		return move != nil && move.Result != ""
	})
	if !strings.HasPrefix(move.Result, "ok") || !strings.Contains(move.Reason, "dev chunk") {
		t.Errorf("decisions %v: want a dev-chunk move-pending done by the agent", decisionKinds(st))
	}
	t.Logf("decision: %s", move.Reason)

	waitFor(t, w, 60*time.Second, "training on dev with an iteration estimate", func() bool {
		st, _ = w.status(lineage)
		return st.Partition == "dev" && st.Step >= 30 && st.IterMS > 0
	})
	if err := runCmd("scancel", blocker); err != nil {
		t.Fatal(err)
	}
	freedAt := time.Now()
	waitFor(t, w, 90*time.Second, "the job back on cpu after the dev chunk", func() bool {
		s := slurmJob(job.id)
		return s["JobState"] == "RUNNING" && s["Partition"] == "cpu" && s["Restarts"] == "1"
	})
	t.Logf("on cpu %s after cpu freed", time.Since(freedAt).Round(100*time.Millisecond))
	s := waitJobEnd(t, w, job.id, 2*time.Minute)
	if s["JobState"] != "COMPLETED" || s["Partition"] != "cpu" || s["Restarts"] != "1" {
		t.Fatalf("job ended %s on %s after %s restarts, want COMPLETED on cpu after 1\n%s\n%s", s["JobState"], s["Partition"], s["Restarts"], job.output(), w.logs())
	}
	runs := jobcompRuns(job.id)
	t.Logf("jobcomp runs: %v", jobcompStates(runs))
	if len(runs) != 2 || runs[0]["Partition"] != "dev" || !strings.HasPrefix(runs[0]["NodeList"], "dev1") ||
		runs[1]["JobState"] != "COMPLETED" || runs[1]["Partition"] != "cpu" {
		t.Errorf("jobcomp runs %v, want a run on dev (dev1) then one COMPLETED on cpu", jobcompStates(runs))
	}

	a0, a1 := job.attemptFacts(t, 0, 0), job.attemptFacts(t, 0, 1)
	t.Logf("attempt 0 on %v: steps %d..%d; attempt 1 on %v: steps %d..%d", a0["node"], num(a0, "start"), num(a0, "end"), a1["node"], num(a1, "start"), num(a1, "end"))
	if a0["node"] != "dev1" || !strings.HasPrefix(fmt.Sprint(a1["node"]), "cpu") {
		t.Errorf("attempts ran on %v then %v, want dev1 then a cpu node", a0["node"], a1["node"])
	}
	if num(a1, "start") != num(a0, "end") || num(a1, "end") != total {
		t.Errorf("attempt 1 ran %d..%d, attempt 0 stopped at %d: want a resume with no lost iterations to %d",
			num(a1, "start"), num(a1, "end"), num(a0, "end"), total)
	}

	waitFor(t, w, 20*time.Second, "the lineage to end", func() bool {
		st, _ = w.status(lineage)
		return st.State == "ENDED"
	})
	t.Logf("spans %s; decisions %v", spansText(st), decisionKinds(st))
	var parts []string
	for _, sp := range st.History {
		parts = append(parts, sp.Partition)
	}
	if !slices.Equal(parts, []string{"dev", "cpu"}) {
		t.Errorf("partition history %v, want [dev cpu]", parts)
	}
	if ids := jobsOfLineage(lineage); len(ids) != 1 || ids[0] != job.id {
		t.Errorf("jobs carrying the lineage: %v, want only %s", ids, job.id)
	}
	lostIterations(t, st)
	if st.ExitStatus == nil || *st.ExitStatus != 0 || st.Step != total {
		t.Errorf("lineage end: exit %v step %d", st.ExitStatus, st.Step)
	}
}
