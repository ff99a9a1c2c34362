package ckpt

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/fsnotify/fsnotify"
)

// Generous waits: the machine is shared and slow under -race.
const (
	debounce = 100 * time.Millisecond
	waitLong = 10 * time.Second
	quietFor = 5 * debounce
)

var quiet = slog.New(slog.NewTextHandler(io.Discard, nil))

func start(t *testing.T, cfg Config, tweak ...func(*Watcher)) *Watcher {
	t.Helper()
	if cfg.Debounce == 0 {
		cfg.Debounce = debounce
	}
	if cfg.DirPoll == 0 {
		cfg.DirPoll = 20 * time.Millisecond
	}
	cfg.Logger = quiet
	w, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range tweak {
		f(w)
	}
	errc := make(chan error, 1)
	go func() { errc <- w.Run(context.Background()) }()
	t.Cleanup(func() {
		w.Close()
		if err := <-errc; err != nil {
			t.Errorf("Run = %v", err)
		}
	})
	return w
}

// waitWatching waits until Run has watched the directory and scanned it for
// the n-th time (1: the first watch; 2: after the directory came back).
func waitWatching(t *testing.T, w *Watcher, n uint64) {
	t.Helper()
	for deadline := time.Now().Add(waitLong); w.Stats().Watches < n; time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("the directory was watched %d times in %s, want %d", w.Stats().Watches, waitLong, n)
		}
	}
}

func next(t *testing.T, w *Watcher) Event {
	t.Helper()
	select {
	case ev, ok := <-w.Events():
		if !ok {
			t.Fatal("events channel closed")
		}
		return ev
	case <-time.After(waitLong):
		t.Fatal("no checkpoint event")
	}
	return Event{}
}

func none(t *testing.T, w *Watcher) {
	t.Helper()
	select {
	case ev := <-w.Events():
		t.Fatalf("unexpected event %+v", ev)
	case <-time.After(quietFor):
	}
}

func writeFile(t *testing.T, path string, chunks ...string) {
	t.Helper()
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range chunks {
		if _, err := f.WriteString(c); err != nil {
			t.Fatal(err)
		}
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
}

// saveAtomically is what torch.save + os.replace (and isched.save) do.
func saveAtomically(t *testing.T, path, content string) {
	t.Helper()
	writeFile(t, path+".tmp", content[:len(content)/2], content[len(content)/2:])
	if err := os.Rename(path+".tmp", path); err != nil {
		t.Fatal(err)
	}
}

func TestWriteThenRenameReportsOncePerCheckpoint(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	w := start(t, Config{Dir: dir, Glob: "*.pt"})
	waitWatching(t, w, 1)

	saveAtomically(t, filepath.Join(dir, "ckpt_step_100.pt"), strings.Repeat("a", 1000))
	ev := next(t, w)
	if ev.Path != filepath.Join(dir, "ckpt_step_100.pt") || ev.Size != 1000 || ev.Existing ||
		ev.Step == nil || *ev.Step != 100 || ev.StepFrom != StepFromStep {
		t.Errorf("event = %+v", ev)
	}
	if ev.MTime.IsZero() || ev.At.Before(ev.MTime) {
		t.Errorf("MTime %v, At %v", ev.MTime, ev.At)
	}
	// The same name replaced again is a new checkpoint.
	saveAtomically(t, filepath.Join(dir, "last.pt"), "v1")
	if ev := next(t, w); filepath.Base(ev.Path) != "last.pt" || ev.Step != nil {
		t.Errorf("event = %+v", ev)
	}
	saveAtomically(t, filepath.Join(dir, "last.pt"), "v22")
	if ev := next(t, w); filepath.Base(ev.Path) != "last.pt" || ev.Size != 3 {
		t.Errorf("event = %+v", ev)
	}
	none(t, w)
	if s := w.Stats(); s.Events != 3 || s.Errors != 0 || s.PollMode {
		t.Errorf("stats = %+v", s)
	}
}

func TestSlowWriteReportedOnlyAfterWritesStop(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	const slowDebounce = 300 * time.Millisecond
	w := start(t, Config{Dir: dir, Debounce: slowDebounce})
	waitWatching(t, w, 1)

	path := filepath.Join(dir, "model_epoch_3.pt")
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	// Writes every 20 ms for well over two debounce periods.
	deadline := time.Now().Add(4 * slowDebounce)
	n := 0
	for time.Now().Before(deadline) {
		if _, err := f.WriteString("0123456789"); err != nil {
			t.Fatal(err)
		}
		n += 10
		select {
		case ev := <-w.Events():
			t.Fatalf("reported while still being written: %+v", ev)
		case <-time.After(20 * time.Millisecond):
		}
	}
	f.Close()
	stopped := time.Now()
	ev := next(t, w)
	if ev.Size != int64(n) || ev.Step == nil || *ev.Step != 3 || ev.StepFrom != StepFromEpoch {
		t.Errorf("event = %+v, want size %d, epoch 3", ev, n)
	}
	if waited := time.Since(stopped); waited < slowDebounce {
		t.Errorf("reported %v after the last write, before the debounce %v", waited, slowDebounce)
	}
	none(t, w)
}

func TestTempAndFilteredFilesIgnored(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	w := start(t, Config{Dir: dir, Glob: "*.pt"})
	waitWatching(t, w, 1)
	for _, name := range []string{"a.pt.tmp", "b.pt.partial", ".c.pt", "notes.txt", "d.ckpt"} {
		writeFile(t, filepath.Join(dir, name), "data")
	}
	if err := os.Mkdir(filepath.Join(dir, "sub.pt"), 0o700); err != nil {
		t.Fatal(err)
	}
	writeFile(t, filepath.Join(dir, "sub.pt", "x.pt"), "nested")
	if err := os.Symlink(filepath.Join(dir, "d.ckpt"), filepath.Join(dir, "link.pt")); err != nil {
		t.Fatal(err)
	}
	writeFile(t, filepath.Join(dir, "empty.pt"))
	none(t, w)
	// The empty file is reported once written.
	writeFile(t, filepath.Join(dir, "empty.pt"), "now full")
	if ev := next(t, w); filepath.Base(ev.Path) != "empty.pt" || ev.Size != 8 {
		t.Errorf("event = %+v", ev)
	}
	none(t, w)
}

func TestInitialScanReportsExisting(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	writeFile(t, filepath.Join(dir, "iter_000500.pt"), "old")
	writeFile(t, filepath.Join(dir, "iter_001000.pt"), "older")
	writeFile(t, filepath.Join(dir, "iter_001500.pt.tmp"), "half")
	w := start(t, Config{Dir: dir})
	got := map[string]Event{}
	for range 2 {
		ev := next(t, w)
		got[filepath.Base(ev.Path)] = ev
	}
	for name, step := range map[string]int64{"iter_000500.pt": 500, "iter_001000.pt": 1000} {
		ev, ok := got[name]
		if !ok || !ev.Existing || ev.Step == nil || *ev.Step != step || ev.StepFrom != StepFromIter {
			t.Errorf("%s: event %+v", name, ev)
		}
	}
	none(t, w)
	// A new checkpoint is not Existing.
	saveAtomically(t, filepath.Join(dir, "iter_002000.pt"), "new")
	if ev := next(t, w); ev.Existing || *ev.Step != 2000 {
		t.Errorf("event = %+v", ev)
	}
}

func TestDirectoryCreatedLater(t *testing.T) {
	t.Parallel()
	dir := filepath.Join(t.TempDir(), "run1", "checkpoints")
	w := start(t, Config{Dir: dir})
	none(t, w)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	// Written before the watcher noticed the directory: found by the scan,
	// and not Existing, since the directory did not exist at start.
	writeFile(t, filepath.Join(dir, "step1.pt"), "x")
	if ev := next(t, w); ev.Existing || filepath.Base(ev.Path) != "step1.pt" {
		t.Errorf("event = %+v", ev)
	}
	waitWatching(t, w, 1)
	saveAtomically(t, filepath.Join(dir, "step2.pt"), "yy")
	if ev := next(t, w); ev.Existing || filepath.Base(ev.Path) != "step2.pt" {
		t.Errorf("event = %+v", ev)
	}
	none(t, w)
}

func TestDirectoryRemovedAndRecreated(t *testing.T) {
	t.Parallel()
	dir := filepath.Join(t.TempDir(), "ckpt")
	if err := os.Mkdir(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	w := start(t, Config{Dir: dir})
	waitWatching(t, w, 1)
	saveAtomically(t, filepath.Join(dir, "a.pt"), "1")
	next(t, w)
	if err := os.RemoveAll(dir); err != nil {
		t.Fatal(err)
	}
	time.Sleep(quietFor)
	if err := os.Mkdir(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	waitWatching(t, w, 2)
	saveAtomically(t, filepath.Join(dir, "a.pt"), "2")
	if ev := next(t, w); ev.Existing || filepath.Base(ev.Path) != "a.pt" {
		t.Errorf("event = %+v", ev)
	}
	none(t, w)
}

func TestPollModeWithoutInotify(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	w := start(t, Config{Dir: dir, DirPoll: 30 * time.Millisecond}, func(w *Watcher) {
		w.newFS = func() (*fsnotify.Watcher, error) { return nil, errors.New("too many open files") }
	})
	waitWatching(t, w, 1)
	saveAtomically(t, filepath.Join(dir, "s_10.pt"), "abc")
	if ev := next(t, w); ev.Size != 3 || *ev.Step != 10 || ev.StepFrom != StepFromNumber {
		t.Errorf("event = %+v", ev)
	}
	none(t, w)
	if s := w.Stats(); !s.PollMode || s.Errors == 0 {
		t.Errorf("stats = %+v, want poll mode and a counted error", s)
	}
}

func TestCloseAndRunLifecycle(t *testing.T) {
	t.Parallel()
	w, err := New(Config{Dir: t.TempDir(), Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	w.Close()
	w.Close()
	if _, ok := <-w.Events(); ok {
		t.Error("events open after Close without Run")
	}
	if err := w.Run(context.Background()); err != nil {
		t.Errorf("Run after Close = %v", err)
	}

	w, _ = New(Config{Dir: t.TempDir(), Logger: quiet})
	errc := make(chan error, 1)
	go func() { errc <- w.Run(context.Background()) }()
	// Close must find Run started (a loaded machine may not have begun it
	// within any fixed sleep)
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(time.Millisecond) {
		w.mu.Lock()
		started := w.started
		w.mu.Unlock()
		if started {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("Run did not start within 10 s")
		}
	}
	w.Close() // waits for Run
	// Run's last act is closing done; the goroutine's send to errc comes
	// after Run returned, so it is not part of what Close waits for.
	select {
	case <-w.done:
	default:
		t.Error("Close returned before Run")
	}
	select {
	case err := <-errc:
		if err != nil {
			t.Errorf("Run = %v", err)
		}
	case <-time.After(waitLong):
		t.Fatal("Run's result never arrived")
	}
	if _, ok := <-w.Events(); ok {
		t.Error("events open after Run returned")
	}
	if err := w.Run(context.Background()); err == nil {
		t.Error("second Run succeeded")
	}

	// Cancelling the context stops Run too.
	w, _ = New(Config{Dir: filepath.Join(t.TempDir(), "missing"), Logger: quiet})
	ctx, cancel := context.WithCancel(context.Background())
	go func() { errc <- w.Run(ctx) }()
	cancel()
	select {
	case err := <-errc:
		if err != nil {
			t.Errorf("Run = %v", err)
		}
	case <-time.After(waitLong):
		t.Fatal("Run did not return after cancel")
	}
	w.Close()
}

func TestNewErrors(t *testing.T) {
	t.Parallel()
	for _, cfg := range []Config{
		{},
		{Dir: "/x", Glob: "["},
		{Dir: "/x", Glob: "sub/*.pt"},
		{Dir: "/x", Ignore: []string{"[z"}},
	} {
		if _, err := New(cfg); err == nil {
			t.Errorf("New(%+v) succeeded", cfg)
		}
	}
	w, err := New(Config{Dir: "relative/dir"})
	if err != nil || !filepath.IsAbs(w.dir) {
		t.Errorf("New(relative) = %v, %v; want an absolute dir", w, err)
	}
}

func TestParseStep(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		step int64
		from string
	}{
		{"ckpt_step_1000.pt", 1000, StepFromStep},
		{"step1000.pt", 1000, StepFromStep},
		{"global_step1500", 1500, StepFromStep},
		{"epoch=3-step=1500.ckpt", 1500, StepFromStep}, // Lightning's default
		{"model-steps_200.safetensors", 200, StepFromStep},
		{"STEP-42.PT", 42, StepFromStep},
		{"iter_000500.pt", 500, StepFromIter},
		{"iteration-500.pth", 500, StepFromIter},
		{"model_epoch_3.pt", 3, StepFromEpoch},
		{"epoch3_loss0.25.pt", 3, StepFromEpoch},
		{"resnet50_1000.pth", 1000, StepFromNumber},
		{"model_100.h5", 100, StepFromNumber},
		{"ckpt-7.tar.gz", 7, StepFromNumber},
		{"weights.2.00-0.31", 31, StepFromNumber}, // numeric "extension" kept
		{"ckpt.pt", 0, ""},
		{"last.ckpt", 0, ""},
		{"step_99999999999999999999.pt", 0, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			step, from, ok := ParseStep(tt.name)
			if ok != (tt.from != "") || step != tt.step || from != tt.from {
				t.Errorf("ParseStep(%q) = %d, %q, %v; want %d, %q", tt.name, step, from, ok, tt.step, tt.from)
			}
		})
	}
}

// Pending counts a file waiting for its debounce period and drops to 0
// once it is reported: the wrapper waits on it before stopping the watcher.
func TestPendingUntilReported(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	w := start(t, Config{Dir: dir, Debounce: 400 * time.Millisecond})
	waitWatching(t, w, 1)
	if n := w.Pending(); n != 0 {
		t.Fatalf("pending before any file: %d", n)
	}
	saveAtomically(t, filepath.Join(dir, "s_7.pt"), "abc")
	sawPending := false
	for deadline := time.Now().Add(5 * time.Second); !sawPending && time.Now().Before(deadline); time.Sleep(5 * time.Millisecond) {
		sawPending = w.Pending() == 1
	}
	if !sawPending {
		t.Fatal("a file in its debounce period was never counted pending")
	}
	if ev := next(t, w); *ev.Step != 7 {
		t.Errorf("event = %+v", ev)
	}
	for deadline := time.Now().Add(5 * time.Second); w.Pending() != 0; time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("still %d pending after the event", w.Pending())
		}
	}
}
