package plan

import (
	"math"
	"strings"
	"testing"

	"github.com/isched/isched/internal/report"
)

func TestMedian(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		in   []float64
		want float64
	}{{[]float64{3}, 3}, {[]float64{5, 1, 3}, 3}, {[]float64{4, 1, 3, 2}, 2.5}, {[]float64{1, 1, 1, 1e9}, 1}} {
		if got := Median(tc.in); got != tc.want {
			t.Errorf("Median(%v) = %v, want %v", tc.in, got, tc.want)
		}
	}
	if !math.IsNaN(Median(nil)) {
		t.Error("Median of nothing is not NaN")
	}
}

func TestSplitReceipts(t *testing.T) {
	t.Parallel()
	me, other := 1001, 1002
	rs := []report.Receipt{
		{User: "alice", UID: &me},                   // mine, confirmed or not
		{User: "alice", UID: &me, Confirmed: true},  // mine
		{User: "bob", UID: &other, Confirmed: true}, // pooled
		{User: "bob", UID: &other},                  // not confirmed: ignored
		{User: "alice", Confirmed: true},            // no owner recorded: ignored, whatever the name says
	}
	own, pooled, ignored := SplitReceipts(rs, me)
	if len(own) != 2 || len(pooled) != 1 || pooled[0].User != "bob" || ignored != 2 {
		t.Errorf("own %d pooled %v ignored %d, want 2, bob's confirmed one, 2", len(own), pooled, ignored)
	}
}

// TestPooledReceipts: other users' receipts move an estimate only robustly.
// The attack: bob runs a tiny job under a ResNet's plan comment and
// reports 1 MiB and 2 ms (Slurm confirms the run: it is his own job); one
// user's receipts, however many, never take alice's estimate below the
// static one, while her own receipts are used as they are and three users
// who agree may lower it.
func TestPooledReceipts(t *testing.T) {
	t.Parallel()
	site := mustSite(t, "../../examples/site-lab.json")
	m := mustModel(t, "testdata/resnet50.json")
	tr := Training{"sgd", PrecFP32}
	key := ConfigKey(m, tr)
	const mib = 1 << 20
	static, err := site.Estimate(Request{Model: m, Training: tr, Samples: 1000, Epochs: 1, Batches: []int{16}})
	if err != nil {
		t.Fatal(err)
	}
	var st Row
	for _, r := range static {
		if r.NodeType.Name == "lab-cpu" {
			st = r
		}
	}
	uid := func(n int) *int { return &n }
	receipt := func(u int, b int, mem int64, iterMS float64) report.Receipt {
		return report.Receipt{Model: key, Batch: b, Partition: "cpu", IterMS: iterMS, PeakRSS: mem, UID: uid(u), Confirmed: true}
	}
	many := func(u, n int, mem int64, iterMS float64) []report.Receipt {
		var out []report.Receipt
		for range n {
			out = append(out, receipt(u, 16, mem, iterMS))
		}
		return out
	}
	capMem := int64(math.Ceil(float64(st.Mem) * MaxPooledRaise))
	low := st.Mem * 8 / 10          // below the static estimate, by honest users
	lowIter := st.IterSeconds * 500 // ms: half the static time
	for name, tc := range map[string]struct {
		own, pooled []report.Receipt
		mem         int64
		iterS       float64
		source      Source
	}{
		"static":                   {nil, nil, st.Mem, st.IterSeconds, Static},
		"one liar":                 {nil, many(1002, 1, mib, 2), st.Mem, st.IterSeconds, Static},
		"one liar, 50 receipts":    {nil, many(1002, 50, mib, 2), st.Mem, st.IterSeconds, Static},
		"one liar, another batch":  {nil, []report.Receipt{receipt(1002, 8, mib, 2), receipt(1002, 32, 2*mib, 3)}, st.Mem, st.IterSeconds, Static},
		"own receipts are trusted": {many(1001, 1, mib, 2), nil, mib, 0.002, Measured},
		"own before pooled":        {many(1001, 1, 600*mib, 300), many(1002, 5, mib, 2), 600 * mib, 0.3, Measured},
		"two agree: not enough":    {nil, append(many(1002, 1, low, lowIter), many(1003, 1, low, lowIter)...), st.Mem, st.IterSeconds, Static},
		"three agree":              {nil, append(append(many(1002, 1, low, lowIter), many(1003, 1, low, lowIter)...), many(1004, 1, low, lowIter)...), low, lowIter / 1000, Measured},
		"three honest, one liar with many receipts": {nil,
			append(append(append(many(1002, 1, low, lowIter), many(1003, 1, low, lowIter)...), many(1004, 1, low, lowIter)...), many(1005, 40, mib, 2)...),
			low, lowIter / 1000, Measured},
		"above static from one user, within the factor: used": {nil, many(1002, 1, st.Mem*6/5, st.IterSeconds*1200), st.Mem * 6 / 5, st.IterSeconds * 1.2, Measured},
		// issue 44: one user's confirmed 2.5 GB job raised alice's
		// estimate 5x
		"far above static from one user: capped": {nil, many(1002, 3, st.Mem*5, st.IterSeconds*8000), capMem, st.IterSeconds * MaxPooledRaise, Measured},
		"two users far above: capped":            {nil, append(many(1002, 1, st.Mem*5, st.IterSeconds*8000), many(1003, 1, st.Mem*5, st.IterSeconds*8000)...), capMem, st.IterSeconds * MaxPooledRaise, Measured},
		"three users far above: used":            {nil, append(append(many(1002, 1, st.Mem*5, st.IterSeconds*8000), many(1003, 1, st.Mem*5, st.IterSeconds*8000)...), many(1004, 1, st.Mem*5, st.IterSeconds*8000)...), st.Mem * 5, st.IterSeconds * 8, Measured},
		"own far above static: used":             {many(1001, 1, st.Mem*5, st.IterSeconds*8000), nil, st.Mem * 5, st.IterSeconds * 8, Measured},
	} {
		rows, err := site.Estimate(Request{Model: m, Training: tr, Samples: 1000, Epochs: 1, Batches: []int{16}, Receipts: tc.own, Pooled: tc.pooled})
		if err != nil {
			t.Fatal(err)
		}
		for _, r := range rows {
			if r.NodeType.Name != "lab-cpu" {
				continue
			}
			capped := tc.mem == capMem // a capped figure has no measured band
			if r.Mem-r.MemMargin != tc.mem || !near(r.IterSeconds, tc.iterS, 1e-9) || r.Source != tc.source || (r.MemMargin > 0) != (r.Source != Static && !capped) {
				t.Errorf("%s: %s mem %s iter %.4f s, want %s %s %.4f s (%s)", name, r.Source, FormatBytes(r.Mem), r.IterSeconds,
					tc.source, FormatBytes(tc.mem), tc.iterS, r.Basis)
			}
			if capped && !strings.Contains(r.Basis, "not above 1.5x the static estimate until 3 users agree") {
				t.Errorf("%s: the basis does not say the figure was capped: %s", name, r.Basis)
			}
			wantWhose := WhosePooled
			switch {
			case tc.source == Static:
				wantWhose = ""
			case tc.own != nil:
				wantWhose = WhoseOwn
			}
			if r.Whose != wantWhose {
				t.Errorf("%s: receipts of %q, want %q", name, r.Whose, wantWhose)
			}
			if r.HostMem < r.Mem {
				t.Errorf("%s: asks Slurm for %s, below the row's %s", name, FormatBytes(r.HostMem), FormatBytes(r.Mem))
			}
		}
	}
}
