package estimate

import (
	"reflect"
	"strings"
	"testing"
	"time"
)

func TestCheck(t *testing.T) {
	t.Parallel()
	perStep := IterEstimate{MS: 100, LowMS: 90, HighMS: 120, GapMS: 100, MaxGapMS: 2000}
	batched := IterEstimate{MS: 100, LowMS: 90, HighMS: 120, GapMS: 10000, MaxGapMS: 12000} // 100 steps per report
	slowEval := IterEstimate{MS: 100, LowMS: 90, HighMS: 120, GapMS: 100, MaxGapMS: 120000} // a 2-minute eval pass
	ago := func(d time.Duration) time.Time { return t0.Add(-d) }
	tests := []struct {
		name   string
		h      Health
		factor float64
		want   []string // kinds
		substr string   // in the first message
	}{
		{name: "healthy", h: Health{LastIterAt: ago(time.Second), Est: perStep, HaveEst: true}},
		{name: "no estimate, no stall verdict", h: Health{LastIterAt: ago(time.Hour)}},
		{name: "never iterated", h: Health{Est: perStep, HaveEst: true}},
		{name: "59 s is under the 60 s floor", h: Health{LastIterAt: ago(59 * time.Second), Est: perStep, HaveEst: true}},
		{
			name: "61 s stall", h: Health{LastIterAt: ago(61 * time.Second), Est: perStep, HaveEst: true},
			want: []string{EventStall}, substr: "no iteration for 1m1s (expected one every 100ms; stall threshold 1m0s)",
		},
		{name: "batched reports: 10 × 10 s not reached", h: Health{LastIterAt: ago(90 * time.Second), Est: batched, HaveEst: true}},
		{
			name: "batched reports: past 10 × 10 s", h: Health{LastIterAt: ago(101 * time.Second), Est: batched, HaveEst: true},
			want: []string{EventStall}, substr: "stall threshold 1m40s",
		},
		{name: "a recurring 2-min eval is not a stall", h: Health{LastIterAt: ago(170 * time.Second), Est: slowEval, HaveEst: true}},
		{
			name: "past 1.5 × the longest gap", h: Health{LastIterAt: ago(181 * time.Second), Est: slowEval, HaveEst: true},
			want: []string{EventStall}, substr: "stall threshold 3m0s",
		},
		{
			name: "factor 3", factor: 3, h: Health{LastIterAt: ago(31 * time.Second), Est: batched, HaveEst: true},
		},
		{
			name: "NaN loss", h: Health{LastIterAt: ago(time.Second), Est: perStep, HaveEst: true, LossNonFinite: true},
			want: []string{EventNaNLoss}, substr: "NaN",
		},
		{
			name: "RSS at 95%", h: Health{RSS: 95 * gib / 10, RSSLimit: 10 * gib},
			want: []string{EventMemoryNearLimit}, substr: "CPU memory 9.5 GiB is 95% of the limit 10.0 GiB",
		},
		{name: "RSS at 89%", h: Health{RSS: 89 * gib / 10, RSSLimit: 10 * gib}},
		{
			name: "predicted RSS peak above the limit", h: Health{RSS: 6 * gib, RSSLimit: 10 * gib, PredictedPeakRSS: 11 * gib},
			want: []string{EventMemoryNearLimit}, substr: "predicted to reach 11.0 GiB",
		},
		{
			name: "GPU near its limit", h: Health{GPU: 39 * gib, GPULimit: 40 * gib},
			want: []string{EventMemoryNearLimit}, substr: "GPU memory 39.0 GiB is 98%",
		},
		{name: "unknown limits", h: Health{RSS: 100 * gib, GPU: 100 * gib, PredictedPeakRSS: 200 * gib}},
		{
			name: "growth", h: Health{RSS: 3 * gib, Growing: true, PredictedPeakRSS: 5 * gib},
			want: []string{EventMemoryGrowth}, substr: "CPU 3.0 GiB now, predicted peak 5.0 GiB",
		},
		{
			name: "everything, in order",
			h: Health{LastIterAt: ago(time.Hour), Est: perStep, HaveEst: true, LossNonFinite: true,
				RSS: 10 * gib, RSSLimit: 10 * gib, GPU: 40 * gib, GPULimit: 40 * gib, Growing: true, PredictedPeakRSS: 12 * gib},
			want: []string{EventStall, EventNaNLoss, EventMemoryNearLimit, EventMemoryNearLimit, EventMemoryGrowth},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			got := Check(t0, tc.h, tc.factor)
			var kinds []string
			for _, e := range got {
				kinds = append(kinds, e.Kind)
			}
			if !reflect.DeepEqual(kinds, tc.want) {
				t.Fatalf("Check() = %+v, want kinds %v", got, tc.want)
			}
			if tc.substr != "" && !strings.Contains(got[0].Message, tc.substr) {
				t.Errorf("message %q does not contain %q", got[0].Message, tc.substr)
			}
		})
	}
}

func TestCkptTimer(t *testing.T) {
	t.Parallel()
	type step struct {
		request, complete time.Duration // offsets from t0; -1: skip
	}
	tests := []struct {
		name     string
		steps    []step
		cancel   bool
		want     time.Duration
		wantN    int
		pending  bool
		measured []bool
	}{
		{name: "default before any", want: DefaultCkpt},
		{name: "one of 10 s", steps: []step{{0, 10 * time.Second}}, want: 12500 * time.Millisecond, wantN: 1, measured: []bool{true}},
		{
			name:  "slower latest dominates",
			steps: []step{{0, 10 * time.Second}, {time.Minute, 70 * time.Second}, {2 * time.Minute, 160 * time.Second}},
			// avg 10 → 10 → 19; 1.25 × 19 = 23.75 s < last 40 s
			want: 40 * time.Second, wantN: 3, measured: []bool{true, true, true},
		},
		{
			name:  "unrequested checkpoint is not measured",
			steps: []step{{-1, 5 * time.Second}}, want: DefaultCkpt, measured: []bool{false},
		},
		{
			name:  "clock going back is not measured",
			steps: []step{{10 * time.Second, 5 * time.Second}}, want: DefaultCkpt, measured: []bool{false},
		},
		{
			name:  "a tiny one is floored at a second",
			steps: []step{{0, 100 * time.Millisecond}}, want: time.Second, wantN: 1, measured: []bool{true},
		},
		{name: "pending", steps: []step{{0, -1}}, want: DefaultCkpt, pending: true},
		{name: "cancelled", steps: []step{{0, -1}}, cancel: true, want: DefaultCkpt},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			var c CkptTimer
			var measured []bool
			for _, s := range tc.steps {
				if s.request >= 0 {
					c.Requested(t0.Add(s.request))
					c.Requested(t0.Add(s.request + time.Second)) // a repeat does not move the start
				}
				if s.complete >= 0 {
					_, ok := c.Completed(t0.Add(s.complete))
					measured = append(measured, ok)
				}
			}
			if tc.cancel {
				c.Cancel()
			}
			_, pending := c.Pending()
			if got := c.Estimate(); got != tc.want || c.N != tc.wantN || pending != tc.pending || !reflect.DeepEqual(measured, tc.measured) {
				t.Errorf("Estimate() = %v, N %d, pending %v, measured %v; want %v, %d, %v, %v",
					got, c.N, pending, measured, tc.want, tc.wantN, tc.pending, tc.measured)
			}
		})
	}
}
