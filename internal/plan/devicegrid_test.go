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
