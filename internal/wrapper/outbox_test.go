package wrapper

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/isched/isched/internal/auth"
	"github.com/isched/isched/internal/report"
)

var quiet = slog.New(slog.NewTextHandler(io.Discard, nil))

func rec(seq uint64, kind report.Kind) record {
	return record{Seq: seq, Kind: kind, Payload: []byte(`{"x":1}`), MAC: "m"}
}

// A dropped sample that itself reported earlier drops passes its count on:
// the count reaches the coordinator with whichever sample is delivered.
func TestOutboxDropCountSurvivesDroppedCarrier(t *testing.T) {
	t.Parallel()
	o := newOutbox(2, 1<<20, "", quiet)
	o.push(rec(1, report.KindSample))
	o.push(rec(2, report.KindSample))
	o.push(rec(3, report.KindSample)) // drops 1
	carrier := rec(4, report.KindSample)
	carrier.Carried = o.takeDropped() // sample 4 reports 1 drop...
	if carrier.Carried != 1 {
		t.Fatalf("carried %d, want 1", carrier.Carried)
	}
	o.push(carrier)                   // ...and drops 2
	o.push(rec(5, report.KindSample)) // drops 3
	o.push(rec(6, report.KindSample)) // drops 4, the carrier
	// 1, 2, 3 and 4 are gone: 4 carried the count of 1, so 4 in all
	if d := o.takeDropped(); d != 4 {
		t.Errorf("next sample reports %d drops, want 4 (samples 1-4)", d)
	}
}

// Samples being sent are never dropped: they may already be in Redis, and
// counting them as dropped would report a loss that did not happen.
func TestOutboxNeverDropsInFlight(t *testing.T) {
	t.Parallel()
	o := newOutbox(2, 1<<20, "", quiet)
	o.push(rec(1, report.KindSample))
	o.push(rec(2, report.KindSample))
	batch := o.head(64)
	o.push(rec(3, report.KindSample)) // full: 1 and 2 are in flight, 3 goes
	o.push(rec(4, report.KindSample)) // and 4
	if q := seqsOf(o.head(64)); len(q) != 2 || q[0] != 1 || q[1] != 2 {
		t.Errorf("queue %v while 1 and 2 were being sent, want [1 2]", q)
	}
	if d := o.takeDropped(); d != 2 {
		t.Errorf("dropped %d, want 2 (3 and 4)", d)
	}
	o.pop(batch) // delivered
	o.push(rec(5, report.KindSample))
	o.push(rec(6, report.KindSample))
	o.push(rec(7, report.KindSample)) // nothing in flight: the oldest, 5, goes
	if q := seqsOf(o.head(64)); len(q) != 2 || q[0] != 6 || q[1] != 7 {
		t.Errorf("queue %v, want [6 7]", q)
	}
}

func seqsOf(rs []record) []uint64 {
	var out []uint64
	for _, r := range rs {
		out = append(out, r.Seq)
	}
	return out
}

func TestOutboxDropsOldestSamplesKeepsEvents(t *testing.T) {
	t.Parallel()
	o := newOutbox(4, 1<<20, "", quiet)
	o.push(rec(1, report.KindStart))
	for i := uint64(2); i <= 6; i++ {
		o.push(rec(i, report.KindSample))
	}
	o.push(rec(7, report.KindCheckpoint))
	o.push(rec(8, report.KindEnd))
	got := o.head(100)
	o.pop(nil) // as after a failed send: nothing delivered, nothing in flight
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
	if d := o.takeDropped(); d != 4 {
		t.Errorf("dropped %d samples, want 4", d)
	}
	// events beyond the bound are kept even with no sample left to drop
	for i := uint64(9); i < 20; i++ {
		o.push(rec(i, report.KindCheckpoint))
	}
	// 11 more events: the one sample left (6) goes, every event stays
	if n := o.len(); n != 14 {
		t.Errorf("%d queued, want the 14 events", n)
	}
}

func TestOutboxSpoolsWhileUndeliveredAndSurvivesDiskErrors(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	path := filepath.Join(dir, "reports.spool")
	o := newOutbox(100, 1<<20, path, quiet)
	o.push(rec(1, report.KindStart))
	o.startSpool() // a send failed
	o.push(rec(2, report.KindSample))
	got, err := readSpool(path)
	if err != nil || len(got) != 2 || got[1].Seq != 2 {
		t.Fatalf("spool %+v %v", got, err)
	}
	o.pop(o.head(2))
	if _, err := os.Stat(path); !os.IsNotExist(err) {
		t.Errorf("spool kept after everything was delivered: %v", err)
	}

	// a spool that cannot be written (disk full, read-only) is reported once
	// and the queue goes on in memory
	bad := newOutbox(100, 1<<20, filepath.Join(dir, "missing", "dir", "spool"), quiet)
	bad.push(rec(1, report.KindStart))
	bad.startSpool()
	bad.push(rec(2, report.KindEnd))
	if !bad.spoolErr || bad.len() != 2 {
		t.Errorf("spool error %v, queued %d", bad.spoolErr, bad.len())
	}
	if full, err := os.OpenFile("/dev/full", os.O_WRONLY, 0); err == nil {
		full.Close()
		f := newOutbox(100, 1<<20, "/dev/full", quiet)
		f.push(rec(1, report.KindStart))
		f.startSpool()
		f.push(rec(2, report.KindSample))
		if !f.spoolErr || f.len() != 2 {
			t.Errorf("/dev/full: spool error %v, queued %d", f.spoolErr, f.len())
		}
	}
}

// flakySink fails while down is set and records what it accepted.
type flakySink struct {
	mu   sync.Mutex
	down bool
	got  []uint64
}

func (f *flakySink) Append(_ context.Context, _ string, payload []byte, mac string, _ int64) (string, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.down {
		return "", errors.New("connection refused")
	}
	env, err := report.Decode(payload)
	if err != nil {
		return "", err
	}
	f.got = append(f.got, env.Seq)
	return "1-0", nil
}

func TestReporterDeliversInOrderAfterAnOutage(t *testing.T) {
	t.Parallel()
	sess, _ := auth.NewSession()
	sink := &flakySink{down: true}
	out := newOutbox(1000, 1<<20, filepath.Join(t.TempDir(), "spool"), quiet)
	job := report.JobRef{Cluster: "lab", JobID: 5, Lineage: "lab-5", User: "u"}
	r := newReporter(job, sess, out, func(context.Context) (appender, error) { return sink, nil }, "isched:lab:ingest", quiet)
	emit := func(k report.Kind) { emitKind(r, k) }
	emit(report.KindStart)
	for range 10 {
		emit(report.KindSample)
	}
	if err := r.flush(context.Background()); err == nil {
		t.Fatal("flush succeeded while Redis was down")
	}
	sink.mu.Lock()
	sink.down = false
	sink.mu.Unlock()
	emit(report.KindEnd)
	if !r.drain(2 * time.Second) {
		t.Fatal("not drained after Redis came back")
	}
	if len(sink.got) != 12 {
		t.Fatalf("delivered %v, want 12 reports (queued %d)", sink.got, out.len())
	}
	for i, s := range sink.got {
		if s != uint64(i+1) {
			t.Fatalf("delivered seqs %v: not 1..12 in order", sink.got)
		}
	}
}

func TestIdentityFromSlurmEnv(t *testing.T) {
	t.Parallel()
	env := map[string]string{"SLURM_JOB_ID": "42", "SLURM_CLUSTER_NAME": "lab", "SLURM_JOB_USER": "alice", "SLURM_JOB_UID": "1001",
		"SLURM_RESTART_COUNT": "2", "SLURM_PROCID": "1", "SLURM_NTASKS": "2", "SLURM_JOB_PARTITION": "cpu", "SLURMD_NODENAME": "cpu1",
		"SLURM_ARRAY_JOB_ID": "40", "SLURM_ARRAY_TASK_ID": "2"}
	j, ok, err := identity(func(k string) string { return env[k] }, "")
	if err != nil || !ok {
		t.Fatal(ok, err)
	}
	if j.JobID != 42 || j.UID != 1001 || j.Attempt != 2 || j.Rank != 1 || j.NRanks != 2 || j.Lineage != "lab-40_2" || *j.ArrayTaskID != 2 {
		t.Errorf("identity %+v", j)
	}
	if _, ok, _ := identity(func(string) string { return "" }, ""); ok {
		t.Error("outside Slurm: identity claims a job")
	}
	for name, bad := range map[string]map[string]string{
		"job id":  {"SLURM_JOB_ID": "4x"},
		"restart": {"SLURM_JOB_ID": "4", "SLURM_RESTART_COUNT": "-1"},
		"lineage": {"SLURM_JOB_ID": "4", "ISCHED_CLUSTER": "a b"},
	} {
		if _, _, err := identity(func(k string) string { return bad[k] }, ""); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
}

func TestParseArgs(t *testing.T) {
	t.Parallel()
	none := func(string) string { return "" }
	for name, args := range map[string][]string{
		"no command":      {"--interval", "1s"},
		"tiny interval":   {"--interval", "1ms", "--", "true"},
		"report < sample": {"--interval", "2s", "--report-interval", "1s", "--", "true"},
		"bad lineage":     {"--lineage", "$(id)", "--", "true"},
		"unknown flag":    {"--frobnicate", "--", "true"},
	} {
		if _, err := ParseArgs(args, none, io.Discard); !errors.Is(err, ErrUsage) {
			t.Errorf("%s: err %v, want ErrUsage", name, err)
		}
	}
	o, err := ParseArgs([]string{"--checkpoint-dir", "rel/dir", "--", "python3", "train.py", "--lr", "0.1"}, none, io.Discard)
	if err != nil || len(o.Argv) != 4 || !filepath.IsAbs(o.CheckpointDir) {
		t.Errorf("options %+v %v", o, err)
	}
}
