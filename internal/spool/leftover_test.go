package spool

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/isched/isched/internal/report"
)

// recSink accepts okLeft appends (all when negative), then refuses, and
// keeps the payloads it accepted.
type recSink struct {
	mu     sync.Mutex
	okLeft int
	got    []string
}

func (s *recSink) Append(_ context.Context, payload []byte, _ string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.okLeft == 0 {
		return errors.New("connection refused")
	}
	s.okLeft--
	s.got = append(s.got, string(payload))
	return nil
}

func (s *recSink) sent() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.got)
}

// leave ends a wrapper of cluster lab with Redis down: its spool file at
// path keeps its n records, unlocked.
func leave(t *testing.T, path string, n int) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		t.Fatal(err)
	}
	q := NewQueue(1000, 1<<20, path, quiet)
	for i := range n {
		q.Push(Record{Seq: uint64(i + 1), Kind: report.KindSample, MAC: "m",
			Payload: fmt.Appendf(nil, `{"job":{"cluster":"lab"},"seq":%d}`, i+1)})
	}
	q.StartSpooling() // a send failed
	q.Finish()        // the wrapper exits
}

func replayer(sink Sink) Replayer {
	return Replayer{UID: os.Getuid(), Cluster: "lab", Log: quiet,
		Connect: func(context.Context) (Sink, error) { return sink, nil }}
}

// A sender that opened a leftover just before another sender sent it (and
// removed it) or cut it to its unsent part (renamed a new file over it)
// does not send the file it holds: it would repeat what Redis took.
func TestLeftoverTakenBetweenOpenAndLock(t *testing.T) {
	path := filepath.Join(t.TempDir(), "isched-7-batch-r0", "reports.spool")
	leave(t, path, 3)
	sink := &recSink{okLeft: -1}
	for _, tc := range []struct {
		name  string
		other func(path string)
	}{
		{"cut to its unsent part", func(path string) {
			if err := rewriteSpool(path, func(w *bufio.Writer) error { _, err := w.WriteString("{}\n"); return err }); err != nil {
				t.Fatal(err)
			}
		}},
		{"sent and removed", func(path string) {
			if err := os.Remove(path); err != nil {
				t.Fatal(err)
			}
		}},
	} {
		raw, err := os.ReadFile(path)
		if err != nil || len(raw) == 0 {
			t.Fatalf("%s: no spool to start from: %v", tc.name, err)
		}
		testHookOpened = tc.other
		_, _, err = replayer(sink).Replay(context.Background(), path)
		testHookOpened = func(string) {}
		if !errors.Is(err, ErrBusy) || len(sink.sent()) != 0 {
			t.Fatalf("%s meanwhile: err %v, sent %v; want ErrBusy and nothing sent", tc.name, err, sink.sent())
		}
		if err := os.WriteFile(path, raw, 0o600); err != nil { // as before, for the next case
			t.Fatal(err)
		}
	}
	// undisturbed, the same file is sent
	if _, _, err := replayer(sink).Replay(context.Background(), path); err != nil || len(sink.sent()) != 3 {
		t.Fatalf("undisturbed: err %v, sent %v", err, sink.sent())
	}
}

// A requeued attempt on the same node finds its previous attempt's spool
// at its own path: it is moved aside (spooling would truncate it) and is
// the first leftover.
func TestAdoptOwnSpool(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	layout := NewLayout(dir, "", "", report.JobRef{Cluster: "lab", JobID: 12, StepID: "0/1", Rank: 3})
	if want := filepath.Join(dir, "isched-lab-12-0_1-r3.spool"); layout.Path != want {
		t.Fatalf("spool path %s, want %s", layout.Path, want)
	}
	if prev, err := AdoptOwn(layout.Path, time.Now()); err != nil || prev != "" {
		t.Fatalf("nothing to adopt: %q %v", prev, err)
	}
	if err := os.WriteFile(layout.Path, []byte("{}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	prev, err := AdoptOwn(layout.Path, time.Unix(0, 42))
	if err != nil || prev != layout.Path+".prev-42" {
		t.Fatalf("adopt: %q %v", prev, err)
	}
	if _, err := os.Stat(layout.Path); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("own path still taken: %v", err)
	}
	if got := FindLeftovers(layout.Patterns, layout.Path, os.Getuid(), time.Now(), 0); !slices.Equal(got, []string{prev}) {
		t.Fatalf("leftovers %v, want [%s]", got, prev)
	}
}

// The race --send-spools' short minimum age opens: a sender takes a
// wrapper's fresh spool file for a leftover, locks and removes it. The
// wrapper's spool must then be a new file at its path, never the unlinked
// one (whose records nobody would ever send).
func TestOpenLockedSpoolRetakesATakenFile(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "reports.spool")
	if err := os.WriteFile(path, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	sender, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := lockFile(sender); err != nil {
		t.Fatal(err)
	}
	sent := make(chan struct{})
	go func() {
		defer close(sent)
		time.Sleep(20 * time.Millisecond)
		_ = os.Remove(path) // what a sender does once it has sent the file
		_ = sender.Close()
	}()
	f, err := openLockedSpool(path, createSpool, quiet)
	if err != nil {
		t.Fatal(err)
	}
	<-sent
	checkHeldSpool(t, f, path)

	// the sender takes the file between the wrapper's create and lock
	path = filepath.Join(t.TempDir(), "reports.spool")
	creates := 0
	f, err = openLockedSpool(path, func(p string) (*os.File, error) {
		creates++
		f, err := createSpool(p)
		if err == nil && creates == 1 {
			_ = os.Remove(p) // locked, sent and removed by the sender
		}
		return f, err
	}, quiet)
	if err != nil {
		t.Fatal(err)
	}
	checkHeldSpool(t, f, path)
	if creates != 2 {
		t.Errorf("%d creates, want 2 (the taken file, then a new one)", creates)
	}
}

// checkHeldSpool: f is the file at path, and it holds its lock.
func checkHeldSpool(t *testing.T, f *os.File, path string) {
	t.Helper()
	t.Cleanup(func() { f.Close() })
	held, _ := f.Stat()
	named, err := os.Lstat(path)
	if err != nil || !os.SameFile(held, named) {
		t.Fatalf("the spool held is not the file at %s (%v)", path, err)
	}
	other, _ := os.Open(path)
	defer other.Close()
	if err := lockFile(other); !errors.Is(err, syscall.EWOULDBLOCK) {
		t.Fatalf("the spool at its path is not locked by the wrapper: %v", err)
	}
}
