package cli

import (
	"context"
	"encoding/json"
	"fmt"
	"image/color"
	"io"
	"math"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
	"gonum.org/v1/plot/vg/vgimg"
	"gonum.org/v1/plot/vg/vgsvg"

	"github.com/isched/isched/internal/atomicfile"
	"github.com/isched/isched/internal/plan"
	"github.com/isched/isched/internal/report"
	"github.com/spf13/pflag"
)

// reportCmd is `isched report`: a run's summary, attempts and samples,
// as text, JSON or a plot.
type reportCmd struct {
	app    *App
	out    string
	asJSON bool
	width  float64
	height float64
}

func (c *reportCmd) leaf() leaf {
	return leaf{
		use:   "report JOB|LINEAGE [--plot FILE.png|FILE.svg] [--json]",
		short: "plot a job's iteration time and memory, and its metrics: isched report JOB --plot run.png|run.svg",
		flags: func(fs *pflag.FlagSet) {
			fs.StringVar(&c.out, "plot", "", "write iteration time and memory over the run to this PNG or SVG file")
			fs.BoolVar(&c.asJSON, "json", false, "print the report's data as JSON (snake_case keys, RFC 3339 times): the summary, the attempts and the samples")
			fs.Float64Var(&c.width, "width", 24, "plot width, cm")
			fs.Float64Var(&c.height, "height", 16, "plot height, cm")
		},
		run: c.run, args: c.app.completeJobs,
	}
}

func (c *reportCmd) run(ctx context.Context, pos []string) error {
	a := c.app
	if len(pos) != 1 {
		return usageErr("want one job id or lineage")
	}
	if c.out != "" {
		if ext := strings.ToLower(filepath.Ext(c.out)); ext != ".png" && ext != ".svg" {
			return usageErr("--plot %q: want a .png or .svg file", c.out)
		}
	}
	if ref, elements, ok := a.arrayElements(ctx, pos[0]); ok {
		return usageErr("%s is array %s: a report is of one run, an element's (%s); isched status %s lists them",
			pos[0], arrayName(ref), elementExamples(ref, elements), pos[0])
	}
	r, err := a.loadReport(ctx, pos[0])
	if err != nil {
		return err
	}
	wrote := a.stdout
	if c.asJSON {
		if err := writeJSON(a.stdout, r.json()); err != nil {
			return err
		}
		wrote = a.stderr // stdout is the JSON's alone
	} else {
		r.writeText(a.stdout)
	}
	if c.out == "" {
		return nil
	}
	if err := writePlot(c.out, r.lineage, r.pts, r.status, vg.Length(c.width)*vg.Centimeter, vg.Length(c.height)*vg.Centimeter); err != nil {
		return err
	}
	fmt.Fprintf(wrote, "wrote %s\n", c.out)
	return nil
}

// reportData is what isched report shows of a lineage.
type reportData struct {
	lineage string
	pts     []report.SeriesPoint // in time order
	bad     int                  // samples that did not decode
	sum     seriesSummary
	status  *report.JobStatus // nil: the coordinator's record is gone
}

// loadReport reads a lineage's samples and status record.
func (a *App) loadReport(ctx context.Context, arg string) (*reportData, error) {
	st, err := a.openStore(ctx)
	if err != nil {
		return nil, fmt.Errorf("redis: %w", err)
	}
	jobs, _ := a.jobTable(ctx)
	t, err := a.resolve(ctx, arg, jobs)
	if err != nil {
		return nil, err
	}
	key := st.Keys().JobSeries(t.lineage)
	vals, err := st.List(ctx, key)
	if err != nil {
		return nil, err
	}
	pts, bad := decodeSeries(vals)
	status, _ := readStatus(ctx, st, t.lineage)
	if err := t.noSuchJob(status, len(vals) > 0); err != nil {
		return nil, err
	}
	if len(pts) == 0 {
		return nil, fmt.Errorf("no samples stored for lineage %s (key %s is empty or missing; %s): the coordinator records them while the job runs",
			t.lineage, key, t.how)
	}
	return &reportData{lineage: t.lineage, pts: pts, bad: bad, sum: summarize(pts), status: status}, nil
}

// writeText writes the report's summary as text.
func (r *reportData) writeText(w io.Writer) {
	sum := r.sum
	fmt.Fprintf(w, "lineage %s: %d points over %s", r.lineage, len(r.pts), plan.FormatDuration(sum.span))
	if r.bad > 0 {
		fmt.Fprintf(w, " (%d unreadable skipped)", r.bad)
	}
	fmt.Fprintln(w)
	if sum.iters > 0 {
		fmt.Fprintf(w, "iteration time: median %s, p90 %s over %d iterations (steps %d-%d)\n",
			ms(sum.medianIter), ms(sum.p90Iter), sum.iters, sum.firstStep, sum.lastStep)
	} else {
		fmt.Fprintln(w, "iteration time: no iterations recorded")
	}
	fmt.Fprintf(w, "memory: peak RSS %s", plan.FormatBytes(sum.peakRSS))
	if sum.peakGPU > 0 {
		fmt.Fprintf(w, ", peak GPU %s", plan.FormatBytes(sum.peakGPU))
	}
	fmt.Fprintln(w)
	if status := r.status; status != nil {
		if c := chain(status); c != "" {
			fmt.Fprintln(w, "attempts: "+c)
		}
		if status.EndedMS > 0 {
			fmt.Fprintf(w, "ended: %s at step %d of %d\n", clean(status.State), max(status.Step, 0), status.TotalIters)
		}
	}
}

func decodeSeries(vals [][]byte) ([]report.SeriesPoint, int) {
	var out []report.SeriesPoint
	bad := 0
	for _, v := range vals {
		var p report.SeriesPoint
		if err := json.Unmarshal(v, &p); err != nil || p.TMS <= 0 {
			bad++
			continue
		}
		out = append(out, p)
	}
	slices.SortStableFunc(out, func(a, b report.SeriesPoint) int {
		switch {
		case a.TMS < b.TMS:
			return -1
		case a.TMS > b.TMS:
			return 1
		}
		return 0
	})
	return out, bad
}

type seriesSummary struct {
	span                time.Duration
	iters               int
	medianIter, p90Iter float64
	firstStep, lastStep int64
	peakRSS, peakGPU    int64
}

func summarize(pts []report.SeriesPoint) seriesSummary {
	var s seriesSummary
	s.span = time.Duration(pts[len(pts)-1].TMS-pts[0].TMS) * time.Millisecond
	var iters []float64
	s.firstStep = -1
	for _, p := range pts {
		if p.IterMS > 0 {
			iters = append(iters, p.IterMS)
			if s.firstStep < 0 {
				s.firstStep = p.Step
			}
			s.lastStep = p.Step
		}
		s.peakRSS = max(s.peakRSS, p.RSS)
		s.peakGPU = max(s.peakGPU, p.GPU)
	}
	s.iters = len(iters)
	if len(iters) > 0 {
		slices.Sort(iters)
		s.medianIter = iters[len(iters)/2]
		s.p90Iter = iters[min(len(iters)-1, len(iters)*9/10)]
	}
	return s
}

// writePlot draws two stacked panels over minutes since the first point:
// iteration time, and RSS and GPU memory. Partition changes from the
// status history are marked on both.
func writePlot(path, lineage string, pts []report.SeriesPoint, st *report.JobStatus, w, h vg.Length) error {
	t0 := pts[0].TMS
	minutes := func(ms int64) float64 { return float64(ms-t0) / 60000 }
	var iterXY, rssXY, gpuXY, lossXY plotter.XYs
	for _, p := range pts {
		x := minutes(p.TMS)
		if p.Loss != nil {
			lossXY = append(lossXY, plotter.XY{X: x, Y: *p.Loss})
		}
		if p.IterMS > 0 {
			iterXY = append(iterXY, plotter.XY{X: x, Y: p.IterMS})
		}
		if p.RSS > 0 {
			rssXY = append(rssXY, plotter.XY{X: x, Y: float64(p.RSS) / (1 << 30)})
		}
		if p.GPU > 0 {
			gpuXY = append(gpuXY, plotter.XY{X: x, Y: float64(p.GPU) / (1 << 30)})
		}
	}
	top, err := iterPanel(lineage, iterXY)
	if err != nil {
		return err
	}
	bottom, err := memoryPanel(rssXY, gpuXY)
	if err != nil {
		return err
	}
	panels := []*plot.Plot{top, bottom}
	if len(lossXY) > 0 {
		lp, err := lossPanel(lossXY)
		if err != nil {
			return err
		}
		panels = append(panels, lp)
	}
	span := minutes(pts[len(pts)-1].TMS)
	for _, p := range panels {
		p.Legend.Top, p.Legend.Left = true, true
		p.X.Min, p.X.Max = 0, max(span, 1.0/60) // one time axis for every panel
	}
	top.Y.Min, bottom.Y.Min = 0, 0 // times and memory read best from zero; a loss as it is
	if st != nil {
		for i, sp := range st.History {
			if i == 0 || sp.StartMS <= t0 {
				continue
			}
			x, label := minutes(sp.StartMS), "→ "+sp.Partition
			if sp.Partition == st.History[i-1].Partition {
				label = "again on " + sp.Partition // a new attempt in the same place (continued, requeued)
			}
			for _, p := range panels {
				mark(p, x, label)
			}
		}
	}
	return savePanels(path, panels, w, h)
}

// lossPanel is the third panel, when the loop reports a loss.
func lossPanel(xy plotter.XYs) (*plot.Plot, error) {
	p := plot.New()
	p.Title.Text = "loss (as the training loop reports it)"
	p.Y.Label.Text = "loss"
	p.X.Label.Text = "minutes since the first sample"
	p.Add(plotter.NewGrid())
	l, err := plotter.NewLine(xy)
	if err != nil {
		return nil, err
	}
	l.LineStyle.Color = color.RGBA{R: 148, G: 103, B: 189, A: 255}
	l.LineStyle.Width = vg.Points(1.5)
	p.Add(l)
	p.Legend.Add("loss", l)
	return p, nil
}

// iterPanel is the top panel: iteration times.
func iterPanel(lineage string, xy plotter.XYs) (*plot.Plot, error) {
	top := plot.New()
	top.Title.Text = "isched " + lineage + ": iteration time"
	top.Y.Label.Text = "ms per iteration"
	top.X.Label.Text = "minutes since the first sample"
	top.Add(plotter.NewGrid())
	if len(xy) == 0 {
		top.Title.Text += " (no iterations recorded)"
		return top, nil
	}
	s, err := plotter.NewScatter(xy)
	if err != nil {
		return nil, err
	}
	s.GlyphStyle.Radius = vg.Points(1.5)
	s.GlyphStyle.Color = color.RGBA{R: 31, G: 119, B: 180, A: 255}
	top.Add(s)
	top.Legend.Add("iteration", s)
	return top, nil
}

// memoryPanel is the bottom panel: host RSS and GPU memory.
func memoryPanel(rssXY, gpuXY plotter.XYs) (*plot.Plot, error) {
	bottom := plot.New()
	bottom.Title.Text = "memory"
	bottom.Y.Label.Text = "GiB"
	bottom.X.Label.Text = "minutes since the first sample"
	bottom.Add(plotter.NewGrid())
	for _, s := range []struct {
		name string
		xy   plotter.XYs
		c    color.RGBA
	}{{"RSS (host)", rssXY, color.RGBA{R: 214, G: 39, B: 40, A: 255}}, {"GPU", gpuXY, color.RGBA{R: 44, G: 160, B: 44, A: 255}}} {
		if len(s.xy) == 0 {
			continue
		}
		l, err := plotter.NewLine(s.xy)
		if err != nil {
			return nil, err
		}
		l.LineStyle.Color = s.c
		l.LineStyle.Width = vg.Points(1.5)
		bottom.Add(l)
		bottom.Legend.Add(s.name, l)
	}
	return bottom, nil
}

// savePanels draws the panels stacked, as SVG or PNG by path's extension,
// into path (through a temporary file, renamed).
func savePanels(path string, panels []*plot.Plot, w, h vg.Length) error {
	var c interface {
		vg.CanvasSizer
		io.WriterTo
	}
	switch strings.ToLower(filepath.Ext(path)) {
	case ".svg":
		c = vgsvg.New(w, h)
	default:
		c = vgimg.PngCanvas{Canvas: vgimg.New(w, h)}
	}
	dc := draw.New(c)
	tiles := draw.Tiles{Rows: len(panels), Cols: 1, PadX: vg.Millimeter * 4, PadY: vg.Millimeter * 4, PadTop: vg.Millimeter * 2,
		PadBottom: vg.Millimeter * 2, PadLeft: vg.Millimeter * 2, PadRight: vg.Millimeter * 4}
	plots := make([][]*plot.Plot, len(panels))
	for i, p := range panels {
		plots[i] = []*plot.Plot{p}
	}
	canvases := plot.Align(plots, tiles, dc)
	for i, p := range panels {
		p.Draw(canvases[i][0])
	}
	err := atomicfile.Write(path, 0o644, func(w io.Writer) error {
		_, err := c.WriteTo(w)
		return err
	})
	if err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	return nil
}

// mark draws a dashed vertical line at x with its label: the partition the
// job moved to, or a new attempt on the same one.
func mark(p *plot.Plot, x float64, label string) {
	ymin, ymax := p.Y.Min, p.Y.Max
	if math.IsInf(ymin, 0) || math.IsInf(ymax, 0) || ymax <= ymin {
		ymin, ymax = 0, 1
	}
	l, err := plotter.NewLine(plotter.XYs{{X: x, Y: ymin}, {X: x, Y: ymax}})
	if err != nil {
		return
	}
	l.LineStyle.Dashes = []vg.Length{vg.Points(4), vg.Points(3)}
	l.LineStyle.Color = color.Gray{Y: 90}
	p.Add(l)
	if lb, err := plotter.NewLabels(plotter.XYLabels{XYs: []plotter.XY{{X: x, Y: ymax}}, Labels: []string{clean(label)}}); err == nil {
		p.Add(lb)
	}
}
