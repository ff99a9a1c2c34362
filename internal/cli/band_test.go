package cli

import (
	"encoding/json"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/isched/isched/internal/plan"
	"github.com/isched/isched/internal/report"
)

// TestEstimateShowsBands: receipts with repeats give rows a band from
// their spread, in JSON and in the table's notes; rows without receipts
// (static) have none.
func TestEstimateShowsBands(t *testing.T) {
	h := newHarness(t)
	model := "testdata/mnist_cnn.json"
	m, err := loadModel(model)
	if err != nil {
		t.Fatal(err)
	}
	key := m.Fingerprint() + ":momentum:fp32"
	var lines []string
	for _, r := range []report.Receipt{
		{Model: key, Batch: 8, Partition: "cpu", NodeType: "lab-cpu", IterMS: 30, PeakRSS: 300 << 20},
		{Model: key, Batch: 8, Partition: "cpu", NodeType: "lab-cpu", IterMS: 40, PeakRSS: 310 << 20},
		{Model: key, Batch: 16, Partition: "cpu", NodeType: "lab-cpu", IterMS: 60, PeakRSS: 340 << 20},
	} {
		b, _ := json.Marshal(r)
		lines = append(lines, string(b))
	}
	file := filepath.Join(t.TempDir(), "receipts.jsonl")
	if err := os.WriteFile(file, []byte(strings.Join(lines, "\n")), 0o600); err != nil {
		t.Fatal(err)
	}
	args := []string{"estimate", "--model", model, "--samples", "3200", "--batch", "8,32", "--optimizer", "momentum",
		"--site", "../../examples/site-lab.json", "--receipts", file, "--state", "none"}
	code, out, errOut := h.run(append(args, "--json")...)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	var rows []jsonRow
	if err := json.Unmarshal([]byte(out), &rows); err != nil {
		t.Fatal(err)
	}
	seen := 0
	for _, r := range rows {
		if r.NodeType != "lab-cpu" {
			continue
		}
		seen++
		if r.MemoryBand == nil || r.IterBand == nil || r.RunBand == nil {
			t.Fatalf("batch %d: no band: %+v", r.Batch, r)
		}
		mem := float64(r.MemoryBytes)
		if r.MemoryBand.Low > mem || r.MemoryBand.High < mem || r.MemoryBand.High <= r.MemoryBand.Low ||
			r.IterBand.Low > r.IterSeconds || r.IterBand.High < r.IterSeconds || r.RunBand.High < r.RunS {
			t.Errorf("batch %d: %g bytes in %+v, %g s in %+v", r.Batch, mem, *r.MemoryBand, r.IterSeconds, *r.IterBand)
		}
		if r.Batch == 8 && (r.IterBand.Low > 0.030 || r.IterBand.High < 0.040) {
			t.Errorf("batch 8: time band %+v does not span the two runs (30 and 40 ms)", *r.IterBand)
		}
	}
	if seen != 2 {
		t.Fatalf("%d lab-cpu rows", seen)
	}
	code, out, _ = h.run(args...)
	if code != 0 || !strings.Contains(out, "batch 32 on lab-cpu (scaled, your runs): ") || !strings.Contains(out, "; band: memory ") {
		t.Errorf("the table's notes do not show the band:\n%s", out)
	}
	code, out, _ = h.run("estimate", "--model", model, "--samples", "3200", "--batch", "8", "--optimizer", "momentum",
		"--site", "../../examples/site-lab.json", "--receipts", "none", "--state", "none", "--json")
	// a static CPU row carries the bench-predict grid's memory calibration
	// instead; without a probe record its time is unmeasured, with no band
	var static []jsonRow
	if code != 0 || json.Unmarshal([]byte(out), &static) != nil || len(static) == 0 {
		t.Fatalf("static estimate: exit %d:\n%s", code, out)
	}
	cal := plan.StaticBandFor(false)
	for _, r := range static {
		mem := float64(r.MemoryBytes)
		if r.NodeType != "lab-cpu" {
			continue
		}
		if r.MemoryBand == nil || *r.MemoryBand != (jsonBand{math.Floor(mem * cal.MemLow), math.Ceil(mem * cal.MemHigh)}) ||
			r.IterBand != nil || r.RunBand != nil || !r.TimeUnmeasured {
			t.Errorf("static lab-cpu row: want the grid's memory band %+v, no time band and time_unmeasured:\n%s", cal, out)
		}
	}
	code, out, _ = h.run("estimate", "--model", model, "--samples", "3200", "--batch", "8", "--optimizer", "momentum",
		"--site", "../../examples/site-lab.json", "--receipts", "none", "--state", "none")
	if code != 0 || !strings.Contains(out, "? time unmeasured on lab-dev,lab-cpu,lab-gdev,lab-gpu") || !strings.Contains(out, "isched site probe --partition P") {
		t.Errorf("the table does not say the static time is unmeasured:\n%s", out)
	}
}
