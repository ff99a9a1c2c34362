//go:build integration

package e2e

import (
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/isched/isched/internal/stream"
	"github.com/isched/isched/internal/testutil"
)

// TestStartElsewhereOnlyWhenItPaysOnCluster is lever e (issue 41) live:
// bob's job holds both gpu nodes; alice, from her own shell with only her
// isched.conf, submits a run with `--partition-ideal gpu --fallback cpu`
// under the default policy (auto), twice. While bob's job may end within
// 3 minutes, the minutes on cpu before gpu frees are worth less than a
// move, so her job waits on gpu; when bob's job holds gpu for 10 hours,
// it starts on cpu now and is to move to gpu when it frees. Slurm's
// record of each job is what is checked, and the reason she is shown.
func TestStartElsewhereOnlyWhenItPaysOnCluster(t *testing.T) {
	testutil.ClaimPartitions(t, "gpu", "cpu")
	w := newWorld(t, fastPolicy)
	root := testutil.RepoRoot()
	_, run := aliceOnLab(t, w, "isched-lever-e-")
	submit := func(name string) (job, out string) {
		t.Helper()
		// about 27 min on a lab gpu node and 80 on cpu (site-lab.json)
		out = run("submit", "--model", filepath.Join(root, "internal/cli/testdata/mnist_cnn.json"), "--samples", "400000", "--epochs", "40",
			"--batch", "8", "--optimizer", "momentum", "--partition-ideal", "gpu", "--fallback", "cpu", "--mem", "500M",
			"--job-name", name, "--wrapper", filepath.Join(binDir, "isched-wrapper"),
			"--", "/usr/bin/python3", filepath.Join(root, "internal/wrapper/testdata/fake_trainer.py"), "--steps", "100000", "--period", "1")
		i := strings.Index(out, "Submitted batch job ")
		if i < 0 {
			t.Fatalf("isched submit said no job id:\n%s", out)
		}
		job = strings.Fields(out[i+len("Submitted batch job "):])[0]
		t.Cleanup(func() { _ = exec.Command("scancel", job).Run() })
		t.Logf("alice's isched submit:\n%s", out)
		return job, out
	}
	hold := func(minutes int) string {
		t.Helper()
		id := w.sbatchAs("bob", "-J", "e2e-lever-e-hold", "-p", "gpu", "-N", "2", "--exclusive", "-t", strconv.Itoa(minutes), "-o", "/dev/null",
			"--wrap", "sleep 900")
		// the agent's job table, which isched submit reads, must show this
		// job running: a snapshot of gpu busy may still be of the last one
		waitFor(t, w, time.Minute, "bob's job "+id+" holding both gpu nodes, in the agent's job table", func() bool {
			p, ok := w.snapshotPartition("gpu")
			return ok && p.NodesIdle == 0 && w.jobTableState(id) == "RUNNING"
		})
		return id
	}

	short := hold(3)
	job, out := submit("lever-e-wait")
	if f := slurmJob(job); f["Partition"] != "gpu" || f["JobState"] != "PENDING" {
		t.Errorf("bob's gpu job ends within 3 min: alice's job is %s on %s, want PENDING on gpu", f["JobState"], f["Partition"])
	}
	if !strings.Contains(out, "isched: why: --partition-ideal gpu: waiting ") || !strings.Contains(out, "starting now on cpu") {
		t.Errorf("the submission does not say why it waits for gpu:\n%s", out)
	}
	if out, err := exec.Command("scancel", job, short).CombinedOutput(); err != nil {
		t.Fatalf("scancel: %v: %s", err, out)
	}

	hold(600)
	job, out = submit("lever-e-start")
	waitFor(t, w, time.Minute, "alice's job running on cpu", func() bool {
		f := slurmJob(job)
		return f["JobState"] == "RUNNING" && f["Partition"] == "cpu"
	})
	if !strings.Contains(out, "on cpu, moving to gpu when it frees") || !strings.Contains(out, "isched: why: --partition-ideal gpu is busy: start now on cpu") {
		t.Errorf("the submission does not say it starts on cpu and why:\n%s", out)
	}
}

// aliceOnLab is alice with a home of her own under a fresh directory
// (prefix) whose isched.conf points at w (its Redis as the viewer, its
// relay, the lab's site), and her isched CLI with only that and, as her
// login would set them, the helpers an installed isched finds beside
// itself (the test's binary is elsewhere; the fake trainer imports
// isched.py from there) and env.
func aliceOnLab(t *testing.T, w *world, prefix string, env ...string) (home string, run func(args ...string) string) {
	t.Helper()
	cli := testutil.Binary(t, "isched", "./isched")
	home, uid := userDir(t, testutil.WorkDir(t, prefix), "alice")
	root := testutil.RepoRoot()
	writeUserConf(t, home, uid, "cluster = "+w.cluster+"\nredis_addr = "+w.redis.Addr+"\nredis_user = viewer\nredis_password_file = "+
		w.redis.PasswordFile("viewer")+"\nrelay_addr = "+w.startRelay()+"\nsite = "+filepath.Join(root, "examples/site-lab.json")+"\n")
	return home, aliceCLI(t, home, cli, append([]string{"ISCHED_HELPER_DIR=" + filepath.Join(root, "scripts")}, env...)...)
}

// jobTableState is the state of job id in the agent's latest job table in
// Redis ("" when it is not there or the table cannot be read).
func (w *world) jobTableState(id string) string {
	env, ok := w.table(stream.Keys.Jobs)
	if !ok || env.Jobs == nil {
		return ""
	}
	for _, j := range env.Jobs.Jobs {
		if strconv.FormatUint(j.JobID, 10) == id {
			return j.State
		}
	}
	return ""
}
