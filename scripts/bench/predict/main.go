// Command predict prints how far isched's estimates are from a grid of real
// CPU training runs (make bench-predict): the static model as assumed (the
// catalogue's peak x efficiency and 300 MiB for the framework), the static
// model with the node type's probe record (isched site probe), and the
// estimate fitted over the grid's own batch-8 and batch-16 cells taken as
// profiled receipts (what isched profile --batches 8,16 gives).
//
// The grid (testdata/grid.json, from grid.py), the model summaries
// (testdata/<arch>.json, from scripts/model_summary.py) and the probe record
// (testdata/probe.json, from scripts/site_probe.py) are committed;
// docs/model-summary.md says how to regenerate them (make bench-predict
// REGRID=1).
package main

import (
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"slices"
	"text/tabwriter"

	"github.com/isched/isched/internal/plan"
	"github.com/isched/isched/internal/report"
)

// grid is testdata/grid.json.
type grid struct {
	V          int     `json:"v"`
	MeasuredAt string  `json:"measured_at"`
	Framework  string  `json:"framework"`
	Optimizer  string  `json:"optimizer"`
	Precision  string  `json:"precision"`
	InputShape []int   `json:"input_shape"`
	NumClasses int     `json:"num_classes"`
	Threads    int     `json:"threads"`
	Warmup     int     `json:"warmup"`
	Steps      int     `json:"steps"`
	Cells      []*cell `json:"cells"`
}

type cell struct {
	Arch         string    `json:"arch"`
	Batch        int       `json:"batch"`
	PeakRSSBytes int64     `json:"peak_rss_bytes"`
	MedianIterMS float64   `json:"median_iter_ms"`
	IterMS       []float64 `json:"iter_ms"`
	LoadBefore   float64   `json:"load_before"`
	LoadAfter    float64   `json:"load_after"`
}

func main() {
	dir := flag.String("dir", "scripts/bench/predict/testdata", "folder with grid.json, probe.json and <arch>.json summaries")
	sitePath := flag.String("site", "examples/site-lab.json", "site catalogue")
	nodeType := flag.String("node-type", "lab-cpu", "the catalogue's node type the grid ran on")
	flag.Parse()
	if err := run(os.Stdout, *dir, *sitePath, *nodeType); err != nil {
		fmt.Fprintln(os.Stderr, "bench-predict:", err)
		os.Exit(1)
	}
}

func run(w io.Writer, dir, sitePath, nodeType string) error {
	b, err := os.ReadFile(filepath.Join(dir, "grid.json"))
	if err != nil {
		return err
	}
	var g grid
	if err := json.Unmarshal(b, &g); err != nil {
		return fmt.Errorf("grid.json: %w", err)
	}
	if len(g.Cells) == 0 {
		return errors.New("grid.json: no cells")
	}
	load := func() (*plan.Site, *plan.NodeType, error) {
		sb, err := os.ReadFile(sitePath)
		if err != nil {
			return nil, nil, err
		}
		s, err := plan.DecodeSite(sb)
		if err != nil {
			return nil, nil, fmt.Errorf("%s: %w", sitePath, err)
		}
		nt := s.NodeType(nodeType)
		if nt == nil {
			return nil, nil, fmt.Errorf("%s: no node type %s", sitePath, nodeType)
		}
		return s, nt, nil
	}
	before, ntBefore, err := load()
	if err != nil {
		return err
	}
	after, ntAfter, err := load()
	if err != nil {
		return err
	}
	pb, err := os.ReadFile(filepath.Join(dir, "probe.json"))
	if err != nil {
		return err
	}
	probe, err := plan.DecodeProbe(pb)
	if err != nil {
		return fmt.Errorf("probe.json: %w", err)
	}
	probe.NodeType = nodeType // the probe record stands for the grid's node type
	if err := after.SetProbe(probe); err != nil {
		return err
	}
	tr := plan.Training{Optimizer: g.Optimizer, Precision: g.Precision}
	if err := tr.Validate(); err != nil {
		return err
	}

	fmt.Fprintf(w, "grid %s (%s, %d threads, median of %d iterations after %d warm-up, input %v): errors are (estimate - real) / real\n",
		g.MeasuredAt, g.Framework, g.Threads, g.Steps, g.Warmup, g.InputShape)
	fmt.Fprintf(w, "static assumed: %s\nstatic probed:  %s\nfitted: isched's fit over the grid's batch 8 and 16 cells as profiled receipts (rows at 8 and 16 are those receipts)\n\n",
		before.StaticBasis(ntBefore), after.StaticBasis(ntAfter))
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "model\tbatch\treal MiB\tassumed\tprobed\tfitted\treal ms\tmin ms\tassumed\tprobed\tfitted\tload\t")
	errs := map[string][]float64{}
	models := map[string]*plan.Model{}
	for _, c := range g.Cells {
		m := models[c.Arch]
		if m == nil {
			mb, err := os.ReadFile(filepath.Join(dir, c.Arch+".json"))
			if err != nil {
				return err
			}
			if m, err = plan.DecodeModel(mb); err != nil {
				return fmt.Errorf("%s.json: %w", c.Arch, err)
			}
			models[c.Arch] = m
		}
		key := plan.ConfigKey(m, tr)
		var receipts []report.Receipt
		for _, o := range g.Cells {
			if o.Arch == c.Arch && (o.Batch == 8 || o.Batch == 16) {
				receipts = append(receipts, report.Receipt{Model: key, Batch: o.Batch, NodeType: nodeType, IterMS: o.MedianIterMS,
					PeakRSS: o.PeakRSSBytes, Iters: int64(len(o.IterMS)), Profiled: true})
			}
		}
		memS, msS := estimate(before, ntBefore, m, tr, c.Batch, nil)
		memP, msP := estimate(after, ntAfter, m, tr, c.Batch, nil)
		memF, msF := estimate(before, ntBefore, m, tr, c.Batch, receipts)
		realMem, realMS := float64(c.PeakRSSBytes), c.MedianIterMS
		e := func(name string, est, real float64) string {
			v := (est - real) / real
			errs[name] = append(errs[name], v)
			return fmt.Sprintf("%+.1f%%", 100*v)
		}
		fitted := func(name string, est, real float64) string {
			if c.Batch <= 16 {
				return "(receipt)"
			}
			return e(name, est, real)
		}
		fastest := slices.Min(c.IterMS)
		errs["time assumed vs fastest"] = append(errs["time assumed vs fastest"], (msS-fastest)/fastest)
		errs["time probed vs fastest"] = append(errs["time probed vs fastest"], (msP-fastest)/fastest)
		fmt.Fprintf(tw, "%s\t%d\t%.0f\t%s\t%s\t%s\t%.0f\t%.0f\t%s\t%s\t%s\t%.1f-%.1f\t\n", c.Arch, c.Batch, realMem/(1<<20),
			e("mem assumed", memS, realMem), e("mem probed", memP, realMem), fitted("mem fitted", memF, realMem),
			realMS, fastest, e("time assumed", msS, realMS), e("time probed", msP, realMS), fitted("time fitted", msF, realMS),
			c.LoadBefore, c.LoadAfter)
	}
	tw.Flush()
	fmt.Fprintln(w)
	tw = tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(w, "(vs fastest: against the cell's fastest iteration instead of its median, the machine least shared)")
	fmt.Fprintln(tw, "estimate\tcells\tunder\tmedian |err|\tworst |err|\tmedian err\t")
	for _, name := range []string{"mem assumed", "mem probed", "mem fitted", "time assumed", "time probed", "time fitted", "time assumed vs fastest", "time probed vs fastest"} {
		v := errs[name]
		if len(v) == 0 {
			continue
		}
		abs := make([]float64, len(v))
		under := 0
		for i, x := range v {
			abs[i] = math.Abs(x)
			if x < 0 {
				under++
			}
		}
		fmt.Fprintf(tw, "%s\t%d\t%d\t%.1f%%\t%.1f%%\t%+.1f%%\t\n", name, len(v), under, 100*median(abs), 100*slices.Max(abs), 100*median(v))
	}
	return tw.Flush()
}

// estimate is isched's estimate of one cell: peak memory (bytes) and
// iteration time (ms).
func estimate(s *plan.Site, nt *plan.NodeType, m *plan.Model, tr plan.Training, batch int, receipts []report.Receipt) (float64, float64) {
	rows, err := s.Estimate(plan.Request{Model: m, Training: tr, Samples: 1000, Epochs: 1, Batches: []int{batch}, Receipts: receipts})
	if err != nil {
		panic(err) // the request is built above and valid
	}
	for _, r := range rows {
		if r.NodeType == nt {
			return float64(r.Mem), r.IterSeconds * 1000
		}
	}
	panic("no row for " + nt.Name)
}

func median(v []float64) float64 {
	s := slices.Clone(v)
	slices.Sort(s)
	n := len(s)
	if n%2 == 1 {
		return s[n/2]
	}
	return (s[n/2-1] + s[n/2]) / 2
}
