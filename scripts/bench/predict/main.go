// Command predict prints how far isched's estimates are from a grid of real
// CPU training runs (make bench-predict): the static model as assumed (the
// catalogue's peak x efficiency and 300 MiB for the framework), the static
// model with the node type's probe record (isched site probe), and the
// estimate fitted over the grid's own batch-8 and batch-16 cells taken as
// profiled receipts (what isched profile --batches 8,16 gives).
//
// A last column fits each cell from the architecture's other three batch
// sizes (profiled at three, this one left out).
//
// It then prints the band of each static estimate (the range of real /
// static over the grid, which internal/plan/staticband_gen.go holds and
// isched estimate shows on static CPU rows) with its in-sample and
// leave-one-architecture-out coverage, and replays real runs' per-step
// times (testdata/traces.json and traces-long.json, from traces.py)
// through the coordinator's iteration estimator to score its ETA at 10,
// 25 and 50 % of each run. Last, it judges the calibrated ETA band (80 %
// stated) over every real run, testdata/traces-cal.json included,
// leave-one-run-out, per progress bucket from 5 % (calib.go).
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
	writeBand := flag.String("write-static-band", "", "write the static bands derived from the grid to this Go file (internal/plan/staticband_gen.go) and exit")
	flag.Parse()
	if *writeBand != "" {
		if err := writeStaticBand(*writeBand, *dir, *sitePath, *nodeType); err != nil {
			fmt.Fprintln(os.Stderr, "bench-predict:", err)
			os.Exit(1)
		}
		return
	}
	if err := run(os.Stdout, *dir, *sitePath, *nodeType); err != nil {
		fmt.Fprintln(os.Stderr, "bench-predict:", err)
		os.Exit(1)
	}
}

// bench is the grid and the two static models it is compared with.
type bench struct {
	g                 grid
	before, after     *plan.Site // the catalogue as is, and with the probe record
	ntBefore, ntAfter *plan.NodeType
	tr                plan.Training
	models            map[string]*plan.Model
	nodeType, dir     string
}

func loadBench(dir, sitePath, nodeType string) (*bench, error) {
	b, err := os.ReadFile(filepath.Join(dir, "grid.json"))
	if err != nil {
		return nil, err
	}
	bn := &bench{models: map[string]*plan.Model{}, nodeType: nodeType, dir: dir}
	if err := json.Unmarshal(b, &bn.g); err != nil {
		return nil, fmt.Errorf("grid.json: %w", err)
	}
	if len(bn.g.Cells) == 0 {
		return nil, errors.New("grid.json: no cells")
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
	if bn.before, bn.ntBefore, err = load(); err != nil {
		return nil, err
	}
	if bn.after, bn.ntAfter, err = load(); err != nil {
		return nil, err
	}
	pb, err := os.ReadFile(filepath.Join(dir, "probe.json"))
	if err != nil {
		return nil, err
	}
	probe, err := plan.DecodeProbe(pb)
	if err != nil {
		return nil, fmt.Errorf("probe.json: %w", err)
	}
	probe.NodeType = nodeType // the probe record stands for the grid's node type
	if err := bn.after.SetProbe(probe); err != nil {
		return nil, err
	}
	bn.tr = plan.Training{Optimizer: bn.g.Optimizer, Precision: bn.g.Precision}
	if err := bn.tr.Validate(); err != nil {
		return nil, err
	}
	for _, c := range bn.g.Cells {
		if bn.models[c.Arch] != nil {
			continue
		}
		mb, err := os.ReadFile(filepath.Join(dir, c.Arch+".json"))
		if err != nil {
			return nil, err
		}
		if bn.models[c.Arch], err = plan.DecodeModel(mb); err != nil {
			return nil, fmt.Errorf("%s.json: %w", c.Arch, err)
		}
	}
	return bn, nil
}

// cellEst is isched's estimate of one cell: memory (bytes) and iteration
// time (ms), static as assumed (S), static probed (P), fitted from the
// batch-8 and 16 cells (F), fitted from the architecture's other three
// batch sizes (L: leave this one out).
type cellEst struct{ memS, msS, memP, msP, memF, msF, memL, msL float64 }

// receipts are the architecture's cells that keep(batch) as profiled
// receipts.
func (bn *bench) receipts(arch string, keep func(batch int) bool) []report.Receipt {
	key := plan.ConfigKey(bn.models[arch], bn.tr)
	var out []report.Receipt
	for _, o := range bn.g.Cells {
		if o.Arch == arch && keep(o.Batch) {
			out = append(out, report.Receipt{Model: key, Batch: o.Batch, NodeType: bn.nodeType, IterMS: o.MedianIterMS,
				PeakRSS: o.PeakRSSBytes, Iters: int64(len(o.IterMS)), Profiled: true})
		}
	}
	return out
}

func (bn *bench) estimates(c *cell) cellEst {
	m := bn.models[c.Arch]
	var e cellEst
	e.memS, e.msS = estimate(bn.before, bn.ntBefore, m, bn.tr, c.Batch, nil)
	e.memP, e.msP = estimate(bn.after, bn.ntAfter, m, bn.tr, c.Batch, nil)
	e.memF, e.msF = estimate(bn.before, bn.ntBefore, m, bn.tr, c.Batch, bn.receipts(c.Arch, func(b int) bool { return b == 8 || b == 16 }))
	e.memL, e.msL = estimate(bn.before, bn.ntBefore, m, bn.tr, c.Batch, bn.receipts(c.Arch, func(b int) bool { return b != c.Batch }))
	return e
}

func writeStaticBand(path, dir, sitePath, nodeType string) error {
	bn, err := loadBench(dir, sitePath, nodeType)
	if err != nil {
		return err
	}
	src, err := staticBandSource(bn)
	if err != nil {
		return err
	}
	return os.WriteFile(path, src, 0o644)
}

func run(w io.Writer, dir, sitePath, nodeType string) error {
	bn, err := loadBench(dir, sitePath, nodeType)
	if err != nil {
		return err
	}
	g, before, after, ntBefore, ntAfter := &bn.g, bn.before, bn.after, bn.ntBefore, bn.ntAfter

	fmt.Fprintf(w, "grid %s (%s, %d threads, median of %d iterations after %d warm-up, input %v): errors are (estimate - real) / real\n",
		g.MeasuredAt, g.Framework, g.Threads, g.Steps, g.Warmup, g.InputShape)
	fmt.Fprintf(w, "static assumed: %s\nstatic probed:  %s\nfitted: isched's fit over the grid's batch 8 and 16 cells as profiled receipts (rows at 8 and 16 are those receipts)\n"+
		"other 3: isched's fit over the architecture's other three batch sizes (profiled at three, this one left out)\n\n",
		before.StaticBasis(ntBefore), after.StaticBasis(ntAfter))
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "model\tbatch\treal MiB\tassumed\tprobed\tfitted\tother 3\treal ms\tmin ms\tassumed\tprobed\tfitted\tother 3\tload\t")
	errs := map[string][]float64{}
	for _, c := range g.Cells {
		est := bn.estimates(c)
		memS, msS, memP, msP, memF, msF, memL, msL := est.memS, est.msS, est.memP, est.msP, est.memF, est.msF, est.memL, est.msL
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
		fmt.Fprintf(tw, "%s\t%d\t%.0f\t%s\t%s\t%s\t%s\t%.0f\t%.0f\t%s\t%s\t%s\t%s\t%.1f-%.1f\t\n", c.Arch, c.Batch, realMem/(1<<20),
			e("mem assumed", memS, realMem), e("mem probed", memP, realMem), fitted("mem fitted", memF, realMem), e("mem other 3", memL, realMem),
			realMS, fastest, e("time assumed", msS, realMS), e("time probed", msP, realMS), fitted("time fitted", msF, realMS), e("time other 3", msL, realMS),
			c.LoadBefore, c.LoadAfter)
	}
	tw.Flush()
	fmt.Fprintln(w)
	tw = tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(w, "(vs fastest: against the cell's fastest iteration instead of its median, the machine least shared)")
	fmt.Fprintln(tw, "estimate\tcells\tunder\tmedian |err|\tworst |err|\tmedian err\t")
	for _, name := range []string{"mem assumed", "mem probed", "mem fitted", "mem other 3", "time assumed", "time probed", "time fitted", "time other 3", "time assumed vs fastest", "time probed vs fastest"} {
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
		fmt.Fprintf(tw, "%s\t%d\t%d\t%.1f%%\t%.1f%%\t%+.1f%%\t\n", name, len(v), under, 100*plan.Median(abs), 100*slices.Max(abs), 100*plan.Median(v))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	if err := printStaticBands(w, bn); err != nil {
		return err
	}
	if err := printETA(w, dir); err != nil {
		return err
	}
	return printCalibration(w, dir)
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
