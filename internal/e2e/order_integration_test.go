//go:build integration

package e2e

import (
	"fmt"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/isched/isched/internal/report"
)

// TestOrderOnCluster is rule 7 (issue 41, lever a) live on Slurm: both gpu
// nodes are held; alice submits a long isched run (60 min asked), bob a
// job outside isched, then alice a short isched run (5 min). Slurm alone
// orders them long, bob, short (submission order). The coordinator
// exchanges the priorities of alice's two jobs through their nice values:
// squeue shows short, bob, long, so bob still has one isched job ahead
// of him, and when a gpu node frees the short run starts first.
func TestOrderOnCluster(t *testing.T) {
	w := newWorld(t, `{"margin": "15s", "move_cost": "3s", "min_interval": "1m", "speed": {"gpu": 8, "cpu": 1}, "order_by_remaining": true}`)
	held := w.sbatch("-J", "isched-e2e-hold1", "-p", "gpu", "-w", "gpu1", "--exclusive", "-t", "10", "--wrap", "sleep 600")
	freed := w.sbatch("-J", "isched-e2e-hold2", "-p", "gpu", "-w", "gpu2", "--exclusive", "-t", "10", "--wrap", "sleep 600")
	waitFor(t, w, time.Minute, "both gpu nodes held", func() bool {
		return slurmJob(held)["JobState"] == "RUNNING" && slurmJob(freed)["JobState"] == "RUNNING"
	})
	id := time.Now().UnixNano() % 1e6
	submit := func(name string, minutes, steps int) trainJob {
		plan := report.Plan{Lineage: fmt.Sprintf("ord-%s-%d", name, id), Ideal: "gpu", Total: int64(steps)}
		return w.submitTrainerWith(trainOpts{User: "alice"}, plan, []string{"-p", "gpu", "--exclusive", "-t", strconv.Itoa(minutes)},
			"--steps", strconv.Itoa(steps), "--period", "0.2", "--ckpt-every", "50")
	}
	long := submit("long", 60, 3000)
	bob := w.sbatchAs("bob", "-p", "gpu", "--exclusive", "-t", "10", "-o", "/dev/null", "--wrap", "sleep 1")
	short := submit("short", 5, 100)
	before := queueOrder(t, long.id, bob, short.id)
	t.Logf("Slurm's order before: %s", before)
	waitFor(t, w, 2*time.Minute, "squeue to show short, bob, long", func() bool {
		p := priorities(t, long.id, bob, short.id)
		return p[short.id] > p[bob] && p[bob] > p[long.id]
	})
	t.Logf("Slurm's order after the exchange: %s", queueOrder(t, long.id, bob, short.id))
	var d *report.Decision
	waitFor(t, w, time.Minute, "the reorder decision's result in the short run's status", func() bool {
		st, _ := w.status(short.lineage)
		d = lastDecision(st, "reorder")
		return d != nil && d.Result != ""
	})
	if !strings.HasPrefix(d.Result, "ok") || !strings.Contains(d.Reason, "shortest predicted remaining first among isched's 2 pending jobs in gpu") {
		t.Errorf("the short run's reorder decision: %+v", d)
	}
	// a gpu node frees: the short run, first in the queue now, starts
	if out, err := exec.Command("scancel", freed).CombinedOutput(); err != nil {
		t.Fatalf("scancel %s: %v: %s", freed, err, out)
	}
	waitFor(t, w, 2*time.Minute, "a gpu job to start", func() bool {
		return slurmJob(short.id)["JobState"] != "PENDING" || slurmJob(long.id)["JobState"] != "PENDING" || slurmJob(bob)["JobState"] != "PENDING"
	})
	if s, l, b := slurmJob(short.id)["JobState"], slurmJob(long.id)["JobState"], slurmJob(bob)["JobState"]; s == "PENDING" || l != "PENDING" || b != "PENDING" {
		t.Errorf("after gpu2 freed: short %s, long %s, bob %s; want the short run started and the others pending", s, l, b)
	}
}

// priorities reads the jobs' priorities from squeue.
func priorities(t *testing.T, ids ...string) map[string]int64 {
	t.Helper()
	out, err := exec.Command("squeue", "-h", "-j", strings.Join(ids, ","), "-o", "%i %Q").Output()
	if err != nil {
		t.Fatalf("squeue: %v", err)
	}
	p := map[string]int64{}
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		if f := strings.Fields(line); len(f) == 2 {
			p[f[0]], _ = strconv.ParseInt(f[1], 10, 64)
		}
	}
	return p
}

// queueOrder is the jobs' squeue lines, priority and nice, as a site's
// admin sees them.
func queueOrder(t *testing.T, ids ...string) string {
	t.Helper()
	out, _ := exec.Command("squeue", "-h", "-S", "-p", "-j", strings.Join(ids, ","), "-o", "%i %u %Q nice=%y %j").Output()
	return strings.ReplaceAll(strings.TrimSpace(string(out)), "\n", "; ")
}
