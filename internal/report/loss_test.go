package report

import (
	"math"
	"testing"
)

func lossIter(step int64, v float64) Iter { return Iter{Step: step, Loss: &v} }

func TestLossStatus(t *testing.T) {
	t.Parallel()
	var l LossStatus
	l.Add(Iter{Step: 1}) // no loss reported
	if l.N != 0 || l.Recent != nil {
		t.Fatalf("an iteration without a loss counted: %+v", l)
	}
	for s := int64(1); s <= 7; s++ {
		l.Add(lossIter(s*10, 2.0/float64(s)))
	}
	if l.Trend != 0 || l.FromStep != 0 {
		t.Errorf("a trend from 7 values: %+v", l)
	}
	l.Add(lossIter(80, 0.25))
	// first quarter (2 values) 2, 1: median 1.5; last quarter 2/7, 0.25: median 0.268
	if want := (0.5*(2.0/7+0.25) - 1.5) / 1.5; math.Abs(l.Trend-want) > 1e-12 || l.FromStep != 20 {
		t.Errorf("trend %v from step %d, want %v from 20", l.Trend, l.FromStep, want)
	}
	if l.Last != 0.25 || l.Step != 80 || l.Min != 0.25 || l.MinStep != 80 || l.N != 8 {
		t.Errorf("%+v", l)
	}
	l.Add(Iter{Step: 90, LossNonFinite: true})
	l.Add(lossIter(100, 0.5))
	if l.NonFinite != 1 || l.Last != 0.5 || l.Min != 0.25 || l.MinStep != 80 {
		t.Errorf("after a NaN and a higher loss: %+v", l)
	}
	for s := int64(0); s < 2*LossWindow; s++ {
		l.Add(lossIter(200+s, 1))
	}
	if len(l.Recent) != LossWindow || l.Recent[0].Step != 200+LossWindow || l.Trend != 0 {
		t.Errorf("window: %d values from step %d, trend %v", len(l.Recent), l.Recent[0].Step, l.Trend)
	}
}
