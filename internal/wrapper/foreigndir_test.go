package wrapper

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/isched/isched/internal/report"
)

// otherUsersDir makes a directory that belongs to a user other than the
// returned job uid, and not to root: as root it is given to nobody
// (65534) and the job is root's; otherwise it is this user's, and the job
// is told (SLURM_JOB_UID) it runs as the next uid.
func otherUsersDir(t *testing.T) (dir string, owner, jobUID int) {
	t.Helper()
	dir = filepath.Join(t.TempDir(), "bobs")
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	owner, jobUID = os.Getuid(), os.Getuid()+1
	if owner == 0 {
		owner, jobUID = 65534, 0
		if err := os.Chown(dir, owner, owner); err != nil {
			t.Fatal(err)
		}
	}
	return dir, owner, jobUID
}

// A checkpoint directory of another user, or one to be made in a directory
// of another user's, is not trusted; the job user's own and root's are.
func TestForeignCkptDir(t *testing.T) {
	t.Parallel()
	bobs, bob, job := otherUsersDir(t)
	for _, tt := range []struct {
		dir  string
		uid  int
		want string // "" trusted; else in the error
	}{
		{bobs, bob, ""},
		{bobs, job, bobs + " is owned by uid " + strconv.Itoa(bob)},
		{filepath.Join(bobs, "a", "ckpt"), job, "is in " + bobs + ", owned by uid " + strconv.Itoa(bob)},
		{"/", job, ""},                        // root's
		{"/nonexistent-isched/ckpt", job, ""}, // would be made in root's /
	} {
		err := foreignCkptDir(tt.dir, tt.uid)
		// a name for the uid where the user database has one: "nobody (uid 65534)"
		got := ""
		if err != nil {
			got = strings.NewReplacer("nobody (uid", "uid").Replace(err.Error())
		}
		if tt.want == "" && err != nil || tt.want != "" && !strings.Contains(got, tt.want) {
			t.Errorf("foreignCkptDir(%s, uid %d) = %v, want %q", tt.dir, tt.uid, err, tt.want)
		}
	}
}

// TestCkptDirOfAnotherUserNotTrusted (issue 44, item 5): the job's
// checkpoint directory belongs to another user, who recorded a resume point
// there (a resume file and a checkpoint the wrapper would accept as the job
// user's). The wrapper refuses the directory, logged at error level: no
// resume point from it, no watcher, no checkpoint the loop saves there
// recorded; the training still runs, told ISCHED_CHECKPOINT_DIR as before.
func TestCkptDirOfAnotherUserNotTrusted(t *testing.T) {
	dir, owner, jobUID := otherUsersDir(t)
	lineage := "t-78"
	planted := filepath.Join(dir, "c100.pt")
	if err := os.WriteFile(planted, []byte("bob's weights"), 0o600); err != nil {
		t.Fatal(err)
	}
	fi, _ := os.Stat(planted)
	checkpointSeen(CheckpointEvent{Path: planted, Size: fi.Size(), MTime: fi.ModTime()}, &state{ckptSeen: map[string]bool{}}, nil,
		Options{CheckpointDir: dir}, report.JobRef{Lineage: lineage, JobID: 77}, slog.New(slog.DiscardHandler))
	resume, err := os.ReadFile(resumeFile(dir, lineage))
	if err != nil || !strings.Contains(string(resume), planted) {
		t.Fatalf("the planted resume point was not recorded: %v %s", err, resume)
	}
	work := t.TempDir()
	out, sum := filepath.Join(work, "env"), filepath.Join(work, "summary.json")
	env := map[string]string{"SLURM_JOB_ID": "78", "ISCHED_CLUSTER": "t", "TMPDIR": work}
	if jobUID != 0 {
		env["SLURM_JOB_UID"] = strconv.Itoa(jobUID)
	}
	getenv := func(k string) string { return env[k] }
	// the loop saves a checkpoint and says so on its progress file
	script := `printf 'resume=%s dir=%s args=%s\n' "${ISCHED_RESUME_FROM:-}" "$ISCHED_CHECKPOINT_DIR" "$*" > "$0"
printf new > "$ISCHED_CHECKPOINT_DIR/c200.pt"
printf 'isched1 ckpt path=%s step=200\n' "$ISCHED_CHECKPOINT_DIR/c200.pt" >> "$ISCHED_PROGRESS_FILE"`
	opts, err := ParseArgs([]string{"--no-report", "--checkpoint-dir", dir, "--resume-arg", "--resume {path}", "--summary-json", sum,
		"--", "/bin/sh", "-c", script, out}, getenv, &bytes.Buffer{})
	if err != nil {
		t.Fatal(err)
	}
	watched := 0
	var stderr bytes.Buffer
	code := Run(context.Background(), opts, Deps{Getenv: getenv, Stdout: &bytes.Buffer{}, Stderr: &stderr,
		NewCheckpointWatcher: func(string, string, time.Duration, time.Duration, *slog.Logger) (CheckpointWatcher, error) {
			watched++
			return nil, fmt.Errorf("not in this test")
		}})
	if code != 0 {
		t.Fatalf("exit %d: %s", code, stderr.String())
	}
	if b, _ := os.ReadFile(out); string(b) != "resume= dir="+dir+" args=\n" {
		t.Errorf("the training got %q, want no resume point and ISCHED_CHECKPOINT_DIR=%s", b, dir)
	}
	log := stderr.String()
	if !strings.Contains(log, "level=ERROR") || !strings.Contains(log, "checkpoint directory refused") ||
		!strings.Contains(log, dir+" is owned by") || !strings.Contains(log, "uid "+strconv.Itoa(owner)) {
		t.Errorf("refusal not logged at error level with the directory and its owner:\n%s", log)
	}
	if watched != 0 {
		t.Errorf("the refused directory was watched")
	}
	var s Summary
	if b, err := os.ReadFile(sum); err != nil || json.Unmarshal(b, &s) != nil || len(s.Checkpoints) != 0 || s.ResumedFrom != "" {
		t.Errorf("summary %s (%v): want no checkpoint recorded, no resume", b, err)
	}
	if b, _ := os.ReadFile(resumeFile(dir, lineage)); !bytes.Equal(b, resume) {
		t.Errorf("the resume file in the refused directory changed:\n%s\nwas\n%s", b, resume)
	}
}
