package estimate

import (
	"math"
	"slices"
)

// PastRun is one earlier run of the same model configuration and batch
// on the same partition, as a Slurm-confirmed receipt holds it.
type PastRun struct {
	// UID is the run's owner as Slurm reported it (the receipt is
	// confirmed only when the job table's owner matched it), never
	// something the job itself claimed.
	UID    int
	IterMS float64
}

// PriorSource says where an iteration estimate made before a run's own
// first iterations comes from.
type PriorSource string

// Prior sources, best first.
const (
	// PriorOwn: the same user's earlier runs. A trace study of HPC and
	// DL clusters found a user's own past run times the best predictor
	// of the next run's.
	PriorOwn PriorSource = "own"
	// PriorPooled: other users' earlier runs, each user counting as the
	// median of their runs (no one user's many runs outvote the rest).
	PriorPooled PriorSource = "pooled"
)

// Prior is the iteration estimate for uid's run before its first
// iteration: from uid's own earlier runs when there are any (the median,
// the band their smallest to their largest), else from other users'
// (the median of each user's median, the band the smallest to the
// largest of those). n is how many runs (own) or users (pooled) it rests
// on; ok is false without a usable run. The estimate is Provisional and
// carries no overhead: a receipt's iteration time is the run's typical
// step, and the ETA band's widening by earlier runs (ETA.WithPast) and
// their drift (ETA.WithDrift) comes on top.
func Prior(uid int, runs []PastRun) (est IterEstimate, src PriorSource, n int, ok bool) {
	var own []float64
	others := map[int][]float64{}
	for _, r := range runs {
		if !(r.IterMS > 0) || math.IsInf(r.IterMS, 0) {
			continue
		}
		if r.UID == uid {
			own = append(own, r.IterMS)
		} else {
			others[r.UID] = append(others[r.UID], r.IterMS)
		}
	}
	if len(own) > 0 {
		return priorOf(own), PriorOwn, len(own), true
	}
	if len(others) == 0 {
		return IterEstimate{}, "", 0, false
	}
	meds := make([]float64, 0, len(others))
	for _, v := range others {
		meds = append(meds, median(v))
	}
	return priorOf(meds), PriorPooled, len(meds), true
}

// priorOf is the median of vs with the band from the smallest to the
// largest.
func priorOf(vs []float64) IterEstimate {
	return IterEstimate{MS: median(vs), LowMS: slices.Min(vs), HighMS: slices.Max(vs), N: len(vs), Provisional: true}
}
