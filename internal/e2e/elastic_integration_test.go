//go:build integration

package e2e

import (
	"bufio"
	"encoding/json"
	"fmt"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/isched/isched/internal/report"
	"github.com/isched/isched/internal/testutil"
)

// TestElasticOnCluster is rule 9 (issue 42) live on Slurm with real
// PyTorch DDP over gloo (elasticOnCluster): alice's elastic run grows from
// one rank to two and shrinks back for bob, resuming at each size.
func TestElasticOnCluster(t *testing.T) {
	elasticOnCluster(t, elasticRun{User: "alice", Steps: 900, Env: []string{"PYTHONPATH=" + filepath.Join(testutil.RepoRoot(), "python")},
		Argv: []string{"/usr/bin/python3", filepath.Join(testutil.RepoRoot(), "internal/e2e/testdata/elastic_ddp.py")}})
}

// elasticRun is the training an elasticOnCluster run starts: Argv is given
// --facts FILE --steps Steps --step-work 0.15; it appends a JSON line per
// step (stepFact) to FILE, with a global batch of 8 samples at any size.
type elasticRun struct {
	User      string
	Argv, Env []string
	Steps     int64
}

// elasticOnCluster runs one elastic run through rule 9 on the lab: gpu1 is
// held, so gpu2's two GPUs are all there is. The run (--gpus 1-2) starts
// at one rank, grows to two when the second GPU idles (checkpoint, requeue
// at 2 tasks and gpu:2), and shrinks back to one when bob's job waits for
// that GPU, which then starts. Every attempt resumes from its checkpoint;
// every step's global batch is 8 samples at either size, and a step redone
// after a resize has the loss it had before (elasticFacts). It returns the
// job and its ended status.
func elasticOnCluster(t *testing.T, r elasticRun) (trainJob, report.JobStatus) {
	w := newWorld(t, `{"margin": "15s", "move_cost": "1s", "default_ckpt": "5s", "min_interval": "10s", "min_pending": "5s",
 "speed": {"gpu": 8, "cpu": 1}, "elastic": true}`)
	held := w.sbatch("-J", "isched-e2e-hold1", "-p", "gpu", "-w", "gpu1", "--exclusive", "-t", "10", "--wrap", "sleep 600")
	waitFor(t, w, time.Minute, "gpu1 held", func() bool { return slurmJob(held)["JobState"] == "RUNNING" })
	plan := report.Plan{Lineage: fmt.Sprintf("elastic-%d", time.Now().UnixNano()%1e6), Ideal: "gpu", IdealGres: "gpu:1", Total: r.Steps,
		Elastic: &report.Elastic{Min: 1, Max: 2}}
	o := trainOpts{User: r.User, Elastic: true, Env: r.Env, Argv: r.Argv}
	run := w.submitTrainerWith(o, plan, []string{"-p", "gpu", "--gres=gpu:1", "-n", "1", "-t", "15", "--mem=3G"},
		"--steps", strconv.FormatInt(r.Steps, 10), "--step-work", "0.15")
	waitFor(t, w, 3*time.Minute, "the run to grow to 2 ranks", func() bool {
		st, ok := w.status(plan.Lineage)
		n := len(st.History)
		return ok && n >= 2 && st.History[n-1].Ranks == 2 && st.Step > st.History[n-1].StartStep+10
	})
	bob := w.sbatchAs("bob", "-J", "isched-e2e-bob", "-p", "gpu", "--gres=gpu:1", "-t", "5", "-o", "/dev/null", "--wrap", "sleep 300")
	t.Cleanup(func() { _ = exec.Command("scancel", bob).Run() })
	waitFor(t, w, 3*time.Minute, "bob's job to start once the run shrank", func() bool { return slurmJob(bob)["JobState"] == "RUNNING" })
	end := w.endedStatus(plan.Lineage, 8*time.Minute)
	elasticEnd(t, end, r.Steps)
	elasticFacts(t, run.facts, end, r.Steps)
	return run, end
}

// elasticEnd checks how the run ended: at its total, over attempts at 1, 2
// and 1 ranks, after a growth and a shrink (checkpoint, requeue twice),
// every decision carried out.
func elasticEnd(t *testing.T, end report.JobStatus, total int64) {
	t.Helper()
	var ranks []int
	for _, s := range end.History {
		ranks = append(ranks, s.Ranks)
	}
	if end.State != "ENDED" || end.Step != total || fmt.Sprint(ranks) != "[1 2 1]" {
		t.Errorf("the run: %s at step %d, ranks per attempt %v (%s); want ENDED at %d over attempts at 1, 2 and 1 ranks",
			end.State, end.Step, ranks, spansText(end), total)
	}
	var kinds []string
	for _, d := range end.Decisions {
		kinds = append(kinds, d.Kind)
		if d.ActionID != "" && !strings.HasPrefix(d.Result, "ok") {
			t.Errorf("decision %s not carried out: %+v", d.Kind, d)
		}
	}
	if got := strings.Join(kinds, ","); got != "checkpoint,requeue,checkpoint,requeue" {
		t.Errorf("decisions %s, want a growth and a shrink (checkpoint,requeue twice): %+v", got, end.Decisions)
	}
	t.Logf("elastic run: %s; decisions %v", spansText(end), kinds)
}

// stepFact is one step of an elastic run's rank 0 (elasticRun).
type stepFact struct {
	Step, Samples int64
	World, Batch  int
	Loss          float64
}

// elasticFacts checks the steps the run logged: the global batch is 8 at
// every step and world size, each attempt resumed where its checkpoint
// was (a step logged twice has the same loss both times), and the loss
// fell.
func elasticFacts(t *testing.T, path string, end report.JobStatus, total int64) {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatalf("the run's facts: %v", err)
	}
	defer f.Close()
	first := map[int64]stepFact{}
	worlds := map[int]bool{}
	var initial, last stepFact
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		var s stepFact
		if err := json.Unmarshal(sc.Bytes(), &s); err != nil {
			t.Fatalf("%s: %q: %v", path, sc.Text(), err)
		}
		if initial.Step == 0 {
			initial = s
		}
		worlds[s.World] = true
		if s.Batch != 8 || s.Samples != 8*s.Step {
			t.Errorf("step %d at world size %d: global batch %d, %d samples; want 8 and %d", s.Step, s.World, s.Batch, s.Samples, 8*s.Step)
		}
		if p, ok := first[s.Step]; ok && math.Abs(p.Loss-s.Loss) > 1e-6*math.Max(1, math.Abs(p.Loss)) {
			t.Errorf("step %d redone at world size %d has loss %g, %g at world size %d before: the run did not resume where it was",
				s.Step, s.World, s.Loss, p.Loss, p.World)
		} else if !ok {
			first[s.Step] = s
		}
		last = s
	}
	if !worlds[1] || !worlds[2] || last.Step != total || !(last.Loss < initial.Loss/2) {
		t.Errorf("world sizes %v, last step %d, loss %g from %g: want both sizes, %d steps, the loss at least halved",
			worlds, last.Step, last.Loss, initial.Loss, total)
	}
	for i := 1; i < len(end.History); i++ {
		if lost := end.History[i-1].EndStep - end.History[i].StartStep; lost < 0 || lost > 60 {
			t.Errorf("attempt %d resumed at %d, attempt %d stopped at %d: want the checkpoint a few steps back at most",
				i, end.History[i].StartStep, i-1, end.History[i-1].EndStep)
		}
	}
}
