package cli

import (
	"encoding/json"
	"math"
	"strconv"
	"strings"
	"testing"
)

// The seed paper's example (examples/site-seed.json) worked out by hand from
// the model summaries and the static model of docs/model-summary.md, so the
// golden files, which -update writes from the code's own output, are not the
// only check of the estimate and plan tables.
//
// Shared by every row: ResNet-50 has P = 25,557,032 parameters, fp32 (4 B),
// trained with Adam (2 states):
//
//	weights 4P = 102,228,128 B, gradients 4P = 102,228,128 B,
//	optimizer 2 × 4P = 204,456,256 B; together 408,912,512 B
//	iterations: ceil(20,000 / batch) × 50 epochs
//	iteration (no probe record): 3 × FLOPs/sample × batch
//	  / (peak × efficiency × batch / (batch + half_batch))
//	xeon-40c: 6.14e12 × 0.3 = 1.842e12 FLOP/s, half_batch 1, 0.084 per hour,
//	  host RSS with an assumed 300 MiB = 314,572,800 B of Python + torch
//	v100-32g: 1.57e13 × 0.5 = 7.85e12 FLOP/s, half_batch 4, 0.174 per GPU-hour,
//	  device memory with a 768 MiB = 805,306,368 B CUDA context; 32 GiB
type handRow struct {
	batch    int
	nodeType string
	mem      int64   // bytes, exact
	iterS    float64 // seconds, 6 significant digits
	iters    int64
	hours    float64 // 6 significant digits
	cost     float64
	fits     bool
	table    string // the row of the table, its figures rounded by hand
}

// resnet50ByHand: activations per sample (91,438,752 + 3 × 224 × 224 × 4 =
// 602,112) × 2 = 184,081,728 B; 8,178,368,512 FLOPs per sample.
var resnet50ByHand = []handRow{
	// memory 408,912,512 + 8 × 184,081,728 (1,472,653,824) + 314,572,800
	//   = 2,196,139,136 B = 2.045 GiB
	// iteration 3 × 8,178,368,512 × 8 / (1.842e12 × 8/9) = 0.119878 s
	// 2,500 × 50 = 125,000 iterations × 0.119878 s = 4.16244 h; × 0.084 = 0.349645
	{8, "xeon-40c", 2_196_139_136, 0.119878, 125_000, 4.16244, 0.349645, true,
		"8 xeon-40c 2.05 GiB RSS 192.0 GiB yes 4.16? cpu ? 0.35 static"},
	// memory 408,912,512 + 64 × 184,081,728 (11,781,230,592) + 805,306,368
	//   = 12,995,449,472 B = 12.10 GiB
	// iteration 3 × 8,178,368,512 × 64 / (7.85e12 × 64/68) = 0.212533 s
	// 313 × 50 = 15,650 iterations × 0.212533 s = 0.923930 h; × 0.174 = 0.160764
	{64, "v100-32g", 12_995_449_472, 0.212533, 15_650, 0.923930, 0.160764, true,
		"64 v100-32g 12.1 GiB GPU 32.0 GiB yes 0.92? gpu,gpu-debug ? 0.16 static"},
	// memory 408,912,512 + 11,781,230,592 + 314,572,800 = 12,504,715,904 B = 11.65 GiB
	// iteration 3 × 8,178,368,512 × 64 / (1.842e12 × 64/65) = 0.865788 s
	// 15,650 × 0.865788 s = 3.76377 h; × 0.084 = 0.316157
	{64, "xeon-40c", 12_504_715_904, 0.865788, 15_650, 3.76377, 0.316157, true,
		"64 xeon-40c 11.6 GiB RSS 192.0 GiB yes 3.76? cpu ? 0.32 static"},
}

// resnet50At448ByHand: activations per sample (365,399,712 + 3 × 448 × 448 ×
// 4 = 2,408,448) × 2 = 735,616,320 B; 32,701,186,048 FLOPs per sample.
var resnet50At448ByHand = []handRow{
	// memory 408,912,512 + 8 × 735,616,320 (5,884,930,560) + 314,572,800
	//   = 6,608,415,872 B = 6.155 GiB
	// iteration 3 × 32,701,186,048 × 8 / (1.842e12 × 8/9) = 0.479333 s
	// 125,000 × 0.479333 s = 16.6435 h; × 0.084 = 1.39806
	{8, "xeon-40c", 6_608_415_872, 0.479333, 125_000, 16.6435, 1.39806, true,
		"8 xeon-40c 6.15 GiB RSS 192.0 GiB yes 16.64? cpu ? 1.40 static"},
	// memory 408,912,512 + 64 × 735,616,320 (47,079,444,480) + 805,306,368
	//   = 48,293,663,360 B = 44.98 GiB > 32 GiB: does not fit
	// iteration 3 × 32,701,186,048 × 64 / (7.85e12 × 64/68) = 0.849814 s
	// 15,650 × 0.849814 s = 3.69433 h; × 0.174 = 0.642814
	{64, "v100-32g", 48_293_663_360, 0.849814, 15_650, 3.69433, 0.642814, false,
		"64 v100-32g 45.0 GiB GPU 32.0 GiB NO - - - - static"},
}

// near is true when got is within 1e-5 of want, relative: the hand figures
// have 6 significant digits.
func near(got, want float64) bool {
	return math.Abs(got-want) <= 1e-5*math.Abs(want)
}

// checkEstimateByHand checks rows of the estimate of model (20,000 samples,
// 50 epochs, batches 8 to 64 on the seed site) against want: the JSON
// output's figures, and the table's rounding of them.
func checkEstimateByHand(t *testing.T, h *harness, model, table string, want []handRow) {
	t.Helper()
	code, out, errOut := h.run("estimate", "--model", model, "--samples", "20000", "--epochs", "50", "--batch", "8,16,32,64",
		"--site", "../../examples/site-seed.json", "--receipts", "none", "--state", "none", "--json")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	var rows []jsonRow
	if err := json.Unmarshal([]byte(out), &rows); err != nil {
		t.Fatal(err)
	}
	for _, w := range want {
		checkJSONRow(t, rows, w)
		if got := tableRow(table, strconv.Itoa(w.batch), w.nodeType); got != w.table {
			t.Errorf("table row of batch %d on %s:\n got %q\nwant %q (rounded by hand)", w.batch, w.nodeType, got, w.table)
		}
	}
}

func checkJSONRow(t *testing.T, rows []jsonRow, w handRow) {
	t.Helper()
	for _, r := range rows {
		if r.Batch != w.batch || r.NodeType != w.nodeType {
			continue
		}
		if r.MemoryBytes != w.mem || r.Iterations != w.iters || r.Fits != w.fits ||
			!near(r.IterSeconds, w.iterS) || !near(r.RunS/3600, w.hours) || !near(r.Cost, w.cost) {
			t.Errorf("batch %d on %s: memory %d B, %d iterations of %.6g s, %.6g h, cost %.6g, fits %v;\n"+
				"by hand: %d B, %d iterations of %.6g s, %.6g h, cost %.6g, fits %v",
				w.batch, w.nodeType, r.MemoryBytes, r.Iterations, r.IterSeconds, r.RunS/3600, r.Cost, r.Fits,
				w.mem, w.iters, w.iterS, w.hours, w.cost, w.fits)
		}
		return
	}
	t.Errorf("no row for batch %d on %s", w.batch, w.nodeType)
}

// tableRow returns the line of table whose first words are first, with its
// words joined by single spaces; "" when there is none.
func tableRow(table string, first ...string) string {
	for _, line := range strings.Split(table, "\n") {
		f := strings.Fields(line)
		if len(f) >= len(first) && strings.Join(f[:len(first)], " ") == strings.Join(first, " ") {
			return strings.Join(f, " ")
		}
	}
	return ""
}

// checkPlanByHand checks `isched plan` of ResNet-50 at batch 64 (no cluster
// state) against the rows worked out above: 15,650 iterations;
//
//	gpu and gpu-debug (v100-32g): 15,650 × 0.212533 s = 3,326.15 s = 55.44 min,
//	  shown rounded up as 56 min; one chunk, within gpu-debug's 1:00:00 too;
//	  cost 0.160764
//	cpu (xeon-40c): 15,650 × 0.865788 s = 13,549.6 s = 3.76 h (3.8 h); cost 0.316157
func checkPlanByHand(t *testing.T, h *harness, table string) {
	t.Helper()
	want := []struct {
		partition  string
		runS, cost float64
		table      string
	}{
		{"gpu", 3326.15, 0.160764, "gpu v100-32g ? - 56 min ? 0.16 unknown: none (--state none)"},
		{"gpu-debug", 3326.15, 0.160764, "gpu-debug v100-32g ? - 56 min ? 0.16 unknown: none (--state none)"},
		{"cpu", 13549.6, 0.316157, "cpu xeon-40c ? - 3.8 h ? 0.32 unknown: none (--state none)"},
	}
	plans := seedPlanJSON(t, h)
	if len(plans) != 1 || plans[0].Batch != 64 || len(plans[0].Options) != len(want) || plans[0].Ideal != "gpu" {
		t.Fatalf("plans %+v, want one of batch 64 with %d options, gpu the fastest", plans, len(want))
	}
	for i, w := range want {
		o := plans[0].Options[i]
		if o.Partition != w.partition || !near(o.RunS, w.runS) || !near(o.Cost, w.cost) || o.Chunks != 1 {
			t.Errorf("option %d: %s, run %.6g s, cost %.6g, %d chunks; by hand %s, %.6g s, %.6g, 1 chunk",
				i, o.Partition, o.RunS, o.Cost, o.Chunks, w.partition, w.runS, w.cost)
		}
		if got := tableRow(table, w.partition); got != w.table {
			t.Errorf("table row of %s:\n got %q\nwant %q (rounded by hand)", w.partition, got, w.table)
		}
	}
	if got := tableRow(table, "batch"); got != "batch 64 (15650 iterations)" {
		t.Errorf("table heading %q, want batch 64 (15650 iterations)", got)
	}
}

func seedPlanJSON(t *testing.T, h *harness) []jsonPlan {
	t.Helper()
	code, out, errOut := h.run("plan", "--model", "../plan/testdata/resnet50.json", "--samples", "20000", "--epochs", "50", "--batch", "64",
		"--site", "../../examples/site-seed.json", "--receipts", "none", "--state", "none", "--json")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	var plans []jsonPlan
	if err := json.Unmarshal([]byte(out), &plans); err != nil {
		t.Fatal(err)
	}
	return plans
}
