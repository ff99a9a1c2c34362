//go:build integration

package e2e

import (
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/isched/isched/internal/report"
	"github.com/isched/isched/internal/testutil"
)

// keepPlacePolicy is fastPolicy's costs with rule 10 on; gpu is 4× cpu,
// as the trainer's --gpu-speedup 4 makes it on the lab's emulated GPUs.
const keepPlacePolicy = `{"margin": "15s", "move_cost": "3s", "min_interval": "1m", "default_ckpt": "2s",
 "speed": {"gpu": 4, "cpu": 1, "scavenger": 1}, "keep_place": true}`

// TestKeepPlaceOnCluster is lever c (issue 41, rule 10) live. bob's job
// holds both gpu nodes for hours; alice, from her own shell with only her
// isched.conf, submits with `--partition-ideal gpu --fallback cpu`: her
// run starts on cpu (lever e), and the coordinator submits its
// twin, which waits on gpu in her name. bob then queues a second job for
// the whole of gpu, behind the twin. When his first job ends, Slurm starts
// the twin (it kept her place: bob's later job still waits); the twin's
// wrapper waits while the cpu attempt checkpoints and is cancelled, then
// resumes from that checkpoint on gpu and finishes the run. Never two
// attempts at once, nothing lost, no job of the lineage left behind.
func TestKeepPlaceOnCluster(t *testing.T) {
	testutil.ClaimPartitions(t, "gpu", "cpu")
	w := newWorld(t, keepPlacePolicy)
	root := testutil.RepoRoot()
	home, run := aliceOnLab(t, w, "isched-lever-c-")

	hold := w.sbatchAs("bob", "-J", "e2e-lever-c-hold", "-p", "gpu", "-N", "2", "--exclusive", "-t", "600", "-o", "/dev/null", "--wrap", "sleep 900")
	t.Cleanup(func() { _ = exec.Command("scancel", hold).Run() })
	// the agent's snapshot and job table, which isched submit reads, must
	// show it running, not gpu as it was before
	waitFor(t, w, time.Minute, "bob's job "+hold+" holding both gpu nodes, in the agent's job table", func() bool {
		p, ok := w.snapshotPartition("gpu")
		return ok && p.NodesIdle == 0 && w.jobTableState(hold) == "RUNNING"
	})

	const total = 500
	facts, log := filepath.Join(home, "facts.json"), filepath.Join(home, "lever-c.log")
	// as TestStartElsewhereOnlyWhenItPaysOnCluster: about 27 min on a lab
	// gpu node and 80 on cpu by the model (the loop's own total, 500
	// steps, then wins), so with gpu held for hours it starts on cpu
	out := run("submit", "--model", filepath.Join(root, "internal/cli/testdata/mnist_cnn.json"), "--samples", "400000", "--epochs", "40",
		"--batch", "8", "--optimizer", "momentum", "--partition-ideal", "gpu", "--fallback", "cpu", "--mem", "500M", "--job-name", "lever-c", "--output", log, "--error", log, "--checkpoint-dir", filepath.Join(home, "ckpt"),
		"--wrapper", filepath.Join(binDir, "isched-wrapper"), "--",
		"/usr/bin/python3", filepath.Join(root, "internal/wrapper/testdata/fake_trainer.py"), "--facts", facts,
		"--steps", strconv.Itoa(total), "--period", "0.2", "--gpu-speedup", "4")
	t.Logf("alice's isched submit:\n%s", out)
	t.Cleanup(func() {
		if t.Failed() {
			b, _ := os.ReadFile(log)
			t.Logf("the run's output (%s):\n%s", log, b)
		}
	})
	i := strings.Index(out, "Submitted batch job ")
	if i < 0 {
		t.Fatalf("isched submit said no job id:\n%s", out)
	}
	first := strings.Fields(out[i+len("Submitted batch job "):])[0]
	t.Cleanup(func() { _ = exec.Command("scancel", first).Run() })
	_, rest, ok := strings.Cut(out, "isched: lineage ")
	if !ok {
		t.Fatalf("isched submit named no lineage:\n%s", out)
	}
	lineage := strings.Fields(rest)[0]

	// the run on cpu; its twin waits on gpu, alice's, of the same lineage
	var twin string
	waitFor(t, w, 90*time.Second, "alice's run on cpu and its twin pending on gpu", func() bool {
		for _, id := range jobsOfLineage(lineage) {
			if f := slurmJob(id); id != first && f["JobState"] == "PENDING" && f["Partition"] == "gpu" {
				twin = id
			}
		}
		return twin != "" && slurmJob(first)["JobState"] == "RUNNING"
	})
	t.Cleanup(func() { _ = exec.Command("scancel", twin).Run() })
	if f := slurmJob(twin); !strings.HasPrefix(f["UserId"], "alice(") || !strings.Contains(f["TRES"]+f["TresPerNode"], "gpu") {
		t.Errorf("twin %s: user %s, TresPerNode %s; want alice's, with a GPU", twin, f["UserId"], f["TresPerNode"])
	}
	later := w.sbatchAs("bob", "-J", "e2e-lever-c-later", "-p", "gpu", "-N", "2", "--exclusive", "-t", "5", "-o", "/dev/null", "--wrap", "sleep 600")
	t.Cleanup(func() { _ = exec.Command("scancel", later).Run() })
	if err := exec.Command("scancel", hold).Run(); err != nil {
		t.Fatal(err)
	}
	waitFor(t, w, 90*time.Second, "the twin running on gpu", func() bool { return slurmJob(twin)["JobState"] == "RUNNING" })
	if s := slurmJob(later)["JobState"]; s != "PENDING" {
		t.Errorf("bob's job queued after the twin is %s when the twin started, want PENDING: the twin did not keep alice's place", s)
	}
	s := waitJobEnd(t, w, first, 90*time.Second)
	if s["JobState"] != "CANCELLED" {
		t.Errorf("the cpu attempt %s ended %s, want CANCELLED by the handover", first, s["JobState"])
	}
	tw := waitJobEnd(t, w, twin, 3*time.Minute)
	if tw["JobState"] != "COMPLETED" {
		b, _ := os.ReadFile(log)
		t.Fatalf("twin %s ended %s, want COMPLETED\n%s\n%s", twin, tw["JobState"], b, w.logs())
	}
	st := w.endedStatus(lineage, time.Minute)
	f, ok := factsOf(facts) // the twin's: the last attempt's facts
	if !ok {
		t.Fatalf("no facts in %s", facts)
	}
	t.Logf("spans %s; events %v; decisions %v; twin facts %v", spansText(st), eventKinds(st), decisionKinds(st), f)
	checkHandover(t, st, f, first, twin, total)
	if b, _ := os.ReadFile(log); !strings.Contains(string(b), "another job of the lineage is running: waiting for it to end") {
		t.Errorf("the twin's wrapper did not wait for the cpu attempt (two attempts at once?):\n%s", b)
	}
	if ls, ok := w.lineageState(lineage); !ok || ls.Moves != 1 || ls.Twin != 0 || ls.underWay() {
		t.Errorf("lineage state %+v: want one move, no twin, nothing under way", ls)
	}
	for _, id := range jobsOfLineage(lineage) {
		if id != first && id != twin {
			t.Errorf("job %s of the lineage besides the run and its twin: %v", id, slurmJob(id))
		}
	}
}

// checkHandover checks the lineage's account of a handover from first (on
// cpu) to twin (on gpu) and the twin's facts f: it resumed where the cpu
// attempt stopped and finished the run.
func checkHandover(t *testing.T, st report.JobStatus, f map[string]any, first, twin string, total int64) {
	t.Helper()
	if len(st.History) != 2 || strconv.FormatUint(st.History[0].JobID, 10) != first || st.History[0].Partition != "cpu" ||
		strconv.FormatUint(st.History[1].JobID, 10) != twin || st.History[1].Partition != "gpu" {
		t.Fatalf("history %s, want job %s on cpu then twin %s on gpu", spansText(st), first, twin)
	}
	lostIterations(t, st)
	if num(f, "start") != st.History[0].EndStep || num(f, "start") <= 0 || num(f, "end") != total || !strings.HasPrefix(f["node"].(string), "gpu") {
		t.Errorf("the twin's attempt %v: want it to resume at step %d on gpu and end at %d", f, st.History[0].EndStep, total)
	}
	for _, k := range []string{"twin-submitted", "twin-started", "handed-over"} {
		if !slices.Contains(eventKinds(st), k) {
			t.Errorf("no %q event: %v", k, eventKinds(st))
		}
	}
	if st.State != "ENDED" || st.ExitStatus == nil || *st.ExitStatus != 0 || st.Step != total {
		t.Errorf("lineage end: %s exit %v step %d", st.State, st.ExitStatus, st.Step)
	}
}
