package estimate

import (
	"math"
	"slices"
	"testing"
	"time"

	"github.com/isched/isched/internal/report"
)

func TestMarkDrift(t *testing.T) {
	t0 := time.UnixMilli(1_000_000)
	est := IterEstimate{MS: 100, OverheadMSPerIter: 5}
	type call struct {
		step, total int64
		est         IterEstimate
	}
	for _, tc := range []struct {
		name  string
		calls []call
		want  []float64 // the marks' points, in order
		steps []int64   // the marks' steps
	}{
		{"every point once, in order",
			[]call{{5, 100, est}, {10, 100, est}, {11, 100, est}, {25, 100, est}, {40, 100, est}, {60, 100, est}, {99, 100, est}},
			[]float64{0.05, 0.10, 0.25, 0.40, 0.60, 0.90}, []int64{5, 10, 25, 40, 60, 99}},
		{"a late first estimate marks only the latest point passed",
			[]call{{30, 100, est}, {55, 100, est}},
			[]float64{0.30, 0.50}, []int64{30, 55}},
		{"no total: nothing", []call{{50, 0, est}}, nil, nil},
		{"no estimate: nothing", []call{{50, 100, IterEstimate{}}}, nil, nil},
		{"done: nothing", []call{{100, 100, est}}, nil, nil},
		{"infinite estimate: nothing", []call{{50, 100, IterEstimate{MS: math.Inf(1)}}}, nil, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var marks []DriftMark
			for i, c := range tc.calls {
				marks = MarkDrift(marks, c.step, c.total, t0.Add(time.Duration(i)*time.Second), c.est)
			}
			var at []float64
			var steps []int64
			for _, m := range marks {
				at, steps = append(at, m.At), append(steps, m.Step)
				if m.PredMS != 105 {
					t.Errorf("mark at %v: predicted %v ms per step, want 105 (estimate + overhead)", m.At, m.PredMS)
				}
			}
			if !slices.Equal(at, tc.want) || !slices.Equal(steps, tc.steps) {
				t.Errorf("marks at %v (steps %v), want %v (steps %v)", at, steps, tc.want, tc.steps)
			}
		})
	}
}

func TestDriftRatios(t *testing.T) {
	marks := []DriftMark{
		{At: 0.10, Step: 100, AtMS: 10_000, PredMS: 100}, // 900 steps left
		{At: 0.25, Step: 250, AtMS: 25_000, PredMS: 100}, // 750 left
		{At: 0.50, Step: 500, AtMS: 50_000, PredMS: 0},   // no prediction: left out
	}
	// the rest ran at 120 ms per step from step 100
	got := DriftRatios(marks, 1000, 10_000+900*120)
	want := []report.ETARatio{{At: 0.10, Ratio: 1.2}, {At: 0.25, Ratio: float64(10_000+900*120-25_000) / 750 / 100}}
	if len(got) != len(want) {
		t.Fatalf("ratios %+v, want %+v", got, want)
	}
	for i := range want {
		if got[i].At != want[i].At || math.Abs(got[i].Ratio-want[i].Ratio) > 1e-12 {
			t.Errorf("ratio %d = %+v, want %+v", i, got[i], want[i])
		}
	}
	if r := DriftRatios(marks, 100, 20_000); len(r) != 0 {
		t.Errorf("no step after the marks: %+v, want none", r)
	}
	// a run that ended 60x slower than predicted is a broken record, not drift
	if r := DriftRatios(marks[:1], 1000, 10_000+900*6000); len(r) != 0 {
		t.Errorf("ratio 60: %+v, want left out", r)
	}
}

func TestDriftAt(t *testing.T) {
	rs := []report.ETARatio{{At: 0.25, Ratio: 1.1}, {At: 0.10, Ratio: 1.3}, {At: 0.50, Ratio: 0.9}}
	for _, tc := range []struct {
		name  string
		rs    []report.ETARatio
		frac  float64
		want  float64
		found bool
	}{
		{"before the first point: the earliest", rs, 0.05, 1.3, true},
		{"at a point", rs, 0.10, 1.3, true},
		{"between points: the latest not after", rs, 0.3, 1.1, true},
		{"past the last", rs, 0.9, 0.9, true},
		{"none", nil, 0.5, 0, false},
		{"invalid ratios and points skipped", []report.ETARatio{{At: 0.1, Ratio: math.NaN()}, {At: 0.1, Ratio: 80}, {At: 1.5, Ratio: 1.2}, {At: 0.25, Ratio: 1.05}}, 0.1, 1.05, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, ok := DriftAt(tc.rs, tc.frac)
			if got != tc.want || ok != tc.found {
				t.Errorf("DriftAt(%v) = %v, %v; want %v, %v", tc.frac, got, ok, tc.want, tc.found)
			}
		})
	}
}

func TestWithDrift(t *testing.T) {
	now := time.UnixMilli(1_000_000)
	est := IterEstimate{MS: 100, LowMS: 95, HighMS: 110, OverheadMSPerIter: 10}
	eta := PredictEnd(now, 100, 1100, est, 0) // 1000 steps left at 110 ms
	at := func(ms float64) time.Time { return now.Add(time.Duration(ms * float64(time.Millisecond))) }
	got := eta.WithDrift(now, est, 0, []float64{1.3, 0.8, 1.05, math.NaN(), 0, 100})
	if !got.End.Equal(at(110_000)) {
		t.Errorf("end moved: %v after now, want 110 s", got.End.Sub(now))
	}
	if !got.Low.Equal(at(88_000)) || !got.High.Equal(at(143_000)) {
		t.Errorf("band %v..%v after now, want 88s..2m23s (0.8 and 1.3 x 110 ms x 1000)", got.Low.Sub(now), got.High.Sub(now))
	}
	if same := eta.WithDrift(now, est, 0, []float64{1.0}); same != eta {
		t.Errorf("ratio 1 changed the ETA: %+v -> %+v", eta, same)
	}
	// a large pool: the extreme tenth on each side left out
	pool := []float64{5, 0.1, math.NaN()}
	for i := range 18 {
		pool = append(pool, 0.9+0.02*float64(i)) // 0.90 .. 1.24
	}
	trimmed := eta.WithDrift(now, est, 0, pool) // 20 valid: 2 left out each side
	if !trimmed.Low.Equal(at(0.92*110_000)) || !trimmed.High.Equal(at(1.22*110_000)) {
		t.Errorf("band over 20 ratios %v..%v after now, want %v..%v (0.92 and 1.22: the 10th and 90th percentiles)",
			trimmed.Low.Sub(now), trimmed.High.Sub(now), at(0.92*110_000).Sub(now), at(1.22*110_000).Sub(now))
	}
	if small := eta.WithDrift(now, est, 0, pool[:DriftTrimMin-1]); !small.High.Equal(at(5*110_000)) || !small.Low.Equal(at(0.1*110_000)) {
		t.Errorf("band over %d ratios %v..%v: below DriftTrimMin every ratio counts (0.1 and 5)", DriftTrimMin-1, small.Low.Sub(now), small.High.Sub(now))
	}
	unknown := PredictEnd(now, 1, 0, est, 0)
	if w := unknown.WithDrift(now, est, 0, []float64{2}); w != unknown {
		t.Errorf("unknown ETA changed: %+v", w)
	}
}
