package plan

import (
	"encoding/json"
	"fmt"
	"math"
	"os"
	"slices"
	"strings"
	"testing"
)

// gridLayers are the layers (and saved bytes) of the recorded grids'
// models, made on the CPU (testdata/grid-layers.json): the recorded
// summaries have none.
func gridLayers(t *testing.T) map[string]Model {
	t.Helper()
	b, err := os.ReadFile("testdata/grid-layers.json")
	if err != nil {
		t.Fatal(err)
	}
	var f struct {
		Models map[string]Model `json:"models"`
	}
	if err := json.Unmarshal(b, &f); err != nil {
		t.Fatal(err)
	}
	return f.Models
}

// replayCell is one recorded GPU cell with the static figures before and
// after the allocator replay.
type replayCell struct {
	grid, model, prec string
	batch             int
	smi, old, new     int64
}

func (c replayCell) err(v int64) float64 { return float64(v-c.smi) / float64(c.smi) }

// replayCells computes every cell of the recorded H100 grids: the static
// GPU memory as StaticMemory gives it on the recorded summary (with the
// CPU's saved bytes where the recording has none), and as ReplayedMemory
// gives it once the summary has its layers.
func replayCells(t *testing.T) []replayCell {
	t.Helper()
	layers := gridLayers(t)
	var cells []replayCell
	for _, name := range []string{"h100-2026-11-27", "h100-2026-11-27b-fp32", "h100-2026-11-27b-bf16", "h100-2026-11-27c-bf16", "h100-2026-11-27d-bf16"} {
		g, _ := loadGrid(t, name)
		site := gridSite(t, g)
		for _, c := range g.Configs {
			m, err := DecodeModel(g.Summaries[c.Model])
			if err != nil {
				t.Fatal(err)
			}
			cpu := layers[c.Model]
			if m.SavedBytesPerSample == 0 {
				m.SavedBytesPerSample = cpu.SavedBytesPerSample
			}
			m.SavedHalfBytesPerSample = cpu.SavedHalfBytesPerSample
			withLayers := *m
			withLayers.Layers = cpu.Layers
			if err := withLayers.Validate(); err != nil {
				t.Fatal(err)
			}
			tr := Training{"adam", c.Precision}
			for _, r := range c.Rows {
				st, ok := ReplayedMemory(&withLayers, tr, r.Batch, site.NodeTypes[0].DeviceMemoryBytes)
				if !ok {
					t.Fatalf("%s %s: not replayed", name, c.Model)
				}
				cells = append(cells, replayCell{name, c.Model, c.Precision, r.Batch, r.SMIBytes,
					StaticMemory(m, tr, r.Batch, true).Total(), st.Total()})
			}
		}
	}
	return cells
}

// TestStaticGPUReplay checks the replayed static GPU memory on every
// recorded H100 cell (32) and prints the table of docs/gpu-check.md
// (go test -v -run TestStaticGPUReplay ./internal/plan/). It recomputes
// staticBandGPUReplay from the cells as TestStaticBandGPU does, checks
// that the plan's ask (the band's top) is never under, and logs each
// model against the other models' top.
func TestStaticGPUReplay(t *testing.T) {
	t.Parallel()
	cells := replayCells(t)
	if len(cells) != 32 {
		t.Errorf("%d cells, want the recordings' 32", len(cells))
	}
	byPrec := map[string][]replayCell{}
	for _, c := range cells {
		byPrec[c.prec] = append(byPrec[c.prec], c)
	}
	for _, prec := range []string{PrecFP32, PrecBF16} {
		cs := byPrec[prec]
		var b strings.Builder
		fmt.Fprintf(&b, "%s\n| grid | model | batch | nvidia-smi MiB | old static | new static |\n| --- | --- | --- | --- | --- | --- |\n", prec)
		var ratios []float64
		for _, c := range cs {
			fmt.Fprintf(&b, "| %s | %s | %d | %d | %d (%+.1f %%) | %d (%+.1f %%) |\n", strings.TrimPrefix(c.grid, "h100-2026-"), c.model, c.batch,
				c.smi>>20, c.old>>20, 100*c.err(c.old), c.new>>20, 100*c.err(c.new))
			ratios = append(ratios, float64(c.smi)/float64(c.new))
		}
		t.Log(b.String())
		t.Log(replaySummary(cs))
		lo := math.Floor(min(1, slices.Min(ratios))*1000) / 1000
		hi := math.Ceil(max(1, slices.Max(ratios))*1000) / 1000
		want := staticBandGPUReplay[prec]
		if lo != want.MemLow || hi != want.MemHigh || len(cs) != want.Cells {
			t.Errorf("%s: the grids give %.3f-%.3f over %d cells; staticBandGPUReplay says %.3f-%.3f over %d", prec, lo, hi, len(cs), want.MemLow, want.MemHigh, want.Cells)
		}
		for _, c := range cs {
			if ask := float64(c.new) * want.MemHigh; ask < float64(c.smi) {
				t.Errorf("%s %s %d: the plan asks %.0f MiB, %d MiB used", c.model, prec, c.batch, ask/(1<<20), c.smi>>20)
			}
		}
		logLeaveOneOut(t, prec, cs)
	}
}

// replaySummary counts the cells under and over, and the worst of each,
// before and after.
func replaySummary(cs []replayCell) string {
	var s strings.Builder
	for _, which := range []string{"old", "new"} {
		under, worstUnder, worstOver := 0, 0.0, 0.0
		in15 := 0
		for _, c := range cs {
			v := c.old
			if which == "new" {
				v = c.new
			}
			e := c.err(v)
			if e < 0 {
				under++
			} else if e <= 0.15 {
				in15++
			}
			worstUnder, worstOver = min(worstUnder, e), max(worstOver, e)
		}
		fmt.Fprintf(&s, "%s: %d cells, %d under (worst %+.1f %%), %d at 0..+15 %%, worst over %+.1f %%; ", which, len(cs), under, 100*worstUnder, in15, 100*worstOver)
	}
	return s.String()
}

func logLeaveOneOut(t *testing.T, prec string, cs []replayCell) {
	t.Helper()
	models := map[string]bool{}
	for _, c := range cs {
		models[c.model] = true
	}
	for model := range models {
		top := 1.0
		for _, c := range cs {
			if c.model != model {
				top = max(top, float64(c.smi)/float64(c.new))
			}
		}
		held, n := 0, 0
		for _, c := range cs {
			if c.model == model {
				n++
				if float64(c.new)*top >= float64(c.smi) {
					held++
				}
			}
		}
		t.Logf("%s %s: %d of %d cells at or below the other models' top %.3f", prec, model, held, n, top)
	}
}

// TestEstimateUsesReplayForAutocast: a bf16 (or fp16) estimate of a
// summary with layers on a GPU is the allocator replay's, with the
// replay's band; fp32, and a summary without layers, keep StaticMemory
// and staticBandGPU.
func TestEstimateUsesReplayForAutocast(t *testing.T) {
	t.Parallel()
	g, _ := loadGrid(t, "h100-2026-11-27c-bf16")
	site := gridSite(t, g)
	nt := &site.NodeTypes[0]
	layers := gridLayers(t)
	c := g.Configs[0]
	plain, err := DecodeModel(g.Summaries[c.Model])
	if err != nil {
		t.Fatal(err)
	}
	cpu := layers[c.Model]
	withLayers := *plain
	withLayers.Layers, withLayers.SavedBytesPerSample, withLayers.SavedHalfBytesPerSample = cpu.Layers, cpu.SavedBytesPerSample, cpu.SavedHalfBytesPerSample
	for _, tc := range []struct {
		m      *Model
		prec   string
		replay bool
	}{
		{&withLayers, PrecBF16, true}, {&withLayers, PrecFP16, true}, {&withLayers, PrecFP32, false}, {plain, PrecBF16, false},
	} {
		tr := Training{"adam", tc.prec}
		rows, err := site.Estimate(Request{Model: tc.m, Training: tr, Samples: 1000, Epochs: 1, Batches: []int{64}})
		if err != nil {
			t.Fatal(err)
		}
		r := rows[0]
		want, band := StaticMemory(tc.m, tr, 64, true), gpuBand(tc.prec)
		if tc.replay {
			want, _ = ReplayedMemory(tc.m, tr, 64, nt.DeviceMemoryBytes)
			band = staticBandGPUReplay[PrecBF16]
		}
		if r.Static != want || r.MemBand.High != float64(r.Mem)*band.MemHigh {
			t.Errorf("%s, layers %v: static %+v band %+v; want %+v, band top x%.3f", tc.prec, len(tc.m.Layers) > 0, r.Static, r.MemBand, want, band.MemHigh)
		}
	}
}
