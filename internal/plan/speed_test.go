package plan

import (
	"math"
	"strings"
	"testing"

	"github.com/isched/isched/internal/report"
)

func TestLearnRatio(t *testing.T) {
	t.Parallel()
	blend := func(n, m, p float64) float64 {
		return math.Exp((n*math.Log(m) + RatioPriorWeight*math.Log(p)) / (n + RatioPriorWeight))
	}
	for _, c := range []struct {
		name     string
		prior    float64
		measured []float64
		want     float64
	}{
		{"nothing measured: the catalogue", 4, nil, 4},
		{"one pair: near the catalogue", 4, []float64{2}, blend(1, 2, 4)},
		{"the median, not the mean", 4, []float64{2, 2, 100}, blend(3, 2, 4)},
		{"even count: geometric middle", 4, []float64{1, 4}, blend(2, 2, 4)},
		{"many: the measured", 4, make30(2), blend(30, 2, 4)},
		{"bad figures ignored", 4, []float64{0, -1, math.Inf(1), 2}, blend(1, 2, 4)},
		{"no prior: unchanged", 0, []float64{2}, 0},
	} {
		if got := LearnRatio(c.prior, c.measured); math.Abs(got-c.want) > 1e-12 {
			t.Errorf("%s: %g, want %g", c.name, got, c.want)
		}
	}
}

func make30(v float64) []float64 {
	out := make([]float64, 30)
	for i := range out {
		out[i] = v
	}
	return out
}

// TestEstimateLearnsNodeSpeed: another configuration measured 2× faster
// on lab-gpu than on lab-cpu (the catalogue says 4×) moves the ratio
// that scales this configuration's lab-cpu receipts to lab-gpu.
func TestEstimateLearnsNodeSpeed(t *testing.T) {
	t.Parallel()
	site := mustSite(t, "../../examples/site-lab.json")
	m := mustModel(t, "testdata/resnet50.json")
	tr := Training{"sgd", PrecFP32}
	key := ConfigKey(m, tr)
	own := []report.Receipt{{Model: key, Batch: 16, Partition: "cpu", NodeType: "lab-cpu", IterMS: 800, PeakRSS: 1 << 30}}
	other := []report.Receipt{
		{Model: "other:sgd:fp32", Batch: 32, Partition: "cpu", NodeType: "lab-cpu", IterMS: 400, PeakRSS: 1 << 30},
		{Model: "other:sgd:fp32", Batch: 32, Partition: "gpu", NodeType: "lab-gpu", IterMS: 200, PeakRSS: 1 << 30},
	}
	for _, c := range []struct {
		name     string
		receipts []report.Receipt
		ratio    float64
		basis    string
	}{
		{"catalogue only", own, 4, "(relative throughput)"},
		{"learned from another configuration", append(own, other...), math.Exp((math.Log(2) + RatioPriorWeight*math.Log(4)) / (1 + RatioPriorWeight)),
			"learned from 1 other configuration(s) on both, catalogue 4"},
	} {
		rows, err := site.Estimate(Request{Model: m, Training: tr, Samples: 1000, Epochs: 1, Batches: []int{16}, Receipts: c.receipts})
		if err != nil {
			t.Fatal(err)
		}
		for _, r := range rows {
			if r.NodeType.Name != "lab-gpu" {
				continue
			}
			if want := 0.8 / c.ratio; math.Abs(r.IterSeconds-want) > 1e-9 || !strings.Contains(r.Basis, c.basis) {
				t.Errorf("%s: %.4f s, want %.4f; %s", c.name, r.IterSeconds, want, r.Basis)
			}
		}
	}
}
