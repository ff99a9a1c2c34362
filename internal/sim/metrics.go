package sim

import (
	"cmp"
	"math"
	"slices"

	"github.com/isched/isched/internal/plan"
)

// accounting sums the use of the nodes.
// Utilisation counts the allocations inside [from, to], the span of the
// arrivals: after the last arrival the cluster drains, and a heavy-tailed
// trace's longest jobs would run alone for weeks.
type accounting struct {
	from, to float64
	gpuSec   float64 // GPU-seconds allocated on GPU nodes
	cpuSec   float64 // CPU-seconds allocated on CPU nodes
	cpuOnGPU float64 // CPU-seconds of GPU-less jobs on GPU nodes
	cost     float64
	// hours of the isched jobs' attempts (the same jobs in every
	// variant), and those off the partition their user asked for
	ischedHours, elsewhereHours float64
}

func (a *accounting) add(n *node, ps *plan.PartitionSpec, cpus, gpus int, start, end float64) {
	a.cost += a.rate(n, ps, cpus, gpus) * (end - start) / 3600
	d := max(0, min(end, a.to)-max(start, a.from))
	switch {
	case n.gpuNode():
		a.gpuSec += float64(gpus) * d
		if gpus == 0 {
			a.cpuOnGPU += float64(cpus) * d
		}
	default:
		a.cpuSec += float64(cpus) * d
	}
}

// rate is what a job's share of a node costs per hour in the catalogue's
// units: its GPUs at the GPU-hour rate on a GPU node (a GPU-less job there
// pays its CPUs' share of the node), its CPUs' share of the node-hour rate
// on a CPU node; times the partition's cost factor.
func (a *accounting) rate(n *node, ps *plan.PartitionSpec, cpus, gpus int) float64 {
	f := ps.CostFactor
	if f == 0 {
		f = 1
	}
	if n.gpuNode() {
		perGPU := n.nt.CostPerHour()
		if gpus == 0 {
			return f * perGPU * float64(n.gpus) * float64(cpus) / float64(n.cpus)
		}
		return f * perGPU * float64(gpus)
	}
	return f * n.nt.CostPerHour() * float64(cpus) / float64(n.cpus)
}

// JobResult is one job's outcome.
type JobResult struct {
	ID       int
	Managed  bool // isched planned and moved it
	Isched   bool // submitted through isched in the variants that run it
	GPUs     int
	Submit   float64
	Wait     float64 // to its first start
	JCT      float64 // submission to the end of its last step
	Run      float64 // its run time in the trace
	Done     bool    // all steps done
	Moves    int
	Conts    int
	Preempts int // rule 8 checkpointed and requeued it for a shorter run
	Resizes  int // rule 9 grew or shrank it
	// Twins is how many twins rule 10 kept for it, Handovers how many
	// of them it moved to (counted in Moves too).
	Twins, Handovers int
	Elastic          bool  // a run rule 9 makes elastic, at fixed size in the variants without it
	Lost             int64 // steps redone
	Attempts         int
	Cost             float64
	Touched          bool
	OnOther          bool
	Path             []Hop // its attempts' starts, in order
}

// Result is one replay's outcome.
type Result struct {
	Variant  string
	Jobs     []JobResult
	Makespan float64 // first submission to last end, seconds
	GPUUtil  float64 // allocated / available GPU-seconds over the arrivals' span
	CPUUtil  float64 // allocated / available CPU-seconds of CPU nodes, same span
	Cost     float64
	Events   int64
	Rejected int // jobs left out: no partition of the site can hold them
	// Elsewhere is the fraction of the isched jobs' hours that ran off
	// the partition their user asked for: the work idle CPU, dev and
	// scavenger nodes absorbed.
	Elsewhere float64
	WaitCurve [][2]float64 // (submission time, wait) of every job, by submission
	// TwinIdleGPUHours is what rule 10's twins held without running
	// their run: from a twin's start to its handover (the run's
	// checkpoint) or its cancel.
	TwinIdleGPUHours float64
}

func (s *sim) result() *Result {
	r := &Result{Variant: s.cfg.Variant.Name, Events: s.events0, Rejected: s.rejected, Cost: s.acct.cost, TwinIdleGPUHours: s.twinIdle / 3600}
	if s.acct.ischedHours > 0 {
		r.Elsewhere = s.acct.elsewhereHours / s.acct.ischedHours
	}
	first, last := math.Inf(1), 0.0
	for i := range s.nJobs {
		js := &s.jobs[i]
		j := js.j
		jr := JobResult{ID: j.ID, Managed: js.managed, Isched: js.isched, GPUs: j.GPUs, Submit: j.Submit,
			Run: j.Run, Done: js.lastCkpt >= js.iters, Moves: js.moves, Conts: js.conts, Lost: js.lost,
			Attempts: js.attempts, Preempts: js.preempts, Resizes: js.resizes, Twins: js.twins, Handovers: js.handovers, Elastic: js.elastic, Cost: js.cost, Touched: js.touched, OnOther: js.onOther, Path: js.path}
		if js.firstStart >= 0 {
			jr.Wait = js.firstStart - j.Submit
		}
		jr.JCT = js.end - j.Submit
		first, last = min(first, j.Submit), max(last, js.end)
		r.Jobs = append(r.Jobs, jr)
	}
	r.Makespan = max(last-first, 1)
	span := max(s.acct.to-s.acct.from, 1)
	var gpus, cpus int
	for ni := range s.cl.nodes {
		if n := &s.cl.nodes[ni]; n.gpuNode() {
			gpus += n.gpus
		} else {
			cpus += n.cpus
		}
	}
	if gpus > 0 {
		r.GPUUtil = s.acct.gpuSec / (float64(gpus) * span)
	}
	if cpus > 0 {
		r.CPUUtil = s.acct.cpuSec / (float64(cpus) * span)
	}
	return r
}

// Summary is a replay's figures.
type Summary struct {
	Rejected                   int // jobs no partition can hold
	Jobs                       int
	MeanJCT, MedianJCT, P95JCT float64 // hours
	MeanWait, MedianWait       float64 // hours
	P95Wait                    float64 // hours
	// WaitShare is the share of the jobs' completion time spent waiting
	// (their waits over their completion times, summed): under Slurm
	// alone, the ceiling of what any placement can save.
	WaitShare        float64
	MeanBSLD         float64 // bounded slowdown, 10 s threshold
	GPUUtil, CPUUtil float64
	Elsewhere        float64 // isched jobs' hours off the partition asked, fraction
	Cost             float64
	MovesPerJob      float64 // migrations and dev chunks per isched job
	ContsPerJob      float64 // continuations per isched job
	PreemptsPerJob   float64 // rule 8's preemptions per isched job
	ResizesPerJob    float64 // rule 9's resizes per isched job
	TwinsPerJob      float64 // rule 10's twins per isched job
	HandoversPerJob  float64 // rule 10's handovers per isched job (in MovesPerJob too)
	TwinIdleGPUHours float64 // GPU-hours the twins held idle (Result's)
	LostPerJob       float64 // steps redone per job
	Unfinished       int
	// The isched jobs' mean completion time, and the others': the same
	// jobs in every variant (Slurm alone included).
	MeanJCTManaged, MeanJCTOther float64 // hours
	P95JCTManaged                float64 // the isched jobs' p95 completion time, hours
	MeanJCTElastic               float64 // the elastic runs' (JobResult.Elastic) mean completion time, hours
	ElasticRuns                  int     // how many there are
	OtherWait                    float64 // mean wait of the others (untouched), hours
}

// Summarize computes r's figures. other selects the jobs whose wait
// counts as harm to others (those no variant plans: the same jobs in
// every variant).
func Summarize(r *Result) Summary {
	s := Summary{Jobs: len(r.Jobs), Rejected: r.Rejected, Elsewhere: r.Elsewhere, GPUUtil: r.GPUUtil, CPUUtil: r.CPUUtil, Cost: r.Cost,
		TwinIdleGPUHours: r.TwinIdleGPUHours}
	var jct, wait, bsld, jctM, jctO, waitO, jctE []float64
	var moves, conts, preempts, resizes, twins, handovers, lost float64
	managed := 0
	for _, j := range r.Jobs {
		jct = append(jct, j.JCT/3600)
		wait = append(wait, j.Wait/3600)
		bsld = append(bsld, max(1, j.JCT/max(j.Run, 10)))
		lost += float64(j.Lost)
		if !j.Done {
			s.Unfinished++
		}
		if j.Isched {
			managed++
			moves += float64(j.Moves)
			conts += float64(j.Conts)
			preempts += float64(j.Preempts)
			resizes += float64(j.Resizes)
			twins += float64(j.Twins)
			handovers += float64(j.Handovers)
			jctM = append(jctM, j.JCT/3600)
			if j.Elastic {
				jctE = append(jctE, j.JCT/3600)
			}
		} else {
			jctO = append(jctO, j.JCT/3600)
			waitO = append(waitO, j.Wait/3600)
		}
	}
	s.MeanJCT, s.MedianJCT, s.P95JCT = mean(jct), quantile(jct, 0.5), quantile(jct, 0.95)
	s.MeanWait, s.MedianWait, s.P95Wait = mean(wait), quantile(wait, 0.5), quantile(wait, 0.95)
	if m := mean(jct); m > 0 {
		s.WaitShare = s.MeanWait / m
	}
	s.MeanBSLD = mean(bsld)
	s.MeanJCTManaged, s.MeanJCTOther, s.OtherWait = mean(jctM), mean(jctO), mean(waitO)
	s.P95JCTManaged, s.MeanJCTElastic, s.ElasticRuns = quantile(jctM, 0.95), mean(jctE), len(jctE)
	if managed > 0 {
		s.MovesPerJob = moves / float64(managed)
		s.ContsPerJob = conts / float64(managed)
		s.PreemptsPerJob = preempts / float64(managed)
		s.ResizesPerJob = resizes / float64(managed)
		s.TwinsPerJob = twins / float64(managed)
		s.HandoversPerJob = handovers / float64(managed)
	}
	if len(r.Jobs) > 0 {
		s.LostPerJob = lost / float64(len(r.Jobs))
	}
	return s
}

func mean(v []float64) float64 {
	if len(v) == 0 {
		return 0
	}
	var t float64
	for _, x := range v {
		t += x
	}
	return t / float64(len(v))
}

// quantile is the q-quantile of v (nearest rank); 0 for none.
func quantile(v []float64, q float64) float64 {
	if len(v) == 0 {
		return 0
	}
	s := slices.Clone(v)
	slices.SortFunc(s, cmp.Compare[float64])
	k := int(math.Ceil(q*float64(len(s)))) - 1
	return s[min(max(k, 0), len(s)-1)]
}
