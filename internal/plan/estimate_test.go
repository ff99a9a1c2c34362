package plan

import (
	"fmt"
	"math"
	"os"
	"slices"
	"strings"
	"testing"

	"github.com/isched/isched/internal/report"
)

func mustModel(t *testing.T, path string) *Model {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	m, err := DecodeModel(b)
	if err != nil {
		t.Fatal(err)
	}
	return m
}

func mustSite(t *testing.T, path string) *Site {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	s, err := DecodeSite(b)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func near(a, b, rel float64) bool { return math.Abs(a-b) <= rel*math.Max(math.Abs(a), math.Abs(b)) }

// TestSeedWorkedExample is the seed's Table 2: ResNet-50 (summary from
// scripts/model_summary.py), 20,000 samples, 50 epochs, batch 8/16/32/64 on
// a 40-core Xeon node (0.084 per node-hour) and a V100-32GB (0.174 per
// GPU-hour).
func TestSeedWorkedExample(t *testing.T) {
	t.Parallel()
	site := mustSite(t, "../../examples/site-seed.json")
	rates := map[string]float64{"xeon-40c": 0.084, "v100-32g": 0.174}
	for _, tc := range []struct {
		model string
		// the largest of 8/16/32/64 that fits a 32 GB V100
		fitsUpTo int
	}{
		// At 224x224 the static model puts batch 64 at 11.6 GiB: it fits,
		// as it does in practice (see docs/model-summary.md).
		{"testdata/resnet50.json", 64},
		// At 448x448 activations are 4x: batch 64 needs 43.9 GiB.
		{"testdata/resnet50_448.json", 32},
	} {
		t.Run(tc.model, func(t *testing.T) {
			t.Parallel()
			m := mustModel(t, tc.model)
			rows, err := site.Estimate(Request{Model: m, Training: Training{"adam", PrecFP32}, Samples: 20000, Epochs: 50, Batches: []int{8, 16, 32, 64}})
			if err != nil {
				t.Fatal(err)
			}
			if len(rows) != 8 {
				t.Fatalf("%d rows, want 4 batch sizes x 2 node types", len(rows))
			}
			last := map[string]int64{}
			for _, r := range rows {
				nt := r.NodeType.Name
				if r.Source != Static {
					t.Errorf("batch %d on %s: source %s without receipts", r.Batch, nt, r.Source)
				}
				if r.Mem <= last[nt] {
					t.Errorf("batch %d on %s: memory %d does not grow (previous %d)", r.Batch, nt, r.Mem, last[nt])
				}
				last[nt] = r.Mem
				if !near(r.Cost, r.Hours*rates[nt], 1e-12) {
					t.Errorf("batch %d on %s: cost %.4f != %.4f h x %.3f", r.Batch, nt, r.Cost, r.Hours, rates[nt])
				}
				if want := int64((20000+r.Batch-1)/r.Batch) * 50; r.Iters != want {
					t.Errorf("batch %d: %d iterations, want %d", r.Batch, r.Iters, want)
				}
				if nt == "v100-32g" {
					if fits := r.Batch <= tc.fitsUpTo; r.Fits != fits {
						t.Errorf("batch %d on the V100: fits=%v (%s of 32 GiB), want %v", r.Batch, r.Fits, FormatBytes(r.Mem), fits)
					}
					if !r.Fits && len(r.Feasible()) != 0 {
						t.Errorf("batch %d: feasible partitions %v for a row that does not fit", r.Batch, r.Feasible())
					}
				}
				if nt == "xeon-40c" && !r.Fits {
					t.Errorf("batch %d does not fit a 192 GiB CPU node (%s)", r.Batch, FormatBytes(r.Mem))
				}
			}
		})
	}
}

func TestStaticMemory(t *testing.T) {
	t.Parallel()
	// 1 M parameters, 0.9 M trainable, 1 MB of activations and a 1000-float input per sample.
	m := &Model{V: 1, Name: "m", Parameters: 1_000_000, TrainableParameters: 900_000, ParamBytes: 4,
		ActivationBytesPerSample: 1_000_000, FLOPsPerSample: 1e9, InputShape: []int{1000}}
	const act = (1_000_000 + 4000) * 2 // per sample, fp32, x BackwardFactor
	tests := []struct {
		opt, prec string
		batch     int
		device    bool
		want      Memory
	}{
		{"sgd", PrecFP32, 1, false, Memory{4e6, 3.6e6, 0, act, CPUFrameworkBytes}},
		{"momentum", PrecFP32, 1, false, Memory{4e6, 3.6e6, 3.6e6, act, CPUFrameworkBytes}},
		{"adam", PrecFP32, 10, true, Memory{4e6, 3.6e6, 7.2e6, 10 * act, GPUContextBytes}},
		// autocast: fp32 master weights plus a half copy, fp32 grads and
		// states, half-size activations
		{"adamw", PrecBF16, 10, true, Memory{6e6, 3.6e6, 7.2e6, 10 * act / 2, GPUContextBytes}},
		{"sgd", PrecFP16, 4, true, Memory{6e6, 3.6e6, 0, 4 * act / 2, GPUContextBytes}},
	}
	for _, tt := range tests {
		got := StaticMemory(m, Training{tt.opt, tt.prec}, tt.batch, tt.device)
		if got != tt.want {
			t.Errorf("%s %s batch %d: %+v, want %+v", tt.opt, tt.prec, tt.batch, got, tt.want)
		}
	}
}

// With the bytes autograd saves (the summary's saved_bytes_per_sample), the
// static model scales those, not the forward outputs: the measured H100
// points of docs/gpu-check.md, never under and within 15 %.
func TestStaticMemorySaved(t *testing.T) {
	t.Parallel()
	m := &Model{V: 1, Name: "m", Parameters: 1_000_000, TrainableParameters: 1_000_000, ParamBytes: 4,
		ActivationBytesPerSample: 3_000_000, SavedBytesPerSample: 1_000_000, InputShape: []int{1000}}
	const saved = (1_000_000 + 4000) * SavedFactor
	for _, tt := range []struct {
		prec string
		want int64
	}{
		{PrecFP32, int64(math.Ceil(8 * saved))},
		{PrecBF16, int64(math.Ceil(8 * saved * HalfActivationFactor))},
	} {
		if got := StaticMemory(m, Training{"adam", tt.prec}, 8, true).Activations; got != tt.want {
			t.Errorf("%s: activations %d, want %d (saved bytes x SavedFactor, not the forward outputs)", tt.prec, got, tt.want)
		}
	}
	// on a CPU node the RSS holds every forward output (glibc keeps the freed
	// ones): the saved bytes change nothing there
	without := *m
	without.SavedBytesPerSample = 0
	if got, want := StaticMemory(m, Training{"adam", PrecFP32}, 8, false), StaticMemory(&without, Training{"adam", PrecFP32}, 8, false); got != want {
		t.Errorf("host memory with saved bytes %+v, without %+v: want the same", got, want)
	}
	// ResNet-50 (224x224, Adam, fp32) and GPT-2 small (256 tokens): nvidia-smi's
	// per-process figure on an H100, and the saved bytes the summary measures
	// on this CPU (torch 1.13; GPT-2 without its loss, as model_summary runs it).
	resnet := &Model{V: 1, Name: "resnet50", Parameters: 25557032, TrainableParameters: 25557032, ParamBytes: 4,
		ActivationBytesPerSample: 91438752, SavedBytesPerSample: 85413632, InputShape: []int{3, 224, 224}}
	gpt2 := &Model{V: 1, Name: "gpt2", Parameters: 124439808, TrainableParameters: 124439808, ParamBytes: 4,
		ActivationBytesPerSample: 791941168, SavedBytesPerSample: 398773416, InputShape: []int{256}}
	for _, tt := range []struct {
		m     *Model
		batch int
		truth int64
	}{
		{resnet, 8, 2069889024}, {resnet, 16, 2824863744}, {resnet, 32, 4519292928}, {resnet, 64, 7864320000},
		{gpt2, 16, 9856614400}, {gpt2, 64, 31989956608},
	} {
		got := StaticMemory(tt.m, Training{"adam", PrecFP32}, tt.batch, true).Total()
		if e := float64(got-tt.truth) / float64(tt.truth); e < 0 || e > 0.15 {
			t.Errorf("%s batch %d: static %s against %s measured: %+.1f%%, want 0..+15%%",
				tt.m.Name, tt.batch, FormatBytes(got), FormatBytes(tt.truth), 100*e)
		}
	}
}

func TestStaticTime(t *testing.T) {
	t.Parallel()
	site := mustSite(t, "../../examples/site-seed.json")
	m := mustModel(t, "testdata/resnet50.json")
	v100 := site.NodeType("v100-32g")
	// 3 x 8.18 GFLOP x 64 over 15.7 TFLOPS x 0.5 x 64/(64+4)
	want := 3 * 8178368512.0 * 64 / (1.57e13 * 0.5 * 64 / 68)
	if got := site.StaticIterSeconds(m, v100, Training{"adam", PrecFP32}, 64); !near(got, want, 1e-9) {
		t.Errorf("V100 iteration: %.6f s, want %.6f", got, want)
	}
	// fp16 uses the tensor-core peak at its own efficiency; bf16 has none on a V100: fp32
	fp16 := site.StaticIterSeconds(m, v100, Training{"adam", PrecFP16}, 64)
	bf16 := site.StaticIterSeconds(m, v100, Training{"adam", PrecBF16}, 64)
	if !near(fp16, want*(1.57e13*0.5)/(1.25e14*0.2), 1e-9) || !near(bf16, want, 1e-9) {
		t.Errorf("fp16 %.4f s, bf16 %.4f s (fp32 %.4f s)", fp16, bf16, want)
	}
}

func TestFitLine(t *testing.T) {
	t.Parallel()
	a, b, ok := FitLine([]float64{8, 16, 16, 32}, []float64{180, 260, 260, 420})
	if !ok || !near(a, 100, 1e-9) || !near(b, 10, 1e-9) {
		t.Errorf("fit %v + %v x (ok %v), want 100 + 10 x", a, b, ok)
	}
	if _, _, ok := FitLine([]float64{8, 8}, []float64{1, 2}); ok {
		t.Error("one distinct x fitted")
	}
	if _, b, _ := FitLine([]float64{8, 16}, []float64{200, 190}); b != 0 {
		t.Errorf("negative slope %v not clamped", b)
	}
}

// TestCalibrated: receipts at batch 8 and 16 on lab-cpu calibrate batch 32
// there (scaled), batch 8 is measured, and the other node types scale.
func TestCalibrated(t *testing.T) {
	t.Parallel()
	site := mustSite(t, "../../examples/site-lab.json")
	m := mustModel(t, "testdata/resnet50.json")
	tr := Training{"sgd", PrecFP32}
	key := ConfigKey(m, tr)
	const mib = 1 << 20
	mem := func(b int) int64 { return 500*mib + int64(b)*40*mib }
	iter := func(b int) float64 { return 100 + 50*float64(b) }
	var receipts []report.Receipt
	for _, b := range []int{8, 8, 16} {
		receipts = append(receipts, report.Receipt{Model: key, Batch: b, Partition: "cpu", IterMS: iter(b), PeakRSS: mem(b)})
	}
	receipts = append(receipts,
		report.Receipt{Model: "other-model:sgd:fp32", Batch: 32, Partition: "cpu", IterMS: 1, PeakRSS: 1},       // another model
		report.Receipt{Model: key, Batch: 32, Partition: "nowhere", IterMS: 1, PeakRSS: 1},                      // unknown partition
		report.Receipt{Model: ConfigKey(m, Training{"adam", PrecFP32}), Batch: 32, Partition: "cpu", IterMS: 1}, // another optimizer
	)
	rows, err := site.Estimate(Request{Model: m, Training: tr, Samples: 1000, Epochs: 1, Batches: []int{8, 32}, Receipts: receipts})
	if err != nil {
		t.Fatal(err)
	}
	get := func(b int, nt string) Row {
		for _, r := range rows {
			if r.Batch == b && r.NodeType.Name == nt {
				return r
			}
		}
		t.Fatalf("no row for batch %d on %s", b, nt)
		return Row{}
	}
	// batch 8 measured twice, identically: the margin is the prior
	// spread's, 2 x MemRunSD x the peak x sqrt(1 + 1/2 + (8-12)^2/32)
	wantMargin := int64(math.Ceil(2 * MemRunSD * float64(mem(8)) * math.Sqrt(2)))
	if r := get(8, "lab-cpu"); r.Source != Measured || r.Mem-r.MemMargin != mem(8) || r.MemMargin != wantMargin || !near(r.IterSeconds, iter(8)/1000, 1e-12) {
		t.Errorf("batch 8 on lab-cpu: %s mem %d (margin %d, want %d) iter %.4f", r.Source, r.Mem, r.MemMargin, wantMargin, r.IterSeconds)
	}
	r := get(32, "lab-cpu")
	// time beyond the largest batch: never below its per-sample cost
	// (900 ms / 16), above the line's 1700 ms
	wantIter := iter(16) / 16 * 32 / 1000
	if r.Source != Scaled || !near(float64(r.Mem-r.MemMargin), float64(mem(32)), 1e-9) || r.MemMargin <= 0 || !near(r.IterSeconds, wantIter, 1e-9) {
		t.Errorf("batch 32 on lab-cpu: %s mem %s (want %s) iter %.4f (want %.4f); %s", r.Source, FormatBytes(r.Mem), FormatBytes(mem(32)),
			r.IterSeconds, wantIter, r.Basis)
	}
	if !near(r.Hours, float64(r.Iters)*r.IterSeconds/3600, 1e-12) || r.Iters != 32 {
		t.Errorf("batch 32: %d iterations, %.4f h", r.Iters, r.Hours)
	}
	// lab-dev keeps its tensors in host memory too: the fit carries over;
	// time scales by throughput (the same machine: ratio 1)
	if d := get(32, "lab-dev"); d.Source != Scaled || d.Mem != r.Mem || !near(d.IterSeconds, r.IterSeconds, 1e-9) {
		t.Errorf("batch 32 on lab-dev: %s mem %s iter %.4f; %s", d.Source, FormatBytes(d.Mem), d.IterSeconds, d.Basis)
	}
	// lab-gpu pretends to be 4x as fast
	if g := get(32, "lab-gpu"); g.Source != Scaled || !near(g.IterSeconds, r.IterSeconds/4, 1e-9) {
		t.Errorf("batch 32 on lab-gpu: %s iter %.4f, want %.4f; %s", g.Source, g.IterSeconds, r.IterSeconds/4, g.Basis)
	}
}

// TestCalibratedDeviceFromHost: receipts on a CPU node scale to a real GPU
// node type with the measured per-sample slope on the GPU's static fixed
// part, since host RSS and device memory differ by a framework's worth.
func TestCalibratedDeviceFromHost(t *testing.T) {
	t.Parallel()
	site := mustSite(t, "../../examples/site-seed.json")
	m := mustModel(t, "testdata/resnet50.json")
	tr := Training{"adam", PrecFP32}
	key := ConfigKey(m, tr)
	const mib = 1 << 20
	rs := []report.Receipt{
		{Model: key, Batch: 4, Partition: "cpu", IterMS: 800, PeakRSS: 1100 * mib},
		{Model: key, Batch: 8, Partition: "cpu", IterMS: 1600, PeakRSS: 1620 * mib},
	}
	rows, err := site.Estimate(Request{Model: m, Training: tr, Samples: 20000, Epochs: 1, Batches: []int{64}, Receipts: rs})
	if err != nil {
		t.Fatal(err)
	}
	g := rows[1]
	fixed := g.Static.Total() - g.Static.Activations
	if want := fixed + 64*130*mib; g.NodeType.Name != "v100-32g" || g.Source != Scaled || g.Mem != want {
		t.Errorf("batch 64 on %s: %s %s, want %s; %s", g.NodeType.Name, g.Source, FormatBytes(g.Mem), FormatBytes(want), g.Basis)
	}
}

// TestCalibratedSlopeCap: two receipts whose memory grows faster than the
// static per-sample bound (allocator steps) extrapolate with the static
// slope through their centroid. These are the real receipts of ResNet-18 at
// 128x128 on the local cluster; the real batch-32 run peaked at 796.7 MiB.
func TestCalibratedSlopeCap(t *testing.T) {
	t.Parallel()
	site := mustSite(t, "../../examples/site-lab.json")
	b, err := os.ReadFile("../cli/testdata/resnet18_128.json")
	if err != nil {
		t.Fatal(err)
	}
	m, err := DecodeModel(b)
	if err != nil {
		t.Fatal(err)
	}
	tr := Training{"momentum", PrecFP32}
	key := ConfigKey(m, tr)
	rs := []report.Receipt{
		{Model: key, Batch: 8, Partition: "cpu", IterMS: 178.501, PeakRSS: 521138176},
		{Model: key, Batch: 16, Partition: "cpu", IterMS: 387.911, PeakRSS: 671592448},
	}
	rows, err := site.Estimate(Request{Model: m, Training: tr, Samples: 1920, Epochs: 1, Batches: []int{32}, Receipts: rs})
	if err != nil {
		t.Fatal(err)
	}
	r := rows[1]
	slope := r.Static.perSample(32)
	want := int64(671592448.0 + slope*(32-16))                            // from the largest batch on
	if r.MemBand.High <= float64(want) || r.MemBand.Low > float64(want) { // high: the uncapped slope
		t.Errorf("batch 32: band %s..%s does not hold %s", FormatBytes(int64(r.MemBand.Low)), FormatBytes(int64(r.MemBand.High)), FormatBytes(want))
	}
	if r.NodeType.Name != "lab-cpu" || r.Source != Scaled || r.Mem-r.MemMargin != want || r.MemMargin <= 0 {
		t.Fatalf("%s: %s %s, want %s; %s", r.NodeType.Name, r.Source, FormatBytes(r.Mem), FormatBytes(want), r.Basis)
	}
	const real32 = 835354624
	if e := float64(r.Mem-real32) / real32; e < 0 || e > 0.15 {
		t.Errorf("batch 32: %s is %.1f%% off the real run's 796.7 MiB", FormatBytes(r.Mem), 100*e)
	}
}

// TestProfiledReceipts: rows made only of `isched profile` receipts say
// profiled (at the profiled batch and fitted beyond it, and on the node
// types they scale to); one ordinary receipt among them makes the row
// measured or scaled again, with a note of how many were profiled.
func TestProfiledReceipts(t *testing.T) {
	t.Parallel()
	site := mustSite(t, "../../examples/site-lab.json")
	m := mustModel(t, "testdata/resnet50.json")
	tr := Training{"sgd", PrecFP32}
	key := ConfigKey(m, tr)
	const mib = 1 << 20
	prof := []report.Receipt{
		{Model: key, Batch: 8, Partition: "cpu", NodeType: "lab-cpu", IterMS: 500, PeakRSS: 900 * mib, Profiled: true},
		{Model: key, Batch: 16, Partition: "cpu", NodeType: "lab-cpu", IterMS: 900, PeakRSS: 1000 * mib, Profiled: true},
	}
	cases := []struct {
		name     string
		receipts []report.Receipt
		batch    int
		nt       string
		want     Source
		wantMem  int64
		basis    string
	}{
		{"at a profiled batch", prof, 8, "lab-cpu", Profiled, 900 * mib, "profiled: "},
		{"fitted beyond", prof, 32, "lab-cpu", Profiled, 1200 * mib, "profiled: memory fit over batch 8,16"},
		{"another node type", prof, 8, "lab-dev", Scaled, 900 * mib, "(2 of 2 receipts profiled)"},
		{"one ordinary receipt among them", append(slices.Clone(prof),
			report.Receipt{Model: key, Batch: 8, Partition: "cpu", NodeType: "lab-cpu", IterMS: 520, PeakRSS: 950 * mib}),
			8, "lab-cpu", Measured, 950 * mib, "(2 of 3 receipts profiled)"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			rows, err := site.Estimate(Request{Model: m, Training: tr, Samples: 1000, Epochs: 1, Batches: []int{c.batch}, Receipts: c.receipts})
			if err != nil {
				t.Fatal(err)
			}
			for _, r := range rows {
				if r.NodeType.Name != c.nt {
					continue
				}
				if r.Source != c.want || r.Mem-r.MemMargin != c.wantMem || r.MemMargin <= 0 || !strings.Contains(r.Basis, c.basis) {
					t.Errorf("%s %s (want %s %s); basis %q, want it to say %q", r.Source, FormatBytes(r.Mem), c.want, FormatBytes(c.wantMem), r.Basis, c.basis)
				}
				return
			}
			t.Fatalf("no row on %s", c.nt)
		})
	}
}

// TestScaledNotBelowMeasured: a prediction never goes below a smaller
// batch's measured peak: beyond the largest it starts there, between two
// batch sizes whose peaks went down (noise) it keeps the larger.
func TestScaledNotBelowMeasured(t *testing.T) {
	t.Parallel()
	site := mustSite(t, "../../examples/site-lab.json")
	m := mustModel(t, "../cli/testdata/mnist_cnn.json")
	tr := Training{"sgd", PrecFP32}
	key := ConfigKey(m, tr)
	const mib = 1 << 20
	rs := []report.Receipt{
		{Model: key, Batch: 8, Partition: "cpu", IterMS: 50, PeakRSS: 300 * mib},
		{Model: key, Batch: 16, Partition: "cpu", IterMS: 90, PeakRSS: 400 * mib},
		{Model: key, Batch: 32, Partition: "cpu", IterMS: 170, PeakRSS: 380 * mib},
	}
	rows, err := site.Estimate(Request{Model: m, Training: tr, Samples: 1000, Epochs: 1, Batches: []int{24, 64}, Receipts: rs})
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range rows {
		if r.NodeType.Name != "lab-cpu" {
			continue
		}
		if r.Mem < 400*mib || (r.Batch == 24 && !strings.Contains(r.Basis, "not below batch 16's measured peak")) {
			t.Errorf("batch %d: %s, under batch 16's 400 MiB; %s", r.Batch, FormatBytes(r.Mem), r.Basis)
		}
	}
}

func TestKnownRow(t *testing.T) {
	t.Parallel()
	site := mustSite(t, "../../examples/site-lab.json")
	tests := []struct {
		name, nodeType string
		iters          int64
		iterSec        float64
		mem            int64
		wantFits       bool
		wantParts      map[string]int // partition → chunks (0: not OK)
	}{
		{"short run on cpu", "lab-cpu", 3600, 1, 1 << 30, true, map[string]int{"cpu": 1, "scavenger": 1}},
		{"run past the dev limit", "lab-dev", 3 * 3600, 1, 1 << 30, true, map[string]int{"dev": 2}},
		{"too big for the node", "lab-gpu", 10, 1, 1 << 40, false, map[string]int{"gpu": 0, "scavenger": 0}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			r := site.KnownRow(site.NodeType(tc.nodeType), 1, tc.iters, tc.iterSec, tc.mem)
			if r.Fits != tc.wantFits || r.Source != Measured {
				t.Fatalf("fits %v source %s, want %v measured", r.Fits, r.Source, tc.wantFits)
			}
			if want := float64(tc.iters) * tc.iterSec / 3600; r.Hours != want {
				t.Errorf("hours %g, want %g", r.Hours, want)
			}
			got := map[string]int{}
			for _, f := range r.Partitions {
				got[f.Partition.Name] = 0
				if f.OK {
					got[f.Partition.Name] = f.Chunks
				}
			}
			if fmt.Sprint(got) != fmt.Sprint(tc.wantParts) {
				t.Errorf("partitions %v, want %v", got, tc.wantParts)
			}
		})
	}
}
