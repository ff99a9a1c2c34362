package plan

import (
	"cmp"
	"errors"
	"fmt"
	"io/fs"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
)

// ProbeVersion is the probe record format version this package reads.
const ProbeVersion = 1

// Kinds of work the probe measures a training throughput for. The model
// summary's flops_by_kind uses the first three; elementwise (normalisation
// and activations, memory-bound) is measured in bytes of forward
// activations per second.
const (
	WorkConv        = "conv"
	WorkDepthwise   = "depthwise"
	WorkLinear      = "linear"
	WorkElementwise = "elementwise"
	WorkOptimizer   = "optimizer"
)

// flopKinds are the kinds whose throughput is in FLOP/s.
var flopKinds = []string{WorkConv, WorkDepthwise, WorkLinear}

// Probe is what `isched site probe` (scripts/site_probe.py) measured on one
// node type: the framework's own memory and the achieved training
// throughput of each kind of layer (docs/model-summary.md).
type Probe struct {
	V           int     `json:"v"`
	NodeType    string  `json:"node_type"`
	Host        string  `json:"host"`
	MeasuredAt  string  `json:"measured_at"`
	Framework   string  `json:"framework"`
	Python      string  `json:"python"`
	Threads     int     `json:"threads"`
	LoadAverage float64 `json:"load_average"`
	// ImportRSS is a fresh Python's RSS after importing torch (and
	// torchvision); RuntimeRSS the peak RSS of one that then trained a tiny
	// reference network for three steps: the framework's footprint
	// besides the model's tensors, pooled over the reference networks.
	ImportRSS  ByteStat `json:"import_rss_bytes"`
	RuntimeRSS ByteStat `json:"runtime_rss_bytes"`
	// RuntimeReferences is RuntimeRSS per reference network ("wide",
	// "residual"); optional (records of one reference network lack it).
	RuntimeReferences map[string]ByteStat `json:"runtime_references,omitempty"`
	Throughput        map[string]RateStat `json:"throughput"`
	// ReferenceStep is the time of whole training steps of a reference
	// network; optional (records made before it, or without
	// model_summary.py beside the probe, lack it). See StepFactor.
	ReferenceStep *ReferenceStep `json:"reference_step,omitempty"`
}

// ReferenceStep is the time of whole training steps (forward, backward,
// SGD with momentum) of one of the probe's reference networks at one batch,
// in seconds over repeats, with the network's model summary.
type ReferenceStep struct {
	Network string   `json:"network"`
	Batch   int      `json:"batch"`
	Seconds RateStat `json:"seconds"`
	Summary *Model   `json:"summary"`
}

// ByteStat is a measured size over repeats.
type ByteStat struct {
	Median  int64 `json:"median"`
	Min     int64 `json:"min"`
	Max     int64 `json:"max"`
	Repeats int   `json:"repeats"`
}

// RateStat is a measured rate over repeats and sizes: FLOP/s, or bytes/s
// for elementwise.
type RateStat struct {
	Median  float64 `json:"median"`
	Min     float64 `json:"min"`
	Max     float64 `json:"max"`
	Repeats int     `json:"repeats"`
}

// DecodeProbe reads a probe record strictly (see DecodeModel).
func DecodeProbe(b []byte) (*Probe, error) {
	var p Probe
	if err := decodeChecked(b, &p, "v", "node_type", "threads", "import_rss_bytes", "runtime_rss_bytes", "throughput"); err != nil {
		return nil, err
	}
	return &p, nil
}

// Validate checks a probe record's values.
func (p *Probe) Validate() error {
	if err := firstBad([]fieldCheck{
		{p.V != ProbeVersion, "v", "want %d (this build reads probe record version %d), got %d", []any{ProbeVersion, ProbeVersion, p.V}},
		{!validName(p.NodeType), "node_type", "want 1-64 of [A-Za-z0-9._-], got %q", []any{p.NodeType}},
		{!printable(p.Host, 256), "host", "want up to 256 printable characters", nil},
		{!printable(p.MeasuredAt, 64), "measured_at", "want up to 64 printable characters", nil},
		{!printable(p.Framework, 128), "framework", "want up to 128 printable characters", nil},
		{!printable(p.Python, 64), "python", "want up to 64 printable characters", nil},
		{p.Threads <= 0, "threads", "must be positive, got %d", []any{p.Threads}},
		{!finiteNonNeg(p.LoadAverage), "load_average", "must be a non-negative number", nil},
	}); err != nil {
		return err
	}
	if err := p.validateRSS(); err != nil {
		return err
	}
	if err := p.ReferenceStep.validate(); err != nil {
		return err
	}
	return p.validateThroughput()
}

// validateRSS checks the memory footprints: import, runtime and the
// runtime's references, which runtime pools.
func (p *Probe) validateRSS() error {
	stats := map[string]ByteStat{"import_rss_bytes": p.ImportRSS, "runtime_rss_bytes": p.RuntimeRSS}
	for ref, s := range p.RuntimeReferences {
		f := joinField("runtime_references", ref)
		if !validName(ref) {
			return fieldErr(f, "want a name of 1-64 of [A-Za-z0-9._-]")
		}
		if s.Max > p.RuntimeRSS.Max || s.Min < p.RuntimeRSS.Min {
			return fieldErr(f, "%d..%d lies outside runtime_rss_bytes %d..%d, which pools the references", s.Min, s.Max, p.RuntimeRSS.Min, p.RuntimeRSS.Max)
		}
		stats[f] = s
	}
	for name, s := range stats {
		if s.Min <= 0 || s.Median < s.Min || s.Max < s.Median || s.Repeats <= 0 {
			return fieldErr(name, "want 0 < min <= median <= max and repeats > 0, got %d <= %d <= %d, %d repeats", s.Min, s.Median, s.Max, s.Repeats)
		}
		if s.Max > 1<<40 {
			return fieldErr(name+".max", "%d bytes is not a framework footprint", s.Max)
		}
	}
	if p.RuntimeRSS.Median < p.ImportRSS.Median {
		return fieldErr("runtime_rss_bytes.median", "%d is below import_rss_bytes.median %d: training cannot need less than the import", p.RuntimeRSS.Median, p.ImportRSS.Median)
	}
	return nil
}

// validateThroughput checks the measured rates: conv is required, every
// kind known, every rate finite and ordered.
func (p *Probe) validateThroughput() error {
	kinds := append(slices.Clone(flopKinds), WorkElementwise, WorkOptimizer)
	if _, ok := p.Throughput[WorkConv]; !ok {
		return fieldErr("throughput.conv", "required field missing")
	}
	for k, r := range p.Throughput {
		f := joinField("throughput", k)
		if !slices.Contains(kinds, k) {
			return fieldErr(f, "unknown kind (want %s)", strings.Join(kinds, ", "))
		}
		if !(r.Min > 0) || math.IsInf(r.Max, 0) || r.Median < r.Min || r.Max < r.Median || r.Repeats <= 0 {
			return fieldErr(f, "want finite rates 0 < min <= median <= max and repeats > 0")
		}
	}
	return nil
}

// validate checks a reference step (nil: none, valid).
func (r *ReferenceStep) validate() error {
	if r == nil {
		return nil
	}
	sec := r.Seconds
	switch {
	case !validName(r.Network):
		return fieldErr("reference_step.network", "want 1-64 of [A-Za-z0-9._-], got %q", r.Network)
	case r.Batch <= 0 || r.Batch > 1<<16:
		return fieldErr("reference_step.batch", "want 1 to 65536, got %d", r.Batch)
	case !(sec.Min > 0) || !(sec.Max <= 3600) || sec.Median < sec.Min || sec.Max < sec.Median || sec.Repeats <= 0:
		return fieldErr("reference_step.seconds", "want 0 < min <= median <= max <= 3600 s and repeats > 0")
	case r.Summary == nil:
		return fieldErr("reference_step.summary", "required field missing")
	}
	if err := r.Summary.Validate(); err != nil {
		var fe *FieldError
		if errors.As(err, &fe) {
			return fieldErr(joinField("reference_step.summary", fe.Field), "%s", fe.Reason)
		}
		return fmt.Errorf("reference_step.summary: %w", err)
	}
	if r.Summary.FLOPsPerSample <= 0 {
		return fieldErr("reference_step.summary.flops_per_sample", "the reference network must do work, got %d", r.Summary.FLOPsPerSample)
	}
	return nil
}

// StepFactor is how much longer the probe's reference network took per
// whole training step than the per-kind rates add up to for it (the time
// they leave out: the autograd graph, allocation, Python, the loss), at
// least 1: it scales the probed static time up, never down. 1 without a
// reference step. The reference is one network at one batch; the factor
// is applied to every model and batch (docs/model-summary.md).
func (p *Probe) StepFactor() float64 {
	r := p.ReferenceStep
	if r == nil || r.Summary == nil {
		return 1
	}
	pred, ok := p.kindSeconds(r.Summary, Training{Optimizer: "momentum", Precision: PrecFP32}, r.Batch)
	if !ok || !(pred > 0) {
		return 1
	}
	return max(1, r.Seconds.Median/pred)
}

// rate is the probe's median rate of a kind, 0 when it was not measured.
func (p *Probe) rate(kind string) float64 { return p.Throughput[kind].Median }

// ProbePath is where the probe record of a node type lives: probes/
// beside the site catalogue, one file per node type.
func ProbePath(siteDir, nodeType string) string {
	return filepath.Join(siteDir, "probes", nodeType+".json")
}

// LoadProbes reads the probe record of every node type that has one under
// siteDir/probes (a missing file is no probe; a bad one is an error).
func (s *Site) LoadProbes(siteDir string) error {
	for i := range s.NodeTypes {
		nt := &s.NodeTypes[i]
		path := ProbePath(siteDir, nt.Name)
		b, err := os.ReadFile(path)
		if errors.Is(err, fs.ErrNotExist) {
			continue
		}
		if err != nil {
			return fmt.Errorf("probe record: %w", err)
		}
		p, err := DecodeProbe(b)
		if err != nil {
			return fmt.Errorf("probe record %s: %w", path, err)
		}
		if p.NodeType != nt.Name {
			return fmt.Errorf("probe record %s: %w", path, fieldErr("node_type", "%q, but the file is node type %s's", p.NodeType, nt.Name))
		}
		if err := s.SetProbe(p); err != nil {
			return fmt.Errorf("probe record %s: %w", path, err)
		}
	}
	return nil
}

// SetProbe attaches a probe record to its node type.
func (s *Site) SetProbe(p *Probe) error {
	if s.NodeType(p.NodeType) == nil {
		return fieldErr("node_type", "%q is not a node type of site %s", p.NodeType, s.Name)
	}
	if s.probes == nil {
		s.probes = map[string]*Probe{}
	}
	s.probes[p.NodeType] = p
	return nil
}

// Probe returns the node type's probe record, or nil.
func (s *Site) Probe(nt *NodeType) *Probe {
	if s == nil || nt == nil {
		return nil
	}
	return s.probes[nt.Name]
}

// FrameworkBytes is the host RSS of the framework on nt, besides the
// model's tensors: the largest runtime footprint its probe measured on any
// reference network plus the repeat spread (Probe.RepeatSpread), else the
// assumed CPUFrameworkBytes; raised to the user's environment's footprint
// where that is larger (UseEnvironment). probed says whether a
// measurement (a probe or footprint record) gave it.
//
// The largest, and not the median, because a static estimate must not
// under-promise; the spread on top because a training process is one more
// draw of the same noise, which the probe's few repeats may not have
// caught at its worst (docs/model-summary.md, "the probe").
func (s *Site) FrameworkBytes(nt *NodeType) (n int64, probed bool) {
	n = CPUFrameworkBytes
	if p := s.Probe(nt); p != nil {
		n, probed = p.RuntimeRSS.Max+p.RepeatSpread(), true
	}
	if s.env != nil && s.env.Bytes() > n {
		n, probed = s.env.Bytes(), true
	}
	return n, probed
}

// RepeatSpread is how much the runtime footprint varied between repeats
// of the same reference network: the largest max - min over the reference
// networks, or over runtime_rss_bytes when the record has no per-reference
// figures (one reference network). The spread between different reference
// networks is not noise and does not count.
func (p *Probe) RepeatSpread() int64 {
	if len(p.RuntimeReferences) == 0 {
		return p.RuntimeRSS.Max - p.RuntimeRSS.Min
	}
	var spread int64
	for _, s := range p.RuntimeReferences {
		spread = max(spread, s.Max-s.Min)
	}
	return spread
}

// StaticBasis says in words what the static model of nt rests on.
func (s *Site) StaticBasis(nt *NodeType) string {
	p := s.Probe(nt)
	if p == nil {
		return fmt.Sprintf("assumed: framework %s, %s (no probe: isched site probe)", FormatBytes(CPUFrameworkBytes), "peak FLOPS x efficiency for every layer")
	}
	kinds := make([]string, 0, len(p.Throughput))
	for _, k := range append(slices.Clone(flopKinds), WorkElementwise, WorkOptimizer) {
		if r, ok := p.Throughput[k]; ok {
			unit := "GFLOP/s"
			if k == WorkElementwise || k == WorkOptimizer {
				unit = "GB/s"
			}
			kinds = append(kinds, fmt.Sprintf("%s %.1f %s", k, r.Median/1e9, unit))
		}
	}
	step := ""
	if r := p.ReferenceStep; r != nil {
		f := p.StepFactor()
		step = fmt.Sprintf("; whole step x%.2f (the %s reference at batch %d: %.0f ms a step against %.0f ms from these rates)",
			f, r.Network, r.Batch, 1000*r.Seconds.Median, 1000*r.Seconds.Median/f)
		if f == 1 {
			step = fmt.Sprintf("; whole step x1 (the %s reference at batch %d ran at these rates)", r.Network, r.Batch)
		}
	}
	return fmt.Sprintf("probed %s on %s (%d threads): framework %s (largest %s + repeat spread %s), %s%s", p.MeasuredAt, p.Host, p.Threads,
		FormatBytes(p.RuntimeRSS.Max+p.RepeatSpread()), FormatBytes(p.RuntimeRSS.Max), FormatBytes(p.RepeatSpread()), strings.Join(kinds, ", "), step)
}

// probedIterSeconds is the time of one iteration from the probe: the
// per-kind time (kindSeconds) times the probe's StepFactor.
func probedIterSeconds(p *Probe, m *Model, t Training, batch int) (sec float64, ok bool) {
	sec, ok = p.kindSeconds(m, t, batch)
	if !ok {
		return 0, false
	}
	return sec * p.StepFactor(), true
}

// kindSeconds is the time of one iteration from the probe's rates:
// each kind's FLOPs x 3 (forward and a backward twice as expensive) over
// its measured rate (FLOPs the summary gives no kind count as conv; a
// kind the probe did not measure runs at the conv rate), plus the
// activations' bytes over the elementwise rate (normalisation and
// activations are memory-bound), times the batch; plus the optimizer
// step, the bytes of the parameters, their gradients and the optimizer
// state once per iteration at the optimizer rate (else the elementwise
// one). ok is false
// when the probe cannot model this training (half precision: the probe
// measures fp32).
func (p *Probe) kindSeconds(m *Model, t Training, batch int) (sec float64, ok bool) {
	if p == nil || t.Precision != PrecFP32 {
		return 0, false
	}
	conv := p.rate(WorkConv)
	var perSample float64
	var kinded int64
	for _, k := range flopKinds {
		f := m.FLOPsByKind[k]
		kinded += f
		r := p.rate(k)
		if r <= 0 {
			r = conv
		}
		perSample += 3 * float64(f) / r
	}
	perSample += 3 * float64(max(0, m.FLOPsPerSample-kinded)) / conv
	ew := p.rate(WorkElementwise)
	if ew > 0 {
		perSample += float64(m.ActivationBytesPerSample) / ew
	}
	step := 0.0
	if r := cmp.Or(p.rate(WorkOptimizer), ew); r > 0 {
		states := int64(2 + OptimizerStates[t.Optimizer])
		step = float64(m.TrainableParameters*int64(m.ParamBytes)*states) / r
	}
	return perSample*float64(batch) + step, true
}
