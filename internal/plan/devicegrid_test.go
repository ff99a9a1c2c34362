package plan

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/isched/isched/internal/report"
)

// gridDir holds what scripts/gpu-check grid recorded on lent GPUs: per
// configuration the model's summary, the profile's receipts (batch 8 and
// 16) and a fresh training process per batch (nvidia-smi's per-process
// figure, the median step).
const gridDir = "../../scripts/testdata/gpu-check/grid"

type gridRecord struct {
	GPU struct {
		Name       string `json:"name"`
		TotalBytes int64  `json:"total_bytes"`
	} `json:"gpu"`
	Summaries map[string]json.RawMessage `json:"summaries"`
	Configs   []struct {
		Model     string `json:"model"`
		Precision string `json:"precision"`
		Rows      []struct {
			Batch      int     `json:"batch"`
			SMIBytes   int64   `json:"smi_process_bytes"`
			StepMedian float64 `json:"step_median_s"`
		} `json:"rows"`
	} `json:"configs"`
}

func loadGrid(t *testing.T, name string) (*gridRecord, []report.Receipt) {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(gridDir, name+".json"))
	if err != nil {
		t.Fatal(err)
	}
	var g gridRecord
	if err := json.Unmarshal(b, &g); err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	return &g, readGrid(t, filepath.Join(gridDir, name+"-receipts.jsonl"))
}

// gridSite is gpu_grid.write_site's catalogue: one node type, this GPU.
func gridSite(t *testing.T, g *gridRecord) *Site {
	t.Helper()
	site := fmt.Sprintf(`{"v": 1, "name": "gpu-check", "currency": "gpu-hours",
 "node_types": [{"name": "this-gpu", "kind": "gpu", "cpu_model": "-", "cores": 16, "host_memory_bytes": 68719476736,
  "gpu_model": %q, "gpus_per_node": 1, "device_memory_bytes": %d, "gres": "gpu",
  "peak_flops": {"fp32": 67e12, "bf16": 989e12}, "efficiency": {"fp32": 0.5, "bf16": 0.3}, "half_batch": 4, "cost_per_gpu_hour": 1.0}],
 "partitions": [{"name": "gpu", "node_types": ["this-gpu"], "node_count": 1, "max_time": "1-00:00:00", "default": true}]}`,
		g.GPU.Name, g.GPU.TotalBytes)
	s, err := DecodeSite([]byte(site))
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// TestDeviceGridProfiled replays the H100 grids of 2026-11-27: from the
// profile's receipts at batch 8 and 16, the GPU memory estimate is never
// under nvidia-smi's figure at 8 to the largest batch that fit (within 3 %
// where measured, 25 % where fitted); where the profile's
// own steps agreed with the fresh processes' (within 12 % at 8 and 16:
// ResNet-18 and GPT-2 fp32), the time at 32 and 64 is within 10 %; at the
// largest batches (over FarBeyond x 16) the time is within 20 % and its
// band holds the truth. The first recording's ResNet-50 steps and the b
// recording's bf16 profile ran on a GPU not yet warm (docs/gpu-check.md).
func TestDeviceGridProfiled(t *testing.T) {
	t.Parallel()
	for _, name := range []string{"h100-2026-11-27", "h100-2026-11-27b-fp32", "h100-2026-11-27b-bf16", "h100-2026-11-27c-bf16", "h100-2026-11-27d-bf16"} {
		g, rs := loadGrid(t, name)
		site := gridSite(t, g)
		for _, c := range g.Configs {
			m, err := DecodeModel(g.Summaries[c.Model])
			if err != nil {
				t.Fatalf("%s %s: %v", name, c.Model, err)
			}
			tr := Training{"adam", c.Precision}
			if !hasReceipt(rs, ConfigKey(m, tr)) {
				continue // no profile ran (the first recording's GPT-2)
			}
			var batches []int
			for _, r := range c.Rows {
				batches = append(batches, r.Batch)
			}
			rows, err := site.Estimate(Request{Model: m, Training: tr, Samples: 6400, Epochs: 1,
				Batches: batches, Receipts: rs})
			if err != nil {
				t.Fatal(err)
			}
			timed := name == "h100-2026-11-27b-fp32"
			for i, r := range c.Rows {
				row := rows[i]
				what := fmt.Sprintf("%s %s %s batch %d", name, c.Model, c.Precision, r.Batch)
				if row.Source == Static {
					t.Errorf("%s: static row, want one made of the profile's receipts", what)
					continue
				}
				limit := 0.25
				if r.Batch <= 16 {
					limit = 0.03
				}
				if e := float64(row.Mem-r.SMIBytes) / float64(r.SMIBytes); e < 0 || e > limit {
					t.Errorf("%s: memory %s against %s measured: %+.1f%%, want 0..%+.0f%%", what,
						FormatBytes(row.Mem), FormatBytes(r.SMIBytes), 100*e, 100*limit)
				}
				if r.Batch > FarBeyond*16 {
					e := row.IterSeconds/r.StepMedian - 1
					if e < -0.20 || e > 0.20 || !row.IterBand.Contains(r.StepMedian) {
						t.Errorf("%s: step %.1f ms (band %.1f-%.1f) against %.1f ms measured: %+.1f%%, want within 20%% and in the band",
							what, 1000*row.IterSeconds, 1000*row.IterBand.Low, 1000*row.IterBand.High, 1000*r.StepMedian, 100*e)
					}
				}
				if timed && r.Batch > 16 {
					if e := row.IterSeconds/r.StepMedian - 1; e < -0.10 || e > 0.10 {
						t.Errorf("%s: step %.1f ms against %.1f ms measured: %+.1f%%, want within 10%%", what,
							1000*row.IterSeconds, 1000*r.StepMedian, 100*e)
					}
				}
			}
		}
	}
}

func hasReceipt(rs []report.Receipt, key string) bool {
	for _, r := range rs {
		if r.Model == key {
			return true
		}
	}
	return false
}

// TestDeviceGridStaticHalf replays the H100 grids' bf16 cells with the
// summary's emulated autocast bytes (testdata/grid-saved-half.json, made
// by isched.summarize on the CPU; the recorded summaries predate the
// field): how much of what autograd keeps autocast halves is the
// model's own (ResNet-50 0.51, GPT-2 0.72 of the float32 bytes), where
// one HalfActivationFactor (0.5) put GPT-2's static estimate 16 to 30 %
// under nvidia-smi's figure. With the emulated bytes, at 8 to 64 samples:
// ResNet-50 +0.8 to +4.5 %; GPT-2 -8.1 to +0.3 % (was -16 to -30 %; the
// summary, made on logits, leaves out the float32 loss over a 50257-token
// vocabulary, and at 32 the allocator reserved 1.12 x what it allocated,
// against 1.03 to 1.05 at 16 and 64); ResNet-18 -4.8 to -14.2 % (was -7
// to -19 %): its allocated bytes are predicted (0.55 of float32, the
// allocated growth per sample within 2 %), what is missing is the
// caching allocator's reserve over them (reserved / allocated 1.17 to
// 1.47): the allocator replay is the next step (docs/model-summary.md). The
// bounds below hold those figures so that a change that loses them fails.
func TestDeviceGridStaticHalf(t *testing.T) {
	t.Parallel()
	half := savedHalf(t)
	seen := 0
	for _, name := range []string{"h100-2026-11-27b-bf16", "h100-2026-11-27c-bf16", "h100-2026-11-27d-bf16"} {
		g, _ := loadGrid(t, name)
		for _, c := range g.Configs {
			m, err := DecodeModel(g.Summaries[c.Model])
			if err != nil {
				t.Fatal(err)
			}
			tr := Training{"adam", c.Precision}
			m.SavedHalfBytesPerSample = half[c.Model]
			if m.SavedHalfBytesPerSample == 0 {
				t.Fatalf("%s: no emulated bytes for %s", name, c.Model)
			}
			for _, r := range c.Rows {
				if r.Batch > 64 {
					continue // the largest batch that fit: memory-bound, its own test
				}
				was := StaticMemory(m, tr, r.Batch, true).Total()
				mSaved := *m
				mSaved.SavedHalfBytesPerSample = 0
				old := StaticMemory(&mSaved, tr, r.Batch, true).Total()
				e := float64(was-r.SMIBytes) / float64(r.SMIBytes)
				t.Logf("%s %s %s batch %d: static %s (was %s) against %s: %+.1f%%", name, c.Model, c.Precision, r.Batch,
					FormatBytes(was), FormatBytes(old), FormatBytes(r.SMIBytes), 100*e)
				seen++
				bound := map[string][2]float64{"resnet50": {-0.01, 0.10}, "gpt2": {-0.09, 0.10}, "resnet18": {-0.15, 0.10}}[c.Model]
				if e < bound[0] || e > bound[1] || was < old {
					t.Errorf("%s %s batch %d: static %s (%s with the one half factor) against %s measured: %+.1f%%, want %+.0f%%..%+.0f%% and no lower than before",
						name, c.Model, r.Batch, FormatBytes(was), FormatBytes(old), FormatBytes(r.SMIBytes), 100*e, 100*bound[0], 100*bound[1])
				}
			}
		}
	}
	if seen < 12 {
		t.Errorf("%d bf16 cells replayed, want the grids' 12 at 8 to 64", seen)
	}
}

// savedHalf is what the summary's autocast emulation keeps per sample for
// each recorded grid model (testdata/grid-saved-half.json).
func savedHalf(t *testing.T) map[string]int64 {
	t.Helper()
	b, err := os.ReadFile("testdata/grid-saved-half.json")
	if err != nil {
		t.Fatal(err)
	}
	var half struct {
		Bytes map[string]int64 `json:"saved_half_bytes_per_sample"`
	}
	if err := json.Unmarshal(b, &half); err != nil {
		t.Fatal(err)
	}
	return half.Bytes
}
