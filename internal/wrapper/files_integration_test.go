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
	testutil.UseLab(t, "cpu")
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

// TestBobPlantsAResumePoint (issue 18 item 7): in a shared 1777 checkpoint
// directory bob plants a lineage resume file naming his own file, or a
// link at its name to a file of alice's. Alice's next attempt is handed
// no resume point, and her file is not overwritten.
func TestBobPlantsAResumePoint(t *testing.T) {
	alice, bob := lookupUser(t, "alice"), lookupUser(t, "bob")
	work := testutil.WorkDir(t, "isched-plant")
	shared := filepath.Join(work, "shared")
	if err := os.Mkdir(shared, 0o777); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(shared, 0o1777); err != nil {
		t.Fatal(err)
	}
	home := alice.dirOf(t, filepath.Join(work, "alice"), 0o755)
	evil := filepath.Join(shared, "evil.pt")
	bob.fileOf(t, evil, []byte("a pickle that runs code"), 0o644)
	fi, _ := os.Stat(evil)
	state := func(lineage string) []byte {
		return fmt.Appendf(nil, `{"lineage":%q,"checkpoints":[{"path":%q,"size":%d,"mtime_ms":%d,"step":1000}]}`,
			lineage, evil, fi.Size(), fi.ModTime().UnixMilli())
	}
	resumeOf := func(t *testing.T, lineage string) (string, string) {
		t.Helper()
		out := filepath.Join(home, lineage+".resume")
		log := srunAs(t, alice, nil, []string{"--checkpoint-dir", shared, "--lineage", lineage},
			"/bin/sh", "-c", `printf '%s' "${ISCHED_RESUME_FROM:-}" > "$0"`, out)
		b, err := os.ReadFile(out)
		if err != nil {
			t.Fatalf("%v\n%s", err, log)
		}
		return string(b), log
	}
	t.Run("bob's lineage file naming bob's file", func(t *testing.T) {
		lineage := fmt.Sprintf("plant-a-%d", time.Now().UnixNano()%1e9)
		bob.fileOf(t, filepath.Join(shared, ".isched-lineage-"+lineage+".json"), state(lineage), 0o644)
		got, log := resumeOf(t, lineage)
		if got != "" {
			t.Fatalf("alice was handed ISCHED_RESUME_FROM=%s\n%s", got, log)
		}
		if !strings.Contains(log, "resume state is not trusted") || !strings.Contains(log, "owned by uid "+strconv.Itoa(bob.uid)) {
			t.Errorf("refusal not logged:\n%s", log)
		}
	})
	t.Run("alice's lineage file naming bob's file", func(t *testing.T) {
		lineage := fmt.Sprintf("plant-b-%d", time.Now().UnixNano()%1e9)
		alice.fileOf(t, filepath.Join(shared, ".isched-lineage-"+lineage+".json"), state(lineage), 0o600)
		got, log := resumeOf(t, lineage)
		if got != "" {
			t.Fatalf("alice was handed ISCHED_RESUME_FROM=%s\n%s", got, log)
		}
		if !strings.Contains(log, "not resuming from it") || !strings.Contains(log, evil) {
			t.Errorf("refusal not logged:\n%s", log)
		}
	})
	t.Run("bob's link at the resume file's name", func(t *testing.T) {
		lineage := fmt.Sprintf("plant-c-%d", time.Now().UnixNano()%1e9)
		precious := filepath.Join(home, "precious")
		alice.fileOf(t, precious, []byte("alice's data"), 0o600)
		rf := filepath.Join(shared, ".isched-lineage-"+lineage+".json")
		for _, name := range []string{rf, rf + ".1.tmp", rf + ".tmp"} {
			if err := os.Symlink(precious, name); err != nil {
				t.Fatal(err)
			}
			if err := os.Lchown(name, bob.uid, bob.gid); err != nil {
				t.Fatal(err)
			}
		}
		ckpt := filepath.Join(shared, lineage+"-c10.pt")
		log := srunAs(t, alice, nil, []string{"--checkpoint-dir", shared, "--lineage", lineage},
			"/bin/sh", "-c", `printf weights > "$0"; sleep 2`, ckpt)
		if b, _ := os.ReadFile(precious); string(b) != "alice's data" {
			t.Fatalf("alice's file was overwritten through bob's link: %q\n%s", b, log)
		}
		if !strings.Contains(log, "symbolic link") {
			t.Errorf("the planted link was not noticed:\n%s", log)
		}
		t.Logf("wrapper log:\n%s", log)
	})
}

// TestBobsTmpDirRefused (issue 18 item 6): bob pre-creates alice's job's
// temp dir name (0777, with his own progress file) before her job starts.
// The wrapper refuses it, and alice's training runs and writes its progress
// in a private directory of her own.
func TestBobsTmpDirRefused(t *testing.T) {
	testutil.UseLab(t, "cpu")
	testutil.NeedSlurm(t)
	alice, bob := lookupUser(t, "alice"), lookupUser(t, "bob")
	work := testutil.WorkDir(t, "isched-tmpdir")
	tmpBase := filepath.Join(work, "tmp")
	if err := os.Mkdir(tmpBase, 0o777); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(tmpBase, 0o1777); err != nil {
		t.Fatal(err)
	}
	home := alice.dirOf(t, filepath.Join(work, "alice"), 0o755)
	facts := filepath.Join(home, "progress-path")
	bin := buildWrapper(t)
	script := filepath.Join(home, "job.sh")
	alice.fileOf(t, script, []byte("#!/bin/bash\nexec srun "+bin+` --no-report -- /bin/sh -c 'echo "isched1 step=1" >> "$ISCHED_PROGRESS_FILE"; printf "%s" "$ISCHED_PROGRESS_FILE" > "$0"' `+facts+"\n"), 0o755)
	out := filepath.Join(home, "out.txt")
	cmd := exec.Command("runuser", "-u", "alice", "--", "sbatch", "--parsable", "-H", "-p", "cpu", "-t", "3", "--mem=1G",
		"-J", "isched-wrapperfiles-test", "-o", out, "--export=ALL,TMPDIR="+tmpBase, script)
	b, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("sbatch as alice: %v: %s", err, b)
	}
	id := strings.TrimSpace(strings.Split(string(b), ";")[0])
	t.Cleanup(func() { _ = exec.Command("scancel", id).Run() })
	planted := bob.dirOf(t, filepath.Join(tmpBase, "isched-"+id+"-0-r0"), 0o777)
	bobsProgress := filepath.Join(planted, "progress")
	bob.fileOf(t, bobsProgress, []byte("bob\n"), 0o666)
	testutil.Run(t, 30*time.Second, "scontrol", "release", id)
	waitJobEnd(t, id, 4*time.Minute)
	log, _ := os.ReadFile(out)
	pb, err := os.ReadFile(facts)
	if err != nil {
		t.Fatalf("alice's job wrote no facts: %v\n%s", err, log)
	}
	progress := string(pb)
	if progress == "" || strings.HasPrefix(progress, planted+"/") {
		t.Fatalf("alice's progress file is %q, in bob's directory %s\n%s", progress, planted, log)
	}
	if b, _ := os.ReadFile(bobsProgress); string(b) != "bob\n" {
		t.Errorf("bob's progress file got alice's progress: %q", b)
	}
	if !strings.Contains(string(log), "job temporary directory refused") || !strings.Contains(string(log), planted) {
		t.Errorf("refusal not logged:\n%s", log)
	}
	t.Logf("alice's progress went to %s", progress)
}

// TestBobsCheckpointDirRefused (issue 44, item 5): alice's job is given a
// checkpoint directory of bob's (0777, so her training can write there;
// bob can rename, replace or link anything in it). Her first attempt saves
// a checkpoint there, her second would resume from it: the wrapper refuses
// the directory in both, logged at error level with bob's uid, records
// nothing and hands the second no resume point; both run to the end.
func TestBobsCheckpointDirRefused(t *testing.T) {
	alice, bob := lookupUser(t, "alice"), lookupUser(t, "bob")
	work := testutil.WorkDir(t, "isched-bobsdir")
	bobs := bob.dirOf(t, filepath.Join(work, "bob", "ckpt"), 0o777)
	home := alice.dirOf(t, filepath.Join(work, "alice"), 0o755)
	lineage := fmt.Sprintf("bobsdir-%d", time.Now().UnixNano()%1e9)
	args := []string{"--checkpoint-dir", bobs, "--lineage", lineage}
	log1 := srunAs(t, alice, nil, args, "/bin/sh", "-c", `printf weights > "$ISCHED_CHECKPOINT_DIR/c10.pt"; sleep 2`)
	if _, err := os.Stat(filepath.Join(bobs, "c10.pt")); err != nil {
		t.Fatalf("alice's training did not write its checkpoint: %v\n%s", err, log1)
	}
	out := filepath.Join(home, "resume")
	log2 := srunAs(t, alice, nil, args, "/bin/sh", "-c", `printf '%s' "${ISCHED_RESUME_FROM:-}" > "$0"`, out)
	b, err := os.ReadFile(out)
	if err != nil {
		t.Fatalf("%v\n%s", err, log2)
	}
	if len(b) != 0 {
		t.Errorf("alice's second attempt resumed from %s in bob's directory\n%s\n%s", b, log1, log2)
	}
	for _, log := range []string{log1, log2} {
		if !strings.Contains(log, "level=ERROR") || !strings.Contains(log, "checkpoint directory refused") ||
			!strings.Contains(log, "uid "+strconv.Itoa(bob.uid)) {
			t.Errorf("refusal not logged at error level with bob's uid:\n%s", log)
		}
	}
	if _, err := os.Stat(filepath.Join(bobs, ".isched-lineage-"+lineage+".json")); err == nil {
		t.Errorf("a resume file was written in bob's directory")
	}
}
