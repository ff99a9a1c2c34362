package main

import (
	"bytes"
	"os"
	"testing"

	"github.com/isched/isched/internal/plan"
)

// TestStaticBandGenerated fails when internal/plan/staticband_gen.go is not
// what the committed grid and the current static model give: after a new
// grid or a change to the static model, regenerate it with
// go run ./scripts/bench/predict -write-static-band internal/plan/staticband_gen.go.
func TestStaticBandGenerated(t *testing.T) {
	bn, err := loadBench("testdata", "../../../examples/site-lab.json", "lab-cpu")
	if err != nil {
		t.Fatal(err)
	}
	want, err := staticBandSource(bn)
	if err != nil {
		t.Fatal(err)
	}
	got, err := os.ReadFile("../../../internal/plan/staticband_gen.go")
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, want) {
		t.Errorf("internal/plan/staticband_gen.go drifted from the grid; want:\n%s", want)
	}
	assumed, probed := bn.staticBands()
	if plan.StaticBandFor(false) != assumed || plan.StaticBandFor(true) != probed {
		t.Errorf("plan bands %+v %+v, grid gives %+v %+v", plan.StaticBandFor(false), plan.StaticBandFor(true), assumed, probed)
	}
	// in sample every cell's ratio lies in its band
	for k, rs := range bn.staticRatios() {
		lo, hi, _ := span(rs, "")
		for _, r := range rs {
			if r.v < lo || r.v > hi {
				t.Errorf("%s: %s ratio %.3f outside %.3f-%.3f", k, r.arch, r.v, lo, hi)
			}
		}
	}
}

func TestSpan(t *testing.T) {
	rs := []ratio{{"a", 0.91234}, {"b", 1.20001}, {"c", 0.5}}
	for _, tc := range []struct {
		skip   string
		lo, hi float64
		ok     bool
	}{{"", 0.5, 1.201, true}, {"c", 0.912, 1.201, true}, {"b", 0.5, 1, true}} {
		lo, hi, ok := span(rs, tc.skip)
		if lo != tc.lo || hi != tc.hi || ok != tc.ok {
			t.Errorf("span without %q = %v %v %v, want %v %v %v", tc.skip, lo, hi, ok, tc.lo, tc.hi, tc.ok)
		}
	}
	if _, _, ok := span(rs[:1], "a"); ok {
		t.Error("span of nothing is ok")
	}
}
