package wrapper

import (
	"encoding/json"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/isched/isched/internal/ckpt"
	"github.com/isched/isched/internal/report"
)

// A directory at the job's temp dir name that is not private (another user
// made it 0777, or planted a link) is not used: the wrapper makes a new
// private one instead and the training still gets its progress file.
func TestJobTmpDirRefusesAnUnsafeDirectory(t *testing.T) {
	t.Parallel()
	job := report.JobRef{JobID: 9, StepID: "0"}
	name := "isched-9-0-r0"
	cases := []struct {
		name  string
		plant func(t *testing.T, p string)
	}{
		{"mode 0777", func(t *testing.T, p string) { mkdirMode(t, p, 0o777) }},
		{"mode 0750", func(t *testing.T, p string) { mkdirMode(t, p, 0o750) }},
		{"a link to another directory", func(t *testing.T, p string) {
			other := t.TempDir()
			if err := os.Symlink(other, p); err != nil {
				t.Fatal(err)
			}
		}},
		{"a file", func(t *testing.T, p string) {
			if err := os.WriteFile(p, nil, 0o600); err != nil {
				t.Fatal(err)
			}
		}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			base := t.TempDir()
			planted := filepath.Join(base, name)
			c.plant(t, planted)
			var logs strings.Builder
			dir, created := jobTmpDir(func(k string) string { return map[string]string{"TMPDIR": base}[k] }, job, true, testLogger(&logs))
			if dir == "" || dir == planted || !created {
				t.Fatalf("jobTmpDir = %q, %v; want a new private directory, not %s", dir, created, planted)
			}
			fi, err := os.Lstat(dir)
			if err != nil || !fi.IsDir() || fi.Mode().Perm() != 0o700 {
				t.Errorf("new directory %s: %v %v", dir, fi.Mode(), err)
			}
			if !strings.Contains(logs.String(), "job temporary directory refused") || !strings.Contains(logs.String(), planted) {
				t.Errorf("refusal not logged: %s", logs.String())
			}
		})
	}
}

func mkdirMode(t *testing.T, p string, mode os.FileMode) {
	t.Helper()
	if err := os.Mkdir(p, mode); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(p, mode); err != nil { // past the umask
		t.Fatal(err)
	}
}

// A link planted at the lineage resume file's name is refused when read
// and replaced (not followed) when written: the file it points to is
// untouched.
func TestResumeFileLinkNotFollowed(t *testing.T) {
	t.Parallel()
	w := newCkptWorld(t)
	victim := filepath.Join(t.TempDir(), "precious")
	if err := os.WriteFile(victim, []byte("alice's data"), 0o600); err != nil {
		t.Fatal(err)
	}
	rf := resumeFile(w.dir, w.job.Lineage)
	if err := os.Symlink(victim, rf); err != nil {
		t.Fatal(err)
	}
	if _, err := readResume(w.dir, w.job.Lineage); err == nil || !strings.Contains(err.Error(), "symbolic link") {
		t.Errorf("readResume through a link: %v", err)
	}
	w.save("c10.pt", 100, 10, time.Unix(1_800_000_000, 0))
	if b, _ := os.ReadFile(victim); string(b) != "alice's data" {
		t.Errorf("the link's target was overwritten: %q", b)
	}
	if fi, err := os.Lstat(rf); err != nil || !fi.Mode().IsRegular() || fi.Mode().Perm() != 0o600 {
		t.Errorf("resume file %v %v, want a regular 0600 file", fi.Mode(), err)
	}
	if f, _ := w.resume(); f != "c10.pt" {
		t.Errorf("resume point %q", f)
	}
	if left, _ := filepath.Glob(rf + ".*.tmp"); len(left) != 0 {
		t.Errorf("temporaries left: %v", left)
	}
}

// A resume file others may write, or one naming paths outside the
// checkpoint directory, hands out no resume point.
func TestPlantedResumeFileRefused(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name  string
		plant func(w *ckptWorld) // after a genuine save of c10.pt
		want  string
	}{
		{"group and world writable", func(w *ckptWorld) {
			_ = os.Chmod(resumeFile(w.dir, w.job.Lineage), 0o666)
		}, ""},
		{"names a file outside the directory", func(w *ckptWorld) {
			outside := filepath.Join(t.TempDir(), "evil.pt")
			_ = os.WriteFile(outside, []byte("pickle"), 0o600)
			fi, _ := os.Stat(outside)
			writeState(w, resumePoint{Path: outside, Size: fi.Size(), MTimeMS: fi.ModTime().UnixMilli()})
		}, ""},
		{"names ../ out of the directory", func(w *ckptWorld) {
			writeState(w, resumePoint{Path: w.dir + "/../evil.pt", Size: 6})
		}, ""},
		{"names a link in the directory", func(w *ckptWorld) {
			outside := filepath.Join(t.TempDir(), "evil.pt")
			_ = os.WriteFile(outside, []byte("pickle"), 0o600)
			link := filepath.Join(w.dir, "c20.pt")
			_ = os.Symlink(outside, link)
			fi, _ := os.Stat(link)
			writeState(w, resumePoint{Path: link, Size: fi.Size(), MTimeMS: fi.ModTime().UnixMilli()})
		}, ""},
		{"the genuine file stays the resume point", func(w *ckptWorld) {}, "c10.pt"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			w := newCkptWorld(t)
			w.save("c10.pt", 100, 10, time.Unix(1_800_000_000, 0))
			c.plant(w)
			if f, _ := w.resume(); f != c.want {
				t.Errorf("resume point %q, want %q", f, c.want)
			}
		})
	}
}

// writeState replaces the lineage's resume file with one entry, as a
// planter would (the file itself is the job user's here).
func writeState(w *ckptWorld, p resumePoint) {
	w.t.Helper()
	b, _ := json.Marshal(resumeState{Lineage: w.job.Lineage, Checkpoints: []resumePoint{p}})
	if err := os.WriteFile(resumeFile(w.dir, w.job.Lineage), b, 0o600); err != nil {
		w.t.Fatal(err)
	}
}

// A directory checkpoint is a resume point while its tree is unchanged.
func TestDirectoryResumePoint(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name   string
		change func(t *testing.T, d string)
		want   string
	}{
		{"unchanged", func(t *testing.T, d string) {}, "checkpoint-20"},
		{"a shard truncated", func(t *testing.T, d string) { _ = os.Truncate(filepath.Join(d, "model.safetensors"), 1) }, "checkpoint-10"},
		{"a file added", func(t *testing.T, d string) { _ = os.WriteFile(filepath.Join(d, "x"), []byte("x"), 0o600) }, "checkpoint-10"},
		{"marker removed", func(t *testing.T, d string) { _ = os.Remove(filepath.Join(d, "trainer_state.json")) }, "checkpoint-10"},
		{"made world-writable", func(t *testing.T, d string) { _ = os.Chmod(filepath.Join(d, "model.safetensors"), 0o666) }, "checkpoint-10"},
		{"removed", func(t *testing.T, d string) { _ = os.RemoveAll(d) }, "checkpoint-10"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			w := newCkptWorld(t)
			for _, n := range []string{"checkpoint-10", "checkpoint-20"} {
				d := filepath.Join(w.dir, n)
				_ = os.Mkdir(d, 0o755)
				for _, f := range []string{"model.safetensors", "optimizer.pt", "trainer_state.json"} {
					if err := os.WriteFile(filepath.Join(d, f), []byte(strings.Repeat("w", 100)), 0o644); err != nil {
						t.Fatal(err)
					}
				}
				tr, err := ckpt.ReadTree(d)
				if err != nil {
					t.Fatal(err)
				}
				step, _, _ := ckpt.ParseStep(n)
				checkpointSeen(CheckpointEvent{Path: d, Dir: true, Tree: tr.Digest, Size: tr.Size, MTime: tr.MTime, Step: &step}, w.st, nil, w.opts, w.job, w.log)
			}
			c.change(t, filepath.Join(w.dir, "checkpoint-20"))
			if f, _ := w.resume(); f != c.want {
				t.Errorf("resume point %q, want %q", f, c.want)
			}
		})
	}
}

func testLogger(w io.Writer) *slog.Logger { return slog.New(slog.NewTextHandler(w, nil)) }
