//go:build integration

package e2e

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/isched/isched/internal/report"
)

// TestPreemptForShortOnCluster is rule 8 (issue 41, lever b) live on
// Slurm: gpu1 is held; alice's long isched run holds gpu2 when her short
// one arrives and waits for it. The long run checkpoints, is requeued
// held, the short one starts in its place, the long one is released once
// it runs, and resumes from its checkpoint when gpu2 frees: it finishes
// every step with nothing lost beyond the checkpoint.
func TestPreemptForShortOnCluster(t *testing.T) {
	w := newWorld(t, `{"margin": "15s", "move_cost": "1s", "default_ckpt": "5s", "min_interval": "10s", "min_pending": "5s",
 "speed": {"gpu": 8, "cpu": 1}, "preempt_for_short": true}`)
	held := w.sbatch("-J", "isched-e2e-hold1", "-p", "gpu", "-w", "gpu1", "--exclusive", "-t", "10", "--wrap", "sleep 600")
	waitFor(t, w, time.Minute, "gpu1 held", func() bool { return slurmJob(held)["JobState"] == "RUNNING" })
	id := time.Now().UnixNano() % 1e6
	submit := func(name string, minutes, steps int) trainJob {
		plan := report.Plan{Lineage: fmt.Sprintf("pre-%s-%d", name, id), Ideal: "gpu", Total: int64(steps)}
		return w.submitTrainerWith(trainOpts{User: "alice"}, plan, []string{"-p", "gpu", "--exclusive", "-t", fmt.Sprint(minutes)},
			"--steps", fmt.Sprint(steps), "--period", "0.1", "--ckpt-every", "100000")
	}
	long := submit("long", 30, 1500)
	waitFor(t, w, 2*time.Minute, "the long run's first steps", func() bool {
		st, ok := w.status(long.lineage)
		return ok && st.Step > 100 && slurmJob(long.id)["JobState"] == "RUNNING"
	})
	short := submit("short", 1, 150)
	waitFor(t, w, 3*time.Minute, "the short run to start while the long one is held", func() bool {
		return slurmJob(short.id)["JobState"] != "PENDING"
	})
	if s := slurmJob(long.id); s["JobState"] != "PENDING" {
		t.Errorf("the long run is %s (%s) when the short one starts, want PENDING (held, yielding)", s["JobState"], s["Reason"])
	}
	end := w.endedStatus(long.lineage, 5*time.Minute)
	if end.State != "ENDED" || end.Step != 1500 || len(end.History) != 2 {
		t.Errorf("the long run: %s at step %d over %d attempts (%s), want ENDED at 1500 in two", end.State, end.Step, len(end.History), spansText(end))
	}
	lostIterations(t, end)
	var kinds []string
	for _, d := range end.Decisions {
		kinds = append(kinds, d.Kind)
		if d.ActionID != "" && !strings.HasPrefix(d.Result, "ok") {
			t.Errorf("decision %s not carried out: %+v", d.Kind, d)
		}
	}
	if got := strings.Join(kinds, ","); got != "checkpoint,requeue,release" {
		t.Errorf("the long run's decisions %s, want checkpoint,requeue,release: %+v", got, end.Decisions)
	}
	if st := w.endedStatus(short.lineage, 2*time.Minute); st.State != "ENDED" || st.Step != 150 {
		t.Errorf("the short run: %s at step %d", st.State, st.Step)
	}
	t.Logf("long run: %s; decisions %v", spansText(end), kinds)
}
