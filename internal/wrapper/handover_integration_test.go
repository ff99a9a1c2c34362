//go:build integration

package wrapper_test

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/isched/isched/internal/report"
	"github.com/isched/isched/internal/testutil"
)

// TestHandoverOnCluster: two jobs of one lineage on the real Slurm. Job A
// trains 100 steps (20 s), checkpointing every 10; job B of the same
// lineage starts beside it (as a twin that Slurm starts on the ideal
// partition would) and its wrapper waits: B's command starts only once A
// has ended, and resumes from A's last checkpoint (step 100), not from one
// A was still writing. bob's running job that names the same lineage in
// its comment holds nobody back: only the user's own jobs count.
func TestHandoverOnCluster(t *testing.T) {
	testutil.UseLab(t, "cpu")
	testutil.NeedSlurm(t)
	bin := buildWrapper(t)
	dir := t.TempDir()
	_ = os.Chmod(dir, 0o755)
	ck := filepath.Join(dir, "ckpt")
	if err := os.Mkdir(ck, 0o755); err != nil {
		t.Fatal(err)
	}
	lineage := fmt.Sprintf("handover-%d", time.Now().UnixNano()%1e9)
	comment := report.Plan{Lineage: lineage, Ideal: "cpu", Total: 100}.FormatComment()
	submit := func(name string) string {
		t.Helper()
		script := fmt.Sprintf("#!/bin/bash\nexec srun %q --no-report --lineage %q --checkpoint-dir %q --checkpoint-debounce 300ms --handover-wait 3m "+
			"-- /usr/bin/python3 %q --facts %q --steps 100 --period 0.2 --ckpt-every 10\n",
			bin, lineage, ck, filepath.Join(testutil.RepoRoot(), "internal/wrapper/testdata/fake_trainer.py"), filepath.Join(dir, name+".json"))
		path := filepath.Join(dir, name+".sh")
		if err := os.WriteFile(path, []byte(script), 0o755); err != nil {
			t.Fatal(err)
		}
		id := strings.TrimSpace(testutil.Run(t, 30*time.Second, "sbatch", "--parsable", "-J", "isched-handover-"+name, "-p", "cpu", "--mem=500M",
			"-t", "5", "--comment", comment, "-o", filepath.Join(dir, name+".out"),
			"--export=ALL,ISCHED_HELPER_DIR="+filepath.Join(testutil.RepoRoot(), "scripts"), path))
		t.Cleanup(func() { _ = exec.Command("scancel", id).Run() })
		return id
	}
	facts := func(name string) map[string]any {
		b, err := os.ReadFile(filepath.Join(dir, name+".json"))
		if err != nil {
			return nil
		}
		var m map[string]any
		_ = json.Unmarshal(b, &m)
		return m
	}
	state := func(id string) string {
		return strings.TrimSpace(testutil.Run(t, 10*time.Second, "squeue", "-h", "-j", id, "-o", "%T"))
	}

	bob, err := exec.Command("runuser", "-u", "bob", "--", "sbatch", "--parsable", "-J", "isched-handover-bob", "-p", "cpu", "--mem=100M",
		"-t", "5", "--comment", comment, "-o", "/dev/null", "--wrap", "sleep 300").Output()
	if err != nil {
		t.Fatalf("bob's sbatch: %v", err)
	}
	bobID := strings.TrimSpace(string(bob))
	t.Cleanup(func() { _ = exec.Command("scancel", bobID).Run() })
	a := submit("a")
	testutil.Eventually(t, 2*time.Minute, 200*time.Millisecond, "job A running with a checkpoint and bob's job running", func() bool {
		_, err := os.Stat(filepath.Join(ck, "ckpt-step10.pt"))
		if state(a) == "" {
			out, _ := os.ReadFile(filepath.Join(dir, "a.out"))
			t.Fatalf("job A ended early:\n%s", out)
		}
		return err == nil && state(bobID) == "RUNNING" && state(a) == "RUNNING"
	})
	b := submit("b")
	testutil.Eventually(t, time.Minute, 200*time.Millisecond, "job B's wrapper waiting for A", func() bool {
		out, _ := os.ReadFile(filepath.Join(dir, "b.out"))
		return strings.Contains(string(out), "another job of the lineage is running")
	})
	// B's command, had it started beside A, would resume from a
	// checkpoint A wrote before step 100: its start step says
	testutil.Eventually(t, 2*time.Minute, 500*time.Millisecond, "job B to end", func() bool { return state(b) == "" })
	fa, fb := facts("a"), facts("b")
	outB, _ := os.ReadFile(filepath.Join(dir, "b.out"))
	t.Logf("A: %v\nB: %v\nB's output:\n%s", fa, fb, outB)
	if state(a) != "" || fa["end"] != float64(100) {
		t.Fatalf("A: state %q, end %v; want ended at step 100", state(a), fa["end"])
	}
	if fb["start"] != float64(100) || !strings.HasSuffix(fmt.Sprint(fb["resumed_from"]), ".pt") {
		t.Errorf("B started at step %v from %v; want A's last checkpoint, step 100", fb["start"], fb["resumed_from"])
	}
	if !strings.Contains(string(outB), "jobs=["+a+"]") || strings.Contains(string(outB), bobID) {
		t.Errorf("B waited for other jobs than A (%s; bob's %s):\n%s", a, bobID, outB)
	}
	if !strings.Contains(string(outB), "the lineage's other job ended: the command starts") {
		t.Errorf("B's wrapper did not say it started after A:\n%s", outB)
	}
}
