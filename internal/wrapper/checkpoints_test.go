package wrapper

import (
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/isched/isched/internal/report"
)

// ckptWorld is a checkpoint directory with a lineage whose wrapper sees
// checkpoint events as the watcher would deliver them.
type ckptWorld struct {
	t    *testing.T
	dir  string
	st   *state
	opts Options
	job  report.JobRef
	log  *slog.Logger
}

func newCkptWorld(t *testing.T) *ckptWorld {
	dir := t.TempDir()
	return &ckptWorld{t: t, dir: dir, st: &state{ckptSeen: map[string]bool{}}, opts: Options{CheckpointDir: dir},
		job: report.JobRef{Lineage: "lin1", JobID: 7}, log: slog.New(slog.NewTextHandler(io.Discard, nil))}
}

// save writes name with size bytes (mtime set explicitly, so two saves in
// the same millisecond still differ) and delivers the watcher's event.
func (w *ckptWorld) save(name string, size int, step int64, mtime time.Time) string {
	w.t.Helper()
	p := filepath.Join(w.dir, name)
	if err := os.WriteFile(p, []byte(strings.Repeat("x", size)), 0o644); err != nil {
		w.t.Fatal(err)
	}
	if err := os.Chtimes(p, mtime, mtime); err != nil {
		w.t.Fatal(err)
	}
	w.seen(p, step)
	return p
}

func (w *ckptWorld) seen(p string, step int64) {
	w.t.Helper()
	fi, err := os.Stat(p)
	if err != nil {
		w.t.Fatal(err)
	}
	checkpointSeen(CheckpointEvent{Path: p, Size: fi.Size(), MTime: fi.ModTime(), Step: &step}, w.st, nil, w.opts, w.job, w.log)
}

func (w *ckptWorld) resume() (string, int64) {
	p, _, ok, _ := loadResume(w.dir, w.job.Lineage)
	if !ok {
		return "", -1
	}
	return filepath.Base(p.Path), *p.Step
}

func TestResumePoint(t *testing.T) {
	t0 := time.Unix(1_800_000_000, 0)
	at := func(s int) time.Time { return t0.Add(time.Duration(s) * time.Second) }
	cases := []struct {
		name     string
		do       func(w *ckptWorld)
		wantFile string
		wantStep int64
	}{
		{"newest complete checkpoint", func(w *ckptWorld) {
			w.save("c40.pt", 4000, 40, at(1))
			w.save("c80.pt", 4000, 80, at(2))
		}, "c80.pt", 80},
		{"newest truncated while the job is down: the one before", func(w *ckptWorld) {
			w.save("c40.pt", 4000, 40, at(1))
			p := w.save("c80.pt", 4000, 80, at(2))
			if err := os.Truncate(p, 100); err != nil {
				t.Fatal(err)
			}
		}, "c40.pt", 40},
		{"newest truncated in place while watched: refused, the one before", func(w *ckptWorld) {
			w.save("c40.pt", 4000, 40, at(1))
			p := w.save("c80.pt", 4000, 80, at(2))
			if err := os.Truncate(p, 100); err != nil {
				t.Fatal(err)
			}
			w.seen(p, 80) // the watcher's Write, then stable: looks complete
		}, "c40.pt", 40},
		{"newest deleted", func(w *ckptWorld) {
			w.save("c40.pt", 4000, 40, at(1))
			if err := os.Remove(w.save("c80.pt", 4000, 80, at(2))); err != nil {
				t.Fatal(err)
			}
		}, "c40.pt", 40},
		{"same size, rewritten since it was confirmed", func(w *ckptWorld) {
			w.save("c40.pt", 4000, 40, at(1))
			p := w.save("c80.pt", 4000, 80, at(2))
			if err := os.Chtimes(p, at(9), at(9)); err != nil {
				t.Fatal(err)
			}
		}, "c40.pt", 40},
		{"one file overwritten by each save (last.pt) stays the resume point", func(w *ckptWorld) {
			w.save("last.pt", 4000, 40, at(1))
			w.save("last.pt", 4100, 80, at(2))
			w.save("last.pt", 3900, 120, at(3))
		}, "last.pt", 120},
		{"a rewrite that shrank by half is refused and drops the old entry", func(w *ckptWorld) {
			w.save("a.pt", 4000, 40, at(1))
			w.save("last.pt", 4000, 80, at(2))
			w.save("last.pt", 1000, 120, at(3))
		}, "a.pt", 40},
		{"only the last resumeKeep are kept", func(w *ckptWorld) {
			for i := 1; i <= resumeKeep+3; i++ {
				w.save("c"+strings.Repeat("0", i)+".pt", 4000, int64(i), at(i))
			}
			st, _ := readResume(w.dir, w.job.Lineage)
			if len(st.Checkpoints) != resumeKeep || *st.Checkpoints[0].Step != 4 {
				t.Errorf("kept %d, oldest step %v; want %d from step 4", len(st.Checkpoints), st.Checkpoints[0].Step, resumeKeep)
			}
			for _, p := range st.Checkpoints { // damage all the kept ones
				_ = os.Truncate(p.Path, 1)
			}
		}, "", -1},
		{"nothing recorded", func(w *ckptWorld) {}, "", -1},
		{"checkpoints present before the attempt are not this lineage's", func(w *ckptWorld) {
			p := filepath.Join(w.dir, "old.pt")
			_ = os.WriteFile(p, []byte("xxxx"), 0o644)
			checkpointSeen(CheckpointEvent{Path: p, Size: 4, MTime: at(1), Existing: true}, w.st, nil, w.opts, w.job, w.log)
		}, "", -1},
		{"another lineage's state file is not read", func(w *ckptWorld) {
			w.save("c40.pt", 4000, 40, at(1))
			w.job.Lineage = "lin2"
		}, "", -1},
		{"garbage state file: start from scratch", func(w *ckptWorld) {
			w.save("c40.pt", 4000, 40, at(1))
			_ = os.WriteFile(resumeFile(w.dir, w.job.Lineage), []byte("{not json"), 0o644)
		}, "", -1},
		{"relative paths in the state file are ignored", func(w *ckptWorld) {
			_ = os.WriteFile(resumeFile(w.dir, w.job.Lineage),
				[]byte(`{"lineage":"lin1","checkpoints":[{"path":"c.pt","size":1,"mtime_ms":1}]}`), 0o644)
		}, "", -1},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			w := newCkptWorld(t)
			c.do(w)
			f, s := w.resume()
			if f != c.wantFile || s != c.wantStep {
				t.Errorf("resume point %q step %d, want %q step %d", f, s, c.wantFile, c.wantStep)
			}
		})
	}
}

// A checkpoint that shrank in place is not reported to the coordinator as
// complete, nor listed in the run's summary.
func TestDamagedCheckpointNotReported(t *testing.T) {
	w := newCkptWorld(t)
	p := w.save("c80.pt", 4000, 80, time.Unix(1_800_000_000, 0))
	if err := os.Truncate(p, 10); err != nil {
		t.Fatal(err)
	}
	w.seen(p, 80)
	if len(w.st.ckpts) != 1 {
		t.Errorf("summary lists %v, want the one complete save", w.st.ckpts)
	}
}

// TestRecordKeepsRankZeroStep: rank 1's wrapper records rank 0's
// checkpoint with no step (it has no progress lines); the step rank 0
// recorded for that version stands, and a rewritten version takes its
// own.
func TestRecordKeepsRankZeroStep(t *testing.T) {
	t.Parallel()
	step := int64(134)
	var r resumeState
	v1 := resumePoint{Path: "/ck/isched-last.ckpt", Size: 10, MTimeMS: 1000, Step: &step}
	if err := r.record(v1); err != nil {
		t.Fatal(err)
	}
	same := v1
	same.Step = nil
	if err := r.record(same); err != nil {
		t.Fatal(err)
	}
	if len(r.Checkpoints) != 1 || r.Checkpoints[0].Step == nil || *r.Checkpoints[0].Step != 134 {
		t.Fatalf("after rank 1's record: %+v, want one entry at step 134", r.Checkpoints)
	}
	next := resumePoint{Path: "/ck/isched-last.ckpt", Size: 10, MTimeMS: 2000}
	if err := r.record(next); err != nil {
		t.Fatal(err)
	}
	if len(r.Checkpoints) != 1 || r.Checkpoints[0].Step != nil {
		t.Errorf("a rewritten version: %+v, want its own (no) step", r.Checkpoints)
	}
}
