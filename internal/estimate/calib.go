package estimate

import (
	"math"
	"slices"
	"time"
)

// Calibrated band: a band that says how often it holds the real end, and
// does. Split-conformal: the calibration scores are earlier runs' ETA
// ratios at the same point of their runs (DriftAt over the pool WithDrift
// reads too: the rest of the run took ratio × what was predicted), scored
// by how far they strayed either way, max(r, 1/r); with q the
// ceil((n+1)·BandCoverage)-th smallest of n scores, the band holds the
// end the run reaches if the rest runs between 1/q and q × the predicted
// time per step. With the n earlier runs exchangeable with this one, the
// band holds its end at least BandCoverage of the time (and at most
// 1/(n+1) more). One score for both sides rather than a quantile per
// side: with a few dozen runs, a tenth on each side is one or two runs,
// and the band would be as wide as the wildest run.

// BandCoverage is the stated coverage of a calibrated ETA band: the share
// of runs whose real end it holds, at every point of a run.
const BandCoverage = 0.80

// BandSource says what an ETA band rests on.
type BandSource string

const (
	// BandConformal: the quantiles of BandRuns earlier runs' ETA ratios;
	// Coverage is the stated rate.
	BandConformal BandSource = "conformal"
	// BandDefault: too few earlier runs to calibrate (fewer than
	// CalibMinRuns(BandCoverage)). The band is the estimator's own
	// (iteration-time percentiles, widened by earlier runs' speeds and
	// misses) widened further to hold the end at DefaultBandRatios ×
	// the predicted time per step; its coverage is unknown (Coverage 0).
	BandDefault BandSource = "default"
)

// DefaultBandRatios are the fallback band's ratios to the predicted time
// per remaining step: 1/3 to 3. Measured leave-one-run-out on the real CPU
// runs of scripts/bench/predict/testdata (make bench-predict, column
// "fallback"), it held the end at 87–97 % of the status updates in every
// progress bucket; 0.5–1.8 held only 67–73 % before 50 % on a machine
// shared with others' builds. Conservative on purpose: its coverage is
// not stated.
var DefaultBandRatios = [2]float64{1.0 / 3, 3}

// calibFloor is the fewest earlier runs a band is calibrated on, whatever
// the rank formula allows: the coverage of one band, given its earlier
// runs, is Beta(k, n+1−k) distributed, which strays by about 10 points
// (one standard deviation) from 8 runs on.
const calibFloor = 8

// CalibMinRuns is the fewest calibration scores for which a split-
// conformal band of the given coverage exists, ceil((n+1)·coverage) ≤ n
// (4 for 80 %), and at least calibFloor: 8 for 80 %.
func CalibMinRuns(coverage float64) int {
	if !(coverage > 0 && coverage < 1) {
		return math.MaxInt
	}
	return max(int(math.Ceil(coverage/(1-coverage)-1e-9)), calibFloor)
}

// ConformalRatios are the edges of a split-conformal band of the given
// coverage over ratios (valid ones only, as validDrift says): 1/q and q,
// q the ceil((n+1)·coverage)-th smallest of the scores max(r, 1/r). ok is
// false with fewer than CalibMinRuns valid ratios.
func ConformalRatios(ratios []float64, coverage float64) (lo, hi float64, n int, ok bool) {
	v := make([]float64, 0, len(ratios))
	for _, r := range ratios {
		if validDrift(r) {
			v = append(v, max(r, 1/r))
		}
	}
	n = len(v)
	if n < CalibMinRuns(coverage) {
		return 0, 0, n, false
	}
	slices.Sort(v)
	// the rank from 1; the epsilon keeps 10 × 0.8 an integer
	k := min(int(math.Ceil(float64(n+1)*coverage-1e-9)), n)
	return 1 / v[k-1], v[k-1], n, true
}

// Calibrated sets the band of an ETA that PredictEnd(now, …, est, extraMS)
// made (and WithPast and WithDrift widened) from ratios, the earlier runs'
// ETA ratios at this run's progress (DriftAt): with enough of them
// (CalibMinRuns) the band becomes the split-conformal one of coverage
// BandCoverage, [now + extraMS + remaining × predicted × lo, … × hi] with
// lo and hi from ConformalRatios (it holds End: lo ≤ 1 ≤ hi). With fewer, the band is kept and widened to DefaultBandRatios, and
// says BandDefault with Coverage 0: coverage unknown. An unknown ETA is
// returned as is.
func (e ETA) Calibrated(now time.Time, est IterEstimate, extraMS float64, ratios []float64) ETA {
	if !e.Known {
		return e
	}
	pred := est.MS + max(est.OverheadMSPerIter, 0)
	at := func(r float64) time.Time {
		return now.Add(msDuration(float64(e.Remaining)*pred*r + max(extraMS, 0)))
	}
	lo, hi, n, ok := ConformalRatios(ratios, BandCoverage)
	e.BandRuns = n
	if !ok {
		e.BandSource, e.Coverage = BandDefault, 0
		return e.widen(at(DefaultBandRatios[0])).widen(at(DefaultBandRatios[1]))
	}
	e.BandSource, e.Coverage = BandConformal, BandCoverage
	e.Low, e.High = at(lo), at(hi)
	return e
}
