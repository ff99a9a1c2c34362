package wrapper

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/isched/isched/internal/report"
)

// leaveSpool makes job jobID's wrapper under base end with Redis down: its
// start and two samples stay in its spool file, which it returns.
func leaveSpool(t *testing.T, base string, jobID uint64) string {
	t.Helper()
	w, layout := testWrapper(t, base, jobID, &countSink{okLeft: 0})
	emitKind(w, report.KindStart)
	emitKind(w, report.KindSample)
	emitKind(w, report.KindEnd)
	if w.drain(100 * time.Millisecond) {
		t.Fatal("drained while Redis was down")
	}
	w.out.Finish()
	return layout.Path
}

// `isched-wrapper --send-spools` sends every leftover of the user in order
// and removes it, waiting for a file younger than its minimum age (a
// wrapper between creating and locking it, or a TaskEpilog right after
// its task) to be that old; a file a live wrapper holds stays; with Redis
// down it exits 1 and keeps the files; with nothing to send it exits 0.
func TestSendSpools(t *testing.T) {
	t.Parallel()
	base := t.TempDir()
	old1, old2, held := leaveSpool(t, base, 11), leaveSpool(t, base, 12), leaveSpool(t, base, 13)
	age(t, old1, time.Minute)
	age(t, old2, 5*time.Second)
	age(t, held, time.Minute)
	// job 13's wrapper is alive: it holds its file
	hf, err := os.Open(held)
	if err != nil {
		t.Fatal(err)
	}
	if err := syscall.Flock(int(hf.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		t.Fatal(err)
	}

	var logs bytes.Buffer
	sink := &countSink{okLeft: 0}
	var cluster string
	d := Deps{
		Getenv: func(k string) string {
			return map[string]string{"TMPDIR": base, "ISCHED_CLUSTER": "lab"}[k]
		},
		Stderr: &logs,
		Logger: slog.New(slog.NewTextHandler(&logs, nil)),
		Connect: func(_ context.Context, c string) (appender, error) {
			cluster = c
			return sink, nil
		},
	}
	if got := SendSpools(context.Background(), Options{SendSpools: true}, d); got != 1 {
		t.Fatalf("Redis down: exit %d, want 1\n%s", got, logs.String())
	}
	for _, p := range []string{old1, old2, held} {
		if _, err := os.Stat(p); err != nil {
			t.Fatalf("Redis down: %s: %v", p, err)
		}
	}
	if !strings.Contains(logs.String(), "files stay for the next try") {
		t.Errorf("the failure is not said:\n%s", logs.String())
	}

	// a task ended a moment ago (a TaskEpilog runs now): its file is sent
	// too, once it is sendSpoolsMinAge old
	fresh := leaveSpool(t, base, 14)
	st, err := os.Stat(fresh)
	if err != nil {
		t.Fatal(err)
	}
	sink.set(-1)
	if got := SendSpools(context.Background(), Options{SendSpools: true}, d); got != 0 {
		t.Fatalf("exit %d, want 0\n%s", got, logs.String())
	}
	if age := time.Since(st.ModTime()); age < sendSpoolsMinAge {
		t.Errorf("a file %s old was sent: younger than the minimum age %s", age, sendSpoolsMinAge)
	}
	if cluster != "lab" {
		t.Errorf("connected for cluster %q, want ISCHED_CLUSTER's lab", cluster)
	}
	got := sink.ids()
	want := []string{"11:01", "11:02", "11:03", "12:01", "12:02", "12:03", "14:01", "14:02", "14:03"}
	if !slices.Equal(got, want) {
		t.Fatalf("sent %v, want %v (each file whole, in order; not the live wrapper's)", got, want)
	}
	for _, p := range []string{old1, old2, fresh} {
		if _, err := os.Stat(p); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("%s stays after it was sent: %v", p, err)
		}
	}
	if _, err := os.Stat(held); err != nil {
		t.Errorf("a live wrapper's spool was taken: %v", err)
	}

	hf.Close() // job 13's wrapper ends without sending
	waitUnlocked(t, held)
	if got := SendSpools(context.Background(), Options{SendSpools: true}, d); got != 0 {
		t.Fatalf("exit %d, want 0", got)
	}
	if got := SendSpools(context.Background(), Options{SendSpools: true}, d); got != 0 || !strings.Contains(logs.String(), "no undelivered reports") {
		t.Fatalf("nothing left: exit %d, want 0 and said\n%s", got, logs.String())
	}
	if n := len(sink.ids()); n != 12 {
		t.Errorf("%d reports sent in all, want 12 (each once)", n)
	}
}

// waitUnlocked waits until no one holds path's flock. A process another
// test forks while this one holds the lock shares the descriptor until
// its exec closes it (close-on-exec), so the lock can outlive Close for a
// moment on a busy machine.
func waitUnlocked(t *testing.T, path string) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		f, err := os.Open(path)
		if err != nil {
			t.Fatal(err)
		}
		err = syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB)
		f.Close() // releases it again
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s still locked 30 s after its holder closed it: %v", path, err)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// --send-spools looks in --spool-dir when given (and only there).
func TestSendSpoolsFromSpoolDir(t *testing.T) {
	t.Parallel()
	dir, tmpBase := t.TempDir(), t.TempDir()
	inTmp := leaveSpool(t, tmpBase, 21)
	age(t, inTmp, time.Minute)
	p := filepath.Join(dir, "isched-lab-22-batch-r0.spool")
	if err := os.Rename(leaveSpool(t, t.TempDir(), 22), p); err != nil {
		t.Fatal(err)
	}
	age(t, p, time.Minute)
	sink := &countSink{okLeft: -1}
	d := Deps{
		Getenv:  func(k string) string { return map[string]string{"TMPDIR": tmpBase, "SLURM_CLUSTER_NAME": "lab"}[k] },
		Stderr:  os.Stderr,
		Logger:  quiet,
		Connect: func(context.Context, string) (appender, error) { return sink, nil },
	}
	if got := SendSpools(context.Background(), Options{SendSpools: true, SpoolDir: dir}, d); got != 0 {
		t.Fatalf("exit %d", got)
	}
	if got := sink.ids(); !slices.Equal(got, []string{"22:01", "22:02", "22:03"}) {
		t.Fatalf("sent %v, want job 22's (the spool directory's) only", got)
	}
	if _, err := os.Stat(inTmp); err != nil {
		t.Errorf("a spool outside --spool-dir was touched: %v", err)
	}
}

func TestParseSendSpools(t *testing.T) {
	t.Parallel()
	env := func(string) string { return "" }
	o, err := ParseArgs([]string{"--send-spools", "--spool-dir", "/var/spool/isched"}, env, &bytes.Buffer{})
	if err != nil || !o.SendSpools || o.SpoolDir != "/var/spool/isched" {
		t.Fatalf("got %+v, %v", o, err)
	}
	if _, err := ParseArgs([]string{"--send-spools", "--", "python", "train.py"}, env, &bytes.Buffer{}); !errors.Is(err, ErrUsage) {
		t.Fatalf("a command with --send-spools: %v, want a usage error", err)
	}
}
