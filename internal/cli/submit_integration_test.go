//go:build integration

package cli

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/isched/isched/internal/report"
	"github.com/isched/isched/internal/slurm"
	"github.com/isched/isched/internal/testutil"
)

func repoRoot() string {
	_, f, _, _ := runtime.Caller(0)
	return filepath.Clean(filepath.Join(filepath.Dir(f), "..", ".."))
}

// TestSubmitOnCluster submits the example PyTorch script through `isched
// submit` on the real local cluster and checks what Slurm made of the
// directives, then that the job ran under the wrapper to the end.
func TestSubmitOnCluster(t *testing.T) {
	testutil.UseLab(t, "cpu", "dev")
	root := repoRoot()
	app, dir, wrapper, cluster := onCluster(t, "cli")
	run := func(args ...string) (int, string, string) {
		var out, errb bytes.Buffer
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		code := app.Run(ctx, args, &out, &errb)
		return code, out.String(), errb.String()
	}

	// no agent publishes for this cluster name: the state comes from Slurm
	code, out, errOut := run("plan", "--model", filepath.Join(root, "internal/cli/testdata/mnist_cnn.json"), "--samples", "40", "--epochs", "1",
		"--batch", "8", "--optimizer", "momentum", "--site", filepath.Join(root, "examples/site-lab.json"), "--receipts", "none")
	if code != 0 || !strings.Contains(out, "cluster:  polled from Slurm now") || !strings.Contains(out, "recommendation:") {
		t.Fatalf("plan: exit %d\n%s%s", code, out, errOut)
	}

	ck := filepath.Join(dir, "ckpt")
	pwned := filepath.Join(dir, "PWNED")
	// a result path with a space and a command substitution: the script
	// must write exactly this file, and nothing may run
	result := filepath.Join(dir, "res $(touch PWNED) `touch PWNED` 'q'.json")
	code, out, errOut = run("submit", "--model", filepath.Join(root, "internal/cli/testdata/mnist_cnn.json"), "--samples", "40", "--epochs", "1",
		"--batch", "8", "--optimizer", "momentum", "--site", filepath.Join(root, "examples/site-lab.json"), "--receipts", "none",
		"--partition-ideal", "cpu", "--fallback", "dev", "--time", "5", "--mem", "1500M", "--checkpoint-dir", ck, "--wrapper", wrapper,
		"--job-name", "isched-cli-it", "--",
		"/usr/bin/python3", filepath.Join(root, "examples/train_mnistlike.py"), "--epochs", "1", "--steps-per-epoch", "5", "--batch", "8",
		"--threads", "1", "--result", result)
	if code != 0 {
		t.Fatalf("submit: exit %d: %s", code, errOut)
	}
	id, ok := strings.CutPrefix(strings.TrimSpace(out), "Submitted batch job ")
	if !ok {
		t.Fatalf("submit printed %q", out)
	}
	t.Cleanup(func() { _ = testutil.Run(t, 10*time.Second, "scancel", id) })
	t.Logf("job %s (cluster key %s)", id, cluster)

	infos, err := slurm.ParseShowJob([]byte(testutil.Run(t, 10*time.Second, "scontrol", "show", "job", "-o", id)))
	if err != nil || len(infos) != 1 {
		t.Fatalf("scontrol show job: %v (%d records)", err, len(infos))
	}
	info := infos[0]
	p, isPlan, err := report.ParsePlanComment(info.Comment)
	if !isPlan || err != nil {
		t.Fatalf("comment %q: plan %v, %v", info.Comment, isPlan, err)
	}
	if p.Ideal != "cpu" || len(p.Fallbacks) != 1 || p.Fallbacks[0] != "dev" || p.Total != 5 || p.Batch != 8 || !p.Migrate ||
		!strings.HasPrefix(p.Lineage, cluster+"-u"+strconv.Itoa(os.Getuid())+"-isched-cli-it-") || !strings.HasSuffix(p.Model, ":momentum:fp32") {
		t.Errorf("plan %+v", p)
	}
	for key, want := range map[string]string{
		"Partition": "cpu", "TimeLimit": "00:05:00", "Requeue": "1", "MinMemoryNode": "1500M", "JobName": "isched-cli-it",
		"NumCPUs": "4", "WorkDir": dir, "StdOut": filepath.Join(dir, "isched-"+p.Lineage+".out"),
	} {
		if got := info.Fields[key]; got != want {
			t.Errorf("scontrol: %s=%q, want %q", key, got, want)
		}
	}

	// no coordinator runs for this cluster name: status says so and shows Slurm's view
	code, out, errOut = run("status", id)
	if code != 0 || !strings.Contains(out, "lineage "+p.Lineage+" (") || !strings.Contains(out, "no isched status yet") {
		t.Errorf("status: exit %d\n%s%s", code, out, errOut)
	}

	waitGone(t, id, 3*time.Minute)
	output, err := os.ReadFile(filepath.Join(dir, "isched-"+p.Lineage+".out"))
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"isched: lineage " + p.Lineage + " job " + id + " attempt 0 on cpu/", "training cnn on cpu",
		`"step": 5, "total": 5`, "isched-wrapper: summary: exit=0", "checkpoints=1"} {
		if !bytes.Contains(output, []byte(want)) {
			t.Errorf("job output lacks %q:\n%s", want, output)
		}
	}
	if _, err := os.Stat(result); err != nil {
		t.Errorf("the result file with the literal name was not written: %v", err)
	}
	if _, err := os.Stat(pwned); err == nil {
		t.Error("an argument was executed by a shell")
	}
	if _, err := os.Stat(filepath.Join(ck, "last.pt")); err != nil {
		t.Errorf("no checkpoint in the checkpoint directory: %v", err)
	}
}

// onCluster is what a submit test on the lab needs: a work directory all
// can read, the wrapper built into it, and an App that reports straight to
// the lab's Redis under a fresh cluster key no agent publishes (the state
// then comes from Slurm).
func onCluster(t *testing.T, prefix string) (app *App, dir, wrapper, cluster string) {
	t.Helper()
	testutil.NeedSlurm(t)
	r := testutil.NeedRedis(t)
	dir = t.TempDir()
	_ = os.Chmod(dir, 0o755)
	wrapper = filepath.Join(dir, "isched-wrapper")
	testutil.Run(t, 3*time.Minute, "go", "build", "-o", wrapper, filepath.Join(repoRoot(), "wrapper"))
	cluster = fmt.Sprintf("%s%d", prefix, time.Now().UnixNano()%1e9)
	env := map[string]string{
		"ISCHED_CLUSTER":             cluster,
		"ISCHED_REDIS_ADDR":          r.Addr,
		"ISCHED_REDIS_USER":          "coordinator", // until the viewer user is loaded everywhere
		"ISCHED_REDIS_PASSWORD_FILE": r.PasswordFile("coordinator"),
		"ISCHED_REPORT_DIRECT":       "1", // root's job, on a cluster key no relay serves: the opt-in
		"HOME":                       dir,
		"PATH":                       os.Getenv("PATH"),
	}
	return &App{Getenv: func(k string) string { return env[k] }, Getwd: func() (string, error) { return dir, nil }}, dir, wrapper, cluster
}

// waitGone polls squeue until the job leaves the queue.
func waitGone(t *testing.T, id string, limit time.Duration) {
	t.Helper()
	testutil.Eventually(t, limit, time.Second, "job "+id+" ended", func() bool {
		return strings.TrimSpace(testutil.Run(t, 10*time.Second, "squeue", "-h", "-j", id, "-o", "%i")) == ""
	})
}

// TestSubmitSiteOptionsOnCluster: `isched submit --account A --qos Q
// --sbatch-arg=--exclusive` (and the other site options) on the real
// Slurm, submitted held: what scontrol shows of each. The user's
// SBATCH_ACCOUNT applies when --account is not given; SBATCH_PARTITION
// never moves isched's partition.
func TestSubmitSiteOptionsOnCluster(t *testing.T) {
	testutil.UseLab(t, "cpu", "dev")
	testutil.NeedSlurm(t)
	dir := t.TempDir()
	_ = os.Chmod(dir, 0o755)
	// accounts the dev cluster's slurmdbd has (scripts/dev-cluster): with
	// accounting, Slurm refuses one it does not know
	environ := []string{"SBATCH_ACCOUNT=chemistry", "SBATCH_PARTITION=gpu"}
	env := map[string]string{"ISCHED_CLUSTER": "lab", "HOME": dir, "PATH": os.Getenv("PATH"), "ISCHED_RELAY_ADDR": "127.0.0.1:6395"}
	app := &App{Getenv: func(k string) string { return env[k] }, Environ: func() []string { return environ }, Getwd: func() (string, error) { return dir, nil }}
	accounting := ""
	for _, line := range strings.Split(testutil.Run(t, 10*time.Second, "scontrol", "show", "config"), "\n") {
		if k, v, ok := strings.Cut(line, "="); ok && strings.TrimSpace(k) == "AccountingStorageType" {
			accounting = strings.TrimSpace(v)
		}
	}
	submit := func(extra ...string) *slurm.JobInfo {
		t.Helper()
		args := append([]string{"submit", "--partition-ideal", "dev", "--time", "2", "--wrapper", "/bin/true", "--job-name", "isched-site-it",
			"--sbatch-arg=--hold", "--constraint", "dev", "--mail-type", "END,FAIL", "--mail-user", "alice"}, extra...)
		args = append(args, "--", "/bin/true")
		var out, errb bytes.Buffer
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		if code := app.Run(ctx, args, &out, &errb); code != 0 {
			t.Fatalf("submit %q: exit %d: %s", extra, code, errb.String())
		}
		id, ok := strings.CutPrefix(strings.TrimSpace(out.String()), "Submitted batch job ")
		if !ok {
			t.Fatalf("submit printed %q", out.String())
		}
		t.Cleanup(func() { _ = testutil.Run(t, 10*time.Second, "scancel", id) })
		if !strings.Contains(errb.String(), "SBATCH_PARTITION ignored: the script sets --partition") {
			t.Errorf("no note on SBATCH_PARTITION: %s", errb.String())
		}
		infos, err := slurm.ParseShowJob([]byte(testutil.Run(t, 10*time.Second, "scontrol", "show", "job", "-o", id)))
		if err != nil || len(infos) != 1 {
			t.Fatalf("scontrol show job %s: %v (%d records)", id, err, len(infos))
		}
		return &infos[0]
	}
	// --qos: without accounting (the dev cluster: accounting_storage/none)
	// slurmctld 22.05 accepts any QOS name and keeps none (QOS=(null));
	// with slurmdbd it must name a QOS there ("normal" always exists).
	qos, wantQOS := "normal", "normal"
	if accounting == "accounting_storage/none" {
		qos, wantQOS = "high", "(null)"
	}
	info := submit("--account", "physics", "--qos", qos, "--sbatch-arg=--exclusive", "--nodes", "1", "--ntasks", "2")
	for key, want := range map[string]string{
		"Account": "physics", "QOS": wantQOS, "OverSubscribe": "NO", "Partition": "dev", "Features": "dev", "MailUser": "alice",
		"MailType": "END,FAIL", "NumTasks": "2", "Reason": "JobHeldUser",
	} {
		if got := info.Fields[key]; got != want {
			t.Errorf("scontrol: %s=%q, want %q (accounting %s)", key, got, want, accounting)
		}
	}
	// no --account: the user's SBATCH_ACCOUNT applies
	info = submit()
	if got := info.Fields["Account"]; got != "chemistry" {
		t.Errorf("SBATCH_ACCOUNT not applied: Account=%q", got)
	}
	if got := info.Fields["OverSubscribe"]; got == "NO" {
		t.Errorf("OverSubscribe=NO without --exclusive")
	}
}

// TestSubmitBatchScriptOnCluster: a batch script as users write them,
// submitted as it is (`isched submit job.sbatch ARG`): Slurm gets the
// script's partition, time, CPUs and memory; the script runs unmodified
// under the wrapper in the batch step, its own srun starts the training's
// step, and the wrapper sees the training's progress through it.
func TestSubmitBatchScriptOnCluster(t *testing.T) {
	testutil.UseLab(t, "cpu")
	root := repoRoot()
	app, dir, wrapper, _ := onCluster(t, "clib")
	script := filepath.Join(dir, "job.sbatch")
	body := fmt.Sprintf(`#!/bin/bash
#SBATCH -J isched-cli-batch
#SBATCH -p cpu -t 5
#SBATCH -c 1 --mem=800M   # one CPU
#SBATCH --signal=B:USR1@60
echo "script args: $*"
srun /usr/bin/python3 %s --epochs 1 --steps-per-epoch 5 --batch 8 --threads 1
`, filepath.Join(root, "examples/train_mnistlike.py"))
	if err := os.WriteFile(script, []byte(body), 0o644); err != nil {
		t.Fatal(err)
	}
	var out, errb bytes.Buffer
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if code := app.Run(ctx, []string{"submit", "--checkpoint-dir", filepath.Join(dir, "ckpt"), "--wrapper", wrapper, script, "0.1"}, &out, &errb); code != 0 {
		t.Fatalf("submit: exit %d: %s", code, errb.String())
	}
	id, ok := strings.CutPrefix(strings.TrimSpace(out.String()), "Submitted batch job ")
	if !ok {
		t.Fatalf("submit printed %q", out.String())
	}
	t.Cleanup(func() { _ = testutil.Run(t, 10*time.Second, "scancel", id) })
	t.Logf("job %s; isched submit said:\n%s", id, errb.String())
	infos, err := slurm.ParseShowJob([]byte(testutil.Run(t, 10*time.Second, "scontrol", "show", "job", "-o", id)))
	if err != nil || len(infos) != 1 {
		t.Fatalf("scontrol show job: %v (%d records)", err, len(infos))
	}
	p, _, _ := report.ParsePlanComment(infos[0].Comment)
	for key, want := range map[string]string{"Partition": "cpu", "TimeLimit": "00:05:00", "MinMemoryNode": "800M", "JobName": "isched-cli-batch", "NumCPUs": "1"} {
		if got := infos[0].Fields[key]; got != want {
			t.Errorf("scontrol: %s=%q, want %q (from the script's lines)", key, got, want)
		}
	}
	waitGone(t, id, 3*time.Minute)
	output, err := os.ReadFile(filepath.Join(dir, "isched-"+p.Lineage+".out"))
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"script args: 0.1", "training cnn on cpu", `"step": 5, "total": 5`, "isched-wrapper: summary: exit=0"} {
		if !bytes.Contains(output, []byte(want)) {
			t.Errorf("job output lacks %q:\n%s", want, output)
		}
	}
}
