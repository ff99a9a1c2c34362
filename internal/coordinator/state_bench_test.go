package coordinator

import (
	"encoding/json"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/isched/isched/internal/report"
	"github.com/isched/isched/internal/stream"
)

// warmLineage is a lineage as the coordinator holds it once its job is
// warm: the iteration window full (512 observations), the memory
// tracker at its 64 points, a few spans, events and decisions.
func warmLineage() *lineage {
	r := rand.New(rand.NewPCG(1, 2))
	l := &lineage{Status: report.JobStatus{V: 1, Cluster: "lab", Lineage: "lab-1", JobID: 1, User: "alice", UID: 1001,
		Partition: "cpu", State: "RUNNING", TotalIters: 100_000}}
	for i := int64(1); i <= 5_000; i++ {
		ms := 120 + r.NormFloat64()*4
		if i%500 == 0 {
			ms *= 6 // an eval phase
		}
		l.Iter.Add(report.Iter{Step: i, AtMS: 1_700_000_000_000 + i*120, DurMS: ms, Source: report.SourceFile})
		if i%10 == 0 {
			l.Mem.Add(i, 2<<30+i*1024, 0)
		}
		l.Status.Step = i
	}
	for i := range 3 {
		l.Status.History = append(l.Status.History, report.Span{JobID: 1, Attempt: i, Partition: "cpu", Node: "cpu1",
			StartMS: int64(i) * 1000, EndMS: int64(i)*1000 + 900, StartStep: int64(i) * 1000, EndStep: int64(i)*1000 + 999, Reason: "exited"})
		l.Status.Events = append(l.Status.Events, report.StatusEvent{AtMS: int64(i), Kind: "requeued", Message: "Slurm requeued the job"})
	}
	return l
}

// benchCoordinator is a coordinator with no store: enough for the work
// of one lineage in memory (queueSave, refreshEstimates).
func benchCoordinator() *Coordinator {
	cfg := Config{ID: "bench"}
	cfg.defaults()
	return &Coordinator{cfg: cfg, keys: stream.Keys{Cluster: "lab"}, now: time.Now}
}

// BenchmarkSaveWarmLineage is queueSave, done for every lineage a round
// touched: at 10 000 jobs reporting every 5 s, 2 000 a second. It reports
// the size of what it writes (state and status).
func BenchmarkSaveWarmLineage(b *testing.B) {
	c, l := benchCoordinator(), warmLineage()
	if n := len(l.Iter.Window); n != 512 {
		b.Fatalf("window %d, want full (512)", n)
	}
	state, _ := json.Marshal(l)
	status, _ := json.Marshal(l.Status)
	b.ReportAllocs()
	for b.Loop() {
		if err := c.queueSave("lab-1", l); err != nil {
			b.Fatal(err)
		}
		c.batch.Reset()
	}
	b.ReportMetric(float64(len(state)+len(status)), "bytes/save")
}

// BenchmarkLoadWarmLineage is the decoding a new leader does for each
// lineage it takes over.
func BenchmarkLoadWarmLineage(b *testing.B) {
	s, err := json.Marshal(warmLineage())
	if err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	for b.Loop() {
		var l lineage
		if err := json.Unmarshal(s, &l); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkRefreshEstimatesWarm is the estimation apply does for every
// sample report of a warm job: iteration estimate, ETA, memory trend,
// health checks.
func BenchmarkRefreshEstimatesWarm(b *testing.B) {
	c, l := benchCoordinator(), warmLineage()
	now := time.UnixMilli(1_700_000_600_000)
	b.ReportAllocs()
	for b.Loop() {
		c.refreshEstimates(l, now)
	}
}
