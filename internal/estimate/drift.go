package estimate

import (
	"math"
	"slices"
	"time"

	"github.com/isched/isched/internal/report"
)

// Drift: how far a run's ETA turned out to be off, kept for later runs of
// the same work. A machine's speed wanders within a run (a job sharing the
// node ends, the page cache warms, the host is shared): the steps measured
// by 10 % of a run cannot show what the rest will do, but earlier runs of
// the same configuration on the same nodes can. A run records what its ETA
// predicted at DriftFracs (MarkDrift); at its end the ratio of what the
// rest took to what was predicted (DriftRatios) goes into its receipt; a
// later run's band is widened to hold its end at those ratios
// (DriftAt, ETA.WithDrift). Conformal, in the statistician's word: the
// band is as wide as the estimator's own misses on earlier runs.

// DriftFracs are the progress points at which a run's ETA is recorded:
// every 5 or 10 points, so that a later run's calibrated band
// (ETA.Calibrated) is scored on misses made where it stands; receipts
// written before kept only 0.10, 0.25 and 0.50, which DriftAt still reads.
var DriftFracs = []float64{0.05, 0.10, 0.15, 0.20, 0.25, 0.30, 0.40, 0.50, 0.60, 0.70, 0.80, 0.90}

// Ratio bounds: a ratio outside them is not a drift but a broken record
// (or a run that waited outside the cluster's view) and is ignored.
const (
	minDriftRatio = 0.02
	maxDriftRatio = 50
)

// DriftMark is what a run's ETA predicted at one point of it.
type DriftMark struct {
	At     float64 `json:"at"`      // the DriftFracs point passed
	Step   int64   `json:"step"`    // steps done then
	AtMS   int64   `json:"at_ms"`   // when (Unix ms)
	PredMS float64 `json:"pred_ms"` // predicted time per remaining step
}

// MarkDrift returns marks with one more for each point of DriftFracs that
// step/total has passed and marks does not hold yet: at time at, with the
// estimate's predicted time per step (MS + OverheadMSPerIter). Nothing is
// marked without a total or an estimate, or once the run is done.
func MarkDrift(marks []DriftMark, step, total int64, at time.Time, est IterEstimate) []DriftMark {
	if total <= 0 || step <= 0 || step >= total || !(est.MS > 0) || math.IsInf(est.MS, 0) {
		return marks
	}
	pred := est.MS + max(est.OverheadMSPerIter, 0)
	frac := float64(step) / float64(total)
	for i, f := range DriftFracs {
		if f > frac {
			break
		}
		if slices.ContainsFunc(marks, func(m DriftMark) bool { return m.At == f }) {
			continue
		}
		// passed several points at once (a late first estimate): mark
		// only the latest, the only one measured where it claims
		if i+1 < len(DriftFracs) && DriftFracs[i+1] <= frac {
			continue
		}
		marks = append(marks, DriftMark{At: f, Step: step, AtMS: at.UnixMilli(), PredMS: pred})
	}
	return marks
}

// DriftRatios judges marks at a run's end (endStep steps done at endMS):
// for each, the mean time per step from the mark to the end over the time
// per step predicted there. Marks with no step after them, and ratios
// outside [0.02, 50], are left out.
func DriftRatios(marks []DriftMark, endStep, endMS int64) []report.ETARatio {
	var out []report.ETARatio
	for _, m := range marks {
		steps := endStep - m.Step
		if steps <= 0 || !(m.PredMS > 0) || endMS <= m.AtMS {
			continue
		}
		r := float64(endMS-m.AtMS) / float64(steps) / m.PredMS
		if validDrift(r) {
			out = append(out, report.ETARatio{At: m.At, Ratio: r})
		}
	}
	return out
}

func validDrift(r float64) bool { return r >= minDriftRatio && r <= maxDriftRatio }

// DriftAt is the ratio of one earlier run for a run now at progress frac:
// the one recorded at the latest point not after frac, else the earliest
// one (a run before 10 % borrows its 10 % figure). Ratios that are not
// valid, or points outside (0, 1), are skipped.
func DriftAt(rs []report.ETARatio, frac float64) (float64, bool) {
	best, bestAt, found := 0.0, 0.0, false
	first, firstAt, haveFirst := 0.0, math.Inf(1), false
	for _, r := range rs {
		if !validDrift(r.Ratio) || !(r.At > 0 && r.At < 1) {
			continue
		}
		if r.At <= frac && (!found || r.At > bestAt) {
			best, bestAt, found = r.Ratio, r.At, true
		}
		if r.At < firstAt {
			first, firstAt, haveFirst = r.Ratio, r.At, true
		}
	}
	if found {
		return best, true
	}
	return first, haveFirst
}

// DriftTrimMin is the pool size from which WithDrift leaves out the most
// extreme tenth of the ratios on each side: one freak run (a node shared
// with a heavy job) must not widen every later band for good once there
// are enough others to say it was one.
const DriftTrimMin = 10

// WithDrift widens the band of an ETA that PredictEnd(now, …, est,
// extraMS) made so that it holds the end the run reaches if the rest of it
// runs at each ratio × the predicted time per step (earlier runs' misses
// at the same point, DriftAt). From DriftTrimMin valid ratios on, only
// those between the 10th and the 90th percentile (nearest rank) count.
// The end itself stays this run's own prediction. Ratios outside
// [0.02, 50] are skipped; an unknown ETA is returned as is.
func (e ETA) WithDrift(now time.Time, est IterEstimate, extraMS float64, ratios []float64) ETA {
	if !e.Known {
		return e
	}
	lo, hi, ok := driftSpread(ratios)
	if !ok {
		return e
	}
	pred := est.MS + max(est.OverheadMSPerIter, 0)
	for _, r := range [2]float64{lo, hi} {
		e = e.widen(now.Add(msDuration(float64(e.Remaining)*pred*r + max(extraMS, 0))))
	}
	return e
}

// driftSpread is the smallest and largest valid ratio, or from
// DriftTrimMin of them on the 10th and 90th percentiles.
func driftSpread(ratios []float64) (lo, hi float64, ok bool) {
	n := 0
	for _, r := range ratios {
		if validDrift(r) {
			if n == 0 || r < lo {
				lo = r
			}
			if n == 0 || r > hi {
				hi = r
			}
			n++
		}
	}
	if n < DriftTrimMin {
		return lo, hi, n > 0
	}
	v := make([]float64, 0, n)
	for _, r := range ratios {
		if validDrift(r) {
			v = append(v, r)
		}
	}
	slices.Sort(v)
	k := n / 10
	return v[k], v[n-1-k], true
}

// widen stretches the band to hold at.
func (e ETA) widen(at time.Time) ETA {
	if at.Before(e.Low) {
		e.Low = at
	}
	if at.After(e.High) {
		e.High = at
	}
	return e
}
