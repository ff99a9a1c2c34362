package ckpt

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

const dirQuiesce = 8 * debounce

// slowly writes the files of a directory checkpoint one chunk at a time,
// a fraction of a debounce period apart: at no moment is the tree quiet
// for a whole period.
func slowly(t *testing.T, dir string, files ...string) {
	t.Helper()
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	for _, name := range files {
		p := filepath.Join(dir, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		f, err := os.OpenFile(p, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o644)
		if err != nil {
			t.Fatal(err)
		}
		for range 3 {
			if _, err := f.WriteString(strings.Repeat("w", 100)); err != nil {
				t.Fatal(err)
			}
			time.Sleep(debounce / 3)
		}
		f.Close()
	}
}

func checkDirEvent(t *testing.T, ev Event, path, layout string, step int64, size int64) {
	t.Helper()
	if ev.Path != path || !ev.Dir || ev.Layout != layout || ev.Step == nil || *ev.Step != step || ev.Size != size || len(ev.Tree) != 64 {
		t.Errorf("event %+v (step %v), want dir %s layout %s step %d size %d", ev, ev.Step, path, layout, step, size)
	}
}

func TestDirectoryCheckpoints(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name string
		// write writes the checkpoint partially, then (after none was
		// reported) finish completes it.
		write, finish func(t *testing.T, dir string)
		path, layout  string
		step, size    int64
	}{
		{"hugging face: trainer_state.json last",
			func(t *testing.T, d string) {
				slowly(t, filepath.Join(d, "checkpoint-500"), "model.safetensors", "optimizer.pt", "rng_state.pth")
			},
			func(t *testing.T, d string) { slowly(t, filepath.Join(d, "checkpoint-500"), "trainer_state.json") },
			"checkpoint-500", LayoutHF, 500, 1200},
		{"torch.distributed.checkpoint: .metadata last",
			func(t *testing.T, d string) { slowly(t, filepath.Join(d, "step_700"), "__0_0.distcp", "__1_0.distcp") },
			func(t *testing.T, d string) { slowly(t, filepath.Join(d, "step_700"), ".metadata") },
			"step_700", LayoutDCP, 700, 900},
		{"deepspeed: global_step<N>/ then latest",
			func(t *testing.T, d string) {
				slowly(t, filepath.Join(d, "global_step300"), "mp_rank_00_model_states.pt", "zero_pp_rank_0_mp_rank_00_optim_states.pt")
			},
			func(t *testing.T, d string) { saveAtomicallyIn(t, d, "latest", "global_step300\n") },
			"global_step300", LayoutDeepSpeed, 300, 600},
		{"unknown layout: quiet for the whole quiet period",
			func(t *testing.T, d string) { slowly(t, filepath.Join(d, "ckpt_400"), "a.bin", "sub/b.bin") },
			nil, // completes by itself once quiet
			"ckpt_400", LayoutUnknown, 400, 600},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			dir := t.TempDir()
			w := start(t, Config{Dir: dir, DirQuiesce: dirQuiesce})
			waitWatching(t, w, 1)
			c.write(t, dir)
			if c.finish != nil {
				// however long it stays quiet, no marker: not complete
				select {
				case ev := <-w.Events():
					t.Fatalf("reported before its marker: %+v", ev)
				case <-time.After(dirQuiesce + 3*debounce):
				}
				c.finish(t, dir)
			} else {
				// written, not yet quiet long enough
				select {
				case ev := <-w.Events():
					if time.Since(ev.MTime) < dirQuiesce {
						t.Fatalf("reported %s after the last write, before the quiet period %s", time.Since(ev.MTime), dirQuiesce)
					}
					checkDirEvent(t, ev, filepath.Join(dir, c.path), c.layout, c.step, c.size)
					return
				case <-time.After(dirQuiesce / 2):
				}
			}
			checkDirEvent(t, next(t, w), filepath.Join(dir, c.path), c.layout, c.step, c.size)
			none(t, w) // once, and DeepSpeed's "latest" is no checkpoint
		})
	}
}

func saveAtomicallyIn(t *testing.T, dir, name, content string) {
	t.Helper()
	saveAtomically(t, filepath.Join(dir, name), content)
}

// A directory still written after its marker appeared (a shard flushed
// late) is reported only once it stopped changing, with its final size.
func TestDirectoryCheckpointWrittenAfterMarker(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	w := start(t, Config{Dir: dir, DirQuiesce: time.Hour})
	waitWatching(t, w, 1)
	ck := filepath.Join(dir, "checkpoint-20")
	slowly(t, ck, "trainer_state.json", "model.safetensors", "optimizer.pt", "scheduler.pt")
	ev := next(t, w)
	checkDirEvent(t, ev, ck, LayoutHF, 20, 1200)
	if ev.At.Sub(ev.MTime) < debounce {
		t.Errorf("reported %s after the last write, less than a debounce period", ev.At.Sub(ev.MTime))
	}
}

// Half-written known layouts (a save that died), step-less directories
// (logs, runs) and hidden or tmp- directories are never checkpoints.
func TestDirectoriesThatAreNotCheckpoints(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	w := start(t, Config{Dir: dir, DirQuiesce: 2 * debounce})
	waitWatching(t, w, 1)
	slowly(t, filepath.Join(dir, "checkpoint-900"), "model.safetensors")
	slowly(t, filepath.Join(dir, "runs", "Nov25_host"), "events.out.tfevents")
	slowly(t, filepath.Join(dir, "tmp-checkpoint-950"), "model.safetensors", "trainer_state.json")
	slowly(t, filepath.Join(dir, ".trash-1000"), "x")
	slowly(t, filepath.Join(dir, "global_step5"), "mp_rank_00_model_states.pt")
	saveAtomicallyIn(t, dir, "latest", "global_step4\n") // names another tag
	// the two half-written known layouts are followed, never reported
	waitPending(t, w, 2, "checkpoint-900/ and global_step5/ are half written")
	for ev := range drain(w) {
		if ev.Dir {
			t.Errorf("reported %+v", ev)
		}
	}
	if n := w.Pending(); n != 2 {
		t.Errorf("Pending = %d after the quiet period, want 2 (the half-written checkpoints stay followed)", n)
	}
}

// waitPending waits until the watcher counts n checkpoints pending.
func waitPending(t *testing.T, w *Watcher, n int, why string) {
	t.Helper()
	for deadline := time.Now().Add(waitLong); w.Pending() != n; time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("Pending = %d after %s, want %d: %s", w.Pending(), waitLong, n, why)
		}
	}
}

// A directory with no step in its name is empty when it appears (torch's
// dcp.save(..., checkpoint_id="final")): it is followed until its layout
// shows, then reported like any other; a step-less directory that never
// shows a layout ("runs/") is never reported, and neither counts as
// pending while undecided. The quiet period is an hour so that neither is
// dropped while the test looks at Pending.
func TestSteplessDirectoryCheckpoint(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	w := start(t, Config{Dir: dir, DirQuiesce: time.Hour})
	waitWatching(t, w, 1)
	final := filepath.Join(dir, "final")
	if err := os.Mkdir(final, 0o755); err != nil {
		t.Fatal(err)
	}
	slowly(t, filepath.Join(dir, "runs"), "events.out.tfevents")
	// a file saved after both: once it is reported, the watcher has
	// handled the directories' creation (fsnotify keeps the order)
	saveAtomicallyIn(t, dir, "barrier.pt", "b")
	if ev := next(t, w); ev.Path != filepath.Join(dir, "barrier.pt") {
		t.Fatalf("event %+v, want barrier.pt", ev)
	}
	waitPending(t, w, 0, "only undecided directories (final/ empty, runs/ layout-less) and barrier.pt reported")
	slowly(t, final, "__0_0.distcp", "__1_0.distcp")
	waitPending(t, w, 1, "final/ has shards and no .metadata")
	saveAtomicallyIn(t, final, ".metadata", "m")
	ev := next(t, w)
	if ev.Path != final || !ev.Dir || ev.Layout != LayoutDCP || ev.Step != nil || ev.Size != 601 {
		t.Errorf("event %+v, want dir %s layout %s, no step, 601 bytes", ev, final, LayoutDCP)
	}
	for ev := range drain(w) {
		t.Errorf("reported %+v (runs/ is no checkpoint)", ev)
	}
}

// drain returns what the watcher reported within quietFor.
func drain(w *Watcher) func(func(Event) bool) {
	return func(yield func(Event) bool) {
		for {
			select {
			case ev := <-w.Events():
				if !yield(ev) {
					return
				}
			case <-time.After(quietFor):
				return
			}
		}
	}
}

// Directory checkpoints there before Run are reported as existing, and the
// watcher's Pending counts directories being written.
func TestExistingDirectoryCheckpoint(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	slowly(t, filepath.Join(dir, "checkpoint-10"), "model.safetensors", "trainer_state.json")
	w := start(t, Config{Dir: dir})
	ev := next(t, w)
	if !ev.Existing || !ev.Dir {
		t.Errorf("event %+v, want an existing directory", ev)
	}
	slowly(t, filepath.Join(dir, "checkpoint-20"), "model.safetensors")
	// no marker: it stays pending (the watcher sees it within waitLong)
	waitPending(t, w, 1, "checkpoint-20/ is written")
}

func TestReadTree(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	slowly(t, dir, "a", "sub/b")
	t1, err := ReadTree(dir)
	if err != nil {
		t.Fatal(err)
	}
	if t1.Files != 2 || t1.Size != 600 || t1.OthersWritable != "" || len(t1.Owners) != 1 || t1.Owners[0] != os.Getuid() {
		t.Errorf("tree %+v", t1)
	}
	same, _ := ReadTree(dir)
	if same.Digest != t1.Digest {
		t.Error("digest changed with nothing written")
	}
	for _, change := range []func(){
		func() { _ = os.Chtimes(filepath.Join(dir, "sub/b"), time.Unix(1, 0), time.Unix(1, 0)) },
		func() { _ = os.WriteFile(filepath.Join(dir, "c"), nil, 0o644) },
		func() { _ = os.Rename(filepath.Join(dir, "c"), filepath.Join(dir, "d")) },
		func() { _ = os.Truncate(filepath.Join(dir, "a"), 1) },
	} {
		prev, _ := ReadTree(dir)
		change()
		now, _ := ReadTree(dir)
		if now.Digest == prev.Digest {
			t.Error("a change left the digest as it was")
		}
	}
	_ = os.Chmod(filepath.Join(dir, "a"), 0o666)
	if t2, _ := ReadTree(dir); t2.OthersWritable != "a" {
		t.Errorf("OthersWritable %q", t2.OthersWritable)
	}
	if _, err := ReadTree(filepath.Join(dir, "a")); err == nil {
		t.Error("a file read as a tree")
	}
}
