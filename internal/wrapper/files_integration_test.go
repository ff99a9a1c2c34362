//go:build integration

package wrapper_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/isched/isched/internal/testutil"
)

// testUser is a dev-cluster test user (alice, bob).
type testUser struct {
	name     string
	uid, gid int
}

func lookupUser(t *testing.T, name string) testUser {
	t.Helper()
	u, err := user.Lookup(name)
	if err != nil {
		t.Fatalf("test user %s: %v (scripts/dev-cluster up creates alice and bob)", name, err)
	}
	uid, _ := strconv.Atoi(u.Uid)
	gid, _ := strconv.Atoi(u.Gid)
	return testUser{name, uid, gid}
}

// dirOf makes dir owned by u with mode.
func (u testUser) dirOf(t *testing.T, dir string, mode os.FileMode) string {
	t.Helper()
	if err := os.MkdirAll(dir, mode); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(dir, mode); err != nil {
		t.Fatal(err)
	}
	if err := os.Chown(dir, u.uid, u.gid); err != nil {
		t.Fatal(err)
	}
	return dir
}

// fileOf writes path owned by u.
func (u testUser) fileOf(t *testing.T, path string, data []byte, mode os.FileMode) {
	t.Helper()
	if err := os.WriteFile(path, data, mode); err != nil {
		t.Fatal(err)
	}
	if err := os.Chown(path, u.uid, u.gid); err != nil {
		t.Fatal(err)
	}
}

// srunAs runs `srun isched-wrapper --no-report wrapperArgs -- argv` as u
// on the cluster's cpu partition and returns the step's stderr (the
// wrapper's log); the step must succeed.
func srunAs(t *testing.T, u testUser, exports []string, wrapperArgs []string, argv ...string) string {
	t.Helper()
	testutil.NeedSlurm(t)
	bin := buildWrapper(t)
	args := []string{"-u", u.name, "--", "srun", "-p", "cpu", "-N1", "-n1", "-t", "3", "--mem=1G", "-J", "isched-wrapperfiles-test",
		"--export=" + strings.Join(append([]string{"ALL"}, exports...), ","), bin, "--no-report", "--checkpoint-debounce", "300ms"}
	args = append(args, wrapperArgs...)
	args = append(args, "--")
	args = append(args, argv...)
	cmd := exec.Command("runuser", args...)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	done := make(chan error, 1)
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { done <- cmd.Wait() }()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("srun as %s: %v\nstdout: %s\nstderr: %s", u.name, err, out.String(), errb.String())
		}
	case <-time.After(4 * time.Minute):
		_ = cmd.Process.Kill()
		t.Fatalf("srun as %s did not end in 4 minutes (cluster busy?)\n%s", u.name, errb.String())
	}
	return errb.String()
}

func readFacts(t *testing.T, path string) map[string]any {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("facts: %v", err)
	}
	var m map[string]any
	if err := json.Unmarshal(b, &m); err != nil {
		t.Fatalf("facts %s: %v", b, err)
	}
	return m
}

// TestDirectoryCheckpointsUnderSrun: a training loop under srun saves
// directory checkpoints (a real PyTorch model in Hugging Face's layout, and
// DeepSpeed's layout), the first attempt stops with its last checkpoint
// half-written; the second attempt is handed the newest complete directory
// in ISCHED_RESUME_FROM and, through --resume-arg, as
// --resume_from_checkpoint, and resumes from its step.
func TestDirectoryCheckpointsUnderSrun(t *testing.T) {
	alice := lookupUser(t, "alice")
	for _, c := range []struct {
		name   string
		args   []string
		layout func(ck string, step int) string
	}{
		{"huggingface-torch", []string{"--layout", "hf", "--torch"}, func(ck string, s int) string { return filepath.Join(ck, fmt.Sprintf("checkpoint-%d", s)) }},
		{"deepspeed", []string{"--layout", "ds"}, func(ck string, s int) string { return filepath.Join(ck, fmt.Sprintf("global_step%d", s)) }},
	} {
		t.Run(c.name, func(t *testing.T) {
			home := alice.dirOf(t, filepath.Join(testutil.WorkDir(t, "isched-dirckpt"), "alice"), 0o755)
			ck := filepath.Join(home, "ck")
			lineage := fmt.Sprintf("dirck-%s-%d", c.name, time.Now().UnixNano()%1e9)
			wargs := []string{"--checkpoint-dir", ck, "--lineage", lineage, "--resume-arg", "--resume_from_checkpoint {path}"}
			run := func(facts string, extra ...string) (map[string]any, string) {
				argv := append([]string{"/usr/bin/python3", filepath.Join(testutil.RepoRoot(), "internal/wrapper/testdata/dir_trainer.py"),
					"--facts", facts}, c.args...)
				log := srunAs(t, alice, nil, wargs, append(argv, extra...)...)
				return readFacts(t, facts), log
			}
			f1, log1 := run(filepath.Join(home, "facts1.json"), "--stop-at", "25", "--half")
			if f1["resume_env"] != "" || f1["start"] != 0.0 || f1["end"] != 25.0 {
				t.Fatalf("attempt 1: %v\n%s", f1, log1)
			}
			b, err := os.ReadFile(filepath.Join(ck, ".isched-lineage-"+lineage+".json"))
			if err != nil {
				t.Fatalf("no resume file: %v\n%s", err, log1)
			}
			if !strings.Contains(string(b), filepath.Base(c.layout(ck, 20))+`"`) || strings.Contains(string(b), filepath.Base(c.layout(ck, 25))+`"`) {
				t.Fatalf("resume file %s: want %s recorded and not the half-written %s\n%s", b, c.layout(ck, 20), c.layout(ck, 25), log1)
			}
			f2, log2 := run(filepath.Join(home, "facts2.json"))
			want := c.layout(ck, 20)
			if f2["resume_env"] != want || f2["resume_arg"] != want || f2["start"] != 20.0 || f2["end"] != 40.0 {
				t.Fatalf("attempt 2: %v, want resumed from %s at step 20 to 40\n%s", f2, want, log2)
			}
			t.Logf("attempt 2 resumed from %s (argv %v)", f2["resume_env"], f2["argv"])
		})
	}
}
