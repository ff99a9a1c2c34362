//go:build integration

package e2e

import (
	"context"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/isched/isched/internal/report"
	"github.com/isched/isched/internal/testutil"
)

// TestChaosRedisKilledUnder20Jobs (issue 8, requirement 1): redis-server is
// SIGKILLed while 20 small planned jobs train, and started again 8 s later.
//   - training untouched: each job's mean step time during the outage
//     (the training loop's own clock, delivered later) is within 5% of the
//     15 s before it;
//   - every report delivered after recovery, at least once and in order:
//     per job one session whose sequence numbers are 1..N in stream order,
//     a report there twice only as the identical copy right after itself
//     that a lost XADD reply makes the wrapper send (the coordinator drops
//     it as a duplicate),
//     every step 2..total reported exactly once and in order (step 1 is
//     the iteration clock's baseline), one end report, last;
//   - no decision on stale data: every decision the coordinator made from
//     the kill on had a snapshot younger than stale_after, and the
//     coordinator and agent outlive the outage. So that there are such
//     decisions, two jobs submitted once Redis is back ask for a time limit
//     (1 min) shorter than their work (70 s): the coordinator must extend
//     each (allow_extend), a decision it takes only on a fresh snapshot (it
//     needs the partition's MaxTime).
func TestChaosRedisKilledUnder20Jobs(t *testing.T) {
	testutil.OwnLab(t) // it kills Redis and fills every partition
	w := newWorld(t, extendPolicy)
	restoreClusterOnCleanup(t)
	const (
		njobs  = 20
		total  = 240
		period = 0.25
	)
	type run struct {
		lineage string
		job     trainJob
	}
	runs := make([]*run, njobs)
	base := time.Now().UnixNano() % 1e6
	// Slurm launches the 20 jobs over tens of seconds on this 2-CPU
	// machine: the trainers wait for this file, so that every run spans
	// the outage (a job that ends while Redis is down has its last reports
	// left in its spool: a different story, see TestSpoolDiskFull)
	startFile := filepath.Join(w.dir, "start")
	for i := range runs {
		r := &run{lineage: fmt.Sprintf("rds%d-%d", base, i)}
		plan := report.Plan{Lineage: r.lineage, Ideal: "cpu", Total: total}
		// 22 CPUs over the four partitions: one each, little memory
		r.job = w.submitTrainer(plan, []string{"-p", "cpu,gpu,dev,gpu-dev", "-c", "1", "--mem=100M", "-t", "5"},
			"--steps", fmt.Sprint(total), "--period", fmt.Sprint(period), "--ckpt-every", "40", "--start-file", startFile)
		runs[i] = r
	}
	waitFor(t, w, 3*time.Minute, "all 20 trainers launched and waiting to start", func() bool {
		for _, r := range runs {
			if _, err := os.Stat(r.job.facts); err != nil {
				return false
			}
		}
		return true
	})
	if err := os.WriteFile(startFile, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	waitFor(t, w, 3*time.Minute, "all 20 jobs training with 15 s behind them", func() bool {
		for _, r := range runs {
			st, ok := w.status(r.lineage)
			if !ok || st.Step < int64(15/period) {
				return false
			}
		}
		return true
	})
	mon := w.monitorSnapshots()
	time.Sleep(time.Second)
	stopAt := time.Now()
	testutil.StopDaemon(t, redisPidFile(), "redis-server", syscall.SIGKILL)
	time.Sleep(8 * time.Second)
	clusterUp(t)
	upAt := time.Now()
	t.Logf("redis-server down %s", upAt.Sub(stopAt).Round(time.Millisecond))
	late := submitShortLimitJobs(w, base, 2)

	for _, r := range runs {
		s := waitJobEnd(t, w, r.job.id, 3*time.Minute)
		if s["JobState"] != "COMPLETED" || s["Restarts"] != "0" {
			t.Errorf("%s: job %s ended %s after %s restarts, want COMPLETED, never requeued\n%s", r.lineage, r.job.id, s["JobState"], s["Restarts"], r.job.output())
		}
	}
	mon.Stop()
	for _, c := range []struct {
		name string
		pid  int
	}{{"coordinator", w.coord.Process.Pid}, {"agent", w.agent.Process.Pid}} {
		if !procAlive(c.pid) {
			t.Errorf("the %s exited during the Redis outage\n%s", c.name, w.logs())
		}
	}

	// every report, read back as the coordinator
	c, err := w.client("coordinator")
	if err != nil {
		t.Fatal(err)
	}
	ents, err := c.Range(context.Background(), c.Keys().Ingest(), "-", "+", 1_000_000)
	c.Close()
	if err != nil {
		t.Fatal(err)
	}
	// at least once, in order; a copy only as the retransmission of a
	// report whose XADD reply the outage lost (the coordinator drops it)
	d := testutil.Delivered(t, ents)
	t.Logf("%d reports, %d retransmitted copies", len(d.First), d.Copies)
	byJob := map[uint64][]*report.Envelope{}
	for _, i := range d.First {
		byJob[d.Envs[i].Job.JobID] = append(byJob[d.Envs[i].Job.JobID], d.Envs[i])
	}
	var worst float64
	for _, r := range runs {
		var id uint64
		_, _ = fmt.Sscan(r.job.id, &id)
		envs := byJob[id]
		if len(envs) == 0 {
			t.Errorf("%s: no reports", r.lineage)
			continue
		}
		steps := map[int64]int{}
		lastStep := int64(0)
		var before, during []float64
		for i, env := range envs {
			if env.SID != envs[0].SID {
				t.Errorf("%s: reports from two sessions (%s, %s): a second wrapper run", r.lineage, envs[0].SID, env.SID)
				break
			}
			if env.Seq != uint64(i+1) {
				t.Errorf("%s: report %d has seq %d: lost, repeated or reordered", r.lineage, i, env.Seq)
				break
			}
			if env.Kind == report.KindEnd && i != len(envs)-1 {
				t.Errorf("%s: end report is %d of %d", r.lineage, i+1, len(envs))
			}
			if env.Sample == nil {
				continue
			}
			for _, it := range env.Sample.Iters {
				if it.Step <= lastStep {
					t.Errorf("%s: step %d reported after step %d", r.lineage, it.Step, lastStep)
				}
				lastStep = it.Step
				steps[it.Step]++
				d := it.LoopDurMS
				if d <= 0 {
					d = it.DurMS
				}
				switch {
				case it.AtMS >= stopAt.Add(-15*time.Second).UnixMilli() && it.AtMS < stopAt.UnixMilli():
					before = append(before, d)
				case it.AtMS >= stopAt.UnixMilli() && it.AtMS < upAt.UnixMilli():
					during = append(during, d)
				}
			}
		}
		if last := envs[len(envs)-1]; last.Kind != report.KindEnd || last.End.ExitCode != 0 || last.End.Iters != total {
			t.Errorf("%s: last report %s %+v, want the end of a run of %d steps", r.lineage, last.Kind, last.End, total)
		}
		// step 1 is the iteration clock's baseline (no duration yet): every
		// later step is reported once
		for s := int64(2); s <= total; s++ {
			if steps[s] != 1 {
				t.Errorf("%s: step %d reported %d times", r.lineage, s, steps[s])
				break
			}
		}
		if len(steps) != total-1 {
			t.Errorf("%s: %d distinct steps reported, want %d (2..%d)", r.lineage, len(steps), total-1, total)
		}
		if len(before) < 20 || len(during) < 20 {
			t.Errorf("%s: %d steps before and %d during the outage: too few to compare", r.lineage, len(before), len(during))
			continue
		}
		mb, md := mean(before), mean(during)
		dev := math.Abs(md-mb) / mb
		worst = max(worst, dev)
		if dev > 0.05 {
			t.Errorf("%s: mean step %.1f ms during the outage vs %.1f ms before: %.1f%% > 5%%", r.lineage, md, mb, 100*dev)
		}
		if st, ok := w.status(r.lineage); !ok || st.Step != total || st.State != "ENDED" {
			t.Errorf("%s: coordinator's status after recovery (found %v): state %q step %d, want ENDED at %d; spans %s; events %v",
				r.lineage, ok, st.State, st.Step, total, spansText(st), st.Events)
		}
	}
	t.Logf("%d ingest entries; worst step-time deviation during the outage %.2f%%", len(ents), 100*worst)
	lineages := checkExtended(t, w, late, upAt)
	for _, r := range runs {
		lineages = append(lineages, r.lineage)
	}
	n := checkNoStaleDecisions(t, w, mon, stopAt.UnixMilli(), 0, lineages...)
	t.Logf("%d decisions since the kill, each on a fresh snapshot", n)
	if n < len(late) {
		t.Errorf("%d decisions since the kill, want at least the %d extensions: the staleness check checked nothing", n, len(late))
	}
	if b := w.logs(); strings.Contains(b, "panic") {
		t.Errorf("a daemon panicked:\n%s", b)
	}
}

func mean(xs []float64) float64 {
	var s float64
	for _, x := range xs {
		s += x
	}
	return s / float64(len(xs))
}

// extendPolicy is fastPolicy with time limits raised instead of
// checkpoint-and-requeue (rule 1 with allow_extend).
const extendPolicy = `{"margin": "15s", "move_cost": "3s", "min_interval": "1m", "allow_extend": true,
 "speed": {"gpu": 8, "gpu-dev": 8, "cpu": 1, "dev": 1, "scavenger": 1}, "dev_partitions": ["dev", "gpu-dev"]}`

// submitShortLimitJobs submits n jobs whose work (700 steps of 0.1 s) does
// not fit their time limit (1 min): rule 1 extends each once its iteration
// estimate is firm, before its deadline (limit − checkpoint − margin 15 s;
// the first checkpoint, at step 20, gives the checkpoint time).
func submitShortLimitJobs(w *world, base int64, n int) []trainJob {
	w.t.Helper()
	var jobs []trainJob
	for i := range n {
		plan := report.Plan{Lineage: fmt.Sprintf("rdx%d-%d", base, i), Ideal: "cpu", Total: 700}
		jobs = append(jobs, w.submitTrainer(plan, []string{"-p", "cpu,gpu,dev,gpu-dev", "-c", "1", "--mem=100M", "-t", "1"},
			"--steps", "700", "--period", "0.1", "--ckpt-every", "20"))
	}
	return jobs
}

// checkExtended waits for the jobs to end and checks that each was
// extended once, after after, through Slurm (a time limit over 1 min) and
// in its status, and ran its 700 steps in one attempt. It returns their
// lineages.
func checkExtended(t *testing.T, w *world, jobs []trainJob, after time.Time) []string {
	t.Helper()
	var lineages []string
	for _, j := range jobs {
		lineages = append(lineages, j.lineage)
		s := waitJobEnd(t, w, j.id, 4*time.Minute)
		if s["JobState"] != "COMPLETED" || s["Restarts"] != "0" || s["TimeLimit"] == "00:01:00" {
			t.Errorf("%s: job %s ended %s after %s restarts with time limit %s, want COMPLETED in one attempt with the limit raised\n%s",
				j.lineage, j.id, s["JobState"], s["Restarts"], s["TimeLimit"], j.output())
		}
		st := w.endedStatus(j.lineage, 30*time.Second)
		extends := 0
		for _, d := range st.Decisions {
			if d.Kind == "extend" && d.AtMS >= after.UnixMilli() {
				extends++
			}
		}
		if extends != 1 || st.Step != 700 {
			t.Errorf("%s: %d extensions since Redis came back, step %d; decisions %v", j.lineage, extends, st.Step, decisionKinds(st))
		}
	}
	return lineages
}
