package estimate

import (
	"math"
	"math/rand/v2"
	"testing"
	"time"
)

func TestCalibMinRuns(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		coverage float64
		want     int
	}{
		{0.80, 8}, // the rank needs 4 (ceil(5·0.8) = 4), the floor 8
		{0.90, 9}, // ceil(10·0.9) = 9
		{0.95, 19},
		{0.50, 8},
		{0, math.MaxInt},
		{1, math.MaxInt},
		{math.NaN(), math.MaxInt},
	} {
		if got := CalibMinRuns(tc.coverage); got != tc.want {
			t.Errorf("CalibMinRuns(%v) = %d, want %d", tc.coverage, got, tc.want)
		}
	}
}

// seqUp is 1.1, 1.2, … 1 + n/10, largest first.
func seqUp(n int) []float64 {
	out := make([]float64, n)
	for i := range out {
		out[n-1-i] = 1 + float64(i+1)/10
	}
	return out
}

func TestConformalRatios(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name     string
		ratios   []float64
		coverage float64
		q        float64 // the band is [1/q, q]; 0: none
		n        int
	}{
		{"too few: no band", seqUp(7), 0.8, 0, 7},
		// ranks ceil((n+1)·0.8): 8 of 8, 16 of 19, 27 of 32 (the
		// coordinator's pool at most)
		{"the fewest: the largest", seqUp(8), 0.8, 1.8, 8},
		{"19: the 16th", seqUp(19), 0.8, 2.6, 19},
		{"32: the 27th", seqUp(32), 0.8, 3.7, 32},
		{"90 %: a higher rank", seqUp(19), 0.9, 2.8, 19},
		{"early and late ends score alike", []float64{1 / 1.1, 1.2, 1 / 1.3, 1.4, 1.5, 1 / 1.6, 1.7, 1 / 1.8, 1.9}, 0.8, 1.8, 9},
		{"invalid ratios do not count", append(seqUp(7), math.NaN(), 0, 80, math.Inf(1), -1), 0.8, 0, 7},
		{"invalid ratios left out of the ranks", append(seqUp(8), 100, 0.001), 0.8, 1.8, 8},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			lo, hi, n, ok := ConformalRatios(tc.ratios, tc.coverage)
			if ok != (tc.q > 0) || n != tc.n || (ok && (math.Abs(lo-1/tc.q) > 1e-12 || math.Abs(hi-tc.q) > 1e-12)) {
				t.Errorf("ConformalRatios = %v, %v, %d, %v; want 1/%v, %v, %d", lo, hi, n, ok, tc.q, tc.q, tc.n)
			}
		})
	}
}

func TestCalibrated(t *testing.T) {
	t.Parallel()
	now := time.UnixMilli(1_000_000)
	est := IterEstimate{MS: 100, LowMS: 95, HighMS: 110, OverheadMSPerIter: 10}
	eta := PredictEnd(now, 100, 1100, est, 0) // 1000 steps left at 110 ms: 110 s
	at := func(s float64) time.Time { return now.Add(time.Duration(s * float64(time.Second))) }
	// 9 ratios, scores max(r, 1/r) 1 … 1.3: the 8th is 1.2
	pool := []float64{0.9, 1.0, 1.1, 1.2, 1.05, 0.95, 1.3, 0.85, 1.15}
	for _, tc := range []struct {
		name      string
		eta       ETA
		ratios    []float64
		low, high time.Time
		source    BandSource
		coverage  float64
		runs      int
	}{
		{"calibrated: the rest between 1/1.2 and 1.2 x predicted", eta, pool, at(110 / 1.2), at(1.2 * 110), BandConformal, BandCoverage, 9},
		// every earlier run was late: the band still holds the ETA
		{"calibrated, all late", eta, []float64{1.2, 1.3, 1.25, 1.4, 1.22, 1.35, 1.28, 1.31, 1.5},
			at(110 / 1.4), at(1.4 * 110), BandConformal, BandCoverage, 9},
		{"the pessimistic own band is replaced, not kept", eta.WithPast(now, est, 0, []float64{300}), pool,
			at(110 / 1.2), at(1.2 * 110), BandConformal, BandCoverage, 9},
		{"too few earlier runs: the default band, coverage unknown", eta, pool[:7],
			at(DefaultBandRatios[0] * 110), at(DefaultBandRatios[1] * 110), BandDefault, 0, 7},
		{"no earlier run: the default band", eta, nil, at(DefaultBandRatios[0] * 110), at(DefaultBandRatios[1] * 110), BandDefault, 0, 0},
		{"default: a wider band of the estimator's is kept", eta.WithPast(now, est, 0, []float64{400}), nil,
			at(DefaultBandRatios[0] * 110), at(410), BandDefault, 0, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			got := tc.eta.Calibrated(now, est, 0, tc.ratios)
			if !got.End.Equal(tc.eta.End) {
				t.Errorf("end moved: %v", got.End.Sub(now))
			}
			near := func(a, b time.Time) bool { return a.Sub(b).Abs() < time.Millisecond }
			if !near(got.Low, tc.low) || !near(got.High, tc.high) {
				t.Errorf("band %v..%v after now, want %v..%v", got.Low.Sub(now), got.High.Sub(now), tc.low.Sub(now), tc.high.Sub(now))
			}
			if got.BandSource != tc.source || got.Coverage != tc.coverage || got.BandRuns != tc.runs {
				t.Errorf("source %q coverage %v runs %d, want %q %v %d", got.BandSource, got.Coverage, got.BandRuns, tc.source, tc.coverage, tc.runs)
			}
			if got.Low.After(got.End) || got.End.After(got.High) {
				t.Errorf("band %v..%v does not hold the ETA %v", got.Low.Sub(now), got.High.Sub(now), got.End.Sub(now))
			}
		})
	}
	if u := PredictEnd(now, 1, 0, est, 0); u.Calibrated(now, est, 0, pool) != u {
		t.Errorf("unknown ETA changed")
	}
}

// TestCalibratedMonotonic: the band never shrinks as more is left of the
// run or as the stated coverage grows, and holds the ETA.
func TestCalibratedMonotonic(t *testing.T) {
	t.Parallel()
	now := time.UnixMilli(1_000_000)
	est := IterEstimate{MS: 100, LowMS: 95, HighMS: 110}
	ratios := append(seqUp(15), 1/1.05, 1/1.25, 1/1.45, 1/1.65, 1/1.85, 1/2.05)
	var last time.Duration
	for _, step := range []int64{990, 900, 500, 100, 0} {
		e := PredictEnd(now, step, 1000, est, 5000).Calibrated(now, est, 5000, ratios)
		w := e.High.Sub(e.Low)
		if w < last {
			t.Errorf("at step %d the band is %v wide, narrower than %v with less left", step, w, last)
		}
		if e.Low.After(e.End) || e.End.After(e.High) || e.Low.Before(now.Add(5*time.Second)) {
			t.Errorf("at step %d band %v..%v, ETA %v: want it to hold the ETA, after the 5 s extra", step, e.Low.Sub(now), e.High.Sub(now), e.End.Sub(now))
		}
		last = w
	}
	prevLo, prevHi := math.Inf(1), math.Inf(-1)
	for _, c := range []float64{0.5, 0.6, 0.7, 0.8, 0.9} {
		lo, hi, _, ok := ConformalRatios(ratios, c)
		if !ok || lo > prevLo || hi < prevHi || lo > hi {
			t.Errorf("coverage %v: [%v, %v] (ok %v), want it to hold [%v, %v]", c, lo, hi, ok, prevLo, prevHi)
		}
		prevLo, prevHi = lo, hi
	}
}

// TestCalibratedStatedRate: with exchangeable runs the band holds the
// truth at least at the stated rate and not much more: the ratio of each
// new run is drawn like the earlier ones' (log-normal, a long tail of slow
// ones), calibrated on the n before it.
func TestCalibratedStatedRate(t *testing.T) {
	t.Parallel()
	rng := rand.New(rand.NewPCG(1, 2))
	draw := func() float64 { return math.Exp(0.25*rng.NormFloat64() + 0.05) }
	for _, n := range []int{8, 19, 32} {
		in, trials := 0, 20000
		for range trials {
			pool := make([]float64, n)
			for i := range pool {
				pool[i] = draw()
			}
			lo, hi, _, ok := ConformalRatios(pool, BandCoverage)
			if !ok {
				t.Fatalf("n %d: no band", n)
			}
			if r := draw(); r >= lo && r <= hi {
				in++
			}
		}
		got := float64(in) / float64(trials)
		// split conformal: k/(n + 1), k = ceil((n + 1)·coverage)
		upper := math.Ceil(float64(n+1)*BandCoverage-1e-9) / float64(n+1)
		if got < BandCoverage-0.01 || got > upper+0.01 {
			t.Errorf("n %d: coverage %.3f, want %.2f to %.3f", n, got, BandCoverage, upper)
		}
		t.Logf("n %d: coverage %.3f (stated %.2f, at most %.3f)", n, got, BandCoverage, upper)
	}
}
