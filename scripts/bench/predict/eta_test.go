package main

import (
	"bytes"
	"math"
	"path/filepath"
	"strings"
	"testing"
)

func steps(n int, ms float64) []float64 {
	out := make([]float64, n)
	for i := range out {
		out[i] = ms
	}
	return out
}

func TestReplayETA(t *testing.T) {
	shift := append(steps(30, 200), steps(70, 100)...) // 13 s: 6 s slow, then 7 s fast
	for _, tc := range []struct {
		name   string
		iterMS []float64
		fracs  []float64
		want   []etaPoint
	}{
		{"steady run: exact, in its zero-width band", steps(100, 100), []float64{0.1, 0.5},
			[]etaPoint{{Frac: 0.1, Step: 10, Known: true, InBand: true}, {Frac: 0.5, Step: 50, Known: true, InBand: true}}},
		// at step 10 the estimator is steady at 200 ms: it predicts
		// 10×200 + 90×200 = 20 s for a 13 s run, +7/13, outside its band
		{"regime shift ahead: late by what the slow speed costs", shift, []float64{0.1},
			[]etaPoint{{Frac: 0.1, Step: 10, Known: true, Err: 7.0 / 13}}},
		{"before three observations: unknown", steps(100, 100), []float64{0.02},
			[]etaPoint{{Frac: 0.02, Step: 2}}},
		{"a fraction past the end is the last step", steps(10, 100), []float64{2},
			[]etaPoint{{Frac: 2, Step: 10, Known: true, InBand: true}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, _, err := replayETA(tc.iterMS, tc.fracs, nil, nil)
			if err != nil {
				t.Fatal(err)
			}
			if len(got) != len(tc.want) {
				t.Fatalf("got %d points, want %d", len(got), len(tc.want))
			}
			for i, w := range tc.want {
				g := got[i]
				if g.Frac != w.Frac || g.Step != w.Step || g.Known != w.Known || g.InBand != w.InBand || g.Provisional != w.Provisional ||
					math.Abs(g.Err-w.Err) > 1e-9 {
					t.Errorf("point %d = %+v, want %+v", i, g, w)
				}
			}
		})
	}
}

func TestReplayETAFollowsShift(t *testing.T) {
	// 40 slow steps, then 160 at half the time: once the estimator has seen
	// the new regime long enough its ETA must be near the truth, where the
	// window's median of both regimes would still be late
	iter := append(steps(40, 200), steps(160, 100)...)
	got, _, err := replayETA(iter, []float64{0.1, 0.75}, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	if !(got[0].Err > 0.3) {
		t.Errorf("at 10%%, before the shift: err %+.3f, want late by > 30%%", got[0].Err)
	}
	if math.Abs(got[1].Err) > 1e-9 || !got[1].InBand {
		t.Errorf("at 75%%, well after the shift: %+v, want exact and in band", got[1])
	}
}

func TestReplayETARejects(t *testing.T) {
	for _, iter := range [][]float64{nil, {100, 0, 100}, {100, math.NaN()}, {math.Inf(1)}} {
		if _, _, err := replayETA(iter, etaFracs, nil, nil); err == nil {
			t.Errorf("replayETA(%v) accepted", iter)
		}
	}
}

func TestPrintETACommittedTraces(t *testing.T) {
	var b bytes.Buffer
	if err := printETA(&b, filepath.Join("testdata")); err != nil {
		t.Fatal(err)
	}
	out := b.String()
	for _, want := range []string{"-load0-5", "no change ahead", "burners, change behind", "band coverage", "err@10%"} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
}

func TestChangeAhead(t *testing.T) {
	iter := steps(100, 100)
	for _, tc := range []struct {
		burn []int
		k    int64
		want bool
	}{
		{nil, 10, false},          // alone
		{[]int{0, 5}, 10, false},  // the load ended before step 10
		{[]int{0, 30}, 10, true},  // it ends later
		{[]int{0, 30}, 30, false}, // it ended with step 30
		{[]int{30, 100}, 10, true},
		{[]int{30, 100}, 50, false}, // it lasts to the end: no change ahead
		{[]int{30, 60}, 50, true},
	} {
		r := &trace{IterMS: iter, BurnSteps: tc.burn}
		if got := r.changeAhead(tc.k); got != tc.want {
			t.Errorf("burn %v at step %d: changeAhead %v, want %v", tc.burn, tc.k, got, tc.want)
		}
	}
}

func TestPrintCalibrationCommittedTraces(t *testing.T) {
	var b bytes.Buffer
	if err := printCalibration(&b, filepath.Join("testdata")); err != nil {
		t.Fatal(err)
	}
	out := b.String()
	for _, want := range []string{"stated coverage 80 %", "Leave-one-run-out", "5-15 %", "75-100 %", "calibrated", "fallback"} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
}

func TestCalFracsBuckets(t *testing.T) {
	fr := calFracs()
	if len(fr) != 95 || fr[0] != 0.05 || fr[len(fr)-1] != 0.99 {
		t.Fatalf("calFracs %v..%v (%d), want 0.05..0.99 (95)", fr[0], fr[len(fr)-1], len(fr))
	}
	// the buckets tile 5..100 % without a gap
	for i, b := range calBuckets {
		if b.Lo >= b.Hi || (i > 0 && calBuckets[i-1].Hi != b.Lo) {
			t.Errorf("bucket %d %+v does not follow %+v", i, b, calBuckets[max(i-1, 0)])
		}
	}
	if calBuckets[0].Lo != 5 || calBuckets[len(calBuckets)-1].Hi != 100 {
		t.Errorf("buckets %+v, want 5 to 100 %%", calBuckets)
	}
}
