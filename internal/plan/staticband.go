package plan

// StaticBand is how far the real peak memory and iteration time of CPU
// training were from the static estimate on the bench-predict grid
// (scripts/bench/predict/testdata/grid.json): the smallest and largest
// ratio real / static over the grid's cells, widened to hold 1 (the
// estimate itself). A static row of a CPU node type carries the band as
// its MemBand and IterBand: the range the real figure fell in on the grid,
// in sample (docs/model-summary.md gives its leave-one-architecture-out
// coverage). The values are generated from the grid (staticband_gen.go, by
// go run ./scripts/bench/predict -write-static-band), never typed in; a
// test there fails when they drift from it.
type StaticBand struct {
	MemLow, MemHigh   float64 // real / static peak memory
	TimeLow, TimeHigh float64 // real / static iteration time
	Cells             int     // grid cells behind the band
	Grid              string  // the grid's measured_at
}

// StaticBandFor returns the band of the static model with a probe record
// for the node type (probed) or with the assumed framework footprint and
// efficiency.
func StaticBandFor(probed bool) StaticBand {
	if probed {
		return staticBandProbed
	}
	return staticBandAssumed
}

// staticBandGPU is how far nvidia-smi's per-process figure was from the
// static GPU memory on the recorded H100 grids whose summaries carry the
// saved tensors (scripts/testdata/gpu-check/grid: 2026-11-27b fp32,
// b/c/d bf16), per precision (fp16 takes bf16's): real / static from
// 0.889 (GPT-2) to 1.305 (ResNet-18 at batch 64) in fp32, 0.867 to 1.166
// in bf16. The static model misses what the caching allocator reserves
// beyond the tensors (and cuDNN's workspaces), more for convolution nets
// than for transformers; a static GPU row carries the band, and the plan
// asks for its top (Row.FitMem). TestStaticBandGPU recomputes it from the
// grids and fails when these drift from them.
var staticBandGPU = map[string]StaticBand{
	"fp32": {MemLow: 0.889, MemHigh: 1.305, Cells: 8, Grid: "h100-2026-11-27b-fp32"},
	"bf16": {MemLow: 0.867, MemHigh: 1.166, Cells: 18, Grid: "h100-2026-11-27b,c,d-bf16"},
}

// gpuBand is the static GPU memory's band for a precision.
func gpuBand(precision string) StaticBand {
	if precision == "fp16" {
		precision = "bf16"
	}
	return staticBandGPU[precision]
}

// staticBands sets a static row's bands: a CPU node type's from the
// bench-predict grid's calibration, a GPU's memory band from the recorded
// GPU grids (staticBandGPU).
//
// Without a probe record of the node type the time is unmeasured: the row
// says so (TimeUnmeasured) instead of carrying the assumed model's time
// band, which spans 40x and tells a user nothing; its memory band stays.
func (s *Site) staticBands(r *Row, tr Training, replayed bool) {
	if r.Source != Static {
		return
	}
	probed := s.Probe(r.NodeType) != nil
	r.TimeUnmeasured = !probed
	if r.NodeType.Kind == KindGPU && !r.NodeType.Emulated {
		b := gpuBand(tr.Precision)
		if replayed {
			b = staticBandGPUReplay[PrecBF16] // autocast only: usesReplay
		}
		if b.Cells > 0 {
			m := float64(r.Mem)
			r.MemBand = Band{m * b.MemLow, m, m * b.MemHigh}
		}
		return
	}
	b := StaticBandFor(probed)
	if r.NodeType.Kind != KindCPU || b.Cells == 0 {
		return
	}
	m := float64(r.Mem)
	r.MemBand = Band{m * b.MemLow, m, m * b.MemHigh}
	if probed {
		r.IterBand = Band{r.IterSeconds * b.TimeLow, r.IterSeconds, r.IterSeconds * b.TimeHigh}
	}
}

// staticBandGPUReplay is staticBandGPU for a static GPU figure from the
// allocator replay (ReplayedMemory: autocast, a summary with layers; the
// fp32 entry is kept for the comparison, unused): real / static
// over every recorded H100 cell with the grid models' layers added
// (TestStaticGPUReplay recomputes it): fp32 0.844 (GPT-2, whose replay is
// 11 to 18 % over) to 1.19 (ResNet-18, 5 to 16 % under: cuDNN's
// workspaces and the backward's in-place and residual gradients are not
// in the trace), bf16 0.942 to 1.074, narrower than staticBandGPU's.
var staticBandGPUReplay = map[string]StaticBand{
	"fp32": {MemLow: 0.844, MemHigh: 1.19, Cells: 14, Grid: "h100-2026-11-27,b-fp32"},
	"bf16": {MemLow: 0.942, MemHigh: 1.074, Cells: 18, Grid: "h100-2026-11-27b,c,d-bf16"},
}
