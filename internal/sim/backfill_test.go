package sim

import (
	"math"
	"reflect"
	"testing"

	"github.com/isched/isched/internal/plan"
)

// twoNodeSite is a partition of two nodes of 2 GPUs each.
func twoNodeSite(t *testing.T) *plan.Site {
	t.Helper()
	s, err := plan.DecodeSite([]byte(`{"v": 1, "name": "two", "node_types": [
  {"name": "g2", "kind": "gpu", "cores": 16, "host_memory_bytes": 68719476736, "gpus_per_node": 2,
   "device_memory_bytes": 17179869184, "peak_flops": {"fp32": 1e13}, "efficiency": {"fp32": 0.5}, "cost_per_gpu_hour": 2}],
 "partitions": [{"name": "gpu", "node_types": ["g2"], "nodes": "n[1-2]", "max_time": "1-00:00:00", "default": true}]}`))
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// slurmReplay runs jobs under Slurm alone on site with sched.
func slurmReplay(t *testing.T, site *plan.Site, sched Sched, jobs []Job) map[int]JobResult {
	t.Helper()
	cfg := DefaultConfig(site)
	cfg.Variant, cfg.Seed, cfg.Sched = slurm, 1, sched
	r, err := Run(cfg, jobs)
	if err != nil {
		t.Fatal(err)
	}
	out := map[int]JobResult{}
	for _, j := range r.Jobs {
		out[j.ID] = j
	}
	return out
}

func wantWaits(t *testing.T, name string, got map[int]JobResult, want map[int]float64) {
	t.Helper()
	for id, w := range want {
		if got[id].Wait != w {
			t.Errorf("%s: job %d waited %g s, want %g", name, id, got[id].Wait, w)
		}
	}
}

// TestBackfillReservations: the backfill pass reserves for every blocked
// job at its earliest start, and a later job may start only if it delays
// none of them; the older model (one reservation per partition, EASY)
// lets job 5 take the node job 4 is to start on.
func TestBackfillReservations(t *testing.T) {
	t.Parallel()
	g := func(id int, submit float64, gpus int, run float64) Job {
		return Job{ID: id, User: string(rune('a' + id)), Submit: submit, Nodes: 1, CPUs: 1, GPUs: gpus, Run: run, Limit: run, Partition: "gpu"}
	}
	jobs := []Job{
		g(1, 0, 2, 1000), // n1 until 1000
		g(2, 0, 1, 1500), // n2's first GPU until 1500
		g(3, 1, 2, 1000), // reserved: n1 at 1000
		g(4, 2, 2, 1000), // reserved: n2 at 1500 (n1 is booked until 2000)
		// fits on n2's free GPU now, but would hold it past 1500: it
		// waits for n1 at 2000 (job 3's end)
		g(5, 3, 1, 2000),
	}
	site := twoNodeSite(t)
	wantWaits(t, "backfill", slurmReplay(t, site, SlurmSched(), jobs), map[int]float64{1: 0, 2: 0, 3: 999, 4: 1498, 5: 1997})
	// EASY protects job 3 only: job 5 starts at once on n2, and job 4
	// waits for n1 at 2000
	wantWaits(t, "easy", slurmReplay(t, site, Sched{}, jobs), map[int]float64{3: 999, 4: 1998, 5: 0})
}

// TestBackfillInterval: a job that backfills starts at the next
// bf_interval, not at once (the quick pass keeps strict priority order);
// one that would delay the reservation waits (the figures of the older
// model's TestBackfill, but job 3 at the 30 s pass).
func TestBackfillInterval(t *testing.T) {
	t.Parallel()
	jobs := []Job{
		{ID: 1, User: "a", Submit: 0, Nodes: 1, CPUs: 4, GPUs: 1, Run: 1000, Limit: 1000, Partition: "gpu"},
		{ID: 2, User: "b", Submit: 1, Nodes: 1, CPUs: 4, GPUs: 2, Run: 100, Limit: 200, Partition: "gpu"},
		{ID: 3, User: "c", Submit: 2, Nodes: 1, CPUs: 4, GPUs: 1, Run: 100, Limit: 500, Partition: "gpu"},
		{ID: 4, User: "d", Submit: 3, Nodes: 1, CPUs: 4, GPUs: 1, Run: 100, Limit: 5000, Partition: "gpu"},
	}
	wantWaits(t, "backfill", slurmReplay(t, tinySite(t), SlurmSched(), jobs), map[int]float64{1: 0, 2: 999, 3: 28, 4: 1097})
}

// TestAccountLimit: a job its account's GrpTRES limit holds waits with
// a GPU free (AssocGrpGRES) and blocks no one; without the limit it
// starts and the other account's job waits.
func TestAccountLimit(t *testing.T) {
	t.Parallel()
	jobs := []Job{
		{ID: 1, User: "u1", Account: "heavy", Submit: 0, Nodes: 1, CPUs: 1, GPUs: 1, Run: 1000, Limit: 1000, Partition: "gpu"},
		{ID: 2, User: "u2", Account: "heavy", Submit: 1, Nodes: 1, CPUs: 1, GPUs: 1, Run: 100, Limit: 100, Partition: "gpu"},
		{ID: 3, User: "u3", Account: "light", Submit: 2, Nodes: 1, CPUs: 1, GPUs: 1, Run: 100, Limit: 100, Partition: "gpu"},
	}
	sc := SlurmSched()
	sc.Quota = map[string]int{"heavy": 1}
	wantWaits(t, "limit 1", slurmReplay(t, tinySite(t), sc, jobs), map[int]float64{1: 0, 2: 999, 3: 0})
	wantWaits(t, "no limit", slurmReplay(t, tinySite(t), SlurmSched(), jobs), map[int]float64{1: 0, 2: 0, 3: 99})
}

// TestFairShareOrders: an account that has used the GPUs goes behind one
// that has not, though its job was submitted first; without the
// fair-share weight the older job goes first.
func TestFairShareOrders(t *testing.T) {
	t.Parallel()
	jobs := []Job{
		{ID: 1, User: "heavy", Submit: 0, Nodes: 1, CPUs: 1, GPUs: 2, Run: 1000, Limit: 1000, Partition: "gpu"},
		{ID: 2, User: "heavy", Submit: 10, Nodes: 1, CPUs: 1, GPUs: 2, Run: 100, Limit: 100, Partition: "gpu"},
		{ID: 3, User: "light", Submit: 20, Nodes: 1, CPUs: 1, GPUs: 2, Run: 100, Limit: 100, Partition: "gpu"},
	}
	site := tinySite(t)
	wantWaits(t, "fair-share", slurmReplay(t, site, SlurmSched(), jobs), map[int]float64{2: 1090, 3: 980})
	noFS := SlurmSched()
	noFS.WeightFairshare = 0
	wantWaits(t, "age only", slurmReplay(t, site, noFS, jobs), map[int]float64{2: 990, 3: 1080})
}

func TestPriority(t *testing.T) {
	t.Parallel()
	cfg := SlurmSched()
	tests := []struct {
		age, fs, want float64
	}{
		{0, 1, 10000 + 1000},                   // a new job of an unused account
		{3.5 * 86400, 1, 500 + 10000 + 1000},   // half PriorityMaxAge
		{30 * 86400, 0.25, 1000 + 2500 + 1000}, // the age factor stops at 1
		{-5, 0, 1000},                          // no negative age
		{86400, math.Exp2(-2), 1000.0/7 + 2500 + 1000},
	}
	for _, tc := range tests {
		if got := priority(cfg, tc.age, tc.fs); math.Abs(got-tc.want) > 1e-9 {
			t.Errorf("priority(age %g, fair-share %g) = %g, want %g", tc.age, tc.fs, got, tc.want)
		}
	}
	fs := []struct {
		usage, total, share, want float64
	}{
		{0, 0, 0.5, 1},      // nothing used anywhere
		{50, 100, 0.5, 0.5}, // used its share: 2^-1
		{100, 100, 0.5, 0.25},
		{0, 100, 0.1, 1},
		{10, 100, 0, 0}, // no shares, some use
	}
	for _, tc := range fs {
		if got := fairShareFactor(tc.usage, tc.total, tc.share); math.Abs(got-tc.want) > 1e-12 {
			t.Errorf("fairShareFactor(%g, %g, %g) = %g, want %g", tc.usage, tc.total, tc.share, got, tc.want)
		}
	}
}

// TestAccountsDecay: usage decays by half every PriorityDecayHalfLife
// and grows by the running GPUs' seconds.
func TestAccountsDecay(t *testing.T) {
	t.Parallel()
	a := newAccounts(Sched{}, []Job{{User: "x"}})
	a.use(0, 2, 1, 0, 100)
	a.advance(0, 50, 100)
	if a.usage[0] != 100 {
		t.Errorf("2 GPUs for 50 s: usage %g, want 100", a.usage[0])
	}
	a.use(0, 2, -1, 50, 100)
	a.advance(0, 150, 100)
	if a.usage[0] != 50 {
		t.Errorf("after a half-life idle: usage %g, want 50", a.usage[0])
	}
}

// TestMultiPartition: a job listing both partitions starts on the one
// that can start it (here the other), where Slurm alone waits.
func TestMultiPartition(t *testing.T) {
	t.Parallel()
	jobs := []Job{
		{ID: 1, User: "a", Submit: 0, Nodes: 1, CPUs: 1, GPUs: 2, Run: 1000, Limit: 1000, Partition: "gpu"},
		{ID: 2, User: "b", Submit: 1, Nodes: 1, CPUs: 1, GPUs: 1, Run: 100, Limit: 200, Partition: "gpu"},
	}
	site := siteFile(t, "../../examples/site-sim-philly.json")
	for _, sc := range []Sched{SlurmSched(), {}} {
		cfg := DefaultConfig(site)
		cfg.Sched, cfg.Variant = sc, Variants[5]
		// a full gpu partition: 60 nodes held
		var full []Job
		for k := range 60 {
			full = append(full, Job{ID: 100 + k, User: "f", Submit: 0, Nodes: 1, CPUs: 1, GPUs: 8, Run: 1000, Limit: 1000, Partition: "gpu"})
		}
		r, err := Run(cfg, append(full, jobs[1]))
		if err != nil {
			t.Fatal(err)
		}
		for _, j := range r.Jobs {
			if j.ID == 2 && (j.Wait != 0 || j.Path[0].Partition != "gpu-old") {
				t.Errorf("backfill %v: job 2 waited %g s on %v, want 0 on gpu-old", sc.Backfill, j.Wait, j.Path)
			}
		}
		cfg.Variant = slurm
		if r, err = Run(cfg, append(full, jobs[1])); err != nil {
			t.Fatal(err)
		}
		for _, j := range r.Jobs {
			if j.ID == 2 && j.Wait != 999 {
				t.Errorf("backfill %v, one partition: job 2 waited %g s, want 999", sc.Backfill, j.Wait)
			}
		}
	}
}

// TestDeterministicBackfill: the Philly excerpt replayed twice under
// the multifactor and backfill model with isched gives the same result.
func TestDeterministicBackfill(t *testing.T) {
	t.Parallel()
	jobs, err := ReadPhilly("philly_excerpt.csv", open(t, "testdata/philly_excerpt.csv"))
	if err != nil {
		t.Fatal(err)
	}
	site := siteFile(t, "../../examples/site-sim-philly.json")
	jobs = SpreadPartitions(ScaleArrivals(jobs, 50), []string{"gpu", "gpu-old"}, []float64{480, 160})
	run := func() *Result {
		cfg := DefaultConfig(site)
		cfg.Variant, cfg.Seed, cfg.Adoption, cfg.Sched = isched, 3, 1, SlurmSched()
		cfg.Sched.Quota, cfg.Sched.Shares = AccountQuotas(jobs, 640, 0.1)
		r, err := Run(cfg, jobs)
		if err != nil {
			t.Fatal(err)
		}
		return r
	}
	a, b := run(), run()
	if !reflect.DeepEqual(a, b) {
		t.Errorf("two replays differ:\n%+v\n%+v", Summarize(a), Summarize(b))
	}
	if s := Summarize(a); s.Jobs != 24 || !(s.MeanWait > 0) {
		t.Errorf("summary %+v: want 24 jobs and some wait", s)
	}
}
