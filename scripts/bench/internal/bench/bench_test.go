package bench

import (
	"context"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/isched/isched/internal/auth"
	"github.com/isched/isched/internal/report"
)

func TestQuantile(t *testing.T) {
	t.Parallel()
	v := []float64{1, 2, 3, 4, 5, 6, 7, 8, 9, 10}
	for _, tc := range []struct {
		q    float64
		want float64
	}{{0.5, 5}, {0.9, 9}, {0.99, 10}, {0, 1}, {1, 10}} {
		if got := Quantile(v, tc.q); got != tc.want {
			t.Errorf("Quantile(%v) = %v, want %v", tc.q, got, tc.want)
		}
	}
	if !math.IsNaN(Quantile(nil, 0.5)) {
		t.Error("Quantile of nothing is not NaN")
	}
}

func TestLatencyMissedIsSlowest(t *testing.T) {
	t.Parallel()
	var l latencies
	for i := range 98 {
		l.add(float64(i), false)
	}
	l.miss()
	l.miss()
	s := l.summary()
	if s.N != 98 || s.Missed != 2 || !math.IsInf(s.P99, 1) || s.P90 != 89 || s.P50 != 49 {
		t.Errorf("summary = %+v", s)
	}
	if _, err := s.MarshalJSON(); err != nil {
		t.Errorf("MarshalJSON: %v", err)
	}
}

func TestParseMetrics(t *testing.T) {
	t.Parallel()
	text := `# HELP isched_coordinator_reports_total Wrapper reports read from the ingest stream, by verdict.
# TYPE isched_coordinator_reports_total counter
isched_coordinator_reports_total{verdict="accepted"} 1234
isched_coordinator_reports_total{verdict="deferred"} 5
isched_coordinator_reports_rejected_total{reason="bad-mac"} 0
isched_coordinator_reports_rejected_total{reason="replay"} 2
isched_coordinator_decisions_total{kind="checkpoint"} 1
isched_coordinator_ingest_duration_seconds_sum 0.5
isched_coordinator_ingest_duration_seconds_count 1239
isched_coordinator_batch_write_duration_seconds_sum 0.25
isched_coordinator_batch_write_duration_seconds_count 10
isched_coordinator_lineages 1004
process_resident_memory_bytes 2.5e+07
`
	m, err := ParseMetrics(strings.NewReader(text))
	if err != nil {
		t.Fatal(err)
	}
	if m.Reports["accepted"] != 1234 || m.Reports["deferred"] != 5 || m.IngestSum != 0.5 || m.IngestCount != 1239 || m.Lineages != 1004 || m.WriteSum != 0.25 || m.WriteCount != 10 {
		t.Errorf("metrics = %+v", m)
	}
	if len(m.Rejected) != 1 || m.Rejected["replay"] != 2 || m.Decisions["checkpoint"] != 1 {
		t.Errorf("rejected = %v, decisions = %v", m.Rejected, m.Decisions)
	}
}

func TestParseStatCPU(t *testing.T) {
	t.Parallel()
	// comm with a space and a parenthesis; utime 150, stime 50 ticks
	line := "4242 (isched (x) y) S 1 4242 4242 0 -1 4194560 100 0 0 0 150 50 0 0 20 0 8 0 12345 1000000 500"
	d, err := parseStatCPU([]byte(line))
	if err != nil {
		t.Fatal(err)
	}
	if d != 2*time.Second {
		t.Errorf("cpu = %v, want 2s", d)
	}
}

// The job table limit is the schema's, and the capacity must be the largest
// table that still encodes.
func TestTableCapacity(t *testing.T) {
	t.Parallel()
	b, err := New(Config{Cluster: "t", Jobs: 2000, Munger: nopMunger{}, Reporter: nil})
	if err == nil || b != nil {
		t.Fatal("New without clients succeeded")
	}
	b = &Bench{cfg: Config{Cluster: "t", GPUs: 1}}
	var sims []*sim
	for i := range 2000 {
		sims = append(sims, &sim{job: report.JobRef{Cluster: "t", JobID: 10_000_000 + uint64(i), User: "alice", UID: 1001, Partition: "gpu", Node: "gpu1"}})
	}
	now := time.UnixMilli(1_800_000_000_000)
	rows := b.rows(sims)
	fit, need, err := tableCapacity("t", rows, now)
	if err != nil {
		t.Fatal(err)
	}
	// the agent's tables may exceed a stream report (report.MaxTablePayload):
	// 2,000 jobs need more than 64 KiB and fit whole
	if fit != len(rows) || need <= report.MaxPayload {
		t.Fatalf("fit %d of %d, need %d bytes", fit, len(rows), need)
	}
}

type nopMunger struct{}

func (nopMunger) Encode(context.Context, []byte, int, time.Duration) (string, error) { return "", nil }
func (nopMunger) Decode(context.Context, string) (auth.Decoded, error)               { return auth.Decoded{}, nil }
