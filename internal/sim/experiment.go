package sim

import (
	"fmt"
	"maps"
	"math"
	"slices"

	"github.com/isched/isched/internal/plan"
	"github.com/isched/isched/internal/policy"
)

// Experiment replays one trace on one site under every variant, at
// several loads, once per seed.
type Experiment struct {
	Name string
	// Jobs is the trace of one seed (a window of a long trace, or a
	// synthesized one), before load scaling.
	Jobs          func(seed uint64) []Job
	Site          *plan.Site
	DevPartitions []string
	DevWindows    []policy.Window
	Loads         []float64 // 0: the trace's own arrivals
	// Factors: Loads are factors of the trace's own arrival rate
	// (ScaleArrivals), not offered loads of the site's capacity.
	Factors  bool
	Seeds    []uint64
	Variants []Variant
	// Base is the configuration every replay starts from (DefaultConfig).
	Base Config
}

// Cell is one replay's figures.
type Cell struct {
	Load    float64
	Variant string
	Seed    uint64
	Offered float64 // the replayed trace's offered load (OfferedLoad) on the site's GPUs
	Summary Summary
	Result  *Result // kept for the first seed only (plots)
}

// Run replays every load, seed and variant, in that order.
func (e *Experiment) Run() ([]Cell, error) {
	cl, err := newCluster(e.Site, e.DevPartitions)
	if err != nil {
		return nil, err
	}
	capy := capacity(cl)
	var cells []Cell
	for _, load := range e.Loads {
		for k, seed := range e.Seeds {
			jobs := e.Jobs(seed)
			switch {
			case e.Factors:
				jobs = ScaleArrivals(jobs, load)
			case load > 0:
				jobs = ScaleLoad(jobs, capy, load)
			}
			offered := OfferedLoad(jobs, capy.gpus)
			for _, v := range e.Variants {
				cfg := e.Base
				cfg.Site, cfg.DevPartitions, cfg.DevWindows, cfg.Variant, cfg.Seed = e.Site, e.DevPartitions, e.DevWindows, v, seed
				r, err := Run(cfg, jobs)
				if err != nil {
					return nil, fmt.Errorf("sim: %s, load %g, seed %d, %s: %w", e.Name, load, seed, v.Name, err)
				}
				c := Cell{Load: load, Variant: v.Name, Seed: seed, Summary: Summarize(r), Offered: offered}
				if k == 0 {
					c.Result = r
				}
				cells = append(cells, c)
			}
		}
	}
	return cells, nil
}

// Interval is a mean over seeds and its 95 % confidence interval's half
// width (Student's t; 0 with one seed).
type Interval struct {
	Mean, Half float64
	N          int
}

func (i Interval) String() string {
	if i.N < 2 {
		return fmt.Sprintf("%.3g", i.Mean)
	}
	return fmt.Sprintf("%.3g ± %.2g", i.Mean, i.Half)
}

// interval is the mean of v with its 95 % confidence half width.
func interval(v []float64) Interval {
	n := len(v)
	if n == 0 {
		return Interval{}
	}
	m := mean(v)
	if n < 2 {
		return Interval{Mean: m, N: n}
	}
	var ss float64
	for _, x := range v {
		ss += (x - m) * (x - m)
	}
	sd := math.Sqrt(ss / float64(n-1))
	return Interval{Mean: m, Half: tQuantile975(n-1) * sd / math.Sqrt(float64(n)), N: n}
}

// tQuantile975 is Student's t 97.5 % quantile for df degrees of freedom.
func tQuantile975(df int) float64 {
	table := []float64{12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228,
		2.201, 2.179, 2.160, 2.145, 2.131, 2.120, 2.110, 2.101, 2.093, 2.086}
	if df >= 1 && df <= len(table) {
		return table[df-1]
	}
	return 1.96
}

// Row is one load and variant over the seeds: each figure's interval,
// and the paired changes against Slurm alone on the same seeds.
type Row struct {
	Load    float64
	Variant string
	JCT, MedianJCT, P95JCT, Wait, BSLD,
	GPUUtil, CPUUtil, Elsewhere, Cost, Moves, Conts, Preempts, Resizes, Lost,
	Twins, Handovers, TwinIdle,
	JCTIsched, OtherWait Interval
	MedianWait, P95Wait Interval
	// WaitShare is this variant's share of completion time spent
	// waiting; Ceiling the baseline's (Slurm alone) at the same load: the
	// most any placement of the jobs could take off their completion time.
	WaitShare, Ceiling Interval
	Offered            float64 // the offered load replayed (GPU-time / (GPUs × span))
	// DJCT is the change of the mean JCT against Slurm alone, DJCTIsched
	// of the isched jobs' mean JCT, DOtherWait of the untouched jobs' mean
	// wait; fractions (−0.25: 25 % lower), paired by seed.
	DJCT, DJCTIsched, DOtherWait Interval
	// DP95Isched is the change of the isched jobs' p95 completion time,
	// DJCTElastic of the elastic runs' mean (the same runs at fixed size
	// in the baseline).
	DP95Isched, DJCTElastic Interval
	Unfinished              float64
}

// Aggregate turns cells into rows, per load in order and per variant in
// the order they ran. baseline names the variant changes are against.
func Aggregate(cells []Cell, baseline string) []Row {
	type key struct {
		load    float64
		variant string
	}
	var keys []key
	by := map[key][]Cell{}
	base := map[float64]map[uint64]Summary{}
	for _, c := range cells {
		k := key{c.Load, c.Variant}
		if _, ok := by[k]; !ok {
			keys = append(keys, k)
		}
		by[k] = append(by[k], c)
		if c.Variant == baseline {
			if base[c.Load] == nil {
				base[c.Load] = map[uint64]Summary{}
			}
			base[c.Load][c.Seed] = c.Summary
		}
	}
	rows := make([]Row, 0, len(keys))
	for _, k := range keys {
		r := aggregateRow(k.load, k.variant, by[k], base[k.load])
		var ceil []float64
		for _, seed := range slices.Sorted(maps.Keys(base[k.load])) {
			ceil = append(ceil, base[k.load][seed].WaitShare)
		}
		r.Ceiling = interval(ceil)
		rows = append(rows, r)
	}
	return rows
}

func aggregateRow(load float64, variant string, cs []Cell, base map[uint64]Summary) Row {
	r := Row{Load: load, Variant: variant}
	pick := func(f func(s Summary) float64) Interval {
		v := make([]float64, len(cs))
		for i, c := range cs {
			v[i] = f(c.Summary)
		}
		return interval(v)
	}
	change := func(f func(s Summary) float64) Interval {
		var v []float64
		for _, c := range cs {
			if b, ok := base[c.Seed]; ok && f(b) > 0 {
				v = append(v, f(c.Summary)/f(b)-1)
			}
		}
		return interval(v)
	}
	r.JCT = pick(func(s Summary) float64 { return s.MeanJCT })
	r.MedianJCT = pick(func(s Summary) float64 { return s.MedianJCT })
	r.P95JCT = pick(func(s Summary) float64 { return s.P95JCT })
	r.Wait = pick(func(s Summary) float64 { return s.MeanWait })
	r.MedianWait = pick(func(s Summary) float64 { return s.MedianWait })
	r.P95Wait = pick(func(s Summary) float64 { return s.P95Wait })
	r.WaitShare = pick(func(s Summary) float64 { return s.WaitShare })
	for _, c := range cs {
		r.Offered += c.Offered / float64(len(cs))
	}
	r.BSLD = pick(func(s Summary) float64 { return s.MeanBSLD })
	r.GPUUtil = pick(func(s Summary) float64 { return s.GPUUtil })
	r.CPUUtil = pick(func(s Summary) float64 { return s.CPUUtil })
	r.Elsewhere = pick(func(s Summary) float64 { return s.Elsewhere })
	r.Cost = pick(func(s Summary) float64 { return s.Cost })
	r.Moves = pick(func(s Summary) float64 { return s.MovesPerJob })
	r.Conts = pick(func(s Summary) float64 { return s.ContsPerJob })
	r.Preempts = pick(func(s Summary) float64 { return s.PreemptsPerJob })
	r.Resizes = pick(func(s Summary) float64 { return s.ResizesPerJob })
	r.Lost = pick(func(s Summary) float64 { return s.LostPerJob })
	r.Twins = pick(func(s Summary) float64 { return s.TwinsPerJob })
	r.Handovers = pick(func(s Summary) float64 { return s.HandoversPerJob })
	r.TwinIdle = pick(func(s Summary) float64 { return s.TwinIdleGPUHours })
	r.JCTIsched = pick(func(s Summary) float64 { return s.MeanJCTManaged })
	r.OtherWait = pick(func(s Summary) float64 { return s.OtherWait })
	r.DJCT = change(func(s Summary) float64 { return s.MeanJCT })
	r.DJCTIsched = change(func(s Summary) float64 { return s.MeanJCTManaged })
	r.DOtherWait = change(func(s Summary) float64 { return s.OtherWait })
	r.DP95Isched = change(func(s Summary) float64 { return s.P95JCTManaged })
	if pick(func(s Summary) float64 { return float64(s.ElasticRuns) }).Mean > 0 { // Slurm alone has none
		r.DJCTElastic = change(func(s Summary) float64 { return s.MeanJCTElastic })
	}
	r.Unfinished = pick(func(s Summary) float64 { return float64(s.Unfinished) }).Mean
	return r
}

// Loads lists the loads of rows, in order.
func Loads(rows []Row) []float64 {
	var out []float64
	for _, r := range rows {
		if !slices.Contains(out, r.Load) {
			out = append(out, r.Load)
		}
	}
	return out
}
