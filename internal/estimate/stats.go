package estimate

import (
	"encoding/json"
	"fmt"
	"math"
	"slices"
	"strconv"
	"time"
)

// Obs is one observed iteration duration: the time per step, in
// milliseconds rounded to the microsecond, and how many steps it covers
// (more than one when the loop logs every N steps or the wrapper read
// several steps at once). It is stored as the JSON array [ms, steps] so
// that a full window stays a few kilobytes in Redis.
type Obs struct {
	MS    float64
	Steps int64
}

// MarshalJSON writes [ms, steps].
func (o Obs) MarshalJSON() ([]byte, error) { return appendObs(nil, o) }

// UnmarshalJSON reads [ms, steps].
func (o *Obs) UnmarshalJSON(b []byte) error {
	var a [2]float64
	if err := json.Unmarshal(b, &a); err != nil {
		return err
	}
	v, err := newObs(a)
	if err != nil {
		return err
	}
	*o = v
	return nil
}

func appendObs(b []byte, o Obs) ([]byte, error) {
	if !(o.MS > 0) || math.IsInf(o.MS, 0) {
		return nil, fmt.Errorf("estimate: bad observation duration %v", o.MS)
	}
	b = append(b, '[')
	b = appendMS(b, o.MS)
	b = append(b, ',')
	b = strconv.AppendInt(b, o.Steps, 10)
	return append(b, ']'), nil
}

func newObs(a [2]float64) (Obs, error) {
	if a[1] < 1 || a[1] > maxWeight || a[1] != math.Trunc(a[1]) || !(a[0] > 0) || math.IsInf(a[0], 0) {
		return Obs{}, fmt.Errorf("estimate: bad observation [%v, %v]", a[0], a[1])
	}
	return Obs{MS: a[0], Steps: int64(a[1])}, nil
}

// Observations is a list of observations, stored as the JSON array of
// their [ms, steps] pairs, encoded and decoded as a whole (codec.go).
type Observations []Obs

// MarshalJSON writes [[ms, steps], ...] (null for a nil list).
func (os Observations) MarshalJSON() ([]byte, error) {
	return os.appendTo(make([]byte, 0, 2+len(os)*14))
}

// UnmarshalJSON reads [[ms, steps], ...], with the checks of Obs.
func (os *Observations) UnmarshalJSON(b []byte) error {
	l, err := decodeList(b, "observations", newObs)
	if err != nil {
		return err
	}
	*os = l
	return nil
}

// appendMS appends ms as json.Marshal would,
// faster for what the estimator stores: a duration rounded to the
// microsecond (at most three decimals) below 2^53 µs.
func appendMS(b []byte, ms float64) []byte {
	us := math.Round(ms * 1000)
	if us/1000 != ms || us >= 1<<53 {
		f, _ := json.Marshal(ms) // ms is finite: checked by the caller
		return append(b, f...)
	}
	u := int64(us)
	b = strconv.AppendInt(b, u/1000, 10)
	frac := u % 1000
	if frac == 0 {
		return b
	}
	b = append(b, '.', byte('0'+frac/100), byte('0'+frac/10%10), byte('0'+frac%10))
	for b[len(b)-1] == '0' {
		b = b[:len(b)-1]
	}
	return b
}

// gap is the time between the two step reports that bound o.
func (o Obs) gap() float64 { return o.MS * float64(o.Steps) }

// wquantiles returns the step-weighted q-quantiles of the observations'
// MS: the smallest value whose cumulative weight reaches q of the total.
// Weighting by steps makes one report covering 100 steps count as much as
// 100 reports of one step.
func wquantiles(obs []Obs, qs ...float64) []float64 {
	return wquantilesOrdered(obs, byMS(nil, obs), qs...)
}

func wmedian(obs []Obs) float64 { return wquantiles(obs, 0.5)[0] }

func wmean(obs []Obs) float64 {
	var sum, w float64
	for _, o := range obs {
		sum += o.MS * float64(o.Steps)
		w += float64(o.Steps)
	}
	if w == 0 {
		return 0
	}
	return sum / w
}

// median is the median of v (the mean of the two middle values for an
// even length), found by selection in a pooled copy: v is left as it is.
func median(v []float64) float64 {
	if len(v) == 0 {
		return 0
	}
	bp := scratch.Get().(*[]float64)
	defer scratch.Put(bp)
	*bp = append((*bp)[:0], v...)
	return medianInPlace(*bp)
}

// medianInPlace is median(v), reordering v. The coordinator takes several
// medians of ~2 000 pairwise slopes whenever a job's memory points change:
// selection is linear where a sort was most of its CPU at 10 000 jobs.
func medianInPlace(v []float64) float64 {
	n := len(v)
	if n == 0 {
		return 0
	}
	hi := nth(v, n/2)
	if n%2 == 1 {
		return hi
	}
	// nth left the n/2 smallest before v[n/2]: the lower middle is their largest
	return (slices.Max(v[:n/2]) + hi) / 2
}

// trend is the Theil–Sen slope (median of pairwise slopes) of y over x and
// Kendall's tau (concordant minus discordant pairs, over all pairs with
// distinct x): 1 for strictly increasing, about 0 for noise around a level.
func trend(x []int64, y []float64) (slope, tau float64) {
	bp := scratch.Get().(*[]float64)
	defer scratch.Put(bp)
	slopes := (*bp)[:0]
	defer func() { *bp = slopes }()
	s := 0
	for i := range x {
		for j := i + 1; j < len(x); j++ {
			dx := float64(x[j] - x[i])
			if dx == 0 {
				continue
			}
			dy := y[j] - y[i]
			slopes = append(slopes, dy/dx)
			switch {
			case dy*dx > 0:
				s++
			case dy*dx < 0:
				s--
			}
		}
	}
	if len(slopes) == 0 {
		return 0, 0
	}
	return medianInPlace(slopes), float64(s) / float64(len(slopes))
}

// maxDuration bounds every predicted duration: beyond a century a
// prediction is noise, and time.Duration overflows at 292 years.
const maxDuration = 100 * 365 * 24 * time.Hour

// msDuration converts milliseconds to a Duration, clamped to [0, maxDuration].
func msDuration(ms float64) time.Duration {
	switch {
	case !(ms > 0):
		return 0
	case ms >= float64(maxDuration/time.Millisecond):
		return maxDuration
	}
	return time.Duration(ms * float64(time.Millisecond))
}
