//go:build integration

package e2e

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/isched/isched/internal/report"
	"github.com/isched/isched/internal/testutil"
)

// TestTrimLimitOnCluster is rule 6 (issue 41, lever d) live on Slurm:
// alice's run asks for 60 minutes and needs about two. Once its estimate
// is steady and a checkpoint is confirmed, the coordinator lowers the
// job's time limit to its predicted end at worst (scontrol shows it);
// Slurm's backfill then plans bob's two-node job, which waits for
// alice's node, at the new end instead of an hour away; alice's run
// finishes every step within the new limit, and bob's job starts once
// hers ends.
func TestTrimLimitOnCluster(t *testing.T) {
	testutil.ClaimPartitions(t, "cpu") // bob's job needs both cpu nodes
	w := newWorld(t, `{"margin": "15s", "move_cost": "3s", "min_interval": "1m", "speed": {"gpu": 8, "cpu": 1},
 "trim_time_limits": true, "trim_min": "2m"}`)
	lineage := fmt.Sprintf("trim%d", time.Now().UnixNano()%1e6)
	plan := report.Plan{Lineage: lineage, Ideal: "cpu", Fallbacks: []string{"cpu"}, Total: 600}
	job := w.submitTrainerWith(trainOpts{User: "alice"}, plan, []string{"-p", "cpu", "-t", "60"},
		"--steps", "600", "--period", "0.2", "--ckpt-every", "50")
	waitFor(t, w, 2*time.Minute, "alice's job to run", func() bool { return slurmJob(job.id)["JobState"] == "RUNNING" })
	start, err := time.ParseInLocation("2006-01-02T15:04:05", slurmJob(job.id)["StartTime"], time.Local)
	if err != nil {
		t.Fatalf("alice's job start: %v", err)
	}
	// bob's job needs both cpu nodes whole: it waits for alice's node
	bob := w.sbatchAs("bob", "-p", "cpu", "-N", "2", "--exclusive", "-t", "2", "-o", "/dev/null", "--wrap", "sleep 1")
	if st := slurmJob(bob)["StartTime"]; st != "" {
		t.Logf("bob's job %s planned at first: StartTime=%s (alice's limit ends %s)", bob, st, start.Add(time.Hour).Format(time.TimeOnly))
	}
	var limit time.Duration
	waitFor(t, w, 3*time.Minute, "the coordinator to lower alice's time limit", func() bool {
		limit = scontrolMinutes(slurmJob(job.id)["TimeLimit"])
		return limit > 0 && limit < time.Hour
	})
	var d *report.Decision
	waitFor(t, w, time.Minute, "the agent's result of the shorten decision in alice's status", func() bool {
		st, _ := w.status(lineage)
		d = lastDecision(st, "shorten")
		return d != nil && d.Result != ""
	})
	if !strings.Contains(d.Reason, "trim limit:") || !strings.Contains(d.Reason, "frees") || !strings.HasPrefix(d.Result, "ok") {
		t.Fatalf("the shorten decision in alice's status: %+v", d)
	}
	t.Logf("alice's limit 60m → %s: %s", limit, d.Reason)
	// Slurm's backfill plans bob's job at alice's new end, not an hour away
	newEnd := start.Add(limit)
	waitFor(t, w, time.Minute, "bob's job planned at alice's new end", func() bool {
		at, err := time.ParseInLocation("2006-01-02T15:04:05", slurmJob(bob)["StartTime"], time.Local)
		return err == nil && !at.After(newEnd.Add(time.Minute))
	})
	t.Logf("bob's job %s planned at %s (alice's new end %s)", bob, slurmJob(bob)["StartTime"], newEnd.Format(time.TimeOnly))
	// alice's run is not cut: it finishes every step in its first attempt
	end := w.endedStatus(lineage, 4*time.Minute)
	if end.State != "ENDED" || end.Step != 600 || len(end.History) != 1 {
		t.Errorf("alice's run: %s at step %d over %d attempts (%s), want ENDED at 600 in one", end.State, end.Step, len(end.History), spansText(end))
	}
	if s := slurmJob(job.id); s["JobState"] != "COMPLETED" {
		t.Errorf("alice's job ended %s (limit %s), want COMPLETED within the lowered limit", s["JobState"], s["TimeLimit"])
	}
	waitFor(t, w, 2*time.Minute, "bob's job to run after alice's", func() bool {
		s := slurmJob(bob)["JobState"]
		return s == "RUNNING" || s == "COMPLETED" || s == "" // MinJobAge may forget it once done
	})
}

// scontrolMinutes reads a TimeLimit as scontrol prints it
// ([days-]hours:minutes:seconds, or minutes:seconds); 0 when it is not
// one (UNLIMITED, Partition_Limit).
func scontrolMinutes(s string) time.Duration {
	var days, h, m, sec int
	switch {
	case strings.Contains(s, "-"):
		if _, err := fmt.Sscanf(s, "%d-%d:%d:%d", &days, &h, &m, &sec); err != nil {
			return 0
		}
	case strings.Count(s, ":") == 2:
		if _, err := fmt.Sscanf(s, "%d:%d:%d", &h, &m, &sec); err != nil {
			return 0
		}
	default:
		if _, err := fmt.Sscanf(s, "%d:%d", &m, &sec); err != nil {
			return 0
		}
	}
	return time.Duration(days)*24*time.Hour + time.Duration(h)*time.Hour + time.Duration(m)*time.Minute + time.Duration(sec)*time.Second
}

// lastDecision is the status's last decision of kind, or nil.
func lastDecision(st report.JobStatus, kind string) *report.Decision {
	for i := len(st.Decisions) - 1; i >= 0; i-- {
		if st.Decisions[i].Kind == kind {
			return &st.Decisions[i]
		}
	}
	return nil
}
