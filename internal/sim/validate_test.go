package sim

import (
	"math"
	"slices"
	"strings"
	"testing"
)

func TestValidate(t *testing.T) {
	t.Parallel()
	hops := func(spec ...any) []Hop {
		var out []Hop
		for i := 0; i < len(spec); i += 2 {
			out = append(out, Hop{At: float64(spec[i].(int)), Partition: spec[i+1].(string)})
		}
		return out
	}
	simr := &Result{Jobs: []JobResult{
		{ID: 1, JCT: 110, Path: hops(0, "gpu")},
		{ID: 2, JCT: 180, Managed: true, Path: hops(10, "cpu", 120, "gpu")},
		{ID: 3, JCT: 300, Managed: true, Path: hops(20, "cpu", 100, "gpu")},
		{ID: 4, JCT: 90, Managed: true, Path: hops(30, "cpu")},
	}}
	lab := []Observed{
		{ID: 1, JCT: 100, Path: hops(0, "gpu")},
		{ID: 2, JCT: 200, Path: hops(10, "cpu", 90, "gpu")}, // moved first on the lab
		{ID: 3, JCT: 300, Path: hops(20, "cpu", 110, "gpu")},
		{ID: 4, JCT: 100, Path: hops(30, "cpu", 80, "gpu")},
	}
	v, err := Validate(lab, simr)
	if err != nil {
		t.Fatal(err)
	}
	errs := []float64{v.Rows[0].Err, v.Rows[1].Err, v.Rows[2].Err, v.Rows[3].Err}
	if want := []float64{0.1, -0.1, 0, -0.1}; !approxEqual(errs, want) {
		t.Errorf("errors %v, want %v", errs, want)
	}
	if math.Abs(v.MedianErr-0.1) > 1e-9 || math.Abs(v.MaxErr-0.1) > 1e-9 {
		t.Errorf("median %g max %g, want 0.1 0.1", v.MedianErr, v.MaxErr)
	}
	if v.SamePaths != 2 || v.IschedJobs != 3 || v.Rows[3].SamePath || !v.Rows[0].SamePath {
		t.Errorf("same paths %d of %d; rows %+v", v.SamePaths, v.IschedJobs, v.Rows)
	}
	wantLab := []string{"job 4: cpu→gpu", "job 2: cpu→gpu", "job 3: cpu→gpu"}
	wantSim := []string{"job 3: cpu→gpu", "job 2: cpu→gpu"}
	if !slices.Equal(v.LabMoves, wantLab) || !slices.Equal(v.SimMoves, wantSim) || v.InOrder != 1 {
		t.Errorf("moves lab %q sim %q in order %d; want %q %q 1", v.LabMoves, v.SimMoves, v.InOrder, wantLab, wantSim)
	}
	var b strings.Builder
	if err := WriteValidation(&b, v); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"median |Δ JCT| 10.0%", "same partitions: 2 of 3", "cpu@10 gpu@90", "moves in the same order: 1 (lab 3, sim 2)"} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("table lacks %q:\n%s", want, b.String())
		}
	}

	if _, err := Validate([]Observed{{ID: 9, JCT: 1}}, simr); err == nil || !strings.Contains(err.Error(), "job 9") {
		t.Errorf("a job the simulation lacks: %v", err)
	}
	if _, err := Validate([]Observed{{ID: 1}}, simr); err == nil || !strings.Contains(err.Error(), "no completion time") {
		t.Errorf("a job without a completion time: %v", err)
	}
}

func approxEqual(a, b []float64) bool {
	return slices.EqualFunc(a, b, func(x, y float64) bool { return math.Abs(x-y) < 1e-9 })
}

func TestLCS(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		a, b string
		want int
	}{
		{"", "", 0}, {"abc", "", 0}, {"abc", "abc", 3}, {"abc", "acb", 2}, {"abcd", "xbxd", 2}, {"ab", "ba", 1},
	} {
		if got := lcs(strings.Split(tc.a, ""), strings.Split(tc.b, "")); got != tc.want {
			t.Errorf("lcs(%q, %q) = %d, want %d", tc.a, tc.b, got, tc.want)
		}
	}
}
