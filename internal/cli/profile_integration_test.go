//go:build integration

package cli

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/isched/isched/internal/testutil"
)

// TestProfileOnCluster profiles the fake trainer as short Slurm jobs on the
// dev partition with the real wrapper (the batch size from ISCHED_BATCH),
// then reads the estimate through the real Redis: the profiled receipts
// are the user's own beside Redis's, and the rows say profiled.
func TestProfileOnCluster(t *testing.T) {
	testutil.UseLab(t, "dev")
	testutil.NeedSlurm(t)
	r := testutil.NeedRedis(t)
	root := testutil.RepoRoot()
	wrapper := testutil.Binary(t, "isched-wrapper", "./wrapper")
	dir := testutil.WorkDir(t, "isched-profile-it")
	cluster := fmt.Sprintf("prof%d", time.Now().UnixNano()%1e9)
	env := map[string]string{
		"ISCHED_CLUSTER":             cluster,
		"ISCHED_REDIS_ADDR":          r.Addr,
		"ISCHED_REDIS_USER":          "coordinator", // as TestSubmitOnCluster
		"ISCHED_REDIS_PASSWORD_FILE": r.PasswordFile("coordinator"),
		"HOME":                       dir,
		"PATH":                       os.Getenv("PATH"),
	}
	app := &App{Getenv: func(k string) string { return env[k] }, Getwd: func() (string, error) { return dir, nil }}
	run := func(limit time.Duration, args ...string) (int, string, string) {
		var out, errb bytes.Buffer
		ctx, cancel := context.WithTimeout(context.Background(), limit)
		defer cancel()
		code := app.Run(ctx, args, &out, &errb)
		return code, out.String(), errb.String()
	}
	model := filepath.Join(root, "internal/cli/testdata/mnist_cnn.json")
	site := filepath.Join(root, "examples/site-lab.json")
	// the dev partition may be busy with other tests' jobs: --queue-wait
	// is generous, and so is the test's own limit
	code, _, errOut := run(30*time.Minute, "profile", "--model", model, "--optimizer", "momentum", "--site", site,
		"--partition", "dev", "--batches", "8,16", "--window", "3s", "--warmup-iters", "3", "--grace", "3s",
		"--startup-timeout", "2m", "--queue-wait", "20m", "--wrapper", wrapper, "--iter-pattern", fakeIterPattern,
		"--", "/usr/bin/python3", filepath.Join(root, "internal/cli/testdata/fake_trainer.py"), "--pid-file", filepath.Join(dir, "pid-{batch}"))
	if code != 0 {
		t.Fatalf("profile: exit %d: %s", code, errOut)
	}
	t.Log(errOut)
	for _, b := range []string{"8", "16"} {
		if !strings.Contains(errOut, "isched profile: batch "+b+": ") || !strings.Contains(errOut, "on dev/dev1): ") {
			t.Errorf("no progress line of a job on dev1 for batch %s:\n%s", b, errOut)
		}
		raw, err := os.ReadFile(filepath.Join(dir, "pid-"+b))
		if err != nil {
			t.Fatalf("batch %s did not run with its batch size: %v", b, err)
		}
		pid, _ := strconv.Atoi(string(raw))
		if err := syscall.Kill(pid, 0); !errors.Is(err, syscall.ESRCH) {
			t.Errorf("batch %s: the trainer (pid %d) is still there (%v)", b, pid, err)
		}
	}
	rs := readProfiled(t, filepath.Join(dir, ".local/share/isched", cluster, "profiled-receipts.jsonl"))
	if len(rs) != 2 {
		t.Fatalf("%d receipts, want 2", len(rs))
	}
	for _, r := range rs {
		if !r.Profiled || r.Partition != "dev" || r.NodeType != "lab-dev" || r.Iters < 2 || r.IterMS <= 0 || r.PeakRSS < int64(r.Batch)*6<<20 {
			t.Errorf("receipt %+v: want a profiled one of dev with the fake's B x 6 MiB", r)
		}
	}
	if rs[1].PeakRSS <= rs[0].PeakRSS || rs[1].IterMS <= rs[0].IterMS {
		t.Errorf("batch 16 (%d B, %.1f ms) not above batch 8 (%d B, %.1f ms)", rs[1].PeakRSS, rs[1].IterMS, rs[0].PeakRSS, rs[0].IterMS)
	}
	code, out, errOut := run(time.Minute, "estimate", "--model", model, "--optimizer", "momentum", "--site", site,
		"--samples", "3200", "--batch", "8,32", "--state", "none", "--receipts", "redis")
	if code != 0 {
		t.Fatalf("estimate: exit %d: %s", code, errOut)
	}
	if !strings.Contains(out, "receipts: 0 in Redis") || !strings.Contains(out, "; 2 profiled in ") ||
		!strings.Contains(out, "batch 8 on lab-dev (profiled, your runs): profiled: 1 receipt(s) at batch 8 on lab-dev") ||
		!strings.Contains(out, "batch 32 on lab-dev (profiled, your runs)") {
		t.Errorf("estimate does not use the profile:\n%s", out)
	}
	// nothing of the profile runs is left in the queue
	if q := strings.TrimSpace(testutil.Run(t, 10*time.Second, "squeue", "-h", "-n", "profile-fake_trainer-b8,profile-fake_trainer-b16", "-o", "%i")); q != "" {
		t.Errorf("profile jobs still queued: %s", q)
	}
}
