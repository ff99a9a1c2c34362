package wrapper

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/isched/isched/internal/auth"
	"github.com/isched/isched/internal/report"
	"github.com/isched/isched/internal/spool"
)

var quiet = slog.New(slog.NewTextHandler(io.Discard, nil))

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
	out := spool.NewQueue(1000, 1<<20, filepath.Join(t.TempDir(), "spool"), quiet)
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
		t.Fatalf("delivered %v, want 12 reports (queued %d)", sink.got, out.Len())
	}
	for i, s := range sink.got {
		if s != uint64(i+1) {
			t.Fatalf("delivered seqs %v: not 1..12 in order", sink.got)
		}
	}
}

// TestReporterRetriesAFailedConnectAtOnce (issue 44): a connection the
// relay refused or closed is tried again after the backoff (0.5 s at
// first), not at the next report tick, so the start report of a job whose
// first connection was taken by another's socket still arrives within
// seconds.
func TestReporterRetriesAFailedConnectAtOnce(t *testing.T) {
	t.Parallel()
	sess, _ := auth.NewSession()
	sink := &flakySink{}
	out := spool.NewQueue(1000, 1<<20, filepath.Join(t.TempDir(), "spool"), quiet)
	job := report.JobRef{Cluster: "lab", JobID: 6, Lineage: "lab-6", User: "u"}
	var mu sync.Mutex
	tries := 0
	connect := func(context.Context) (appender, error) {
		mu.Lock()
		defer mu.Unlock()
		if tries++; tries == 1 {
			return nil, errors.New("relay: refused (busy): too many unauthenticated connections from this source")
		}
		return sink, nil
	}
	r := newReporter(job, sess, out, connect, "isched:lab:ingest", quiet)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); r.run(ctx, time.Hour) }() // no tick within the test
	t.Cleanup(func() { cancel(); <-done })
	t0 := time.Now()
	emitKind(r, report.KindStart)
	for r.delivered() == 0 {
		if time.Since(t0) > 5*time.Second {
			mu.Lock()
			defer mu.Unlock()
			t.Fatalf("start report not delivered within 5 s of a refused connect (%d connects)", tries)
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Logf("delivered %.2f s after a refused first connect", time.Since(t0).Seconds())
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
		"job id":  {"SLURM_JOB_ID": "4x", "SLURM_CLUSTER_NAME": "c"},
		"restart": {"SLURM_JOB_ID": "4", "SLURM_CLUSTER_NAME": "c", "SLURM_RESTART_COUNT": "-1"},
		"lineage": {"SLURM_JOB_ID": "4", "ISCHED_CLUSTER": "a b"},
	} {
		if _, _, err := identity(func(k string) string { return bad[k] }, ""); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
	// no cluster name anywhere: none is made up
	if _, ok, err := identity(func(k string) string { return map[string]string{"SLURM_JOB_ID": "4"}[k] }, ""); ok || !errors.Is(err, errNoCluster) {
		t.Errorf("without a cluster name: ok %v, err %v; want errNoCluster", ok, err)
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
