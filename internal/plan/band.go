package plan

import (
	"fmt"
	"math"
	"slices"
)

// Band is an estimate and the range the measurements behind it support.
// Low == High == Mid when nothing measured says how far off it may be
// (one receipt per batch size on two batch sizes, or a static row).
type Band struct{ Low, Mid, High float64 }

// Width is High − Low.
func (b Band) Width() float64 { return b.High - b.Low }

// Contains reports whether v lies in the band.
func (b Band) Contains(v float64) bool { return v >= b.Low && v <= b.High }

// scale multiplies every bound by f.
func (b Band) scale(f float64) Band { return Band{b.Low * f, b.Mid * f, b.High * f} }

// shift adds d to every bound.
func (b Band) shift(d float64) Band { return Band{b.Low + d, b.Mid + d, b.High + d} }

// bandZ is how many measured standard deviations each side the band
// spans (two: about 95 % of a normal spread).
const bandZ = 2

// Curve is what receipts at several batch sizes say about one quantity
// (peak memory or iteration time) as a function of the batch size.
type Curve struct {
	xs      []float64 // distinct batch sizes, ascending
	centre  []float64 // per batch: the mean, or the largest (peak) repeat
	lo, hi  []float64 // per batch: smallest and largest repeat
	relSD   float64   // relative noise: repeats' pooled spread, fit residuals
	slopes  []float64 // marginal slopes between neighbouring batch sizes (≥ 0)
	fit     float64   // least-squares slope over the batch sizes' centres (≥ 0)
	repeats int       // batch sizes measured more than once
	// proportional: beyond the largest batch the value grows at least in
	// proportion to the batch (time: the per-sample cost of the largest
	// batch is a floor of the slope)
	proportional bool
	// saturating: beyond the largest batch the middle follows the line
	// through the measured batches and the band's high end reaches the
	// largest batch's per-sample cost (GPU time, see Saturating)
	saturating bool
}

// Proportional makes the curve's extrapolation beyond the largest
// measured batch at least proportional to the batch size: iteration time,
// whose per-sample cost at the largest batch is measured and, on the grid
// (bandgrid_test.go), did not shrink at larger ones, while the marginal
// slopes between small batches did (ResNet-50 and MobileNet-V2 on one CPU
// thread ran batch 8 slower than batch 16). Not memory, whose fixed part
// would be multiplied.
func (c Curve) Proportional() Curve {
	c.proportional = true
	return c
}

// Saturating is Proportional's counterpart for a GPU's iteration time:
// beyond the largest measured batch the middle follows the line through
// the measured batches (a fixed part per step, launches and the optimizer,
// and a per-sample part), and only the band's high end reaches the largest
// batch's per-sample cost times the batch. A GPU is far from busy at small
// batches: on an H100 (docs/gpu-check.md, 2026-11-27) ResNet-18's step
// took 10.4 ms at batch 8 and 16.1 ms at 64, GPT-2's 52 and 324 ms, so the
// per-sample cost of batch 16 times 64 was 2 to 3 times the truth for the
// ResNets, while the line through 8 and 16 was within 4 % at 64 for
// ResNet-18 and GPT-2.
func (c Curve) Saturating() Curve {
	c.saturating = true
	return c
}

// NewCurve groups points (x: batch size, y: value) by batch size. peak
// takes a batch size's largest repeat as its centre (memory: the worst
// run must fit), else the mean (time). ok is false without points.
func NewCurve(xs, ys []float64, peak bool) (Curve, bool) {
	var c Curve
	if len(xs) == 0 || len(xs) != len(ys) {
		return c, false
	}
	c.xs = slices.Clone(xs)
	slices.Sort(c.xs)
	c.xs = slices.Compact(c.xs)
	var ssRel float64
	var dof int
	for _, x := range c.xs {
		var sum, lo, hi float64
		var vals []float64
		for i := range xs {
			if xs[i] == x {
				vals = append(vals, ys[i])
				sum += ys[i]
			}
		}
		lo, hi = slices.Min(vals), slices.Max(vals)
		mean := sum / float64(len(vals))
		centre := mean
		if peak {
			centre = hi
		}
		c.centre, c.lo, c.hi = append(c.centre, centre), append(c.lo, lo), append(c.hi, hi)
		if len(vals) > 1 && mean > 0 {
			c.repeats++
			for _, v := range vals {
				ssRel += (v/mean - 1) * (v/mean - 1)
			}
			dof += len(vals) - 1
		}
	}
	if dof > 0 {
		c.relSD = math.Sqrt(ssRel / float64(dof))
	}
	for i := 1; i < len(c.xs); i++ {
		c.slopes = append(c.slopes, max((c.centre[i]-c.centre[i-1])/(c.xs[i]-c.xs[i-1]), 0))
	}
	if a, b, ok := FitLine(c.xs, c.centre); ok {
		c.fit = b
		if len(c.xs) > 2 { // residuals mean something only beyond two points
			var ss float64
			for i, x := range c.xs {
				if y := a + b*x; y > 0 {
					ss += (c.centre[i]/y - 1) * (c.centre[i]/y - 1)
				}
			}
			c.relSD = max(c.relSD, math.Sqrt(ss/float64(len(c.xs)-2)))
		}
	}
	return c, true
}

// Batches is how many distinct batch sizes were measured.
func (c Curve) Batches() int { return len(c.xs) }

// At predicts the value at batch size x. Measured: the centre, the band
// from the repeats. Between two measured sizes: the straight line between
// them. Beyond the largest: from the largest measured size on, at the
// steeper of the least-squares slope and the last marginal slope, so a
// per-sample cost measured to grow is never taken to shrink (slopeCap > 0
// caps that slope: memory's allocator steps, see scaleMem); the band's
// high end uses the steepest marginal slope measured, uncapped, its low
// end the shallowest. Below the
// smallest: the first marginal slope down, the same way. One batch size:
// slope1 (the caller's per-sample figure) both ways. Every band widens
// by bandZ × the relative noise (repeats, fit residuals) of the
// prediction. On a proportional curve (time), between a smaller batch that
// ran slower and a larger one, only the larger one counts (see the case).
// how says which rule was used.
func (c Curve) At(x, slope1, slopeCap float64) (b Band, how string) {
	n := len(c.xs)
	noise := func(b Band) Band {
		d := bandZ * c.relSD * b.Mid
		return Band{max(b.Low-d, 0), b.Mid, b.High + d}
	}
	if i, ok := slices.BinarySearch(c.xs, x); ok {
		return noise(Band{c.lo[i], c.centre[i], c.hi[i]}), "measured"
	}
	if n == 1 {
		d := x - c.xs[0]
		return noise(Band{c.lo[0] + slope1*d, c.centre[0] + slope1*d, c.hi[0] + slope1*d}),
			fmt.Sprintf("from batch %g + per-sample slope", c.xs[0])
	}
	lo, hi := slices.Min(c.slopes), slices.Max(c.slopes)
	switch i, _ := slices.BinarySearch(c.xs, x); {
	case i == n:
		b, how := c.beyond(x, lo, hi, slopeCap)
		return noise(b), how
	case i == 0:
		mid := c.slopes[0]
		d := c.xs[0] - x
		return noise(Band{max(c.lo[0]-hi*d, 0), max(c.centre[0]-mid*d, 0), max(c.hi[0]-lo*d, 0)}),
			fmt.Sprintf("down from batch %g", c.xs[0])
	default:
		if c.proportional && c.centre[i-1] > c.centre[i] {
			// the smaller batch ran slower than the larger one (a slow
			// kernel path at small batches: ResNet-50 at batch 8 on one
			// CPU thread took 3x batch 16's time): no line through it
			// holds. Time that grows with the batch at a per-sample cost
			// that does not grow bounds x by the larger batch alone:
			// between its per-sample cost times x and its own time; the
			// estimate is the middle of the two (geometric).
			r := x / c.xs[i]
			lo, hi := c.lo[i]*r, c.hi[i]
			return noise(Band{lo, math.Sqrt(c.centre[i] * r * c.centre[i]), hi}),
				fmt.Sprintf("below batch %g, which ran faster than batch %g", c.xs[i], c.xs[i-1])
		}
		f := (x - c.xs[i-1]) / (c.xs[i] - c.xs[i-1])
		lerp := func(a, b float64) float64 { return a + f*(b-a) }
		return noise(Band{lerp(c.lo[i-1], c.lo[i]), lerp(c.centre[i-1], c.centre[i]), lerp(c.hi[i-1], c.hi[i])}),
			fmt.Sprintf("between batch %g and %g", c.xs[i-1], c.xs[i])
	}
}

// beyond is At past the largest measured batch, before the noise; lo and
// hi are the shallowest and the steepest marginal slopes.
func (c Curve) beyond(x, lo, hi, slopeCap float64) (Band, string) {
	n := len(c.xs)
	mid := max(c.fit, c.slopes[n-2])
	if slopeCap > 0 {
		mid = min(mid, slopeCap)
	}
	if c.proportional {
		mid = max(mid, c.centre[n-1]/c.xs[n-1])
	}
	d := x - c.xs[n-1]
	how := fmt.Sprintf("from batch %g on at the steeper of the fitted and the last slope", c.xs[n-1])
	b := Band{c.lo[n-1] + min(lo, mid)*d, c.centre[n-1] + mid*d, c.hi[n-1] + max(hi, mid)*d}
	if c.proportional {
		how = fmt.Sprintf("from batch %g on at the steepest of the fitted slope, the last one and its per-sample cost", c.xs[n-1])
		b, how = c.perSampleBand(b, x, how)
	}
	if c.saturating {
		b.High = max(b.High, c.hi[n-1]/c.xs[n-1]*x)
		how += fmt.Sprintf(", up to batch %g's per-sample cost", c.xs[n-1])
	}
	return b, how
}

// PerSampleLow and PerSampleHigh bound how the per-sample iteration time
// at a larger batch compared with the largest measured batch's on the
// grids (testdata/bandgrid.jsonl, both runs, and the bench-predict grid:
// the 18 cells at batch 32 and 64 against batch 16's per-sample cost):
// 0.664 (ResNet-18 at 64) to 1.270 (MobileNet-V2 at 32), rounded outward.
// Neither direction is predictable from two small batches: the per-sample
// cost fell for ResNet-50 (0.72 at 64) and rose for MobileNet-V2 in the
// same grid.
const (
	PerSampleLow  = 0.66
	PerSampleHigh = 1.27
)

// perSampleBand widens a time band beyond the largest measured batch to
// hold PerSampleLow..PerSampleHigh × that batch's per-sample cost × x:
// without it a fit over two batch sizes measured once each had no
// width above its middle, and the truth was above it in 3 of 6
// bench-predict cells (MobileNet-V2 at 32 by 27 %). When the smaller
// batch ran slower in all than the largest (a slow small-batch kernel
// path: ResNet-50 and MobileNet-V2 at batch 8 with this torch build), how
// says so: only the largest batch's per-sample cost stands.
func (c Curve) perSampleBand(b Band, x float64, how string) (Band, string) {
	n := len(c.xs)
	ps := c.centre[n-1] / c.xs[n-1] * x
	b.Low, b.High = min(b.Low, PerSampleLow*ps), max(b.High, PerSampleHigh*ps)
	if n > 1 && c.centre[n-2] > c.centre[n-1] {
		// the clamped slope between them (0) said nothing: time does grow
		b.Low = PerSampleLow * ps
		how += fmt.Sprintf(" (batch %g ran slower than batch %g: a slow small-batch path, so the band is batch %g's per-sample cost x %g-%g, as larger batches ran on the grids)",
			c.xs[n-2], c.xs[n-1], c.xs[n-1], PerSampleLow, PerSampleHigh)
	}
	return b, how
}

// MemRunSD is the relative run-to-run spread of one batch size's peak
// memory when the receipts repeat no batch size: the pooled relative
// standard deviation of the 15 pairs of repeat runs in
// testdata/bandgrid.jsonl (ResNet-18, MobileNet-V2, ResNet-50 at batch
// 4-64, two fresh processes each), 1.12 %. The largest pair differed by
// 25 MiB of 633 (ResNet-18 at 64): glibc keeps freed activation memory on
// its heap in steps, so a peak is the allocator's, not the tensors'.
const MemRunSD = 0.0112

// DeviceMemRunSD is MemRunSD for GPU memory: the device's caching
// allocator repeats itself (on an H100, docs/gpu-check.md 2026-11-27, the
// profile's receipts at batch 8 and 16 and the grid's fresh processes
// agreed to the MiB in all 8 pairs), but a line through two small batches
// strays as the batch grows (cuDNN's workspace, the allocator's
// segments): from 8 and 16 it was -16 % to +4.8 % off at 32 and 64 over
// ResNet-18 and ResNet-50 (fp32, bf16) and GPT-2. This spread makes
// Margin's prediction interval hold the worst of those cells (ResNet-18
// bf16 at 64, 16 % under the line: 2 x 1.05 % x 9.3 = 19.5 %; at 32
// 2 x 1.05 % x 3.74 = 7.9 %), at the cost of +22 to +25 % over the truth
// at 64 for ResNet-18 and GPT-2 fp32. Set from that grid itself, five
// configurations of one GPU: thin evidence, said where it is used.
const DeviceMemRunSD = 0.0105

// Margin is how far above the prediction mid at x a peak may lie, from
// the spread of the peaks it rests on: bandZ × sd × mid × √leverage,
// where sd is the larger of the receipts' own relative spread (repeats,
// and the residuals of the fit over three or more batch sizes: the
// allocator's steps) and sdPrior, and the leverage is the textbook
// prediction interval's 1 + 1/n + (x − x̄)²/Sxx over the n measured batch
// sizes (one: 2). A line through two peaks that each stray by sd strays
// further the further it is extended. Beyond the largest measured batch,
// with slopeCap > 0, the margin stops at that batch's largest peak (plus
// its own spread) continued at slopeCap per sample: memory's per-sample
// slope was never steeper than the static one on the grid, so the truth
// is not above that line.
func (c Curve) Margin(x, mid, sdPrior, slopeCap float64) float64 {
	n := len(c.xs)
	if n == 0 || !(mid > 0) {
		return 0
	}
	sd := max(c.relSD, sdPrior)
	lev := 2.0
	if n > 1 {
		var mx, sxx float64
		for _, v := range c.xs {
			mx += v
		}
		mx /= float64(n)
		for _, v := range c.xs {
			sxx += (v - mx) * (v - mx)
		}
		lev = 1 + 1/float64(n) + (x-mx)*(x-mx)/sxx
	}
	m := bandZ * sd * mid * math.Sqrt(lev)
	if last := c.xs[n-1]; x > last && slopeCap > 0 {
		point := bandZ * sd * c.hi[n-1] * math.Sqrt2
		upper := c.hi[n-1] + point + slopeCap*(x-last)
		m = min(m, max(upper-mid, point))
	}
	return m
}
