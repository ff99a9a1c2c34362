package estimate

import (
	"math"
	"testing"
)

func TestPrior(t *testing.T) {
	t.Parallel()
	const me = 1001
	cases := []struct {
		name string
		runs []PastRun
		src  PriorSource
		n    int
		want IterEstimate // MS, LowMS, HighMS
	}{
		{"none", nil, "", 0, IterEstimate{}},
		{"own only", []PastRun{{me, 100}, {me, 120}, {me, 90}}, PriorOwn, 3, IterEstimate{MS: 100, LowMS: 90, HighMS: 120}},
		{"own before others, however many", []PastRun{{1002, 500}, {1003, 500}, {1004, 500}, {me, 110}, {me, 130}}, PriorOwn, 2,
			IterEstimate{MS: 120, LowMS: 110, HighMS: 130}},
		{"others: median of each user's median", []PastRun{{1002, 100}, {1002, 300}, {1003, 150}, {1004, 400}}, PriorPooled, 3,
			// medians 200, 150, 400
			IterEstimate{MS: 200, LowMS: 150, HighMS: 400}},
		{"one user's many runs count once", []PastRun{{1002, 100}, {1003, 120}, {1004, 900}, {1004, 900}, {1004, 900}, {1004, 900}, {1004, 900}},
			PriorPooled, 3, IterEstimate{MS: 120, LowMS: 100, HighMS: 900}},
		{"unusable times skipped", []PastRun{{me, 0}, {me, -5}, {me, math.Inf(1)}, {me, math.NaN()}, {1002, 80}}, PriorPooled, 1,
			IterEstimate{MS: 80, LowMS: 80, HighMS: 80}},
		{"only unusable", []PastRun{{me, 0}, {1002, math.NaN()}}, "", 0, IterEstimate{}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			est, src, n, ok := Prior(me, c.runs)
			if ok != (c.src != "") || src != c.src || n != c.n {
				t.Fatalf("source %q n %d ok %v, want %q %d", src, n, ok, c.src, c.n)
			}
			if !ok {
				return
			}
			if est.MS != c.want.MS || est.LowMS != c.want.LowMS || est.HighMS != c.want.HighMS || !est.Provisional || est.N != c.n {
				t.Errorf("estimate %+v, want %v/%v/%v provisional, n %d", est, c.want.MS, c.want.LowMS, c.want.HighMS, c.n)
			}
		})
	}
}
