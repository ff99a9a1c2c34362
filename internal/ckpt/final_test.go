package ckpt

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"
)

// TestScan: the one-off look the wrapper takes once its command exited
// finds the checkpoints complete now, never a half-written one.
func TestScan(t *testing.T) {
	t.Parallel()
	old := time.Now().Add(-time.Hour)
	write := func(t *testing.T, p, body string, mtime time.Time) {
		t.Helper()
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
		if !mtime.IsZero() {
			if err := os.Chtimes(p, mtime, mtime); err != nil {
				t.Fatal(err)
			}
		}
	}
	cases := []struct {
		name  string
		glob  string
		setup func(t *testing.T, d string)
		want  []string // base names, oldest first
	}{
		{"a file saved just before the exit", "", func(t *testing.T, d string) {
			write(t, filepath.Join(d, "ckpt-300.pt"), "weights", time.Time{})
		}, []string{"ckpt-300.pt"}},
		{"ordered by step", "", func(t *testing.T, d string) {
			write(t, filepath.Join(d, "ckpt-300.pt"), "weights", time.Time{})
			write(t, filepath.Join(d, "ckpt-200.pt"), "weights", time.Time{})
		}, []string{"ckpt-200.pt", "ckpt-300.pt"}},
		{"older than the attempt: not this attempt's", "", func(t *testing.T, d string) {
			write(t, filepath.Join(d, "ckpt-100.pt"), "weights", old)
		}, nil},
		{"temporary and empty files are not checkpoints", "", func(t *testing.T, d string) {
			write(t, filepath.Join(d, "tmp-400.pt"), "half", time.Time{})
			write(t, filepath.Join(d, "ckpt-400.pt.partial"), "half", time.Time{})
			write(t, filepath.Join(d, "ckpt-500.pt"), "", time.Time{})
		}, nil},
		{"the glob selects", "ckpt-*.pt", func(t *testing.T, d string) {
			write(t, filepath.Join(d, "ckpt-600.pt"), "weights", time.Time{})
			write(t, filepath.Join(d, "model.safetensors"), "final", time.Time{})
		}, []string{"ckpt-600.pt"}},
		{"hugging face with its marker", "", func(t *testing.T, d string) {
			write(t, filepath.Join(d, "checkpoint-700", "model.safetensors"), "w", time.Time{})
			write(t, filepath.Join(d, "checkpoint-700", "trainer_state.json"), "{}", time.Time{})
		}, []string{"checkpoint-700"}},
		{"hugging face without its marker: half-written", "", func(t *testing.T, d string) {
			write(t, filepath.Join(d, "checkpoint-800", "model.safetensors"), "w", time.Time{})
		}, nil},
		{"deepspeed: the tag named by latest, latest itself not", "", func(t *testing.T, d string) {
			write(t, filepath.Join(d, "global_step900", "mp_rank_00_model_states.pt"), "w", time.Time{})
			write(t, filepath.Join(d, "latest"), "global_step900\n", time.Time{})
		}, []string{"global_step900"}},
		{"unknown layout, written just now: not quiet yet", "", func(t *testing.T, d string) {
			write(t, filepath.Join(d, "ckpt_1000", "a.bin"), "w", time.Time{})
		}, nil},
		{"unknown layout, quiet for the quiet period", "", func(t *testing.T, d string) {
			quiet := time.Now().Add(-2 * time.Minute)
			write(t, filepath.Join(d, "ckpt_1100", "a.bin"), "w", quiet)
			if err := os.Chtimes(filepath.Join(d, "ckpt_1100"), quiet, quiet); err != nil {
				t.Fatal(err)
			}
		}, []string{"ckpt_1100"}},
		{"a directory without a step is not a checkpoint", "", func(t *testing.T, d string) {
			write(t, filepath.Join(d, "runs", "events.out"), "w", time.Time{})
		}, nil},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			d := t.TempDir()
			since := time.Now().Add(-10 * time.Minute)
			c.setup(t, d)
			evs, err := Scan(context.Background(), Config{Dir: d, Glob: c.glob, DirQuiesce: time.Minute}, since, 50*time.Millisecond)
			if err != nil {
				t.Fatal(err)
			}
			var got []string
			for _, ev := range evs {
				got = append(got, filepath.Base(ev.Path))
				if ev.Existing || ev.Size <= 0 {
					t.Errorf("event %+v: want a new, non-empty checkpoint", ev)
				}
			}
			if !slices.Equal(got, c.want) {
				t.Errorf("scan found %q, want %q", got, c.want)
			}
		})
	}
}

// A file still being written during the settle period is not taken.
func TestScanSkipsFileWrittenDuringSettle(t *testing.T) {
	t.Parallel()
	d := t.TempDir()
	p := filepath.Join(d, "ckpt-5.pt")
	if err := os.WriteFile(p, []byte("part"), 0o644); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() { // append until the scan returns
		f, err := os.OpenFile(p, os.O_WRONLY|os.O_APPEND, 0)
		if err != nil {
			return
		}
		defer f.Close()
		for ctx.Err() == nil {
			_, _ = f.WriteString("x")
			time.Sleep(time.Millisecond)
		}
	}()
	evs, err := Scan(context.Background(), Config{Dir: d}, time.Now().Add(-time.Minute), 200*time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	if len(evs) != 0 {
		t.Errorf("scan took %+v while it was being written", evs)
	}
}

func TestScanMissingDir(t *testing.T) {
	t.Parallel()
	if _, err := Scan(context.Background(), Config{Dir: filepath.Join(t.TempDir(), "nope")}, time.Time{}, 0); err == nil {
		t.Error("scan of a missing directory: no error")
	}
}
