package estimate

import (
	"encoding/json"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/isched/isched/internal/report"
)

var t0 = time.Date(2025, 3, 1, 12, 0, 0, 0, time.UTC)

// run is a simulated training run: the true duration of every step.
type run []float64

func constant(n int, ms float64) run {
	r := make(run, n)
	for i := range r {
		r[i] = ms
	}
	return r
}

// noisy multiplies each step by a uniform factor in [1-f, 1+f].
func (r run) noisy(seed uint64, f float64) run {
	rng := rand.New(rand.NewPCG(seed, seed))
	out := make(run, len(r))
	for i, d := range r {
		out[i] = d * (1 + f*(2*rng.Float64()-1))
	}
	return out
}

// every sets step i (1-based) to ms × factor when i % period == 0.
func (r run) every(period int, factor float64) run {
	out := append(run(nil), r...)
	for i := range out {
		if (i+1)%period == 0 {
			out[i] *= factor
		}
	}
	return out
}

func (r run) set(from int, ms ...float64) run {
	out := append(run(nil), r...)
	copy(out[from:], ms)
	return out
}

// sum of steps (from, to], 1-based step numbers.
func (r run) sum(from, to int) float64 {
	s := 0.0
	for _, d := range r[from:to] {
		s += d
	}
	return s
}

// reports turns steps 1..upto into the Iters a wrapper would send when it
// sees every by-th step: each report carries the mean per-step duration of
// the steps it covers.
func (r run) reports(upto, by int) []report.Iter {
	var out []report.Iter
	at := t0
	for s := by; s <= upto; s += by {
		sum := r.sum(s-by, s)
		at = at.Add(time.Duration(sum * float64(time.Millisecond)))
		out = append(out, report.Iter{Step: int64(s), AtMS: at.UnixMilli(), DurMS: sum / float64(by), Source: report.SourceFile})
	}
	return out
}

func feed(e *IterEstimator, its []report.Iter) {
	for _, it := range its {
		e.Add(it)
	}
}

func within(got, want, rel float64) bool {
	return math.Abs(got-want) <= rel*math.Abs(want)
}

func TestIterEstimator(t *testing.T) {
	t.Parallel()
	const total = 10000
	drift := make(run, 5000)
	for i := range drift {
		drift[i] = 100 + 100*float64(i)/float64(len(drift))
	}
	shifted := append(constant(1000, 100), constant(500, 400)...)
	ramp := constant(2000, 100)
	for i := range 40 {
		ramp[i] = 100 * (1 + 5*math.Exp(-float64(i)/6))
	}

	tests := []struct {
		name    string
		its     []report.Iter
		wantMS  float64 // typical iteration
		msTol   float64 // relative
		ovMS    float64 // overhead per iter
		ovTol   float64 // absolute ms
		check   func(t *testing.T, est IterEstimate, e *IterEstimator)
		truth   run // when set: ETA at the last report vs truth over total steps
		etaTol  float64
		skipMin int // WarmupSkipped at least
	}{
		{
			name: "constant", its: constant(300, 100).reports(300, 1),
			wantMS: 100, ovMS: 0, ovTol: 1e-9, skipMin: 5,
			check: func(t *testing.T, est IterEstimate, e *IterEstimator) {
				if est.LowMS != 100 || est.HighMS != 100 || est.WarmupSkipped != 5 || est.N != 295 || est.Provisional {
					t.Errorf("got %+v, want band 100-100, 5 skipped, N 295", est)
				}
			},
		},
		{
			name: "noisy ±20%", its: constant(3000, 100).noisy(1, 0.2).reports(3000, 1),
			wantMS: 100, msTol: 0.04, ovMS: 0, ovTol: 3,
			truth: constant(total, 100).noisy(1, 0.2), etaTol: 0.03,
			check: func(t *testing.T, est IterEstimate, _ *IterEstimator) {
				// Uniform in [80, 120]: the 10th and 90th percentiles are 84 and 116.
				if !within(est.LowMS, 84, 0.03) || !within(est.HighMS, 116, 0.03) {
					t.Errorf("band %.1f-%.1f, want about 84-116", est.LowMS, est.HighMS)
				}
			},
		},
		{
			name: "warm-up spike", its: constant(500, 100).set(0, 5000, 3000, 2000).reports(500, 1),
			wantMS: 100, ovMS: 0, ovTol: 1e-9, skipMin: 5,
			check: func(t *testing.T, est IterEstimate, _ *IterEstimator) {
				if est.Outliers != 0 || est.MaxGapMS != 100 {
					t.Errorf("warm-up leaked into the steady state: %+v", est)
				}
			},
		},
		{
			name: "slow warm-up ramp", its: ramp.reports(2000, 1),
			wantMS: 100, msTol: 0.01, ovMS: 0, ovTol: 1, skipMin: 15,
		},
		{
			name: "eval every 100 at 20x", its: constant(total, 100).every(100, 20).reports(5000, 1),
			wantMS: 100, ovMS: 19, ovTol: 0.5,
			truth: constant(total, 100).every(100, 20), etaTol: 0.02,
		},
		{
			name: "noisy with eval every 100 at 20x", its: constant(total, 100).noisy(2, 0.1).every(100, 20).reports(5000, 1),
			wantMS: 100, msTol: 0.02, ovMS: 19, ovTol: 1.5,
			truth: constant(total, 100).noisy(2, 0.1).every(100, 20), etaTol: 0.02,
		},
		{
			name: "checkpoint every 1000 at 300x", its: constant(total, 100).every(1000, 300).reports(4000, 1),
			wantMS: 100, ovMS: 29.9, ovTol: 1,
			truth: constant(total, 100).every(1000, 300), etaTol: 0.02,
		},
		{
			// Logged every 10 steps: the report holding the eval averages
			// (9×100 + 2000)/10 = 290 ms, under the outlier factor; the body's
			// skew carries its cost.
			name: "step jumps of 10 with eval every 100", its: constant(total, 100).every(100, 20).reports(5000, 10),
			wantMS: 100, ovMS: 19, ovTol: 0.5,
			truth: constant(total, 100).every(100, 20), etaTol: 0.02,
			check: func(t *testing.T, est IterEstimate, _ *IterEstimator) {
				if est.GapMS != 1000 {
					t.Errorf("GapMS %v, want 1000 (10 steps of 100 ms per report)", est.GapMS)
				}
			},
		},
		{
			name: "drift 100 to 200 ms", its: drift.reports(5000, 1),
			wantMS: 200, msTol: 0.05, ovMS: 0, ovTol: 2,
		},
		{
			name: "level shift to 4x slower", its: shifted.reports(1500, 1),
			wantMS: 400, ovMS: 0, ovTol: 1e-9,
			check: func(t *testing.T, est IterEstimate, e *IterEstimator) {
				if e.LevelShifts != 1 {
					t.Errorf("LevelShifts %d, want 1", e.LevelShifts)
				}
			},
		},
		{
			// another job shared the node for the first 300 steps, then
			// ended: the window must follow within a regime check, not
			// after half of its 512 observations are new
			name: "speed-up when a co-located job ends", its: append(constant(300, 200), constant(100, 100)...).reports(400, 1),
			wantMS: 100, ovMS: 0, ovTol: 1e-9,
			truth: append(constant(300, 200), constant(total-300, 100)...), etaTol: 0.01,
			check: func(t *testing.T, est IterEstimate, e *IterEstimator) {
				if e.RegimeShifts != 1 || e.LevelShifts != 0 {
					t.Errorf("RegimeShifts %d, LevelShifts %d, want 1 and 0", e.RegimeShifts, e.LevelShifts)
				}
			},
		},
		{
			name: "slow-down by 1.5x (under the outlier factor)", its: append(constant(300, 100), constant(100, 150).noisy(4, 0.05)...).reports(400, 1),
			wantMS: 150, msTol: 0.05, ovMS: 0, ovTol: 3,
			check: func(t *testing.T, est IterEstimate, e *IterEstimator) {
				if e.RegimeShifts != 1 {
					t.Errorf("RegimeShifts %d, want 1", e.RegimeShifts)
				}
			},
		},
		{
			name: "noise ±40% is no regime", its: constant(3000, 100).noisy(5, 0.4).reports(3000, 1),
			wantMS: 100, msTol: 0.06, ovMS: 0, ovTol: 5,
			check: func(t *testing.T, est IterEstimate, e *IterEstimator) {
				if e.RegimeShifts != 0 {
					t.Errorf("RegimeShifts %d, want 0", e.RegimeShifts)
				}
			},
		},
		{
			name: "loop clock preferred",
			its: func() []report.Iter {
				its := constant(200, 100).reports(200, 1)
				for i := range its {
					its[i].LoopDurMS = its[i].DurMS
					its[i].DurMS = 50 + float64(i%7)*30 // wrapper arrival jitter
				}
				return its
			}(),
			wantMS: 100, ovMS: 0, ovTol: 1e-9,
		},
		{
			name: "duplicates and zero durations ignored",
			its: func() []report.Iter {
				its := constant(100, 100).reports(100, 1)
				dup := its[50]
				dup.DurMS = 9999
				zero := its[60]
				zero.Step, zero.DurMS = 1000, 0
				return append(its[:51:51], append([]report.Iter{dup, zero}, its[51:]...)...)
			}(),
			wantMS: 100, ovMS: 0, ovTol: 1e-9,
			check: func(t *testing.T, _ IterEstimate, e *IterEstimator) {
				if e.Ignored != 2 {
					t.Errorf("Ignored %d, want 2", e.Ignored)
				}
			},
		},
		{
			name: "resumed process re-warms, keeps the window",
			its: func() []report.Iter {
				first := constant(400, 100).reports(400, 1)
				again := constant(400, 100).set(250, 9000, 4000).reports(400, 1)[249:]
				return append(first, again...)
			}(),
			wantMS: 100, ovMS: 0, ovTol: 1e-9,
			check: func(t *testing.T, est IterEstimate, e *IterEstimator) {
				if e.Restarts != 1 || est.Outliers != 0 || est.WarmupSkipped != 10 {
					t.Errorf("restarts %d, est %+v; want 1 restart, no outliers, 10 skipped", e.Restarts, est)
				}
			},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			var e IterEstimator
			feed(&e, tc.its)
			est, ok := e.Estimate()
			if !ok || est.Provisional {
				t.Fatalf("Estimate() = %+v, %v; want a steady estimate", est, ok)
			}
			if !within(est.MS, tc.wantMS, tc.msTol) {
				t.Errorf("MS %.2f, want %.2f ±%.0f%%", est.MS, tc.wantMS, 100*tc.msTol)
			}
			if math.Abs(est.OverheadMSPerIter-tc.ovMS) > tc.ovTol {
				t.Errorf("OverheadMSPerIter %.3f, want %.3f ±%v", est.OverheadMSPerIter, tc.ovMS, tc.ovTol)
			}
			if est.WarmupSkipped < tc.skipMin {
				t.Errorf("WarmupSkipped %d, want >= %d", est.WarmupSkipped, tc.skipMin)
			}
			if !(est.LowMS <= est.MS && est.MS <= est.HighMS) {
				t.Errorf("band %v <= %v <= %v violated", est.LowMS, est.MS, est.HighMS)
			}
			if tc.truth != nil {
				last := tc.its[len(tc.its)-1]
				now := time.UnixMilli(last.AtMS)
				eta := PredictEnd(now, last.Step, int64(len(tc.truth)), est, 0)
				want := tc.truth.sum(int(last.Step), len(tc.truth))
				got := float64(eta.End.Sub(now)) / float64(time.Millisecond)
				t.Logf("ETA error %.3f%% (MS %.2f, overhead %.2f)", 100*(got-want)/want, est.MS, est.OverheadMSPerIter)
				if !eta.Known || !within(got, want, tc.etaTol) {
					t.Errorf("remaining %.0f ms, truth %.0f ms (error %.2f%%, max %.0f%%)", got, want, 100*(got-want)/want, 100*tc.etaTol)
				}
				if eta.Low.After(eta.End) || eta.High.Before(eta.End) {
					t.Errorf("ETA band %v..%v does not hold %v", eta.Low, eta.High, eta.End)
				}
			}
			if tc.check != nil {
				tc.check(t, est, &e)
			}
		})
	}
}

func TestIterEstimatorEarly(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name      string
		n         int
		wantOK    bool
		wantProv  bool
		wantMS    float64
		wantReset int
		reset     bool
	}{
		{name: "nothing", n: 0},
		{name: "two", n: 2},
		{name: "provisional from warm-up", n: 4, wantOK: true, wantProv: true, wantMS: 200},
		{name: "steady once the halves agree", n: 14, wantOK: true, wantMS: 100},
		{name: "still warming while they differ", n: 10, wantOK: true, wantProv: true, wantMS: 100},
		{name: "reset forgets", n: 300, reset: true, wantReset: 1},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			r := constant(tc.n, 100)
			for i := range min(4, tc.n) {
				r[i] = 200
			}
			var e IterEstimator
			feed(&e, r.reports(tc.n, 1))
			if tc.reset {
				e.Reset()
			}
			est, ok := e.Estimate()
			if ok != tc.wantOK || est.Provisional != tc.wantProv || (ok && est.MS != tc.wantMS) || e.Resets != tc.wantReset {
				t.Errorf("Estimate() = %+v, %v (resets %d); want ok %v, provisional %v, MS %v, resets %d",
					est, ok, e.Resets, tc.wantOK, tc.wantProv, tc.wantMS, tc.wantReset)
			}
		})
	}
}

// A coordinator persists the estimator after every report and may resume
// from Redis at any point: the resumed one must answer exactly as the
// original, and a full window must stay small.
func TestIterEstimatorJSON(t *testing.T) {
	t.Parallel()
	its := constant(6000, 100).noisy(3, 0.3).every(97, 25).reports(6000, 1)
	tests := []struct {
		name string
		cut  int
	}{
		{"in warm-up", 4},
		{"just steady", 12},
		{"inside an outlier run", 97 * 3},
		{"window full", 3000},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			var a IterEstimator
			feed(&a, its[:tc.cut])
			b, err := json.Marshal(&a)
			if err != nil {
				t.Fatal(err)
			}
			if len(b) > 16<<10 {
				t.Errorf("persisted estimator is %d bytes, want <= 16 KiB", len(b))
			}
			var r IterEstimator
			if err := json.Unmarshal(b, &r); err != nil {
				t.Fatal(err)
			}
			feed(&a, its[tc.cut:])
			feed(&r, its[tc.cut:])
			ea, oka := a.Estimate()
			er, okr := r.Estimate()
			if ea != er || oka != okr {
				t.Errorf("resumed estimator differs:\n%+v\n%+v", ea, er)
			}
			if len(a.Window) > WindowSize {
				t.Errorf("window %d > %d", len(a.Window), WindowSize)
			}
		})
	}
}

func TestObsUnmarshalRejects(t *testing.T) {
	t.Parallel()
	for _, in := range []string{`[0,1]`, `[-1,1]`, `[1,0]`, `[1,1.5]`, `[1,100000]`, `{"ms":1}`, `[1]`} {
		t.Run(in, func(t *testing.T) {
			t.Parallel()
			var o Obs
			if err := json.Unmarshal([]byte(in), &o); err == nil {
				t.Errorf("Unmarshal(%s) = %+v, want an error", in, o)
			}
		})
	}
}

// State read back from Redis may be damaged or hand-edited; no method may
// panic on it, and the estimator must recover to a sane answer.
func TestIterEstimatorDamagedState(t *testing.T) {
	t.Parallel()
	big := `[` + strings.Repeat(`[100,1],`, 900) + `[100,1]]`
	tests := []struct {
		name string
		json string
	}{
		{"empty object", `{}`},
		{"oversized window, bad ring index", `{"window":` + big + `,"next":-7,"steady":true}`},
		{"ring index past the end", `{"window":[[100,1],[100,1],[100,1]],"next":99,"steady":true}`},
		{"oversized warm-up", `{"warm":` + big + `}`},
		{"negative reference", `{"window":[[100,1],[100,1],[100,1]],"steady":true,"ref_ms":-3}`},
		{"long outlier run", `{"window":[[100,1],[100,1],[100,1]],"steady":true,"ref_ms":100,"run":[` + strings.Repeat(`[900,1],`, 40)[:8*40-1] + `]}`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			var e IterEstimator
			if err := json.Unmarshal([]byte(tc.json), &e); err != nil {
				t.Fatal(err)
			}
			_, _ = e.Estimate()
			its := constant(2000, 100).reports(2000, 1)
			for i := range its {
				its[i].Step += 1 << 20 // after whatever step the state remembers
			}
			feed(&e, its)
			est, ok := e.Estimate()
			if !ok || est.MS != 100 || len(e.Window) > WindowSize {
				t.Errorf("after 2000 steps of 100 ms: %+v, %v, window %d", est, ok, len(e.Window))
			}
		})
	}
}

func BenchmarkIterEstimatorAdd(b *testing.B) {
	its := constant(100000, 100).noisy(9, 0.2).every(100, 20).reports(100000, 1)
	var e IterEstimator
	b.ResetTimer()
	for i := range b.N {
		e.Add(its[i%len(its)])
	}
}

func BenchmarkIterEstimatorEstimate(b *testing.B) {
	var e IterEstimator
	feed(&e, constant(5000, 100).noisy(9, 0.2).every(100, 20).reports(5000, 1))
	// computed: after an Add; cached: asked again with nothing new (the
	// coordinator's decision round asks for every job every tick).
	b.Run("computed", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			_, _ = e.estimate()
		}
	})
	b.Run("cached", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			_, _ = e.Estimate()
		}
	})
}

func BenchmarkMemTrackerTrend(b *testing.B) {
	var m MemTracker
	for s := int64(0); s < 100000; s += 10 {
		m.Add(s, 2*gib+s*mib, gib)
	}
	b.ResetTimer()
	for range b.N {
		_ = m.Trend()
	}
}

// BenchmarkMemTrendComputed is what a job's memory trend costs whenever
// its points change (every sample report while the stride is short): the
// Theil–Sen slopes and Kendall's tau of 64 noisy, rising points, RSS and GPU.
func BenchmarkMemTrendComputed(b *testing.B) {
	r := rand.New(rand.NewPCG(1, 2))
	var m MemTracker
	for s := int64(0); len(m.Points) < memPoints; s += 10 {
		m.Add(s, 2*gib+s*mib/64+r.Int64N(64*mib), gib+r.Int64N(mib))
	}
	b.ReportAllocs()
	for b.Loop() {
		_ = trendOf(m.Points)
	}
}

// The list encoders write what per-element json.Marshal wrote (states
// saved before them decode, and their output decodes the same), and
// refuse what Obs refuses.
func TestObservationsJSON(t *testing.T) {
	t.Parallel()
	ms := []float64{0.001, 0.01, 0.1, 0.5, 1, 1.5, 12.25, 119.871, 120, 999.999, 1000.001, 86_400_000, 0.0005, 1.0000001, 3e21}
	var obs Observations
	for i, m := range ms {
		obs = append(obs, Obs{MS: m, Steps: int64(i%3 + 1)})
	}
	got, err := json.Marshal(obs)
	if err != nil {
		t.Fatal(err)
	}
	// the format states were saved in: [ms, steps] pairs as encoding/json
	// writes float arrays
	ref := make([][2]float64, len(obs))
	for i, o := range obs {
		ref[i] = [2]float64{o.MS, float64(o.Steps)}
	}
	want, err := json.Marshal(ref)
	if err != nil {
		t.Fatal(err)
	}
	for i, o := range obs { // one observation alone (Obs.MarshalJSON)
		one, err := json.Marshal(o)
		ref1, _ := json.Marshal(ref[i])
		if err != nil || string(one) != string(ref1) {
			t.Errorf("observation %v: %s, %v; want %s", o, one, err, ref1)
		}
	}
	if string(got) != string(want) {
		t.Errorf("list encoding\n got %s\nwant %s", got, want)
	}
	var back Observations
	if err := json.Unmarshal(got, &back); err != nil || !slices.Equal(back, obs) {
		t.Errorf("round trip: %v, %v", back, err)
	}
	for _, nilOrEmpty := range []Observations{nil, {}} {
		b, _ := json.Marshal(nilOrEmpty)
		var d Observations
		if err := json.Unmarshal(b, &d); err != nil || (d == nil) != (nilOrEmpty == nil) {
			t.Errorf("%s decoded to %#v, %v", b, d, err)
		}
	}
	for _, bad := range []string{`[[0,1]]`, `[[-1,1]]`, `[[1,0]]`, `[[1,1.5]]`, `[[1]]`, `[1]`, `{}`, `[["1",1]]`} {
		var d Observations
		if err := json.Unmarshal([]byte(bad), &d); err == nil {
			t.Errorf("%s decoded to %v, want an error", bad, d)
		}
	}
	if _, err := json.Marshal(Observations{{MS: math.NaN(), Steps: 1}}); err == nil {
		t.Error("a NaN observation encoded")
	}

	pts := MemPoints{{Step: 0, RSS: 1 << 30, GPU: 0}, {Step: 10, RSS: 1<<30 + 5, GPU: 7 << 30}}
	got, _ = json.Marshal(pts)
	want, _ = json.Marshal([][3]int64{{0, 1 << 30, 0}, {10, 1<<30 + 5, 7 << 30}})
	if string(got) != string(want) {
		t.Errorf("memory points\n got %s\nwant %s", got, want)
	}
	var pback MemPoints
	if err := json.Unmarshal(got, &pback); err != nil || !slices.Equal(pback, pts) {
		t.Errorf("memory points round trip: %v, %v", pback, err)
	}
	if err := json.Unmarshal([]byte(`[[1,-2,0]]`), &pback); err == nil {
		t.Error("a negative memory point decoded")
	}
}

// TestEstimateCacheFollowsTheState: the cached Estimate equals a fresh
// computation after every kind of Add (warm-up, steady, outlier runs, level
// shifts, duplicates, restarts) and Reset, and after a JSON round trip.
func TestEstimateCacheFollowsTheState(t *testing.T) {
	t.Parallel()
	r := rand.New(rand.NewPCG(5, 6))
	var e IterEstimator
	step, level := int64(0), 100.0
	for i := range 4000 {
		switch {
		case i%1499 == 1498:
			e.Reset()
		case i%613 == 612:
			step /= 2 // a resumed process
		case i%401 == 400:
			level *= 2.5 // slower node: a level shift
		case i%7 == 6:
			// a duplicate step
		default:
			step += 1 + r.Int64N(3)
		}
		ms := level * (0.95 + 0.1*r.Float64())
		if r.IntN(20) == 0 {
			ms *= 4 // a periodic phase: an outlier
		}
		e.Add(report.Iter{Step: step, DurMS: ms})
		want, wantOK := e.estimate() // no cache
		got, ok := e.Estimate()
		if got != want || ok != wantOK {
			t.Fatalf("add %d: cached %+v %v, computed %+v %v", i, got, ok, want, wantOK)
		}
		if got2, ok2 := e.Estimate(); got2 != want || ok2 != wantOK {
			t.Fatalf("add %d: second Estimate %+v %v, computed %+v %v", i, got2, ok2, want, wantOK)
		}
		if i%500 == 0 {
			b, err := json.Marshal(&e)
			if err != nil {
				t.Fatal(err)
			}
			var back IterEstimator
			if err := json.Unmarshal(b, &back); err != nil {
				t.Fatal(err)
			}
			if got, ok := back.Estimate(); got != want || ok != wantOK {
				t.Fatalf("add %d: after a JSON round trip %+v %v, want %+v %v", i, got, ok, want, wantOK)
			}
		}
	}
}

// checkOrder compares what the kept order gives with a sort of the window.
func checkOrder(t *testing.T, what string, e *IterEstimator) {
	t.Helper()
	qs := []float64{0.1, 0.5, 0.9}
	if got, want := e.windowQuantiles(qs...), wquantiles(e.Window, qs...); !slices.Equal(got, want) {
		t.Fatalf("%s: quantiles from the kept order %v, from a sort %v", what, got, want)
	}
	pos := e.order.pos
	if len(pos) != len(e.Window) {
		t.Fatalf("%s: order has %d positions for a window of %d", what, len(pos), len(e.Window))
	}
	seen := make([]bool, len(e.Window))
	for i, p := range pos {
		if int(p) >= len(seen) || seen[p] {
			t.Fatalf("%s: order %v is not a permutation of the window's positions", what, pos)
		}
		seen[p] = true
		if i > 0 && e.Window[pos[i-1]].MS > e.Window[p].MS {
			t.Fatalf("%s: order not sorted at %d", what, i)
		}
	}
	gaps := make([]float64, len(e.Window))
	for i, o := range e.Window {
		gaps[i] = o.gap()
	}
	if got, want := medianGap(e.Window), median(gaps); got != want {
		t.Fatalf("%s: median gap by selection %v, by sort %v", what, got, want)
	}
}

// TestWindowOrderFollowsTheWindow: the order push keeps gives the same
// quantiles as sorting the window, through fills, ring replacement, ties,
// level shifts, restarts, resets, JSON loads over an estimator in use, a
// repaired oversize window, and value copies that go separate ways.
func TestWindowOrderFollowsTheWindow(t *testing.T) {
	t.Parallel()
	r := rand.New(rand.NewPCG(7, 8))
	var e IterEstimator
	var step int64
	level := 100.0
	loads, repairs, copies, others := 0, 0, 0, 0
	add := func(e *IterEstimator, ms float64) {
		step += 1 + r.Int64N(4)
		e.Add(report.Iter{Step: step, DurMS: ms})
	}
	for i := range 6000 {
		what := fmt.Sprintf("op %d", i)
		switch {
		case i%2111 == 2110:
			e.Reset()
		case i%977 == 976:
			step /= 3 // a resumed process
		case i%1301 == 1300:
			for range levelShiftRun { // slower for good: the window restarts
				add(&e, level*10)
			}
			level *= 10
		case i%701 == 700:
			loads++
			b, err := json.Marshal(&e)
			if err != nil {
				t.Fatal(err)
			}
			if err := json.Unmarshal(b, &e); err != nil { // over the estimator in use
				t.Fatal(err)
			}
		case i%1103 == 1102 && len(e.Window) == WindowSize:
			// another job's state loaded over this estimator: same
			// window length, other observations
			var other IterEstimator
			for k := range int64(2 * WindowSize) {
				other.Add(report.Iter{Step: k + 1, DurMS: 50 + float64(r.IntN(9))})
			}
			b, err := json.Marshal(&other)
			if err != nil {
				t.Fatal(err)
			}
			if err := json.Unmarshal(b, &e); err != nil {
				t.Fatal(err)
			}
			step, others = e.LastStep, others+1
		case i%839 == 838 && len(e.Window) == WindowSize:
			// a hand-edited state: too long, repaired by sanitize
			e.Window = append(slices.Clone(e.Window), e.Window[:10]...)
			e.Next = 3
			repairs++
		case i%523 == 522:
			// a copy (as a save's shallow copy of the state) shares the
			// backing arrays: reading it must not disturb the original,
			// nor the original's adds a copy whose window they leave alone
			c := e
			ring := len(e.Window)+40 > WindowSize // the adds overwrite ring slots the copy sees
			checkOrder(t, what+" (copy)", &c)
			for range 40 {
				add(&e, level*(1+float64(r.IntN(5))/10))
				checkOrder(t, what+" (original)", &e)
			}
			if !ring {
				checkOrder(t, what+" (copy, after the original's adds)", &c)
				copies++
			}
		default:
			// ties: a handful of distinct durations
			ms := level * (1 + float64(r.IntN(7))/20)
			if r.IntN(25) == 0 {
				ms *= 5 // an outlier
			}
			add(&e, ms)
		}
		checkOrder(t, what, &e)
	}
	if loads == 0 || repairs == 0 || copies == 0 || others == 0 {
		t.Errorf("cases not reached: %d loads, %d repairs, %d copies checked after adds, %d other states loaded", loads, repairs, copies, others)
	}
}

// TestWindowOrderIsKeptNotRebuilt: once built, the order follows the
// window's adds without sorting again.
func TestWindowOrderIsKeptNotRebuilt(t *testing.T) {
	t.Parallel()
	r := rand.New(rand.NewPCG(11, 12))
	var e IterEstimator
	for step := int64(1); step <= 5000; step++ {
		e.Add(report.Iter{Step: step, DurMS: 100 + r.Float64()*10})
		e.Estimate()
	}
	if n := e.order.rebuilds; n != 0 {
		t.Errorf("the order was sorted %d times for a window that only grew and turned", n)
	}
	b, _ := json.Marshal(&e)
	var back IterEstimator
	if err := json.Unmarshal(b, &back); err != nil {
		t.Fatal(err)
	}
	for step := int64(5001); step <= 6000; step++ {
		back.Add(report.Iter{Step: step, DurMS: 100 + r.Float64()*10})
		back.Estimate()
	}
	if n := back.order.rebuilds; n != 1 {
		t.Errorf("a loaded estimator sorted its window %d times, want once", n)
	}
}

func TestNth(t *testing.T) {
	t.Parallel()
	r := rand.New(rand.NewPCG(9, 10))
	for n := 1; n < 300; n += 1 + n/10 {
		for _, spread := range []int{2, 10, 1_000_000} { // many ties to none
			v := make([]float64, n)
			for i := range v {
				v[i] = float64(r.IntN(spread))
			}
			want := slices.Sorted(slices.Values(v))
			for _, k := range []int{0, n / 2, n - 1, r.IntN(n)} {
				w := slices.Clone(v)
				if got := nth(w, k); got != want[k] {
					t.Fatalf("n=%d spread=%d: nth(%d) = %v, want %v", n, spread, k, got, want[k])
				}
				for i := range w {
					if (i < k && w[i] > w[k]) || (i > k && w[i] < w[k]) {
						t.Fatalf("n=%d spread=%d k=%d: %v at %d on the wrong side of %v", n, spread, k, w[i], i, w[k])
					}
				}
			}
		}
	}
}

// TestAppendJSONIsMarshal: the estimators' AppendJSON writes what
// json.Marshal writes, byte for byte, in every state (empty, warming up,
// outliers pending, full window, after restarts and resets), after what
// the buffer held; and fails where json.Marshal fails.
func TestAppendJSONIsMarshal(t *testing.T) {
	t.Parallel()
	r := rand.New(rand.NewPCG(13, 14))
	var e IterEstimator
	var m MemTracker
	check := func(what string) {
		t.Helper()
		for name, v := range map[string]interface {
			AppendJSON([]byte) ([]byte, error)
		}{"iter": &e, "mem": &m} {
			want, err := json.Marshal(v)
			if err != nil {
				t.Fatalf("%s %s: Marshal: %v", what, name, err)
			}
			got, err := v.AppendJSON([]byte("prefix"))
			if err != nil {
				t.Fatalf("%s %s: AppendJSON: %v", what, name, err)
			}
			if string(got) != "prefix"+string(want) {
				t.Fatalf("%s %s:\nAppendJSON %s\nMarshal          %s", what, name, got, want)
			}
		}
	}
	check("zero")
	step := int64(0)
	for i := range 3000 {
		switch {
		case i == 1500:
			e.Reset()
			m.Reset()
		case i%997 == 996:
			step /= 2
		default:
			step += 1 + r.Int64N(3)
		}
		ms := 100 * (0.9 + 0.2*r.Float64())
		if r.IntN(15) == 0 {
			ms *= 4
		}
		e.Add(report.Iter{Step: step, DurMS: ms, LoopDurMS: 0})
		m.Add(step, 1<<30+int64(r.IntN(1<<20)), int64(r.IntN(2))<<30)
		if i < 40 || i%37 == 0 {
			check(fmt.Sprintf("after %d adds", i+1))
		}
	}
	e.Window[3].MS = math.NaN() // a state json.Marshal refuses
	if _, err := e.AppendJSON(nil); err == nil {
		t.Error("AppendJSON of a NaN observation succeeded")
	}
}

// TestMedianMatchesSort: the selection medians equal the sorted-copy
// median they replaced, for odd and even lengths, with and without ties,
// and median leaves its input alone.
func TestMedianMatchesSort(t *testing.T) {
	t.Parallel()
	r := rand.New(rand.NewPCG(15, 16))
	sorted := func(v []float64) float64 {
		s := slices.Sorted(slices.Values(v))
		n := len(s)
		if n%2 == 1 {
			return s[n/2]
		}
		return (s[n/2-1] + s[n/2]) / 2
	}
	if median(nil) != 0 || medianInPlace(nil) != 0 {
		t.Error("median of nothing is not 0")
	}
	for n := 1; n < 2100; n += 1 + n/7 {
		for _, spread := range []int{1, 3, 1 << 30} {
			v := make([]float64, n)
			for i := range v {
				v[i] = float64(r.IntN(spread)) - float64(spread)/3
			}
			in := slices.Clone(v)
			want := sorted(v)
			if got := median(v); got != want {
				t.Fatalf("n=%d spread=%d: median %v, want %v", n, spread, got, want)
			}
			if !slices.Equal(v, in) {
				t.Fatalf("n=%d: median changed its input", n)
			}
			if got := medianInPlace(v); got != want {
				t.Fatalf("n=%d spread=%d: medianInPlace %v, want %v", n, spread, got, want)
			}
		}
	}
}

// A new process of the job (a new attempt) that resumed from a checkpoint
// at the last step seen does not step back: NewProcess starts its warm-up
// all the same, so its slow first steps are skipped, not counted as
// periodic phases that would raise every later ETA. The window stays.
func TestIterEstimatorNewProcess(t *testing.T) {
	t.Parallel()
	steady := constant(600, 100).noisy(7, 0.02)
	var e IterEstimator
	feed(&e, steady.reports(600, 1))
	before, ok := e.Estimate()
	if !ok || before.Provisional {
		t.Fatalf("fixture not steady: %+v", before)
	}
	var fresh IterEstimator
	fresh.NewProcess()
	if fresh.Restarts != 0 || fresh.HaveStep {
		t.Errorf("NewProcess on an empty estimator counted a restart: %+v", fresh)
	}
	// the new process: 5 slow start-up steps (8x), then steady again,
	// steps 601.. (no step back)
	next := func(e *IterEstimator) {
		at := t0.Add(time.Hour)
		for i := int64(0); i < 40; i++ {
			ms := 100.0
			if i < 5 {
				ms = 800
			}
			at = at.Add(time.Duration(ms) * time.Millisecond)
			e.Add(report.Iter{Step: 601 + i, AtMS: at.UnixMilli(), DurMS: ms, Source: report.SourceFile})
		}
	}
	var without IterEstimator // a deep copy: the window is a ring shared by a plain one
	if b, err := json.Marshal(&e); err != nil || json.Unmarshal(b, &without) != nil {
		t.Fatal("copy", err)
	}
	e.NewProcess()
	next(&e)
	next(&without)
	got, _ := e.Estimate()
	old, _ := without.Estimate()
	if e.Restarts != 1 || got.WarmupSkipped < before.WarmupSkipped+5 {
		t.Errorf("restarts %d, warm-up skipped %d (before %d): want the start-up steps skipped", e.Restarts, got.WarmupSkipped, before.WarmupSkipped)
	}
	if got.Outliers != before.Outliers || math.Abs(got.OverheadMSPerIter-before.OverheadMSPerIter) > 0.5 {
		t.Errorf("after NewProcess: outliers %d (before %d), overhead %.2f ms (before %.2f): the start-up counted as phases",
			got.Outliers, before.Outliers, got.OverheadMSPerIter, before.OverheadMSPerIter)
	}
	if !within(got.MS, 100, 0.03) || got.N < before.N {
		t.Errorf("estimate %+v: the window must stay", got)
	}
	// the contrast: without NewProcess the start-up steps are outliers
	if old.Outliers <= before.Outliers {
		t.Errorf("fixture: without NewProcess the start-up gave %d outliers (before %d); the test shows nothing", old.Outliers, before.Outliers)
	}
}

// TestRegimeShiftEarly: a job that shares the node for its first 30 steps
// (a co-located job ends, the data loader has warmed its cache) must be
// re-based about 24 steps later, not after half of a long window, so that
// the ETA at step 70 is the new speed's; at every seed and noise level up
// to ±10 % per step, faster or slower.
func TestRegimeShiftEarly(t *testing.T) {
	const shiftAt, n, judge = 30, 300, 70
	for _, noise := range []float64{0.02, 0.05, 0.10} {
		for _, ratio := range []float64{1.5, 2, 0.67} {
			for seed := uint64(1); seed <= 10; seed++ {
				r := append(constant(shiftAt, 100*ratio), constant(n-shiftAt, 100)...).noisy(seed, noise)
				var e IterEstimator
				feed(&e, r.reports(judge, 1))
				est, ok := e.Estimate()
				if !ok {
					t.Fatalf("noise %.2f ratio %.2f seed %d: no estimate at step %d", noise, ratio, seed, judge)
				}
				// a warm-up that outlasted the slow part needs no re-basing
				if e.RegimeShifts != 1 && e.WarmupSkipped < shiftAt {
					t.Errorf("noise %.2f ratio %.2f seed %d: RegimeShifts %d (warm-up skipped %d), want 1",
						noise, ratio, seed, e.RegimeShifts, e.WarmupSkipped)
				}
				left := r.sum(judge, n)
				eta := PredictEnd(t0, judge, n, est, 0)
				got := float64(eta.End.Sub(t0)) / float64(time.Millisecond)
				if err := (got - left) / r.sum(0, n); math.Abs(err) > 0.04 {
					t.Errorf("noise %.2f ratio %.2f seed %d: ETA at step %d off by %+.1f%% of the run, want within 4%%",
						noise, ratio, seed, judge, 100*err)
				}
			}
		}
	}
}

// TestRegimeShiftNotInNoise: noise alone, however wide, is no regime: 20
// runs of 3000 steps at ±40 % and ±20 % per step and none restarts its
// window.
func TestRegimeShiftNotInNoise(t *testing.T) {
	for _, noise := range []float64{0.2, 0.4} {
		for seed := uint64(1); seed <= 20; seed++ {
			var e IterEstimator
			feed(&e, constant(3000, 100).noisy(seed, noise).reports(3000, 1))
			if e.RegimeShifts != 0 {
				t.Errorf("noise ±%.0f%% seed %d: RegimeShifts %d, want 0", 100*noise, seed, e.RegimeShifts)
			}
		}
	}
}
