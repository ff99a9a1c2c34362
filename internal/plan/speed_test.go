package plan

import (
	"math"
	"strings"
	"testing"

	"github.com/isched/isched/internal/report"
)

// TestLearnRatio checks LearnRatio against figures worked out by hand from
// its documented rule, exp((n·ln median + 3·ln prior) / (n + 3)) with
// RatioPriorWeight = 3. With prior 4 = 2² and every median a power of two
// the blend is 2^((n·log2 median + 3·2) / (n + 3)):
//
//	one pair, 2:            2^((1·1 + 6) / 4)  = 2^1.75      = 3.363585661014858
//	2, 2, 100 (median 2):   2^((3·1 + 6) / 6)  = 2^1.5       = 2.8284271247461903
//	1, 4 (√(1·4) = 2):      2^((2·1 + 6) / 5)  = 2^1.6       = 3.0314331330207964
//	thirty 2s:              2^((30·1 + 6) / 33) = 2^(12/11)  = 2.1300821788799253
//
// The literals are not recomputed with the formula under test, so a change
// of the weight, the median or the space of the blend fails here.
func TestLearnRatio(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name     string
		prior    float64
		measured []float64
		want     float64
	}{
		{"nothing measured: the catalogue", 4, nil, 4},
		{"one pair: near the catalogue", 4, []float64{2}, 3.363585661014858},
		{"the median, not the mean", 4, []float64{2, 2, 100}, 2.8284271247461903},
		{"even count: geometric middle", 4, []float64{1, 4}, 3.0314331330207964},
		{"many: the measured", 4, make30(2), 2.1300821788799253},
		{"bad figures ignored", 4, []float64{0, -1, math.Inf(1), 2}, 3.363585661014858},
		{"no prior: unchanged", 0, []float64{2}, 0},
	} {
		if got := LearnRatio(c.prior, c.measured); math.Abs(got-c.want) > 1e-12 {
			t.Errorf("%s: %.16g, want %.16g", c.name, got, c.want)
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
	// lab-cpu's 800 ms over the ratio to lab-gpu. The catalogue's ratio is
	// (1.332e12 × 0.3) / (3.33e11 × 0.3) = 4: 800 / 4 = 200 ms. Learned: the
	// other configuration measured 400 / 200 = 2 on one pair, blended with 4
	// at weight 3 in log space, 2^((1·1 + 3·2) / 4) = 2^1.75 = 3.3636:
	// 800 / 3.3636 = 237.84 ms.
	for _, c := range []struct {
		name     string
		receipts []report.Receipt
		iterS    float64
		basis    string
	}{
		{"catalogue only", own, 0.2, "(relative throughput)"},
		{"learned from another configuration", append(own, other...), 0.23784142300054423,
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
			if math.Abs(r.IterSeconds-c.iterS) > 1e-9 || !strings.Contains(r.Basis, c.basis) {
				t.Errorf("%s: %.6f s, want %.6f; %s", c.name, r.IterSeconds, c.iterS, r.Basis)
			}
		}
	}
}
