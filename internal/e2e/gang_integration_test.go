//go:build integration

package e2e

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/isched/isched/internal/report"
)

// TestGangMigration: a two-rank job (`srun -n 2`, the wrapper on each rank,
// rank 0 alone writing progress lines and checkpoints) is one lineage with a
// session per rank; its status is per job (RSS summed over the ranks); the
// cpu → gpu migration moves it as one: both ranks restart on the same gpu
// node as attempt 1, both resume from rank 0's checkpoint, and the lineage
// has exactly one span per attempt. Rank 0 starts 1.5 s after rank 1, so
// the coordinator hears from rank 1 first (a real gang has no order either).
func TestGangMigration(t *testing.T) {
	w := newWorld(t, fastPolicy)
	blocker := w.blockGPU(t, 3*time.Minute)

	lineage := fmt.Sprintf("gang%d", time.Now().UnixNano()%1e6)
	const total, mb = 150, 64
	plan := report.Plan{Lineage: lineage, Ideal: "gpu", IdealGres: "gpu:1", Fallbacks: []string{"cpu"}, Total: total, Migrate: true}
	job := w.submitTrainerWith(trainOpts{Rank0Delay: 1500 * time.Millisecond}, plan, []string{"-p", "cpu", "-n", "2", "-t", "10"},
		"--steps", fmt.Sprint(total), "--period", "0.2", "--ckpt-every", "50", "--mb", fmt.Sprint(mb))

	// One lineage, a session per rank, RSS per job.
	var st report.JobStatus
	var ls lineageState
	waitFor(t, w, 90*time.Second, "both ranks reporting on cpu", func() bool {
		var ok bool
		st, ok = w.status(lineage)
		ls, _ = w.lineageState(lineage)
		return ok && st.Partition == "cpu" && st.Step >= 15 && st.IterMS > 0 &&
			ls.RankRSS["0"] > mb<<20 && ls.RankRSS["1"] > mb<<20
	})
	if sum := ls.RankRSS["0"] + ls.RankRSS["1"]; st.RSSBytes < 2*mb<<20 || len(ls.RankRSS) != 2 {
		t.Errorf("status RSS %d MiB with per-rank RSS %v (sum %d MiB): want the job's RSS, both ranks summed", st.RSSBytes>>20, ls.RankRSS, sum>>20)
	}
	t.Logf("on cpu: step %d, RSS %d MiB = rank 0 %d MiB + rank 1 %d MiB, peak %d MiB", st.Step, st.RSSBytes>>20, ls.RankRSS["0"]>>20, ls.RankRSS["1"]>>20, st.PeakRSSBytes>>20)
	if st.PeakRSSBytes < st.RSSBytes {
		t.Errorf("status peak RSS %d MiB below its current RSS %d MiB: the peak is the largest rank's "+
			"(internal/coordinator/apply.go: PeakRSSBytes = max over samples of one rank's peak), the RSS the job's sum",
			st.PeakRSSBytes>>20, st.RSSBytes>>20)
	}
	ranks := map[int]int{}
	for _, s := range w.sessions(lineage) {
		ranks[s.Rank]++
	}
	if ranks[0] != 1 || ranks[1] != 1 {
		t.Errorf("sessions per rank %v, want one for rank 0 and one for rank 1", ranks)
	}

	if err := runCmd("scancel", blocker); err != nil {
		t.Fatal(err)
	}
	waitFor(t, w, 90*time.Second, "the job running on a gpu node after the move", func() bool {
		s := slurmJob(job.id)
		return s["JobState"] == "RUNNING" && strings.HasPrefix(s["NodeList"], "gpu") && s["Restarts"] == "1"
	})
	s := waitJobEnd(t, w, job.id, 2*time.Minute)
	if s["JobState"] != "COMPLETED" || s["Partition"] != "gpu" || s["Restarts"] != "1" {
		t.Fatalf("job ended %s on %s after %s restarts, want COMPLETED on gpu after 1\n%s\n%s", s["JobState"], s["Partition"], s["Restarts"], job.output(), w.logs())
	}

	// Both ranks moved together and resumed from the same checkpoint.
	r0a0 := job.attemptFacts(t, 0, 0)
	var resumedAt int64 = -1
	for rank := 0; rank < 2; rank++ {
		f := job.attemptFacts(t, rank, 1)
		t.Logf("rank %d attempt 1: node %v restart %v start %d end %d", rank, f["node"], f["restart"], num(f, "start"), num(f, "end"))
		if f["node"] != s["NodeList"] || f["restart"] != "1" || num(f, "end") != total {
			t.Errorf("rank %d attempt 1 ran on %v (restart %v) to step %d, want %s restart 1 step %d", rank, f["node"], f["restart"], num(f, "end"), s["NodeList"], total)
		}
		if resumedAt < 0 {
			resumedAt = num(f, "start")
		} else if num(f, "start") != resumedAt {
			t.Errorf("rank 0 resumed at step %d, rank 1 at %d: the gang resumed from different checkpoints", resumedAt, num(f, "start"))
		}
	}
	if resumedAt != num(r0a0, "end") || resumedAt <= 0 {
		t.Errorf("the gang resumed at step %d, rank 0 stopped at %d", resumedAt, num(r0a0, "end"))
	}
	ranks = map[int]int{}
	for _, s := range w.sessions(lineage) {
		ranks[s.Rank]++
	}
	if ranks[0] != 2 || ranks[1] != 2 {
		t.Errorf("sessions per rank %v, want two per rank (one per attempt)", ranks)
	}

	waitFor(t, w, 20*time.Second, "the lineage to end", func() bool {
		st, _ = w.status(lineage)
		return st.State == "ENDED"
	})
	t.Logf("spans %s; decisions %v", spansText(st), decisionKinds(st))
	if len(st.History) != 2 || st.History[0].Attempt != 0 || st.History[0].Partition != "cpu" ||
		st.History[1].Attempt != 1 || st.History[1].Partition != "gpu" {
		t.Errorf("history %s, want exactly one span per attempt: cpu (attempt 0) then gpu (attempt 1). "+
			"applyStart (internal/coordinator/apply.go) opens a new span for a rank-0 start even when a rank-1 start of "+
			"the same attempt came first, and applyEnd lets any rank close the span", spansText(st))
	}
	if n := len(st.History); n > 0 && st.History[0].EndStep != num(r0a0, "end") {
		t.Errorf("the cpu span ends at step %d, rank 0 stopped at %d: applyEnd (internal/coordinator/apply.go) closes "+
			"the span on the first end report of any rank, before rank 0's last iterations arrived", st.History[0].EndStep, num(r0a0, "end"))
	}
	if ids := jobsOfLineage(lineage); len(ids) != 1 || ids[0] != job.id {
		t.Errorf("jobs carrying the lineage: %v, want only %s", ids, job.id)
	}
	lostIterations(t, st)
	if st.ExitStatus == nil || *st.ExitStatus != 0 || st.Step != total {
		t.Errorf("lineage end: exit %v step %d", st.ExitStatus, st.Step)
	}
	if ls, _ := w.lineageState(lineage); ls.Moves != 1 {
		t.Errorf("moves %d, want 1", ls.Moves)
	}
}
