package progress

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// fakeClock hands out a ticker the test drives by hand.
type fakeClock struct {
	mu    sync.Mutex
	now   time.Time
	ticks chan time.Time
}

func newFakeClock() *fakeClock {
	return &fakeClock{now: time.Unix(1_700_000_000, 0), ticks: make(chan time.Time)}
}

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *fakeClock) Advance(d time.Duration) time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
	return c.now
}

func (c *fakeClock) NewTicker(time.Duration) Ticker { return fakeTicker{c.ticks} }

type fakeTicker struct{ c chan time.Time }

func (f fakeTicker) Chan() <-chan time.Time { return f.c }
func (f fakeTicker) Stop()                  {}

var quiet = slog.New(slog.NewTextHandler(io.Discard, nil))

// tailHarness polls a Tail by hand, without Run's goroutine.
type tailHarness struct {
	t     *testing.T
	tail  *Tail
	clock *fakeClock
	path  string
}

func newTailHarness(t *testing.T, cfg TailConfig) *tailHarness {
	t.Helper()
	if cfg.Path == "" {
		cfg.Path = filepath.Join(t.TempDir(), "progress")
	}
	clock := newFakeClock()
	cfg.Clock, cfg.Logger = clock, quiet
	tl, err := NewTail(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(tl.closeFile)
	return &tailHarness{t: t, tail: tl, clock: clock, path: cfg.Path}
}

// poll runs one poll and returns the steps it emitted.
func (h *tailHarness) poll() []int64 {
	h.t.Helper()
	var steps []int64
	err := h.tail.poll(func(evs []Event) {
		for _, ev := range evs {
			if !ev.At.Equal(h.clock.Now()) || ev.Source != SourceFile {
				h.t.Errorf("event At=%v Source=%q, want %v %q", ev.At, ev.Source, h.clock.Now(), SourceFile)
			}
			steps = append(steps, ev.Step)
		}
	}, false)
	if err != nil {
		h.t.Fatalf("poll: %v", err)
	}
	return steps
}

func (h *tailHarness) write(s string) {
	h.t.Helper()
	f, err := os.OpenFile(h.path, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o600)
	if err != nil {
		h.t.Fatal(err)
	}
	defer f.Close()
	if _, err := f.WriteString(s); err != nil {
		h.t.Fatal(err)
	}
}

func equalSteps(a, b []int64) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

func (h *tailHarness) expect(want ...int64) {
	h.t.Helper()
	if got := h.poll(); !equalSteps(got, want) {
		h.t.Errorf("poll emitted steps %v, want %v", got, want)
	}
}

func TestTailFollowsGrowingFile(t *testing.T) {
	t.Parallel()
	h := newTailHarness(t, TailConfig{})
	h.expect() // not there yet
	h.write("isched1 step=1\nisched1 step=2\n")
	h.clock.Advance(time.Second)
	h.expect(1, 2)
	h.expect()
	h.write("isched1 step=3\nisched1 st")
	h.expect(3)
	h.write("ep=4 loss=0.5\n")
	h.expect(4)
	h.write("\n  \nisched1 step=5\r\n")
	h.expect(5)
	if s := h.tail.Stats(); s.Events != 5 || s.Rejected != 0 {
		t.Errorf("stats = %+v", s)
	}
}

func TestTailRejectsBadLinesAndSkipsLongOnes(t *testing.T) {
	t.Parallel()
	h := newTailHarness(t, TailConfig{})
	h.write("isched1 step=1 lss=2\nhello\nisched1 step=2\n")
	h.expect(2)
	h.write("isched1 step=3 " + strings.Repeat("x", MaxLineLen))
	h.expect()
	h.write(strings.Repeat("y", 10000) + "\nisched1 step=4\n")
	h.expect(4)
	h.write("isched1 ckpt path=/x " + strings.Repeat("z", MaxLineLen) + "\nisched1 step=5\n")
	h.expect(5)
	s := h.tail.Stats()
	if s.Rejected != 2 || s.TooLong != 2 || !strings.Contains(s.LastErr, "hello") && !strings.Contains(s.LastErr, "version") {
		t.Errorf("stats = %+v, want 2 rejected, 2 too long", s)
	}
	if len(h.tail.partial) != 0 || cap(h.tail.partial) > 2*MaxLineLen {
		t.Errorf("partial buffer holds %d bytes (cap %d)", len(h.tail.partial), cap(h.tail.partial))
	}
}

func TestTailTruncation(t *testing.T) {
	t.Parallel()
	h := newTailHarness(t, TailConfig{})
	h.write("isched1 step=1\nisched1 step=2\nisched1 step=3\nisched1 st")
	h.expect(1, 2, 3)
	if err := os.Truncate(h.path, 0); err != nil {
		t.Fatal(err)
	}
	h.expect()
	h.write("isched1 step=10\n")
	h.expect(10)
	if s := h.tail.Stats(); s.Truncated != 1 {
		t.Errorf("Truncated = %d, want 1", s.Truncated)
	}
}

func TestTailRecreatedFile(t *testing.T) {
	t.Parallel()
	h := newTailHarness(t, TailConfig{})
	h.write("isched1 step=1\n")
	h.expect(1)
	// The old file gets one more line, then a new file is renamed over it:
	// both are read, old first.
	h.write("isched1 step=2\nisched1 partial")
	tmp := h.path + ".new"
	if err := os.WriteFile(tmp, []byte("isched1 step=0\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, h.path); err != nil {
		t.Fatal(err)
	}
	h.expect(2, 0)
	// Removed, then created again.
	if err := os.Remove(h.path); err != nil {
		t.Fatal(err)
	}
	h.expect()
	h.write("isched1 step=7\n")
	h.expect(7)
	if s := h.tail.Stats(); s.Reopened != 1 {
		t.Errorf("Reopened = %d, want 1", s.Reopened)
	}
}

func TestTailSkipExisting(t *testing.T) {
	t.Parallel()
	h := newTailHarness(t, TailConfig{SkipExisting: true})
	h.write("isched1 step=1\n")
	var got []int64
	if err := h.tail.poll(func(evs []Event) {
		for _, ev := range evs {
			got = append(got, ev.Step)
		}
	}, true); err != nil || len(got) != 0 {
		t.Fatalf("first poll = %v, %v; want nothing", got, err)
	}
	h.write("isched1 step=2\n")
	h.expect(2)
}

func TestTailRefusesUnsafeFiles(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	regular := filepath.Join(dir, "regular")
	if err := os.WriteFile(regular, []byte("isched1 step=1\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	fifo := filepath.Join(dir, "fifo")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	link := filepath.Join(dir, "link")
	if err := os.Symlink(regular, link); err != nil {
		t.Fatal(err)
	}
	dangling := filepath.Join(dir, "dangling")
	if err := os.Symlink(filepath.Join(dir, "nowhere"), dangling); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name, path, want string
	}{
		{"fifo", fifo, "a FIFO"},
		{"symlink", link, "a symlink"},
		{"dangling symlink", dangling, "a symlink"},
		{"directory", dir, "a directory"},
		{"device", "/dev/null", "a device"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			tl, err := NewTail(TailConfig{Path: tt.path, Clock: newFakeClock(), Logger: quiet})
			if err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			err = tl.Run(ctx, func([]Event) { t.Error("emitted an event") })
			if !errors.Is(err, ErrUnsafeFile) || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("Run = %v, want ErrUnsafeFile (%s)", err, tt.want)
			}
		})
	}
}

func TestTailRefusesFileBecomingSymlink(t *testing.T) {
	t.Parallel()
	h := newTailHarness(t, TailConfig{})
	h.write("isched1 step=1\n")
	h.expect(1)
	other := filepath.Join(t.TempDir(), "other")
	if err := os.WriteFile(other, []byte("isched1 step=99\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(h.path); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(other, h.path); err != nil {
		t.Fatal(err)
	}
	err := h.tail.poll(func(evs []Event) { t.Errorf("emitted %+v", evs) }, false)
	if !errors.Is(err, ErrUnsafeFile) {
		t.Errorf("poll = %v, want ErrUnsafeFile", err)
	}
}

func TestTailRefusesOtherOwner(t *testing.T) {
	t.Parallel()
	if os.Geteuid() != 0 {
		t.Skip("needs root to chown a file to another user")
	}
	h := newTailHarness(t, TailConfig{})
	h.write("isched1 step=1\n")
	if err := os.Chown(h.path, 65534, 65534); err != nil {
		t.Fatal(err)
	}
	err := h.tail.poll(func([]Event) { t.Error("emitted an event") }, false)
	if !errors.Is(err, ErrUnsafeFile) || !strings.Contains(err.Error(), "owned by uid 65534") {
		t.Errorf("poll = %v, want ErrUnsafeFile (owner)", err)
	}
	h2 := newTailHarness(t, TailConfig{Path: h.path, AnyOwner: true})
	h2.expect(1)
}

func TestTailRun(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "progress")
	clock := newFakeClock()
	tl, err := NewTail(TailConfig{Path: path, Clock: clock, Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	batches := make(chan []Event, 10)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- tl.Run(ctx, func(evs []Event) { batches <- evs }) }()

	if err := os.WriteFile(path, []byte("isched1 step=1\nisched1 step=2\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	at := clock.Advance(200 * time.Millisecond)
	clock.ticks <- at
	select {
	case evs := <-batches:
		if len(evs) != 2 || evs[0].Step != 1 || evs[1].Step != 2 || !evs[0].At.Equal(at) || !evs[1].At.Equal(at) {
			t.Errorf("batch = %+v, want steps 1, 2 at %v", evs, at)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("no batch after a tick")
	}

	// Written just before the child exits, read by the final poll.
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND, 0)
	if err != nil {
		t.Fatal(err)
	}
	f.WriteString("isched1 step=3\n")
	f.Close()
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("Run = %v, want nil", err)
	}
	select {
	case evs := <-batches:
		if len(evs) != 1 || evs[0].Step != 3 {
			t.Errorf("final batch = %+v, want step 3", evs)
		}
	default:
		t.Error("no final drain after cancel")
	}
}

func TestNewTailNeedsPath(t *testing.T) {
	t.Parallel()
	if _, err := NewTail(TailConfig{}); err == nil {
		t.Error("NewTail with empty path succeeded")
	}
}
