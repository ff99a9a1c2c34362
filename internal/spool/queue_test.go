package spool

import (
	"bytes"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/isched/isched/internal/report"
)

var quiet = slog.New(slog.NewTextHandler(io.Discard, nil))

func rec(seq uint64, kind report.Kind) Record {
	return Record{Seq: seq, Kind: kind, Payload: []byte(`{"x":1}`), MAC: "m"}
}

// A dropped sample that itself reported earlier drops passes its count on:
// the count reaches the coordinator with whichever sample is delivered.
func TestQueueDropCountSurvivesDroppedCarrier(t *testing.T) {
	t.Parallel()
	o := NewQueue(2, 1<<20, "", quiet)
	o.Push(rec(1, report.KindSample))
	o.Push(rec(2, report.KindSample))
	o.Push(rec(3, report.KindSample)) // drops 1
	carrier := rec(4, report.KindSample)
	carrier.Carried = o.TakeDropped() // sample 4 reports 1 drop...
	if carrier.Carried != 1 {
		t.Fatalf("carried %d, want 1", carrier.Carried)
	}
	o.Push(carrier)                   // ...and drops 2
	o.Push(rec(5, report.KindSample)) // drops 3
	o.Push(rec(6, report.KindSample)) // drops 4, the carrier
	// 1, 2, 3 and 4 are gone: 4 carried the count of 1, so 4 in all
	if d := o.TakeDropped(); d != 4 {
		t.Errorf("next sample reports %d drops, want 4 (samples 1-4)", d)
	}
}

// Samples being sent are never dropped: they may already be in Redis, and
// counting them as dropped would report a loss that did not happen.
func TestQueueNeverDropsInFlight(t *testing.T) {
	t.Parallel()
	o := NewQueue(2, 1<<20, "", quiet)
	o.Push(rec(1, report.KindSample))
	o.Push(rec(2, report.KindSample))
	batch := o.Head(64)
	o.Push(rec(3, report.KindSample)) // full: 1 and 2 are in flight, 3 goes
	o.Push(rec(4, report.KindSample)) // and 4
	if q := seqsOf(o.Head(64)); len(q) != 2 || q[0] != 1 || q[1] != 2 {
		t.Errorf("queue %v while 1 and 2 were being sent, want [1 2]", q)
	}
	if d := o.TakeDropped(); d != 2 {
		t.Errorf("dropped %d, want 2 (3 and 4)", d)
	}
	o.Pop(batch) // delivered
	o.Push(rec(5, report.KindSample))
	o.Push(rec(6, report.KindSample))
	o.Push(rec(7, report.KindSample)) // nothing in flight: the oldest, 5, goes
	if q := seqsOf(o.Head(64)); len(q) != 2 || q[0] != 6 || q[1] != 7 {
		t.Errorf("queue %v, want [6 7]", q)
	}
}

func seqsOf(rs []Record) []uint64 {
	var out []uint64
	for _, r := range rs {
		out = append(out, r.Seq)
	}
	return out
}

func TestQueueDropsOldestSamplesKeepsEvents(t *testing.T) {
	t.Parallel()
	o := NewQueue(4, 1<<20, "", quiet)
	o.Push(rec(1, report.KindStart))
	for i := uint64(2); i <= 6; i++ {
		o.Push(rec(i, report.KindSample))
	}
	o.Push(rec(7, report.KindCheckpoint))
	o.Push(rec(8, report.KindEnd))
	got := o.Head(100)
	o.Pop(nil) // as after a failed send: nothing delivered, nothing in flight
	var seqs []uint64
	for _, r := range got {
		seqs = append(seqs, r.Seq)
	}
	// bound 4: samples 2..6 go oldest first; start, checkpoint and end stay
	want := []uint64{1, 6, 7, 8}
	if len(seqs) != len(want) {
		t.Fatalf("queue %v, want %v", seqs, want)
	}
	for i := range want {
		if seqs[i] != want[i] {
			t.Fatalf("queue %v, want %v", seqs, want)
		}
	}
	if d := o.TakeDropped(); d != 4 {
		t.Errorf("dropped %d samples, want 4", d)
	}
	// events beyond the bound are kept even with no sample left to drop
	for i := uint64(9); i < 20; i++ {
		o.Push(rec(i, report.KindCheckpoint))
	}
	// 11 more events: the one sample left (6) goes, every event stays
	if n := o.Len(); n != 14 {
		t.Errorf("%d queued, want the 14 events", n)
	}
}

func TestQueueSpoolsWhileUndeliveredAndSurvivesDiskErrors(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	path := filepath.Join(dir, "reports.spool")
	o := NewQueue(100, 1<<20, path, quiet)
	o.Push(rec(1, report.KindStart))
	o.StartSpooling() // a send failed
	o.Push(rec(2, report.KindSample))
	got, err := readSpool(path)
	if err != nil || len(got) != 2 || got[1].Seq != 2 {
		t.Fatalf("spool %+v %v", got, err)
	}
	o.Pop(o.Head(2))
	if _, err := os.Stat(path); !os.IsNotExist(err) {
		t.Errorf("spool kept after everything was delivered: %v", err)
	}

	// a spool that cannot be written (disk full, read-only) is reported once
	// and the queue goes on in memory
	bad := NewQueue(100, 1<<20, filepath.Join(dir, "missing", "dir", "spool"), quiet)
	bad.Push(rec(1, report.KindStart))
	bad.StartSpooling()
	bad.Push(rec(2, report.KindEnd))
	if !bad.spoolErr || bad.Len() != 2 {
		t.Errorf("spool error %v, queued %d", bad.spoolErr, bad.Len())
	}
	if full, err := os.OpenFile("/dev/full", os.O_WRONLY, 0); err == nil {
		full.Close()
		f := NewQueue(100, 1<<20, "/dev/full", quiet)
		f.Push(rec(1, report.KindStart))
		f.StartSpooling()
		f.Push(rec(2, report.KindSample))
		if !f.spoolErr || f.Len() != 2 {
			t.Errorf("/dev/full: spool error %v, queued %d", f.spoolErr, f.Len())
		}
	}
}

// TestSpoolFullDiskKeepsMemory: a spool whose writes fail (the disk is
// full: /dev/full answers every write with ENOSPC) is given up at the
// first failed write while the queue is mirrored to it; the records stay
// in memory and later pushes do not touch the closed spool. Before the
// fix the mirror loop wrote the second record through the closed spool's
// nil buffer and panicked, and the wrapper's panic killed the training
// (TestSpoolDiskFull on CI).
func TestSpoolFullDiskKeepsMemory(t *testing.T) {
	f, err := os.OpenFile("/dev/full", os.O_WRONLY, 0)
	if err != nil {
		t.Fatalf("/dev/full: %v", err)
	}
	var logs strings.Builder
	q := NewQueue(100, 1<<20, filepath.Join(t.TempDir(), "never.spool"), slog.New(slog.NewTextHandler(&logs, nil)))
	for i := range 3 {
		q.Push(Record{Seq: uint64(i + 1), Kind: report.KindSample, Payload: bytes.Repeat([]byte("x"), 3000)})
	}
	q.mirror(f)
	q.Push(Record{Seq: 4, Kind: report.KindEnd, Payload: []byte("{}")})
	if n := q.Len(); n != 4 {
		t.Errorf("%d records in memory, want 4", n)
	}
	if !strings.Contains(logs.String(), "report spool unavailable") || !strings.Contains(logs.String(), "no space left on device") {
		t.Errorf("no warning of the full disk: %q", logs.String())
	}
	if q.spool != nil || q.spoolBuf != nil {
		t.Error("the failed spool is still open")
	}
}
