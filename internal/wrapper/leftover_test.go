package wrapper

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/isched/isched/internal/auth"
	"github.com/isched/isched/internal/report"
	"github.com/isched/isched/internal/spool"
)

// countSink accepts okLeft appends (all when negative), then refuses, and
// keeps what it accepted.
type countSink struct {
	mu     sync.Mutex
	okLeft int
	got    []*report.Envelope
}

func (s *countSink) Append(_ context.Context, _ string, payload []byte, _ string, _ int64) (string, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.okLeft == 0 {
		return "", errors.New("connection refused")
	}
	s.okLeft--
	env, err := report.Decode(payload)
	if err != nil {
		return "", err
	}
	s.got = append(s.got, env)
	return "1-0", nil
}

func (s *countSink) set(okLeft int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.okLeft = okLeft
}

// ids lists what the sink accepted as "job:seq".
func (s *countSink) ids() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []string
	for _, e := range s.got {
		out = append(out, fmt.Sprintf("%02d:%02d", e.Job.JobID, e.Seq))
	}
	return out
}

// testWrapper is one wrapper's reporter in a tmp directory under base, as
// run.go sets it up.
func testWrapper(t *testing.T, base string, jobID uint64, sink *countSink) (*reporter, spool.Layout) {
	t.Helper()
	job := report.JobRef{Cluster: "lab", JobID: jobID, StepID: "batch", Lineage: fmt.Sprintf("lab-%d", jobID), User: "u"}
	tmp := filepath.Join(base, fmt.Sprintf("isched-%d-batch-r0", jobID))
	if err := os.MkdirAll(tmp, 0o700); err != nil {
		t.Fatal(err)
	}
	layout := spool.NewLayout("", tmp, base, job)
	sess, err := auth.NewSession()
	if err != nil {
		t.Fatal(err)
	}
	out := spool.NewQueue(1000, 1<<20, layout.Path, quiet)
	r := newReporter(job, sess, out, func(context.Context) (appender, error) { return sink, nil }, "isched:lab:ingest", quiet)
	return r, layout
}

func emitKind(r *reporter, k report.Kind) {
	e := report.NewEnvelope(k, time.Now())
	switch k {
	case report.KindStart:
		e.Start = &report.Start{Argv: []string{"x"}, PID: 7, GPUs: []string{}}
	case report.KindSample:
		e.Sample = &report.Sample{CPU: &report.CPUStat{RSSBytes: 1, PeakRSSBytes: 1}}
	case report.KindEnd:
		e.End = &report.End{ExitCode: 0, Reason: report.EndExited}
	}
	r.emit(e)
}

func age(t *testing.T, path string, d time.Duration) {
	t.Helper()
	old := time.Now().Add(-d)
	if err := os.Chtimes(path, old, old); err != nil {
		t.Fatal(err)
	}
}

// A job ends while Redis is down, after a partial delivery: its spool keeps
// exactly the undelivered reports. The next wrapper of the user finds the
// file, sends those reports in order after its own, removes the file and
// the emptied tmp directory, and keeps its own.
func TestLeftoverSpoolIsSentByTheNextWrapper(t *testing.T) {
	t.Parallel()
	base := t.TempDir()
	sinkA := &countSink{okLeft: 0}
	a, layoutA := testWrapper(t, base, 5, sinkA)
	emitKind(a, report.KindStart)
	for range 3 {
		emitKind(a, report.KindSample)
	}
	if err := a.flush(context.Background()); err == nil {
		t.Fatal("flush succeeded while Redis was down")
	}
	sinkA.set(2) // start and the first sample get through, then Redis goes
	if err := a.flush(context.Background()); err == nil {
		t.Fatal("flush succeeded past the sink's limit")
	}
	emitKind(a, report.KindEnd)
	if a.drain(300 * time.Millisecond) {
		t.Fatal("drained while Redis was down")
	}
	a.out.Finish()
	left := readSpool(t, layoutA.Path)
	var got []uint64
	for _, r := range left {
		got = append(got, r.Seq)
	}
	if !slices.Equal(got, []uint64{3, 4, 5}) {
		t.Fatalf("spool at exit holds %v, want the undelivered 3, 4, 5", got)
	}
	if got := sinkA.ids(); !slices.Equal(got, []string{"05:01", "05:02"}) {
		t.Fatalf("delivered before the outage %v", got)
	}

	// too young: its wrapper may be between creating and locking it
	if got := spool.FindLeftovers([]string{filepath.Join(base, "isched-*", "reports.spool*")}, "", os.Getuid(), time.Now(), spool.LeftoverMinAge); len(got) != 0 {
		t.Fatalf("a fresh spool listed as leftover: %v", got)
	}
	age(t, layoutA.Path, time.Minute)

	sinkB := &countSink{okLeft: -1}
	b, layoutB := testWrapper(t, base, 6, sinkB)
	b.leftovers = spool.FindLeftovers(layoutB.Patterns, layoutB.Path, os.Getuid(), time.Now(), spool.LeftoverMinAge)
	if !slices.Equal(b.leftovers, []string{layoutA.Path}) {
		t.Fatalf("leftovers %v, want [%s]", b.leftovers, layoutA.Path)
	}
	emitKind(b, report.KindStart)
	if err := b.flush(context.Background()); err != nil {
		t.Fatal(err)
	}
	if err := b.replayLeftovers(context.Background()); err != nil {
		t.Fatal(err)
	}
	if got := sinkB.ids(); !slices.Equal(got, []string{"06:01", "05:03", "05:04", "05:05"}) {
		t.Fatalf("delivered %v, want its own start then job 5's 3, 4, 5", got)
	}
	if b.hasLeftovers() {
		t.Fatalf("still pending: %v", b.leftovers)
	}
	if _, err := os.Stat(filepath.Dir(layoutA.Path)); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the leftover's emptied tmp directory stays: %v", err)
	}
	if _, err := os.Stat(filepath.Dir(layoutB.Path)); err != nil {
		t.Errorf("the replaying wrapper's own tmp directory: %v", err)
	}
}

// A spool a live wrapper holds is not taken; a send that fails halfway
// keeps the unsent part of the file for the next try (from the record that
// failed: Redis may have taken it with its reply lost, a copy the
// coordinator drops), never the reports Redis confirmed; a file that is not a spool's is
// skipped line by line, and symlinks, other names and the wrapper's own
// file are never listed.
func TestLeftoverLockedPartialAndHostile(t *testing.T) {
	t.Parallel()
	base := t.TempDir()
	sinkA := &countSink{okLeft: 0}
	a, layoutA := testWrapper(t, base, 7, sinkA)
	for _, k := range []report.Kind{report.KindStart, report.KindSample, report.KindSample, report.KindEnd} {
		emitKind(a, k)
	}
	if err := a.flush(context.Background()); err == nil {
		t.Fatal("flush succeeded while Redis was down")
	}
	// a still alive: its spool is locked
	sinkB := &countSink{okLeft: -1}
	b, layoutB := testWrapper(t, base, 8, sinkB)
	b.leftovers = spool.FindLeftovers(layoutB.Patterns, layoutB.Path, os.Getuid(), time.Now(), 0)
	if !slices.Equal(b.leftovers, []string{layoutA.Path}) {
		t.Fatalf("leftovers %v", b.leftovers)
	}
	if _, _, err := b.replayLeftover(context.Background(), layoutA.Path, os.Getuid()); !errors.Is(err, spool.ErrBusy) {
		t.Fatalf("replaying a live wrapper's spool: %v, want spool.ErrBusy", err)
	}
	if len(sinkB.got) != 0 {
		t.Fatalf("sent from a live wrapper's spool: %v", sinkB.ids())
	}
	a.out.Finish() // a exits
	// junk among the records
	f, err := os.OpenFile(layoutA.Path, os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteString("not json\n{\"seq\":9}\n"); err != nil {
		t.Fatal(err)
	}
	f.Close()

	sinkB.set(2)
	sent, _, err := b.replayLeftover(context.Background(), layoutA.Path, os.Getuid())
	if !errors.Is(err, spool.ErrSend) || sent != 2 {
		t.Fatalf("half-sent leftover: sent %d, err %v, want 2 and spool.ErrSend", sent, err)
	}
	// the file keeps what was not sent, from the record that failed on
	raw, err := os.ReadFile(layoutA.Path)
	if err != nil {
		t.Fatalf("a half-sent leftover: %v", err)
	}
	lines := strings.Split(strings.TrimSuffix(string(raw), "\n"), "\n")
	var seqs []uint64
	for _, l := range lines[:min(2, len(lines))] {
		var r spool.Record
		if err := json.Unmarshal([]byte(l), &r); err != nil {
			t.Fatalf("half-sent leftover line %q: %v", l, err)
		}
		seqs = append(seqs, r.Seq)
	}
	if len(lines) != 4 || !slices.Equal(seqs, []uint64{3, 4}) || lines[2] != "not json" {
		t.Fatalf("half-sent leftover holds %q, want records 3 and 4 and the two junk lines (the unsent part)", lines)
	}
	if _, err := os.Stat(layoutA.Path + ".tmp"); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("rewrite left its tmp file: %v", err)
	}
	sinkB.set(-1)
	sent, bad, err := b.replayLeftover(context.Background(), layoutA.Path, os.Getuid())
	if err != nil || sent != 2 || bad != 2 {
		t.Fatalf("second try: sent %d, unreadable %d, err %v; want 2, 2, nil", sent, bad, err)
	}
	if got := sinkB.ids(); !slices.Equal(got, []string{"07:01", "07:02", "07:03", "07:04"}) {
		t.Fatalf("delivered %v, want each report once", got)
	}

	// another cluster's spool is left for a wrapper of that cluster
	sinkC := &countSink{okLeft: -1}
	c, _ := testWrapper(t, base, 10, sinkC)
	c.job.Cluster = "other"
	emitKind(c, report.KindStart)
	c.out.Finish()
	if _, _, err := b.replayLeftover(context.Background(), c.out.Path(), os.Getuid()); !errors.Is(err, spool.ErrForeign) {
		t.Fatalf("another cluster's spool: %v, want spool.ErrForeign", err)
	}
	if _, err := os.Stat(c.out.Path()); err != nil || len(sinkB.ids()) != 4 {
		t.Fatalf("another cluster's spool was sent or removed: %v, %v", err, sinkB.ids())
	}
	if err := os.Remove(c.out.Path()); err != nil {
		t.Fatal(err)
	}

	// only regular files of this uid, not the own one, not *.tmp, not symlinks
	dir := filepath.Join(base, "isched-9-batch-r0")
	if err := os.MkdirAll(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	target := filepath.Join(base, "elsewhere")
	if err := os.WriteFile(target, []byte("x\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(target, filepath.Join(dir, "reports.spool")); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "reports.spool.tmp"), []byte("x\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(layoutB.Path, []byte("x\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if got := spool.FindLeftovers(layoutB.Patterns, layoutB.Path, os.Getuid(), time.Now(), 0); len(got) != 0 {
		t.Fatalf("listed %v: want no leftovers", got)
	}
	if got := spool.FindLeftovers(layoutB.Patterns, "", os.Getuid()+1, time.Now(), 0); len(got) != 0 {
		t.Fatalf("listed another uid's files %v", got)
	}
}

// readSpool reads the records of a spool file (JSON lines).
func readSpool(t *testing.T, path string) []spool.Record {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var out []spool.Record
	for _, line := range bytes.Split(bytes.TrimSpace(b), []byte("\n")) {
		var r spool.Record
		if err := json.Unmarshal(line, &r); err != nil {
			t.Fatalf("spool %s: %v", path, err)
		}
		out = append(out, r)
	}
	return out
}
