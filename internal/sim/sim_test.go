package sim

import (
	"math"
	"os"
	"slices"
	"testing"

	"github.com/isched/isched/internal/plan"
	"github.com/isched/isched/internal/policy"
)

func tinySite(t *testing.T) *plan.Site { return siteFile(t, "testdata/site-tiny.json") }

// siteFile reads a site catalogue.
func siteFile(t *testing.T, path string) *plan.Site {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	s, err := plan.DecodeSite(b)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// replay runs jobs on the tiny site under variant v with every
// one-device job adopted.
func replay(t *testing.T, v Variant, jobs []Job, tune func(*Config)) map[int]JobResult {
	t.Helper()
	cfg := DefaultConfig(tinySite(t))
	cfg.Variant, cfg.Adoption, cfg.Seed = v, 1, 1
	cfg.DevPartitions = []string{"dev"}
	if tune != nil {
		tune(&cfg)
	}
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

var slurm, isched = Variants[0], Variants[1]

func TestBackfill(t *testing.T) {
	t.Parallel()
	jobs := []Job{
		{ID: 1, User: "a", Submit: 0, Nodes: 1, CPUs: 4, GPUs: 1, Run: 1000, Limit: 1000, Partition: "gpu"},
		{ID: 2, User: "b", Submit: 1, Nodes: 1, CPUs: 4, GPUs: 2, Run: 100, Limit: 200, Partition: "gpu"},
		// fits beside job 1 and ends (by its limit) before job 2's reservation
		{ID: 3, User: "c", Submit: 2, Nodes: 1, CPUs: 4, GPUs: 1, Run: 100, Limit: 500, Partition: "gpu"},
		// fits too, but would hold the reserved GPU past the reservation
		{ID: 4, User: "d", Submit: 3, Nodes: 1, CPUs: 4, GPUs: 1, Run: 100, Limit: 5000, Partition: "gpu"},
	}
	got := replay(t, slurm, jobs, nil)
	tests := []struct {
		id   int
		wait float64
	}{{1, 0}, {2, 999}, {3, 0}, {4, 1097}}
	for _, tc := range tests {
		if w := got[tc.id].Wait; w != tc.wait {
			t.Errorf("job %d waited %g s, want %g", tc.id, w, tc.wait)
		}
	}
}

func TestPreemptionRequeues(t *testing.T) {
	t.Parallel()
	jobs := []Job{
		{ID: 1, User: "a", Submit: 0, Nodes: 1, CPUs: 4, GPUs: 2, Run: 4000, Limit: 8000, Partition: "scavenger"},
		{ID: 2, User: "b", Submit: 2000, Nodes: 1, CPUs: 4, GPUs: 2, Run: 100, Limit: 200, Partition: "gpu"},
	}
	got := replay(t, slurm, jobs, func(c *Config) { c.CkptEvery = 1800 })
	if got[2].Wait != 0 {
		t.Errorf("the gpu job waited %g s for the scavenger job", got[2].Wait)
	}
	// preempted at step 2000, resumed from the checkpoint at 1800
	if j := got[1]; j.Lost != 200 || j.Attempts != 2 || !j.Done {
		t.Errorf("scavenger job: lost %d, attempts %d, done %v; want 200, 2, true", j.Lost, j.Attempts, j.Done)
	}
}

func TestPerUserLimit(t *testing.T) {
	t.Parallel()
	// the gpu partition allows 2 GPUs per user: a's second job waits,
	// b's does not
	jobs := []Job{
		{ID: 1, User: "a", Submit: 0, Nodes: 1, CPUs: 1, GPUs: 2, Run: 1000, Limit: 2000, Partition: "gpu"},
		{ID: 2, User: "a", Submit: 1, Nodes: 1, CPUs: 1, GPUs: 1, Run: 10, Limit: 100, Partition: "gpu"},
		{ID: 3, User: "b", Submit: 2, Nodes: 1, CPUs: 1, GPUs: 0, Run: 10, Limit: 100, Partition: "cpu"},
	}
	got := replay(t, slurm, jobs, nil)
	if got[2].Wait != 999 || got[3].Wait != 0 {
		t.Errorf("waits %g and %g, want 999 and 0", got[2].Wait, got[3].Wait)
	}
}

func TestDevWindow(t *testing.T) {
	t.Parallel()
	w, err := policy.ParseWindow("18:00-08:00")
	if err != nil {
		t.Fatal(err)
	}
	s, err := newSim(Config{Site: tinySite(t), DevPartitions: []string{"dev"}, DevWindows: []policy.Window{w}, Tick: 1, Poll: 1, CkptEvery: 1, CkptDur: 1, Depth: 1}, nil)
	if err != nil {
		t.Fatal(err)
	}
	dev := s.cl.byName["dev"]
	for _, tc := range []struct {
		hour float64
		up   bool
	}{{3, true}, {12, false}, {19, true}} {
		s.now = tc.hour * 3600
		if s.partUp(dev) != tc.up || !s.partUp(s.cl.byName["gpu"]) {
			t.Errorf("at %g h: dev up %v, want %v", tc.hour, s.partUp(dev), tc.up)
		}
	}
}

// A one-GPU job arrives while a two-GPU job holds the GPU node: Slurm
// alone waits for it; isched starts it on the CPU node and migrates it
// when the GPU node frees (checkpoint, requeue), as the real policy
// decides.
func TestIschedMigrates(t *testing.T) {
	t.Parallel()
	jobs := []Job{
		{ID: 1, User: "a", Submit: 0, Nodes: 1, CPUs: 4, GPUs: 2, Run: 7200, Limit: 7200, Partition: "gpu"},
		{ID: 2, User: "b", Submit: 60, Nodes: 1, CPUs: 4, GPUs: 1, Run: 3 * 3600, Partition: "gpu"},
	}
	base := replay(t, slurm, jobs, nil)[2]
	got := replay(t, isched, jobs, nil)[2]
	if base.Moves != 0 || base.Wait < 7000 {
		t.Fatalf("Slurm alone: %+v", base)
	}
	if got.Moves != 1 || !got.OnOther || got.Wait != 0 || !got.Done {
		t.Errorf("isched: moves %d, on another partition %v, wait %g, done %v; want 1, true, 0, true", got.Moves, got.OnOther, got.Wait, got.Done)
	}
	if got.JCT >= base.JCT {
		t.Errorf("isched JCT %g s, not below Slurm alone's %g s", got.JCT, base.JCT)
	}
}

// A run longer than the partition's limit: its user resubmits it after
// each time limit (UserDelay later); isched continues it at once from a
// checkpoint taken before the limit.
func TestContinuation(t *testing.T) {
	t.Parallel()
	jobs := []Job{{ID: 1, User: "a", Submit: 0, Nodes: 1, CPUs: 4, GPUs: 1, Run: 5 * 3600, Partition: "gpu"}}
	site := func(c *Config) {
		for i := range c.Site.Partitions {
			c.Site.Partitions[i].MaxTime = "2:00:00" // every partition: a 2 h limit
		}
	}
	base := replay(t, slurm, jobs, site)[1]
	got := replay(t, isched, jobs, site)[1]
	if !base.Done || base.Attempts < 3 || base.Lost == 0 {
		t.Fatalf("Slurm alone: %+v", base)
	}
	if !got.Done || got.Conts < 2 || got.JCT >= base.JCT || got.Lost >= base.Lost {
		t.Errorf("isched: %+v; want done, ≥ 2 continuations, JCT < %g and lost < %d", got, base.JCT, base.Lost)
	}
	noCont := replay(t, Variants[3], jobs, site)[1]
	if noCont.Conts != 0 || noCont.JCT <= got.JCT {
		t.Errorf("without continuation: %+v; want no continuation and JCT > %g", noCont, got.JCT)
	}
}

func TestDeterministic(t *testing.T) {
	t.Parallel()
	runtimes := []float64{60, 600, 3600, 7200, 36000}
	mix := []Job{{CPUs: 4, GPUs: 1}, {CPUs: 4, GPUs: 2}, {CPUs: 8}}
	cl, err := newCluster(tinySite(t), []string{"dev"})
	if err != nil {
		t.Fatal(err)
	}
	jobs := ScaleLoad(Synthesize(runtimes, mix, 200, 7), capacity(cl), 0.9)
	run := func() Summary {
		cfg := DefaultConfig(tinySite(t))
		cfg.Variant, cfg.Seed, cfg.DevPartitions = Variants[2], 7, []string{"dev"}
		r, err := Run(cfg, jobs)
		if err != nil {
			t.Fatal(err)
		}
		return Summarize(r)
	}
	a, b := run(), run()
	if a != b {
		t.Errorf("two replays differ:\n%+v\n%+v", a, b)
	}
	if a.Jobs != 200 || a.Unfinished != 0 || !(a.MeanJCT > 0) {
		t.Errorf("summary %+v", a)
	}
}

func TestScaleLoad(t *testing.T) {
	t.Parallel()
	jobs := Synthesize([]float64{100, 1000, 10000}, []Job{{CPUs: 1, GPUs: 1}}, 2000, 3)
	capy := &siteCap{gpus: 10}
	for _, load := range []float64{0.5, 0.9} {
		out := ScaleLoad(jobs, capy, load)
		end := out[len(out)-1].Submit
		var work float64
		for _, j := range out {
			work += min(j.Run, end-j.Submit)
		}
		if got := work / (10 * end); math.Abs(got-load) > 0.01 {
			t.Errorf("load %g: offered %g", load, got)
		}
	}
}

func TestInterval(t *testing.T) {
	t.Parallel()
	tests := []struct {
		in         []float64
		mean, half float64
	}{
		{nil, 0, 0},
		{[]float64{2}, 2, 0},
		{[]float64{1, 3}, 2, 12.706},
		{[]float64{1, 2, 3}, 2, 4.303 / math.Sqrt(3)},
	}
	for _, tc := range tests {
		got := interval(tc.in)
		if math.Abs(got.Mean-tc.mean) > 1e-9 || math.Abs(got.Half-tc.half) > 1e-9 {
			t.Errorf("interval(%v) = %+v, want %g ± %g", tc.in, got, tc.mean, tc.half)
		}
	}
}

// TestPredictErrorReachesThePlan: with --predict-error the planner sees
// each run's work off by its drawn factor (the time limit it asks for
// follows the estimate, not the run), drawn the same way every time; at
// 0 every factor is 1, so exact replays are the same as before.
func TestPredictErrorReachesThePlan(t *testing.T) {
	t.Parallel()
	jobs := []Job{{ID: 1, User: "a", Submit: 0, Nodes: 1, CPUs: 4, GPUs: 1, Run: 3600, Partition: "gpu"}}
	limits := func(sigma float64) []float64 {
		cfg := DefaultConfig(tinySite(t))
		cfg.Variant, cfg.Adoption, cfg.Seed, cfg.PredictErr = isched, 1, 3, sigma
		s, err := newSim(cfg, jobs)
		if err != nil {
			t.Fatal(err)
		}
		var out []float64
		for i := range s.jobs {
			if s.jobs[i].managed {
				s.submitPlanned(i)
				out = append(out, s.jobs[i].limit, s.jobs[i].predErr)
			}
		}
		return out
	}
	exact, again, off := limits(0), limits(0.5), limits(0.5)
	if len(exact) != 2 || exact[1] != 1 {
		t.Fatalf("exact replay: limit and factor %v, want factor 1", exact)
	}
	if !slices.Equal(again, off) {
		t.Errorf("the same seed drew %v then %v", again, off)
	}
	if again[1] == 1 || again[0] == exact[0] || (again[0] > exact[0]) != (again[1] > 1) {
		t.Errorf("with sigma 0.5: limit %g (exact %g), factor %g: the limit must follow the estimate", again[0], exact[0], again[1])
	}
}

// TestPreemptForShortInReplay is rule 8 in the replay: two 10-hour runs
// hold the only GPU node when a 10-minute run arrives. Slurm alone keeps
// it waiting about 10 hours; with preempt_for_short the longer run left
// checkpoints and is requeued held, the short one starts in its place,
// and the long one resumes from its checkpoint once released, having
// lost at most the steps of the checkpoint it was asked for.
func TestPreemptForShortInReplay(t *testing.T) {
	t.Parallel()
	jobs := []Job{
		{ID: 1, User: "a", Submit: 0, Nodes: 1, CPUs: 4, GPUs: 1, Run: 10 * 3600, Partition: "gpu"},
		{ID: 2, User: "b", Submit: 0, Nodes: 1, CPUs: 4, GPUs: 1, Run: 10*3600 + 600, Partition: "gpu"},
		{ID: 3, User: "c", Submit: 3600, Nodes: 1, CPUs: 4, GPUs: 1, Run: 600, Partition: "gpu"},
	}
	gpuOnly := func(c *Config) { c.Site.Partitions = c.Site.Partitions[:1] }
	preempt := Variant{Name: "isched+preempt", Isched: true, Preempt: true}
	base := replay(t, isched, jobs, gpuOnly)
	got := replay(t, preempt, jobs, gpuOnly)
	if w := base[3].Wait; w < 9*3600 {
		t.Fatalf("without rule 8 the short run waited %g s; the test wants it to wait behind the long ones", w)
	}
	if w := got[3].Wait; w > 300 {
		t.Errorf("with rule 8 the short run waited %g s, want under 5 min", w)
	}
	long := got[2] // the one with more left
	if long.Preempts != 1 || got[1].Preempts != 0 || !long.Done || long.Attempts != 2 {
		t.Errorf("the longer run: %+v, the other %+v; want job 2 preempted once, done in two attempts", long, got[1])
	}
	if long.Lost > 60 { // steps of 1 s: the checkpoint took 30 s
		t.Errorf("the preempted run lost %d steps", long.Lost)
	}
	if p := long.Path; len(p) != 2 || p[1].At < got[3].Submit+got[3].Wait+got[3].Run {
		t.Errorf("the preempted run's attempts %+v: it must resume after the short run ends", p)
	}
	sum := func(r map[int]JobResult) (s float64) {
		for _, j := range r {
			s += j.JCT
		}
		return s
	}
	if sum(got) >= sum(base) {
		t.Errorf("summed completion time %g s with rule 8, not below %g s without", sum(got), sum(base))
	}
}

// TestTrimAnyShape: with Config.AnyShape a job isched does not plan (a
// CPU job of the whole request its user wrote) is still isched's, and rule
// 6 lowers its time limit once a checkpoint is confirmed. The waiting
// whole-node job's reservation then moves from the user's 20 h guess to
// the run's predicted end: it starts when the run ends, and the later
// 8 h job is no longer backfilled into the resources it needs.
func TestTrimAnyShape(t *testing.T) {
	t.Parallel()
	jobs := []Job{
		{ID: 1, User: "a", Submit: 0, Nodes: 1, CPUs: 8, Run: 4 * 3600, Limit: 20 * 3600, Partition: "cpu"},
		{ID: 2, User: "b", Submit: 600, Nodes: 1, CPUs: 16, Run: 3600, Limit: 2 * 3600, Partition: "cpu"},
		{ID: 3, User: "c", Submit: 3600, Nodes: 1, CPUs: 8, Run: 6 * 3600, Limit: 8 * 3600, Partition: "cpu"},
	}
	trim := Variant{Name: "isched+trim", Isched: true, Trim: true}
	anyShape := func(c *Config) { c.AnyShape = true }
	planned := replay(t, trim, jobs, nil) // one-GPU jobs only: none of these
	got := replay(t, trim, jobs, anyShape)
	if planned[1].Isched || !got[1].Isched || !got[1].Managed {
		t.Fatalf("job 1 isched's: %v without AnyShape, %v (managed %v) with it", planned[1].Isched, got[1].Isched, got[1].Managed)
	}
	if w := planned[2].Wait; w < 6*3600 {
		t.Fatalf("untrimmed, the whole-node job waited %g s; the test wants it behind the backfilled 8 h job", w)
	}
	if w := got[2].Wait; w > 4*3600 {
		t.Errorf("trimmed, the whole-node job waited %g s, want it to start when job 1 ends (3.8 h)", w)
	}
	if got[3].Wait < got[2].Wait {
		t.Errorf("job 3 started at %g s, before the reserved job 2 (%g s)", got[3].Submit+got[3].Wait, got[2].Submit+got[2].Wait)
	}
	for id, r := range got {
		if !r.Done || r.Conts != 0 || r.Lost != 0 {
			t.Errorf("job %d: %+v; want done in one attempt", id, r)
		}
	}
}

// TestElasticInReplay is rule 9 in the replay: a long one-GPU run that
// arrives alone on the 2-GPU node starts on both GPUs (StartSize), shrinks
// back when another job arrives, and grows again once that one has ended;
// it finishes far sooner than at its fixed size, and the other job barely
// waits.
func TestElasticInReplay(t *testing.T) {
	t.Parallel()
	jobs := []Job{
		{ID: 1, User: "a", Submit: 0, Nodes: 1, CPUs: 4, GPUs: 1, Run: 10 * 3600, Partition: "gpu"},
		{ID: 2, User: "b", Submit: 3 * 3600, Nodes: 1, CPUs: 4, GPUs: 1, Run: 3600, Partition: "gpu"},
	}
	gpuOnly := func(c *Config) { c.Site.Partitions = c.Site.Partitions[:1] }
	elastic := Variant{Name: "isched+elastic", Isched: true, Elastic: true}
	base := replay(t, isched, jobs, gpuOnly)
	got := replay(t, elastic, jobs, gpuOnly)
	if base[1].Resizes != 0 || base[1].JCT < 10*3600 {
		t.Fatalf("at its fixed size: %+v", base[1])
	}
	// 0.9 of 2 GPUs: 1.8 times as fast for the ~9 h of its 10 it holds both
	// (a resize loses only the steps run while its checkpoint is written)
	if r := got[1]; r.JCT > 0.65*base[1].JCT || r.Resizes != 2 || !r.Done || r.Lost > 2*int64(DefaultConfig(nil).CkptDur*2) {
		t.Errorf("elastic run: JCT %.0f s (fixed %.0f s), %d resizes, lost %d, done %v; want under 65 %%, 2 resizes (shrink, grow), little lost",
			r.JCT, base[1].JCT, r.Resizes, r.Lost, r.Done)
	}
	if p := got[1].Path; len(p) != 3 || p[0].GPUs != 2 || p[1].GPUs != 1 || p[2].GPUs != 2 || got[2].Path[0].GPUs != 1 {
		t.Errorf("attempts %+v, the other job's %+v: want the run at 2, 1 and 2 GPUs, the other at 1", p, got[2].Path)
	}
	if w := got[2].Wait; w > 300 {
		t.Errorf("the job that arrived waited %.0f s for the elastic run to shrink, want under 5 min", w)
	}
	if got[2].Resizes != 0 || got[2].Managed && got[2].Touched {
		t.Errorf("the other job was resized or touched: %+v", got[2])
	}
}

// TestElasticWaitingInReplay: an elastic run that arrives while its
// partition's two GPUs idle asks for both (policy.StartSize); left waiting
// for them past min_pending (here nothing schedules it), rule 9 sets it
// back to its base with the coordinator's policy.ShrinkWaiting, its CPUs
// with it, and counts a resize.
func TestElasticWaitingInReplay(t *testing.T) {
	t.Parallel()
	cfg := DefaultConfig(tinySite(t))
	cfg.Variant, cfg.Adoption, cfg.Seed = Variant{Name: "isched+elastic", Isched: true, Elastic: true}, 1, 1
	cfg.Site.Partitions = cfg.Site.Partitions[:1]
	s, err := newSim(cfg, []Job{{ID: 0, User: "a", Submit: 0, Nodes: 1, CPUs: 4, GPUs: 1, Run: 10 * 3600, Partition: "gpu"}})
	if err != nil {
		t.Fatal(err)
	}
	s.arrive(0)
	js := &s.jobs[0]
	if js.state != stPending || js.gpus != 2 || js.plan.Elastic == nil {
		t.Fatalf("arrived: state %v, %d GPUs, elastic %v; want pending at 2", js.state, js.gpus, js.plan.Elastic)
	}
	cpus := js.cpus
	minPending := orDefault(s.pol.MinPending, policy.DefaultMinPending).Seconds()
	s.now = minPending / 2
	s.resizeElastic()
	if js.gpus != 2 || js.resizes != 0 {
		t.Fatalf("within min_pending: %d GPUs, %d resizes; want it left at 2", js.gpus, js.resizes)
	}
	s.now = minPending + 1
	s.resizeElastic()
	if js.gpus != 1 || js.cpus != cpus/2 || js.resizes != 1 || js.state != stPending {
		t.Errorf("after min_pending: %d GPUs, %d CPUs (from %d), %d resizes, state %v; want pending at 1 GPU and half the CPUs, 1 resize",
			js.gpus, js.cpus, cpus, js.resizes, js.state)
	}
}
