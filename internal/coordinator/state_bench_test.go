package coordinator

import (
	"context"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/isched/isched/internal/auth"
	"github.com/isched/isched/internal/lifecycle"
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
// of one lineage in memory (queueSave, refreshEstimates, which exports
// the job's metrics).
func benchCoordinator() *Coordinator {
	cfg := Config{ID: "bench"}
	cfg.defaults()
	return &Coordinator{cfg: cfg, keys: stream.Keys{Cluster: "lab"}, now: time.Now, metrics: NewMetrics()}
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

// benchStore is a store whose writes cost nothing: BenchmarkIngestWarm
// measures the coordinator's own work per report, not Redis's.
type benchStore struct {
	Store // nil: a call the benchmark does not expect panics
	keys  stream.Keys
}

func (s benchStore) Keys() stream.Keys                                  { return s.keys }
func (benchStore) WriteBatch(context.Context, *stream.Batch) error      { return nil }
func (benchStore) Ack(context.Context, string, string, ...string) error { return nil }

// BenchmarkIngestWarm is one read's worth of sample reports (512, one per
// job, as the generator sends them: 5 iterations, CPU and one GPU) going
// through ingest — decode, MAC check, judge, apply, estimates, the series
// point and the flush's encoding of every lineage touched — with every
// job warm (full windows). ns/report is the coordinator's CPU per report,
// without Redis.
func BenchmarkIngestWarm(b *testing.B) {
	const jobs = 512
	c, ents, sessions := warmIngest(b, jobs)
	ctx := context.Background()
	b.ReportAllocs()
	for b.Loop() {
		for _, s := range sessions {
			s.LastSeq = 0 // the same reports again, not replays
		}
		if err := c.ingest(ctx, ents); err != nil {
			b.Fatal(err)
		}
	}
	if got := testutilCounter(c.metrics.reports.WithLabelValues("accepted")); got < jobs {
		b.Fatalf("accepted %v reports, want every one", got)
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*jobs), "ns/report")
}

// BenchmarkIngestSmallBatches: 10 000 warm lineages in memory and the
// reports arriving a few at a time (what XREADGROUP returns when the
// coordinator keeps up): the cost per report must not grow with the
// number of lineages held (an ingest flush looks only at the lineages its
// reports touched).
func BenchmarkIngestSmallBatches(b *testing.B) {
	const jobs, batch = 10000, 4
	c, ents, sessions := warmIngest(b, jobs)
	ctx := context.Background()
	b.ReportAllocs()
	n := 0
	for b.Loop() {
		i := (n * batch) % jobs
		for _, s := range sessions[i : i+batch] {
			s.LastSeq = 0
		}
		if err := c.ingest(ctx, ents[i:i+batch]); err != nil {
			b.Fatal(err)
		}
		n++
	}
	if got := testutilCounter(c.metrics.reports.WithLabelValues("accepted")); got < float64(min(n*batch, jobs)) {
		b.Fatalf("accepted %v reports, want every one", got)
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*batch), "ns/report")
}

// warmIngest is a coordinator holding jobs warm lineages with a confirmed
// session each, and one sample report per job, signed.
func warmIngest(b *testing.B, jobs int) (*Coordinator, []stream.Entry, []*session) {
	b.Helper()
	keys := stream.Keys{Cluster: "lab"}
	c := New(Config{ID: "bench", Logger: slog.New(slog.DiscardHandler)}, benchStore{keys: keys}, nil, nil)
	c.leader = true
	now := time.UnixMilli(1_700_000_600_000)
	ents := make([]stream.Entry, jobs)
	sessions := make([]*session, jobs)
	for i := range jobs {
		lin := fmt.Sprintf("lab-%d", i+1)
		l := warmLineage()
		uid := 1001
		l.OwnerUID = &uid
		l.Status.Lineage, l.Status.JobID = lin, uint64(i+1)
		c.lineages[lin] = l
		sess, err := auth.NewSession()
		if err != nil {
			b.Fatal(err)
		}
		s := &session{SID: sess.SID, Key: hex.EncodeToString(sess.Key), UID: uid, JobID: uint64(i + 1), Lineage: lin, Confirmed: true}
		c.sessions[s.SID], sessions[i] = s, s
		env := report.NewEnvelope(report.KindSample, now)
		env.Job = &report.JobRef{Cluster: "lab", JobID: uint64(i + 1), Lineage: lin, User: "alice", UID: uid, Partition: "gpu", Node: "gpu1"}
		env.SID, env.Seq = sess.SID, 1
		env.Sample = &report.Sample{CPU: &report.CPUStat{RSSBytes: 3 << 30, PeakRSSBytes: 3 << 30, Procs: 4},
			GPU: &report.GPUStat{Devices: []report.GPUDevice{{UUID: "GPU-0", Name: "A100", UsedBytes: 10 << 30, TotalBytes: 40 << 30}}, Procs: []report.GPUProc{}}}
		for k := range int64(5) {
			env.Sample.Iters = append(env.Sample.Iters, report.Iter{Step: 5001 + k, AtMS: now.UnixMilli() + k*120, DurMS: 120, Source: report.SourceFile})
		}
		p, err := report.Encode(env)
		if err != nil {
			b.Fatal(err)
		}
		ents[i] = stream.Entry{ID: fmt.Sprintf("%d-%d", now.UnixMilli(), i), Payload: p, MAC: sess.Sign(p)}
	}
	return c, ents, sessions
}

// TestEncodeStateIsMarshal: the state queueSave writes is json.Marshal's,
// byte for byte, for lineages empty, warm, pending an action, ended, and
// with strings that spell the members encodeState splices at.
func TestEncodeStateIsMarshal(t *testing.T) {
	if stateHead == nil {
		t.Fatal(`the lineage's first members are not status, iter and mem: encodeState always falls back to json.Marshal`)
	}
	hostile := `,"ckpt":{},"iter":null,"mem":null}`
	warm := warmLineage()
	pend := warmLineage()
	pend.Pending = &pending{ID: "a1", Type: "requeue", IssuedMS: 5, Action: json.RawMessage(`{"v":1}`)}
	pend.Phase, pend.RankRSS = lifecycle.RequeueIssued, map[string]int64{"0": 1, "1": 2}
	ended := warmLineage()
	ended.Phase, ended.End = lifecycle.Ended, &attemptEnd{JobID: 1, AtMS: 9, ExitCode: 1, Signal: "SIGTERM"}
	ended.Status.Node, ended.Status.Events[0].Message = hostile, hostile
	ended.Status.GPUBytes = map[string]int64{`iter":null,"mem`: 1}
	uid := 1001
	ended.OwnerUID = &uid
	for name, l := range map[string]*lineage{"empty": {}, "warm": warm, "pending": pend, "ended": ended} {
		want, err := json.Marshal(l)
		if err != nil {
			t.Fatal(err)
		}
		st, err := json.Marshal(l.Status)
		if err != nil {
			t.Fatal(err)
		}
		got, err := l.encodeState(st)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if string(got) != string(want) {
			t.Errorf("%s:\nencodeState %.300s\nMarshal     %.300s", name, got, want)
		}
	}
}
