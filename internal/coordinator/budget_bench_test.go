package coordinator

import (
	"context"
	"fmt"
	"runtime"
	"testing"

	"github.com/isched/isched/internal/report"
)

// BenchmarkHostileFloodMemory measures what one hostile user's flood
// leaves the coordinator holding (issue 18, items 3 and 4): bob's job
// opens a new session per report, each a new attempt of one of 200
// lineages, each sample naming a new GPU id and rank, and floods reports
// of sessions nobody opened; alice's job starts in the middle of it. It
// prints the heap the coordinator and its (in-process) Redis hold after
// the flood once the ingest stream itself is dropped (heap-MiB), the
// sessions and lineages kept and the largest status (status-KiB), and
// fails if alice's start report was lost.
//
//	go test -run '^$' -bench HostileFloodMemory -benchtime 1x ./internal/coordinator
func BenchmarkHostileFloodMemory(b *testing.B) {
	const flood = 20_000
	for range b.N {
		e := newEnv(b)
		e.publish([]report.Job{job(60, 1002, "bob", "RUNNING", "cpu", ""), job(61, 1001, "alice", "RUNNING", "cpu", "")}, nil)
		runtime.GC()
		var before runtime.MemStats
		runtime.ReadMemStats(&before)
		ghost := e.wrapper(62, 1002, "bob", "ghost", "cpu")
		for i := range flood {
			w := e.wrapper(60, 1002, "bob", fmt.Sprintf("lin-%d", i%200), "cpu")
			w.job.Attempt = i
			e.start(w)
			env := report.NewEnvelope(report.KindSample, e.now)
			env.Sample = &report.Sample{CPU: &report.CPUStat{RSSBytes: 1 << 20, Procs: 1},
				GPU: &report.GPUStat{Devices: []report.GPUDevice{{UUID: fmt.Sprintf("GPU-%d", i), Name: "x", UsedBytes: 1}}}}
			w.job.Rank = i
			e.send(w, env)
			e.sample(ghost, int64(i+1), 1, 1)
			if i == flood/2 {
				e.start(e.wrapper(61, 1001, "alice", "alice-61", "cpu"))
			}
			if i%500 == 499 {
				e.rounds(1)
			}
		}
		e.rounds(2)
		if st := e.status("alice-61"); st.JobID != 61 || st.User != "alice" {
			b.Fatalf("alice's start report lost in the flood: job %d user %q", st.JobID, st.User)
		}
		e.mr.Del("isched:lab:ingest")
		maxStatus := 0
		for name := range e.c.lineages {
			v, err := e.store.Get(context.Background(), e.c.keys.JobStatus(name))
			if err == nil {
				maxStatus = max(maxStatus, len(v))
			}
		}
		sessions := len(e.savedSessions())
		lineages := len(e.c.lineages)
		runtime.GC()
		var after runtime.MemStats
		runtime.ReadMemStats(&after)
		b.ReportMetric(float64(int64(after.HeapAlloc)-int64(before.HeapAlloc))/(1<<20), "heap-MiB")
		b.ReportMetric(float64(sessions), "sessions")
		b.ReportMetric(float64(lineages), "lineages")
		b.ReportMetric(float64(maxStatus)/1024, "status-KiB")
	}
}
