package plan

import (
	"math"
	"testing"
)

// TestStaticBandGPU recomputes staticBandGPU from the recorded GPU grids
// whose summaries carry the saved tensors: real (nvidia-smi's figure of the
// training process) / static per cell, every batch that ran, per precision;
// the band is their smallest and largest, widened to hold 1, rounded
// outwards to 3 decimals. It logs each model's cells against the top of
// the other models' band (leave one model out): whether the plan's ask
// would have held a model the band was not made from.
func TestStaticBandGPU(t *testing.T) {
	t.Parallel()
	half := savedHalf(t)
	type cell struct {
		model string
		v     float64
	}
	ratios := map[string][]cell{}
	grids := map[string][]string{"fp32": {"h100-2026-11-27b-fp32"}, "bf16": {"h100-2026-11-27b-bf16", "h100-2026-11-27c-bf16", "h100-2026-11-27d-bf16"}}
	for prec, names := range grids {
		for _, name := range names {
			g, _ := loadGrid(t, name)
			for _, c := range g.Configs {
				m, err := DecodeModel(g.Summaries[c.Model])
				if err != nil {
					t.Fatal(err)
				}
				if m.SavedBytesPerSample == 0 {
					t.Fatalf("%s %s: no saved tensors in the summary", name, c.Model)
				}
				m.SavedHalfBytesPerSample = half[c.Model]
				for _, r := range c.Rows {
					st := StaticMemory(m, Training{"adam", c.Precision}, r.Batch, true).Total()
					ratios[prec] = append(ratios[prec], cell{c.Model, float64(r.SMIBytes) / float64(st)})
				}
			}
		}
	}
	span := func(cs []cell, skip string) (lo, hi float64) {
		lo, hi = 1, 1
		for _, c := range cs {
			if c.model != skip {
				lo, hi = min(lo, c.v), max(hi, c.v)
			}
		}
		return math.Floor(lo*1000) / 1000, math.Ceil(hi*1000) / 1000
	}
	for prec, cs := range ratios {
		lo, hi := span(cs, "")
		want := staticBandGPU[prec]
		if lo != want.MemLow || hi != want.MemHigh || len(cs) != want.Cells {
			t.Errorf("%s: the grids give %.3f-%.3f over %d cells; staticBandGPU says %.3f-%.3f over %d", prec, lo, hi, len(cs), want.MemLow, want.MemHigh, want.Cells)
		}
		models := map[string]bool{}
		for _, c := range cs {
			models[c.model] = true
		}
		for model := range models {
			_, ohi := span(cs, model)
			held, n := 0, 0
			for _, c := range cs {
				if c.model == model {
					n++
					if c.v <= ohi {
						held++
					}
				}
			}
			t.Logf("%s %s: %d of %d cells at or below the other models' top %.3f", prec, model, held, n, ohi)
		}
	}
}
