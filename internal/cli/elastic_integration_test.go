//go:build integration

package cli

import (
	"bytes"
	"context"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/isched/isched/internal/slurm"
	"github.com/isched/isched/internal/testutil"
)

// TestSubmitElasticStartsLargeOnCluster is policy.StartSize live: with
// the lab's gpu partition idle (claimed alone) and nothing pending there,
// `isched submit --gpus 1-2` of a long predicted run asks Slurm for both
// GPUs of a node and two tasks, and says why; Slurm's record of the job
// is what is checked.
func TestSubmitElasticStartsLargeOnCluster(t *testing.T) {
	testutil.ClaimPartitions(t, "gpu")
	root := repoRoot()
	app, dir, wrapper, _ := onCluster(t, "cliel")
	testutil.Eventually(t, 2*time.Minute, time.Second, "gpu's GPUs idle", func() bool {
		return strings.TrimSpace(testutil.Run(t, 10*time.Second, "squeue", "-h", "-p", "gpu", "-o", "%i")) == ""
	})
	var out, errb bytes.Buffer
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	// 20 epochs of 200 000 samples in batches of 8: about 5 minutes on
	// the lab's gpu node type, long enough for a second GPU to pay
	code := app.Run(ctx, []string{"submit", "--model", filepath.Join(root, "internal/cli/testdata/mnist_cnn.json"), "--samples", "200000",
		"--epochs", "20", "--batch", "8", "--optimizer", "momentum", "--site", filepath.Join(root, "examples/site-lab.json"), "--receipts", "none",
		"--policy", "ideal", "--partition-ideal", "gpu", "--gpus", "1-2", "--time", "5", "--mem", "1G", "--checkpoint-dir", filepath.Join(dir, "ck"),
		"--wrapper", wrapper, "--job-name", "isched-cli-elastic", "--", "/bin/sleep", "300"}, &out, &errb)
	if code != 0 {
		t.Fatalf("submit: exit %d: %s", code, errb.String())
	}
	id, ok := strings.CutPrefix(strings.TrimSpace(out.String()), "Submitted batch job ")
	if !ok {
		t.Fatalf("submit printed %q", out.String())
	}
	t.Cleanup(func() { _ = testutil.Run(t, 10*time.Second, "scancel", id) })
	t.Logf("isched submit: %s", strings.TrimSpace(errb.String()))
	if !strings.Contains(errb.String(), "it starts at 2 GPUs") {
		t.Errorf("stderr %q: want the start size's reason", errb.String())
	}
	infos, err := slurm.ParseShowJob([]byte(testutil.Run(t, 10*time.Second, "scontrol", "show", "job", "-o", id)))
	if err != nil || len(infos) != 1 {
		t.Fatalf("scontrol show job: %v (%d records)", err, len(infos))
	}
	f := infos[0].Fields
	if f["NumTasks"] != "2" || !strings.HasSuffix(f["TresPerNode"], "gpu:2") || f["Partition"] != "gpu" {
		t.Errorf("Slurm's job: NumTasks=%s TresPerNode=%s Partition=%s; want 2 tasks with gpu:2 on gpu\n%v", f["NumTasks"], f["TresPerNode"], f["Partition"], f)
	}
}
