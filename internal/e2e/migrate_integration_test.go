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

// fastPolicy makes the lab's short jobs worth moving: costs measured here
// are seconds, not the production defaults' minutes.
const fastPolicy = `{"margin": "15s", "move_cost": "3s", "min_interval": "1m", "speed": {"gpu": 8, "gpu-dev": 8, "cpu": 1, "dev": 1, "scavenger": 1},
 "dev_partitions": ["dev", "gpu-dev"]}`

// TestMigrateCPUToGPU is the seed's use case: gpu is full, the job starts on
// cpu, the blocker ends, the coordinator checkpoints the job and moves it to
// gpu (same job id, GRES gpu:1), it resumes from the checkpoint and ends at
// the same step count as a run that never moved.
func TestMigrateCPUToGPU(t *testing.T) { testMigrateCPUToGPU(t, newWorld(t, fastPolicy)) }

// TestRedisClusterMigrate: the same move with wrapper, coordinator and
// agent on the dev Redis Cluster (three masters; make cluster-up starts
// it): the job's keys, the streams and the coordinator's hashes live on
// different masters, the coordinator's batches span slots.
func TestRedisClusterMigrate(t *testing.T) {
	w := newWorldOn(t, fastPolicy, testutil.NeedRedisCluster)
	lineage, job := testMigrateCPUToGPU(t, w)
	// the CLI as the viewer user (a cluster client needs CLUSTER SLOTS)
	out := runCLI(t, w, testutil.Binary(t, "isched", "./isched"), "root", "status", job)
	if want := fmt.Sprintf("job %s · lineage %s", job, lineage); !strings.Contains(out, want) {
		t.Errorf("isched status %s on the Redis Cluster, want %q:\n%s", job, want, out)
	}
}

// testMigrateCPUToGPU runs the move in w and returns the lineage and the job id.
func testMigrateCPUToGPU(t *testing.T, w *world) (lineage, jobID string) {
	blocker := w.blockGPU(t, 30*time.Second)

	lineage = fmt.Sprintf("mig%d", time.Now().UnixNano()%1e6)
	// a whole cpu node's 4 CPUs; the plan's 2 per GPU on gpu (lab-gpu's share)
	plan := report.Plan{Lineage: lineage, Ideal: "gpu", IdealGres: "gpu:1", IdealCPUs: 2, Fallbacks: []string{"cpu"}, Total: 150, Migrate: true}
	job := w.submitTrainer(plan, []string{"-p", "cpu", "-c", "4", "-t", "10"}, "--steps", "150", "--period", "0.2", "--ckpt-every", "50")
	waitFor(t, w, 60*time.Second, "training on cpu with an iteration estimate", func() bool {
		st, ok := w.status(lineage)
		return ok && st.Partition == "cpu" && st.Step >= 15 && st.IterMS > 0
	})
	before, _ := w.status(lineage)
	t.Logf("on cpu: step %d, %.0f ms/iter, ETA %s", before.Step, before.IterMS, time.UnixMilli(before.ETAMS).Format(time.TimeOnly))
	w.sbatch("--wrap", "true", "-J", "isched-e2e-noop", "-t", "1") // keep the scheduler busy-free: harmless
	if err := runCmd("scancel", blocker); err != nil {
		t.Fatal(err)
	}
	waitFor(t, w, 90*time.Second, "the job running on a gpu node after the move", func() bool {
		s := slurmJob(job.id)
		return s["JobState"] == "RUNNING" && strings.HasPrefix(s["NodeList"], "gpu") && s["Restarts"] == "1"
	})
	waitFor(t, w, 120*time.Second, "the job to finish", func() bool {
		s := slurmJob(job.id)["JobState"]
		return s == "COMPLETED" || s == "FAILED" || s == "CANCELLED"
	})
	if s := slurmJob(job.id); s["JobState"] != "COMPLETED" || s["Partition"] != "gpu" {
		t.Fatalf("job ended %s on %s, want COMPLETED on gpu\n%s", s["JobState"], s["Partition"], w.logs())
	} else if s["NumCPUs"] != "2" || s["CPUs/Task"] != "2" {
		// with its 4 it would hold every CPU of a gpu node and strand its other GPU
		t.Errorf("moved job has NumCPUs=%s CPUs/Task=%s, want the plan's 2 on gpu", s["NumCPUs"], s["CPUs/Task"])
	}
	f := job.readFacts(t)
	if f["end"] != float64(150) || f["restart"] != "1" || !strings.HasPrefix(f["node"].(string), "gpu") {
		t.Errorf("final attempt: %v", f)
	}
	start := f["start"].(float64)
	if start <= 0 {
		t.Errorf("the moved job started from step %v: it did not resume from its checkpoint", start)
	}
	// Slurm can call the job COMPLETED before the coordinator has read its
	// end report: wait for the lineage to end
	var st report.JobStatus
	waitFor(t, w, 60*time.Second, "the lineage to end", func() bool {
		var ok bool
		st, ok = w.status(lineage)
		return ok && st.EndedMS != 0
	})
	if len(st.History) < 2 || st.History[0].Partition != "cpu" || st.History[len(st.History)-1].Partition != "gpu" {
		t.Errorf("partition history %+v", st.History)
	}
	// lost iterations: the first attempt stopped at the step it checkpointed
	lost := int64(-1)
	if len(st.History) >= 2 {
		lost = st.History[0].EndStep - int64(start)
	}
	var kinds []string
	for _, d := range st.Decisions {
		kinds = append(kinds, d.Kind+"("+d.Result+")")
	}
	t.Logf("moved cpu -> gpu: resumed at step %.0f, lost iterations %d, decisions %v", start, lost, kinds)
	if lost != 0 {
		t.Errorf("lost %d iterations between the checkpoint and the move", lost)
	}
	if st.State != "ENDED" || st.ExitStatus == nil || *st.ExitStatus != 0 {
		t.Errorf("status at the end: state %s exit %v", st.State, st.ExitStatus)
	}
	return lineage, job.id
}

// TestTimeLimitContinuation: a job whose time limit is too short checkpoints
// before the limit and finishes across attempts, with no lost iterations.
func TestTimeLimitContinuation(t *testing.T) {
	w := newWorld(t, fastPolicy)
	lineage := fmt.Sprintf("tl%d", time.Now().UnixNano()%1e6)
	// 100 s of work, 1 min time limit (Slurm's smallest): at least one continuation
	plan := report.Plan{Lineage: lineage, Ideal: "cpu", Fallbacks: []string{"cpu"}, Total: 500, Migrate: true}
	job := w.submitTrainer(plan, []string{"-p", "cpu", "-t", "1"}, "--steps", "500", "--period", "0.2", "--ckpt-every", "100000")
	waitFor(t, w, 6*time.Minute, "the job to finish", func() bool {
		s := slurmJob(job.id)["JobState"]
		return s == "COMPLETED" || s == "FAILED" || s == "TIMEOUT" || s == "CANCELLED"
	})
	s := slurmJob(job.id)
	if s["JobState"] != "COMPLETED" {
		t.Fatalf("job ended %s (restarts %s), want COMPLETED\n%s", s["JobState"], s["Restarts"], w.logs())
	}
	f := job.readFacts(t)
	if f["end"] != float64(500) || s["Restarts"] == "0" {
		t.Errorf("final attempt %v, restarts %s", f, s["Restarts"])
	}
	// the coordinator's account, once it has read the last end report
	st := w.endedStatus(lineage, 30*time.Second)
	restarts, _ := strconv.Atoi(s["Restarts"])
	if len(st.History) != restarts+1 || st.Step != 500 || st.History[0].StartStep != 0 || st.History[len(st.History)-1].EndStep != 500 {
		t.Errorf("status: %d attempts for %d restarts, step %d; spans %s", len(st.History), restarts, st.Step, spansText(st))
	}
	lostIterations(t, st)
	t.Logf("finished across %d attempts: %+v", len(st.History), st.History)
}
