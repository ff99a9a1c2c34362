package estimate

import (
	"math"
	"testing"
	"time"
)

func TestPredictEnd(t *testing.T) {
	t.Parallel()
	est := IterEstimate{MS: 100, LowMS: 80, HighMS: 150, OverheadMSPerIter: 20}
	tests := []struct {
		name        string
		step, total int64
		est         IterEstimate
		extraMS     float64
		want        ETA
	}{
		{name: "unknown total", step: 10, total: 0, est: est, want: ETA{Reason: ReasonNoTotal}},
		{name: "negative total", step: 10, total: -1, est: est, want: ETA{Reason: ReasonNoTotal}},
		{name: "no estimate", step: 10, total: 100, est: IterEstimate{}, want: ETA{Reason: ReasonNoEstimate}},
		{
			name: "1000 left", step: 9000, total: 10000, est: est,
			want: ETA{Known: true, Remaining: 1000, End: t0.Add(120 * time.Second), Low: t0.Add(100 * time.Second), High: t0.Add(170 * time.Second)},
		},
		{
			name: "extra for a final checkpoint", step: 9000, total: 10000, est: est, extraMS: 30000,
			want: ETA{Known: true, Remaining: 1000, End: t0.Add(150 * time.Second), Low: t0.Add(130 * time.Second), High: t0.Add(200 * time.Second)},
		},
		{
			name: "done", step: 10000, total: 10000, est: est, extraMS: 5000,
			want: ETA{Known: true, Remaining: 0, End: t0.Add(5 * time.Second), Low: t0.Add(5 * time.Second), High: t0.Add(5 * time.Second)},
		},
		{
			name: "past the total", step: 12000, total: 10000, est: est,
			want: ETA{Known: true, Remaining: 0, End: t0, Low: t0, High: t0},
		},
		{
			name: "absurd remaining is clamped", step: 0, total: 1 << 62, est: est,
			want: ETA{Known: true, Remaining: 1 << 62, End: t0.Add(maxDuration), Low: t0.Add(maxDuration), High: t0.Add(maxDuration)},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			got := PredictEnd(t0, tc.step, tc.total, tc.est, tc.extraMS)
			if got != tc.want {
				t.Errorf("PredictEnd() =\n%+v\nwant\n%+v", got, tc.want)
			}
		})
	}
}

func TestETAWithPast(t *testing.T) {
	t.Parallel()
	// 1000 steps left at 100 ms + 20 ms overhead: end +120 s, band
	// [+100 s, +170 s] (PredictEnd's "1000 left" case)
	est := IterEstimate{MS: 100, LowMS: 80, HighMS: 150, OverheadMSPerIter: 20}
	base := PredictEnd(t0, 9000, 10000, est, 0)
	at := func(s float64) time.Time { return t0.Add(time.Duration(s * float64(time.Second))) }
	tests := []struct {
		name      string
		past      []float64
		extraMS   float64
		low, high time.Time
	}{
		{"no earlier runs", nil, 0, at(100), at(170)},
		{"earlier runs inside the band change nothing", []float64{90, 140}, 0, at(100), at(170)},
		{"a slower earlier run raises the high end", []float64{200}, 0, at(100), at(220)},
		{"a faster one lowers the low end", []float64{50, 250}, 0, at(70), at(270)},
		{"not positive or finite is skipped", []float64{0, -5, math.NaN(), math.Inf(1)}, 0, at(100), at(170)},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			got := base.WithPast(t0, est, tc.extraMS, tc.past)
			if !got.Low.Equal(tc.low) || !got.High.Equal(tc.high) || !got.End.Equal(base.End) || got.Remaining != base.Remaining {
				t.Errorf("WithPast(%v) = low %v end %v high %v, want low %v end %v high %v", tc.past,
					got.Low.Sub(t0), got.End.Sub(t0), got.High.Sub(t0), tc.low.Sub(t0), base.End.Sub(t0), tc.high.Sub(t0))
			}
		})
	}
	// the extra time ahead counts for the earlier runs' ends too
	withExtra := PredictEnd(t0, 9000, 10000, est, 30000).WithPast(t0, est, 30000, []float64{200})
	if want := at(250); !withExtra.High.Equal(want) {
		t.Errorf("with 30 s extra: high %v, want %v", withExtra.High.Sub(t0), want.Sub(t0))
	}
	if unknown := PredictEnd(t0, 10, 0, est, 0); unknown.WithPast(t0, est, 0, []float64{200}) != unknown {
		t.Error("an unknown ETA changed")
	}
}
