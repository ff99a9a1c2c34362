package estimate

import (
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
