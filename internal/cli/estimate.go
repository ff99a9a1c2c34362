package cli

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"

	"github.com/isched/isched/internal/plan"
	"github.com/spf13/pflag"
)

// estimateCmd is `isched estimate`: the estimate's rows for each batch
// size and node type.
type estimateCmd struct {
	app             *App
	in              inputs
	asJSON, explain bool
}

func (c *estimateCmd) leaf() leaf {
	return leaf{
		use:   "estimate --model model.json --samples N --epochs E --batch 8,16,32 [flags]",
		short: "memory, hours, cost and where the numbers come from, per batch size and node type",
		flags: func(fs *pflag.FlagSet) {
			c.in.register(fs, "batch sizes to compare, e.g. 8,16,32,64")
			c.in.registerQOS(fs)
			fs.BoolVar(&c.asJSON, "json", false, "print the rows as JSON")
			fs.BoolVar(&c.explain, "explain", false, "also print the static memory breakdown of every row")
		},
		run: c.run, args: noArgs,
	}
}

func (c *estimateCmd) run(ctx context.Context, pos []string) error {
	a := c.app
	if len(pos) > 0 {
		return usageErr("unexpected arguments %q", pos)
	}
	l, err := a.load(ctx, &c.in, true)
	if err != nil {
		return err
	}
	if c.asJSON {
		return writeJSON(a.stdout, l.jsonRows())
	}
	writeEstimate(a.stdout, l, c.explain)
	return nil
}

// header describes the inputs of a table.
func (l *loaded) header(w io.Writer) {
	m := l.model
	fmt.Fprintf(w, "model:    %s (%s): %s parameters, %s FLOP/sample forward, %s activations/sample\n",
		clean(m.Name), m.Fingerprint(), human(float64(m.Parameters)), human(float64(m.FLOPsPerSample)), plan.FormatBytes(m.ActivationBytesPerSample))
	fmt.Fprintf(w, "training: %d samples x %d epochs, optimizer %s, precision %s\n",
		l.req.Samples, l.req.Epochs, l.req.Training.Optimizer, l.req.Training.Precision)
	fmt.Fprintf(w, "site:     %s (%s); receipts: %s\n", clean(l.site.Name), l.sitePath, l.receiptsSrc)
	fmt.Fprintf(w, "cluster:  %s\n", l.view.source)
	if l.envNote != "" {
		fmt.Fprintf(w, "python:   %s\n", l.envNote)
	}
}

// human prints a count with an SI prefix: 25.6 M, 8.18 G.
func human(v float64) string {
	for _, u := range []struct {
		f float64
		s string
	}{{1e15, "P"}, {1e12, "T"}, {1e9, "G"}, {1e6, "M"}, {1e3, "k"}} {
		if v >= u.f {
			return strconv.FormatFloat(v/u.f, 'g', 3, 64) + " " + u.s
		}
	}
	return strconv.FormatFloat(v, 'g', 3, 64)
}

func memKind(nt *plan.NodeType) string {
	if nt.DeviceMemory() {
		return "GPU"
	}
	return "RSS"
}

func (l *loaded) cost(v float64) string {
	s := fmt.Sprintf("%.2f", v)
	if l.site.Currency != "" {
		s += " " + clean(l.site.Currency)
	}
	return s
}

func writeEstimate(w io.Writer, l *loaded, explain bool) {
	l.header(w)
	fmt.Fprintln(w)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "BATCH\tNODE TYPE\tPEAK MEMORY\tLIMIT\tFITS\tHOURS\tPARTITIONS\tIDLE NOW\tCOST\tSOURCE")
	var m estimateMarks
	for i := range l.rows {
		r := &l.rows[i]
		name := r.NodeType.Name
		if r.NodeType.Emulated {
			name += "†"
			m.emulated = true
		}
		fits := "yes"
		if !r.Fits {
			fits = "NO"
		}
		hours, parts, idle, cost := "-", "-", "-", "-"
		if r.Fits {
			hours, cost = m.hours(r), l.cost(r.Cost)
			parts, idle = m.partitions(l, r)
		}
		fmt.Fprintf(tw, "%d\t%s\t%s %s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", r.Batch, name, plan.FormatBytes(r.Mem), memKind(r.NodeType),
			plan.FormatBytes(r.MemCap), fits, hours, parts, idle, cost, r.Source)
		m.note(r)
	}
	tw.Flush()
	fmt.Fprintln(w)
	m.legend(w, l.site)
	if explain {
		writeExplain(w, l)
	}
}

// estimateMarks are what the rows of an estimate's table marked, for the
// legend under it.
type estimateMarks struct {
	chunked, emulated  bool
	notes, staticNotes []string
	unmeasured         []string // node types whose time is assumed
}

// hours is a fitting row's HOURS cell: "?" marks an unmeasured time.
func (m *estimateMarks) hours(r *plan.Row) string {
	h := fmt.Sprintf("%.2f", r.Hours)
	if r.TimeUnmeasured {
		h += "?"
		if !slices.Contains(m.unmeasured, r.NodeType.Name) {
			m.unmeasured = append(m.unmeasured, r.NodeType.Name)
		}
	}
	return h
}

// partitions are a fitting row's PARTITIONS and IDLE NOW cells: "*"
// marks a partition whose time limit splits the run.
func (m *estimateMarks) partitions(l *loaded, r *plan.Row) (parts, idle string) {
	parts, idle = "-", "-"
	var ps, idles []string
	unknown := false
	for _, f := range r.Feasible() {
		n := f.Partition.Name
		if f.Chunks > 1 {
			n += "*"
			m.chunked = true
		}
		ps = append(ps, n)
		wt := l.wait(f.Partition, r.NodeType)
		switch {
		case wt.IdleNow:
			idles = append(idles, f.Partition.Name)
		case !wt.Known:
			unknown = true
		}
	}
	if len(ps) > 0 {
		parts = strings.Join(ps, ",")
	}
	switch {
	case len(idles) > 0:
		idle = strings.Join(idles, ",")
	case unknown:
		idle = "?"
	case len(ps) > 0:
		idle = "no"
	}
	return parts, idle
}

// note keeps what the legend says of a row: how a measured or scaled row
// was derived, the band of a static one.
func (m *estimateMarks) note(r *plan.Row) {
	nt := r.NodeType
	if r.Source != plan.Static {
		m.notes = append(m.notes, fmt.Sprintf("  batch %d on %s (%s, %s): %s%s%s", r.Batch, nt.Name, r.Source, whoseText(r.Whose), r.Basis, marginText(r), bandText(r)))
	} else if r.MemBand.Width() > 0 || r.IterBand.Width() > 0 {
		m.staticNotes = append(m.staticNotes, fmt.Sprintf("  batch %d on %s%s", r.Batch, nt.Name, bandText(r)))
	}
}

// legend explains the table's marks and sources.
func (m *estimateMarks) legend(w io.Writer, site *plan.Site) {
	if m.chunked {
		fmt.Fprintln(w, "* longer than the partition's time limit: it continues from checkpoints across attempts")
	}
	if m.emulated {
		fmt.Fprintln(w, "† emulated GPUs (GRES on fake devices): jobs there compute on the CPU; the memory that must fit is host RSS")
	}
	if len(m.unmeasured) > 0 {
		fmt.Fprintf(w, "? time unmeasured on %s: no probe record of the node type, so hours and cost rest on assumed framework costs and peak FLOPS "+
			"(off by up to 40x on the bench-predict grid); `isched site probe --partition P` measures it once for everyone\n", strings.Join(m.unmeasured, ","))
	}
	fmt.Fprintln(w, "source: static = model summary and catalogue only; measured = receipts of this model, set-up, batch and node type;")
	fmt.Fprintln(w, "        scaled = receipts of another batch size (linear fit) or node type (relative throughput);")
	fmt.Fprintln(w, "        profiled = your isched profile receipts only (at this batch, or fitted over the profiled batches)")
	writeStaticBasis(w, site)
	if len(m.staticNotes) > 0 {
		fmt.Fprintln(w, "static rows: the range real / static took on the calibration grids, CPU trainings (docs/model-summary.md) and recorded GPU ones (docs/gpu-check.md); a GPU row must fit at its band's top:")
		for _, n := range m.staticNotes {
			fmt.Fprintln(w, n)
		}
	}
	if len(m.notes) > 0 {
		fmt.Fprintln(w, "how the measured and scaled rows were derived:")
		for _, n := range m.notes {
			fmt.Fprintln(w, n)
		}
	}
}

// writeExplain prints the static memory breakdown of every row.
func writeExplain(w io.Writer, l *loaded) {
	fmt.Fprintln(w, "static memory breakdown:")
	for i := range l.rows {
		r := &l.rows[i]
		s := r.Static
		over := overheadLabel(l.site, r.NodeType)
		if r.NodeType.DeviceMemory() {
			over = "CUDA context"
		}
		fmt.Fprintf(w, "  batch %d on %s: weights %s + gradients %s + optimizer %s + activations %s + %s %s = %s\n",
			r.Batch, r.NodeType.Name, plan.FormatBytes(s.Weights), plan.FormatBytes(s.Gradients), plan.FormatBytes(s.Optimizer),
			plan.FormatBytes(s.Activations), over, plan.FormatBytes(s.Overhead), plan.FormatBytes(s.Total()))
	}
}

// whoseText says whose runs a row rests on.
func whoseText(w plan.Whose) string {
	if w == plan.WhosePooled {
		return "other users' runs"
	}
	return "your runs"
}

// marginText says what a row made of receipts adds to its memory so that
// it is not under the truth (plan.Curve.Margin).
func marginText(r *plan.Row) string {
	if r.MemMargin <= 0 {
		return ""
	}
	pred := r.Mem - r.MemMargin
	return fmt.Sprintf("; memory %s + margin %s (%.1f %%: peaks vary %.1f %% between runs, more the further from the measured batch sizes)",
		plan.FormatBytes(pred), plan.FormatBytes(r.MemMargin), 100*float64(r.MemMargin)/float64(max(pred, 1)), 100*r.MemSD)
}

// overheadLabel names what a host-memory node type's fixed part rests on.
func overheadLabel(s *plan.Site, nt *plan.NodeType) string {
	n, probed := s.FrameworkBytes(nt)
	switch {
	case !probed:
		return "Python+torch (assumed)"
	case s.Environment() != nil && s.Environment().Bytes() == n:
		return "Python+torch+imports (your environment's footprint record)"
	}
	return "Python+torch (probed)"
}

// bandText says the row's measured bands.
func bandText(r *plan.Row) string {
	var parts []string
	if b := r.MemBand; b.Width() > 0 {
		parts = append(parts, fmt.Sprintf("memory %s–%s", plan.FormatBytes(int64(b.Low)), plan.FormatBytes(int64(b.High))))
	}
	if b := r.HoursBand(); b.Width() > 0 {
		parts = append(parts, fmt.Sprintf("hours %.3g–%.3g", b.Low, b.High))
	}
	if len(parts) == 0 {
		return "; no spread measured (one receipt per batch size)"
	}
	return "; band: " + strings.Join(parts, ", ")
}

// jsonBand is a measured or calibrated range; absent for a figure nothing
// calibrated (a static row of an emulated GPU).
type jsonBand struct {
	Low  float64 `json:"low"`
	High float64 `json:"high"`
}

// byteBand is a band of bytes in whole bytes, widened to them (issue 43:
// "5258209983.360001" bytes).
func byteBand(b *jsonBand) *jsonBand {
	if b == nil {
		return nil
	}
	return &jsonBand{Low: math.Floor(b.Low), High: math.Ceil(b.High)}
}

// bandOf is b times unit (3600: a band of hours in seconds); nil for none.
func bandOf(b plan.Band, unit float64) *jsonBand {
	if b.High <= 0 {
		return nil
	}
	return &jsonBand{Low: b.Low * unit, High: b.High * unit}
}

// writeStaticBasis says what the static rows rest on: a probe record of the
// node type (isched site probe), or assumptions.
func writeStaticBasis(w io.Writer, s *plan.Site) {
	var assumed []string
	for i := range s.NodeTypes {
		nt := &s.NodeTypes[i]
		if s.Probe(nt) != nil {
			fmt.Fprintf(w, "static model on %s: %s\n", nt.Name, s.StaticBasis(nt))
		} else {
			assumed = append(assumed, nt.Name)
		}
	}
	if len(assumed) > 0 {
		fmt.Fprintf(w, "static model on %s: assumed (framework %s, peak FLOPS x efficiency for every layer; isched site probe measures a node type)\n",
			strings.Join(assumed, ","), plan.FormatBytes(plan.CPUFrameworkBytes))
	}
	if env := s.Environment(); env != nil {
		fmt.Fprintf(w, "framework part on CPU memory: your environment's %s (python: above) where larger than the node type's\n", plan.FormatBytes(env.Bytes()))
	}
}

type jsonPartition struct {
	Name    string `json:"name"`
	OK      bool   `json:"ok"`
	Chunks  int    `json:"chunks,omitempty"`
	Why     string `json:"why,omitempty"`
	IdleNow *bool  `json:"idle_now,omitempty"` // nil: unknown
}

type jsonRow struct {
	Batch       int    `json:"batch"`
	NodeType    string `json:"node_type"`
	MemoryBytes int64  `json:"memory_bytes"`
	MemoryKind  string `json:"memory_kind"` // "device" or "host"
	// MarginBytes: what memory_bytes adds to the receipts' prediction so
	// that it is not under the truth; MarginSD the relative run-to-run
	// spread of a peak it rests on (plan.Row.MemMargin, MemSD)
	MarginBytes int64       `json:"memory_margin_bytes,omitempty"`
	MarginSD    float64     `json:"memory_margin_sd,omitempty"`
	LimitBytes  int64       `json:"limit_bytes"`
	Fits        bool        `json:"fits"`
	HostBytes   int64       `json:"host_memory_bytes"`
	IterSeconds float64     `json:"iter_s"`
	Iterations  int64       `json:"iterations"`
	RunS        float64     `json:"run_s"` // the run: iterations x iter_s
	Cost        float64     `json:"cost"`
	Source      plan.Source `json:"source"`
	// Whose: "own" (the user's runs, first) or "pooled" (other users'
	// Slurm-confirmed ones); absent on a static row
	Whose plan.Whose `json:"receipts_of,omitempty"`
	Basis string     `json:"basis,omitempty"`
	// bands from the receipts' spread (plan.Curve); on a static CPU row
	// the bench-predict grid's calibration (plan.StaticBand); absent on
	// other static rows
	MemoryBand *jsonBand `json:"memory_band_bytes,omitempty"`
	IterBand   *jsonBand `json:"iter_band_s,omitempty"`
	// TimeUnmeasured: a static row on a node type no probe record measured
	// (isched site probe): its time is an assumption, with no band
	TimeUnmeasured bool            `json:"time_unmeasured,omitempty"`
	RunBand        *jsonBand       `json:"run_band_s,omitempty"`
	Static         plan.Memory     `json:"static_memory"`
	Partitions     []jsonPartition `json:"partitions"`
}

func (l *loaded) jsonRows() []jsonRow {
	out := []jsonRow{}
	for i := range l.rows {
		r := &l.rows[i]
		kind := "host"
		if r.NodeType.DeviceMemory() {
			kind = "device"
		}
		jr := jsonRow{Batch: r.Batch, NodeType: r.NodeType.Name, MemoryBytes: r.Mem, MemoryKind: kind, LimitBytes: r.MemCap,
			MarginBytes: r.MemMargin, MarginSD: r.MemSD,
			Fits: r.Fits, HostBytes: r.HostMem, IterSeconds: r.IterSeconds, Iterations: r.Iters, RunS: r.Hours * 3600, Cost: r.Cost,
			Source: r.Source, Whose: r.Whose, Basis: r.Basis, Static: r.Static, Partitions: []jsonPartition{},
			MemoryBand: byteBand(bandOf(r.MemBand, 1)), IterBand: bandOf(r.IterBand, 1), RunBand: bandOf(r.HoursBand(), 3600),
			TimeUnmeasured: r.TimeUnmeasured}
		for _, f := range r.Partitions {
			jp := jsonPartition{Name: f.Partition.Name, OK: f.OK, Why: f.Why}
			if f.Chunks > 1 {
				jp.Chunks = f.Chunks
			}
			if wt := l.wait(f.Partition, r.NodeType); wt.Known {
				idle := wt.IdleNow
				jp.IdleNow = &idle
			}
			jr.Partitions = append(jr.Partitions, jp)
		}
		out = append(out, jr)
	}
	return out
}

func writeJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return errors.New("encode JSON: " + err.Error())
	}
	return nil
}
