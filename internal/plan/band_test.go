package plan

import (
	"math"
	"strings"
	"testing"
)

func TestCurveAt(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name          string
		xs, ys        []float64
		peak          bool
		x, slope1, cp float64
		want          Band
		how           string
	}{
		{"measured, repeats: mean and spread", []float64{8, 8}, []float64{90, 110}, false, 8, 0, 0,
			// relative SD of 90,110 around 100: sqrt((0.01+0.01)/1) = 0.1414; ±2×14.14
			Band{90 - 2*14.142135623730951, 100, 110 + 2*14.142135623730951}, "measured"},
		{"measured, repeats, peak: the worst run", []float64{8, 8}, []float64{90, 110}, true, 8, 0, 0,
			Band{90 - 2*0.1414213562373095*110, 110, 110 + 2*0.1414213562373095*110}, "measured"},
		{"between two sizes: straight line", []float64{8, 16}, []float64{100, 180}, false, 12, 0, 0,
			Band{140, 140, 140}, "between batch 8 and 16"},
		{"beyond: last marginal slope when steeper than the fit", []float64{4, 8, 16}, []float64{100, 120, 200}, false, 32, 0, 0,
			// fit slope 100/112*... < last marginal 10; lowest marginal 5; residuals widen it (checked below)
			Band{200 + 5*16, 200 + 10*16, 200 + 10*16}, "from batch 16"},
		{"beyond: cap lowers the middle, not the high end", []float64{8, 16}, []float64{100, 180}, true, 32, 0, 4,
			Band{100 + 80 + 4*16, 180 + 4*16, 180 + 10*16}, "from batch 16"},
		{"one batch size: the caller's slope", []float64{8}, []float64{100}, false, 16, 3, 0,
			Band{124, 124, 124}, "from batch 8 + per-sample slope"},
		{"below the smallest", []float64{8, 16}, []float64{100, 180}, false, 4, 0, 0,
			Band{60, 60, 60}, "down from batch 8"},
		{"below: never negative", []float64{8, 16}, []float64{10, 180}, false, 2, 0, 0,
			Band{0, 0, 0}, "down from batch 8"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			cv, ok := NewCurve(c.xs, c.ys, c.peak)
			if !ok {
				t.Fatal("no curve")
			}
			got, how := cv.At(c.x, c.slope1, c.cp)
			if !strings.Contains(how, c.how) {
				t.Errorf("how %q, want it to say %q", how, c.how)
			}
			if cv.relSD > 0 && len(c.xs) > 2 && !strings.Contains(c.name, "repeats") {
				// residual noise widens the band around the rule's figures
				d := bandZ * cv.relSD * got.Mid
				c.want.Low, c.want.High = c.want.Low-d, c.want.High+d
			}
			if !near(got.Low, c.want.Low, 1e-9) || !near(got.Mid, c.want.Mid, 1e-9) || !near(got.High, c.want.High, 1e-9) {
				t.Errorf("At(%g) = %+v, want %+v", c.x, got, c.want)
			}
		})
	}
	// proportional (time): the per-sample cost of the largest batch is a
	// floor of the slope beyond it
	cv, _ := NewCurve([]float64{8, 16}, []float64{100, 120}, false)
	// floor of the slope beyond it, and the band holds PerSampleLow..High
	// x that cost (here 0.66 x 240 is below the line's 160)
	if b, _ := cv.Proportional().At(32, 0, 0); b.Mid != 240 || b.High != 1.27*240 || b.Low != 0.66*240 {
		t.Errorf("proportional: %+v, want mid 240 (120/16 per sample), high 1.27 x 240", b)
	}
	// a smaller batch that ran slower: the band is the per-sample cost's
	slow, _ := NewCurve([]float64{8, 16}, []float64{500, 200}, false)
	if b, how := slow.Proportional().At(64, 0, 0); b.Mid != 800 || b.Low != 0.66*800 || b.High != 1.27*800 ||
		!strings.Contains(how, "batch 8 ran slower than batch 16: a slow small-batch path") {
		t.Errorf("slow small batch: %+v (%s), want 0.66-1.27 x 800", b, how)
	}
	if b, _ := cv.At(32, 0, 0); b.Mid != 120+2.5*16 {
		t.Errorf("not proportional: %+v", b)
	}
	if _, ok := NewCurve(nil, nil, false); ok {
		t.Error("a curve without points")
	}
}

// TestCurveNeverShrinksPerSample: beyond the largest measured batch the
// prediction's per-sample cost is at least the last measured marginal
// one, whatever the least-squares line over the smaller batches says (the
// small-batch gain of the issue: 8→16 flat, 16→32 steep).
// TestCurveSlowSmallBatch: time measured at 8 slower than at 32 (a slow
// kernel path at batch 8): batch 16 lies between batch 32's per-sample
// cost × 16 and batch 32's time, not on the line from 8 to 32.
func TestCurveSlowSmallBatch(t *testing.T) {
	cv, _ := NewCurve([]float64{8, 32}, []float64{3000, 1600}, false)
	b, how := cv.Proportional().At(16, 0, 0)
	if b.Low != 800 || b.High != 1600 || math.Abs(b.Mid-math.Sqrt(800*1600)) > 1e-9 {
		t.Errorf("At(16) = %+v (%s), want [800, 1600] around %.1f", b, how, math.Sqrt(800*1600))
	}
	if !strings.Contains(how, "ran faster") {
		t.Errorf("how %q does not say why", how)
	}
	// not proportional (memory), or monotone: the straight line
	if b, _ := cv.At(16, 0, 0); b.Mid != 3000-1400.0/3 {
		t.Errorf("memory curve At(16) = %+v, want the line %.1f", b, 3000-1400.0/3)
	}
	up, _ := NewCurve([]float64{8, 32}, []float64{400, 1600}, false)
	if b, _ := up.Proportional().At(16, 0, 0); b.Mid != 800 {
		t.Errorf("monotone time At(16) = %+v, want the line 800", b)
	}
}

func TestCurveNeverShrinksPerSample(t *testing.T) {
	t.Parallel()
	cv, _ := NewCurve([]float64{8, 16, 32}, []float64{100, 104, 200}, false)
	last := (200.0 - 104) / 16
	for _, x := range []float64{48, 64, 128} {
		b, _ := cv.At(x, 0, 0)
		if b.Mid < 200+last*(x-32) {
			t.Errorf("batch %g: %g, under the last marginal slope's %g", x, b.Mid, 200+last*(x-32))
		}
		if !(b.Low <= b.Mid && b.Mid <= b.High) || b.Width() <= 0 {
			t.Errorf("batch %g: band %+v", x, b)
		}
	}
}

func TestBandOps(t *testing.T) {
	t.Parallel()
	b := Band{1, 2, 4}
	if !b.Contains(1) || !b.Contains(4) || b.Contains(4.5) || b.Width() != 3 {
		t.Errorf("%+v", b)
	}
	if s := b.scale(2).shift(1); s != (Band{3, 5, 9}) {
		t.Errorf("%+v", s)
	}
	if math.IsNaN(Band{}.Width()) {
		t.Error("NaN")
	}
}

// TestCurveMargin checks Curve.Margin against hand-worked figures:
// 2 (bandZ) × sd × mid × √(1 + 1/n + (x − x̄)²/Sxx).
func TestCurveMargin(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name           string
		xs, ys         []float64
		x, mid, sd, cp float64
		want           float64
	}{
		{"one batch size: leverage 2", []float64{16}, []float64{1000}, 16, 1000, 0.01, 0,
			2 * 0.01 * 1000 * 1.4142135623730951},
		{"measured, two batch sizes: 1 + 1/2 + 16/32", []float64{8, 16}, []float64{900, 1000}, 8, 900, 0.01, 0,
			2 * 0.01 * 900 * 1.4142135623730951},
		{"far beyond, no cap: 1 + 1/2 + 52²/32 = 86", []float64{8, 16}, []float64{900, 1000}, 64, 1600, 0.01, 0,
			2 * 0.01 * 1600 * 9.273618495495704},
		{"far beyond, capped: batch 16's peak + its spread + 5/sample × 48 − mid", []float64{8, 16}, []float64{900, 1000}, 64, 1200, 0.01, 5,
			1000 + 2*0.01*1000*1.4142135623730951 + 5*48 - 1200},
		{"capped below the mid: the point's own spread", []float64{8, 16}, []float64{900, 1000}, 64, 1600, 0.01, 5,
			2 * 0.01 * 1000 * 1.4142135623730951},
		{"repeats spread more than the prior: theirs", []float64{8, 8, 16, 16}, []float64{900, 940, 1000, 1000}, 16, 1000, 0.01, 0,
			// batch 8 around 920: sqrt((20/920)² × 2 / 2 dof) = 0.021739
			2 * 0.021739130434782608 * 1000 * 1.4142135623730951},
		{"no prediction: none", []float64{8}, []float64{900}, 8, 0, 0.01, 0, 0},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			cv, ok := NewCurve(c.xs, c.ys, true)
			if !ok {
				t.Fatal("no curve")
			}
			if got := cv.Margin(c.x, c.mid, c.sd, c.cp); math.Abs(got-c.want) > 1e-9*max(1, c.want) {
				t.Errorf("margin %.6f, want %.6f", got, c.want)
			}
		})
	}
}
