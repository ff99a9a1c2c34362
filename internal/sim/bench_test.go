package sim

import (
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"testing"
	"time"

	"github.com/isched/isched/internal/plan"
)

// benchSite is a cluster of n nodes: 3/4 of them 8-GPU nodes, the rest
// CPU nodes, as examples/site-sim-gpu.json's node types.
func benchSite(b *testing.B, n int) *plan.Site {
	b.Helper()
	g, c := n*3/4, n-n*3/4
	js := fmt.Sprintf(`{"v": 1, "name": "bench", "node_types": [
  {"name": "gpu8", "kind": "gpu", "cores": 128, "host_memory_bytes": 412316860416, "gpus_per_node": 8, "device_memory_bytes": 34359738368, "peak_flops": {"fp32": 1.57e13}, "cost_per_gpu_hour": 2},
  {"name": "cpu64", "kind": "cpu", "cores": 64, "host_memory_bytes": 274877906944, "peak_flops": {"fp32": 5.1e12}, "efficiency": {"fp32": 0.3}, "cost_per_node_hour": 1}],
 "partitions": [
  {"name": "gpu", "node_types": ["gpu8"], "nodes": "g[1-%d]", "max_time": "3-00:00:00"},
  {"name": "cpu", "node_types": ["cpu64"], "nodes": "c[1-%d]", "max_time": "3-00:00:00", "default": true}]}`, g, c)
	s, err := plan.DecodeSite([]byte(js))
	if err != nil {
		b.Fatal(err)
	}
	return s
}

// philly is n one-GPU jobs with log-normal run times of Philly's median
// (1 186 s) and 90th percentile (12 860 s), Poisson arrivals.
func philly(n int, seed uint64) []Job {
	r := rand.New(rand.NewPCG(seed, 1))
	sigma := math.Log(12860.0/1186) / 1.2816
	jobs := make([]Job, n)
	t := 0.0
	for i := range jobs {
		t += r.ExpFloat64()
		jobs[i] = Job{ID: i, User: fmt.Sprint("u", r.IntN(64)), Submit: t, Nodes: 1, CPUs: 8, GPUs: 1,
			Run: math.Min(1186*math.Exp(sigma*r.NormFloat64()), 30*86400)}
	}
	return jobs
}

func benchReplay(b *testing.B, nodes, jobs int, v Variant) {
	site := benchSite(b, nodes)
	cl, err := newCluster(site, nil)
	if err != nil {
		b.Fatal(err)
	}
	trace := ScaleLoad(philly(jobs, 1), capacity(cl), 0.9)
	cfg := DefaultConfig(site)
	cfg.Variant, cfg.Seed = v, 1
	var events int64
	var wall time.Duration
	var peak uint64
	for b.Loop() {
		runtime.GC()
		t0 := time.Now()
		r, err := Run(cfg, trace)
		if err != nil {
			b.Fatal(err)
		}
		wall += time.Since(t0)
		events += r.Events
		var ms runtime.MemStats
		runtime.ReadMemStats(&ms)
		peak = max(peak, ms.HeapInuse)
	}
	b.ReportMetric(float64(events)/wall.Seconds(), "events/s")
	b.ReportMetric(float64(events)/float64(b.N), "events/op")
	b.ReportMetric(float64(peak)/(1<<20), "heap-MiB")
}

// BenchmarkReplay: 10 000 Philly-like jobs on 100 nodes at load 0.9.
func BenchmarkReplay(b *testing.B) {
	for _, v := range Variants[:2] {
		b.Run(v.Name, func(b *testing.B) { benchReplay(b, 100, 10_000, v) })
	}
}

// BenchmarkReplayScale: issue 29's scale, 100 000 jobs on 1 000 nodes.
func BenchmarkReplayScale(b *testing.B) {
	for _, v := range Variants[:2] {
		b.Run(v.Name, func(b *testing.B) { benchReplay(b, 1000, 100_000, v) })
	}
}

// phillyTrace is the Philly trace with real arrivals
// (shared/traces/philly_pollux_82k.csv; ISCHED_TRACES names the folder),
// its partitions spread over site's GPU partitions and its accounts'
// limits and shares sized as `isched simulate` sizes them.
func phillyTrace(b *testing.B, site *plan.Site) ([]Job, Sched) {
	b.Helper()
	dir := os.Getenv("ISCHED_TRACES")
	if dir == "" {
		dir = "../../../shared/traces"
	}
	f, err := os.Open(filepath.Join(dir, "philly_pollux_82k.csv"))
	if err != nil {
		b.Skipf("the Philly trace: %v", err)
	}
	defer f.Close()
	jobs, err := ReadPhilly(f.Name(), f)
	if err != nil {
		b.Fatal(err)
	}
	names, weights, err := GPUPartitions(site, nil)
	if err != nil {
		b.Fatal(err)
	}
	gpus, err := SiteGPUs(site, nil)
	if err != nil {
		b.Fatal(err)
	}
	sc := SlurmSched()
	sc.Quota, sc.Shares = AccountQuotas(jobs, gpus, 2)
	return SpreadPartitions(jobs, names, weights), sc
}

// BenchmarkReplayPhilly: the whole Philly trace (82 247 jobs, 109 days)
// at its own arrivals on examples/site-sim-philly.json (640 GPUs), Slurm
// alone with multifactor priority and backfill: the replay must take
// well under 5 minutes on a 2-vCPU machine (issue 41).
func BenchmarkReplayPhilly(b *testing.B) {
	site := siteFileB(b, "../../examples/site-sim-philly.json")
	jobs, sc := phillyTrace(b, site)
	for _, v := range []Variant{Variants[0], Variants[5]} {
		b.Run(v.Name, func(b *testing.B) {
			cfg := DefaultConfig(site)
			cfg.Variant, cfg.Seed, cfg.Sched = v, 1, sc
			var wall time.Duration
			for b.Loop() {
				t0 := time.Now()
				if _, err := Run(cfg, jobs); err != nil {
					b.Fatal(err)
				}
				wall += time.Since(t0)
			}
			b.ReportMetric(wall.Seconds()/float64(b.N), "s/replay")
			b.ReportMetric(float64(len(jobs)), "jobs")
		})
	}
}

func siteFileB(b *testing.B, path string) *plan.Site {
	b.Helper()
	raw, err := os.ReadFile(path)
	if err != nil {
		b.Fatal(err)
	}
	s, err := plan.DecodeSite(raw)
	if err != nil {
		b.Fatal(err)
	}
	return s
}

// BenchmarkSnapshot: what the policy and the planner read of the cluster
// (sim.snapshot, and sim.clusterState with its job table), built halfway
// through a replay of 10 000 Philly-like jobs on 100 nodes at load 1.2,
// their 64 users in 16 accounts with GPU quotas as `isched simulate`
// sizes them (AccountQuotas, twice over-subscribed).
func BenchmarkSnapshot(b *testing.B) {
	site := benchSite(b, 100)
	cl, err := newCluster(site, nil)
	if err != nil {
		b.Fatal(err)
	}
	trace := ScaleLoad(philly(10_000, 1), capacity(cl), 1.2)
	for k := range trace {
		n, _ := strconv.Atoi(trace[k].User[1:]) // u0 to u63
		trace[k].Account = fmt.Sprint("a", n%16)
	}
	gpus, err := SiteGPUs(site, nil)
	if err != nil {
		b.Fatal(err)
	}
	cfg := DefaultConfig(site)
	cfg.Variant, cfg.Seed, cfg.Sched = Variants[0], 1, SlurmSched()
	cfg.Sched.Quota, cfg.Sched.Shares = AccountQuotas(trace, gpus, 2)
	s, err := newSim(cfg, trace)
	if err != nil {
		b.Fatal(err)
	}
	replayUntil(s, trace[len(trace)/2].Submit)
	b.Run("snapshot", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			_ = s.snapshot()
		}
	})
	b.Run("clusterState", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			s.csAt = math.Inf(-1)
			_ = s.clusterState()
		}
	})
	b.Logf("at %.0f s: %d pending, %d limits", s.now, len(s.pending), len(s.snapshot().Limits))
}

// replayUntil plays s's events up to time t, as sim.loop does.
func replayUntil(s *sim, t float64) { s.runUntil(t) }
