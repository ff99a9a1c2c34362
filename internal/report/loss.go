package report

import (
	"math"
	"slices"
)

// LossStatus is the training loss the run reports (isched.step(loss=...),
// a progress line's loss=, a callback's): the last value, the lowest, and
// the trend over the recent reports, for `isched status`.
type LossStatus struct {
	Last    float64 `json:"last"`
	Step    int64   `json:"step"` // the last value's step
	Min     float64 `json:"min"`
	MinStep int64   `json:"min_step"`
	// N counts the finite losses reported; NonFinite the NaN or infinite
	// ones (a diverging run).
	N         int `json:"n"`
	NonFinite int `json:"nonfinite,omitempty"`
	// Recent are the last LossWindow (step, loss) pairs, oldest first;
	// Trend is the change from the median of their first quarter (ending
	// at FromStep) to that of their last: (to − from) / |from|; 0 with
	// fewer than 8 of them.
	Recent   []LossPoint `json:"recent,omitempty"`
	Trend    float64     `json:"trend"`
	FromStep int64       `json:"from_step,omitempty"`
}

// LossPoint is one reported loss.
type LossPoint struct {
	Step int64   `json:"step"`
	Loss float64 `json:"loss"`
}

// LossWindow is how many recent losses the trend looks at.
const LossWindow = 64

// Add takes one iteration's loss (it has none: nothing changes).
func (l *LossStatus) Add(it Iter) {
	switch {
	case it.LossNonFinite:
		l.NonFinite++
		return
	case it.Loss == nil || math.IsNaN(*it.Loss) || math.IsInf(*it.Loss, 0):
		return
	}
	v := *it.Loss
	if l.N == 0 || v < l.Min {
		l.Min, l.MinStep = v, it.Step
	}
	l.N++
	l.Last, l.Step = v, it.Step
	l.Recent = append(l.Recent, LossPoint{Step: it.Step, Loss: v})
	if len(l.Recent) > LossWindow {
		l.Recent = slices.Delete(l.Recent, 0, len(l.Recent)-LossWindow)
	}
	l.trend()
}

// trend compares the medians of the first and the last quarter of Recent.
func (l *LossStatus) trend() {
	n := len(l.Recent)
	l.Trend, l.FromStep = 0, 0
	if n < 8 {
		return
	}
	q := n / 4
	from, to := medianLoss(l.Recent[:q]), medianLoss(l.Recent[n-q:])
	if from == 0 {
		return
	}
	l.Trend, l.FromStep = (to-from)/math.Abs(from), l.Recent[q-1].Step
}

func medianLoss(ps []LossPoint) float64 {
	v := make([]float64, len(ps))
	for i, p := range ps {
		v[i] = p.Loss
	}
	slices.Sort(v)
	if len(v)%2 == 1 {
		return v[len(v)/2]
	}
	return (v[len(v)/2-1] + v[len(v)/2]) / 2
}
