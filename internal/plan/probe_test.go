package plan

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

const validProbe = `{"v": 1, "node_type": "lab-cpu", "host": "n1", "measured_at": "2026-11-26T05:41:31Z",
 "framework": "pytorch 1.13.0", "python": "3.11.2", "threads": 2, "load_average": 0.5,
 "import_rss_bytes": {"median": 250000000, "min": 249000000, "max": 252000000, "repeats": 3},
 "runtime_rss_bytes": {"median": 268000000, "min": 267000000, "max": 270000000, "repeats": 3},
 "throughput": {"conv": {"median": 3e10, "min": 2e10, "max": 4e10, "repeats": 6},
  "depthwise": {"median": 2e9, "min": 1e9, "max": 3e9, "repeats": 6},
  "linear": {"median": 1e10, "min": 1e10, "max": 1e10, "repeats": 6},
  "elementwise": {"median": 1e9, "min": 1e9, "max": 1e9, "repeats": 6}}}`

// validProbeRefs is validProbe with the runtime footprint per reference
// network (repeat spreads 0.5 MB and 1 MB; pooled 267-270 MB).
var validProbeRefs = strings.Replace(validProbe, `"throughput":`, `"runtime_references": {
  "wide": {"median": 267200000, "min": 267000000, "max": 267500000, "repeats": 3},
  "residual": {"median": 269500000, "min": 269000000, "max": 270000000, "repeats": 3}},
 "throughput":`, 1)

// refSummary is a reference network's summary (the model of
// TestProbedIterSeconds: 3.208012 s a step at batch 8 on validProbe's
// rates).
const refSummary = `{"v": 1, "name": "residual", "framework": "pytorch 1.13.0", "parameters": 1000, "trainable_parameters": 1000,
  "param_bytes": 4, "activation_bytes_per_sample": 1000000, "flops_per_sample": 1000000000,
  "flops_by_kind": {"conv": 600000000, "depthwise": 200000000, "linear": 100000000}, "input_shape": [10], "activations_counted": "aten-outputs"}`

// withStep is validProbe with a reference step of median seconds at batch 8.
func withStep(median float64) string {
	return strings.Replace(validProbe, `"throughput":`, fmt.Sprintf(`"reference_step": {"network": "residual", "batch": 8,
  "seconds": {"median": %g, "min": %g, "max": %g, "repeats": 8}, "summary": %s},
 "throughput":`, median, median*0.9, median*1.1, refSummary), 1)
}

func TestDecodeProbe(t *testing.T) {
	t.Parallel()
	edit := func(old, new string) string {
		if !strings.Contains(validProbe, old) {
			t.Fatalf("test bug: %q not in the valid probe", old)
		}
		return strings.Replace(validProbe, old, new, 1)
	}
	editRefs := func(old, new string) string {
		if !strings.Contains(validProbeRefs, old) {
			t.Fatalf("test bug: %q not in the valid probe", old)
		}
		return strings.Replace(validProbeRefs, old, new, 1)
	}
	tests := []struct {
		name, in      string
		field, reason string // reason "" = valid
	}{
		{"valid", validProbe, "", ""},
		{"valid with references", validProbeRefs, "", ""},
		{"reference above pooled max", editRefs(`"max": 270000000, "repeats": 3}}`, `"max": 271000000, "repeats": 3}}`), "runtime_references.residual", "outside runtime_rss_bytes"},
		{"reference below pooled min", editRefs(`"min": 267000000, "max": 267500000`, `"min": 266000000, "max": 267500000`), "runtime_references.wide", "outside runtime_rss_bytes"},
		{"reference min above median", editRefs(`"median": 269500000, "min": 269000000`, `"median": 269500000, "min": 269600000`), "runtime_references.residual", "min <= median <= max"},
		{"reference name", editRefs(`"wide":`, `"wide net":`), "runtime_references.wide net", "A-Za-z0-9"},
		{"reference not a stat", editRefs(`"wide": {"median": 267200000`, `"wide": {"median": "big"`), "runtime_references.wide.median", "integer"},
		{"version", edit(`"v": 1`, `"v": 2`), "v", "want 1"},
		{"unknown field", edit(`"host"`, `"hostname"`), "hostname", "unknown field"},
		{"missing throughput", edit(`"throughput"`, `"throughput_x"`), "throughput_x", "unknown field"},
		{"missing threads", edit(`"threads": 2,`, ``), "threads", "required field missing"},
		{"zero threads", edit(`"threads": 2`, `"threads": 0`), "threads", "must be positive, got 0"},
		{"bad host", edit(`"host": "n1"`, `"host": "n\u0001"`), "host", "want up to 256 printable characters"},
		{"bad measured_at", edit(`"2026-11-26T05:41:31Z"`, `"`+strings.Repeat("t", 65)+`"`), "measured_at", "want up to 64 printable characters"},
		{"bad framework", edit(`"pytorch 1.13.0"`, `"pytorch\n"`), "framework", "want up to 128 printable characters"},
		{"bad python", edit(`"3.11.2"`, `"3.11\t"`), "python", "want up to 64 printable characters"},
		{"negative load", edit(`"load_average": 0.5`, `"load_average": -0.5`), "load_average", "must be a non-negative number"},
		{"first bad of several", edit(`"threads": 2, "load_average": 0.5`, `"threads": 0, "load_average": -1`), "threads", "must be positive"},
		{"bad node type", edit(`"lab-cpu"`, `"lab cpu"`), "node_type", "A-Za-z0-9"},
		{"fraction in bytes", edit(`"median": 250000000`, `"median": 2.5e8`), "import_rss_bytes.median", "integer"},
		{"min above median", edit(`"min": 249000000`, `"min": 251000000`), "import_rss_bytes", "min <= median <= max"},
		{"runtime below import", edit(`"median": 268000000, "min": 267000000`, `"median": 240000000, "min": 239000000`), "runtime_rss_bytes.median", "below import"},
		{"unknown kind", edit(`"linear":`, `"attention":`), "throughput.attention", "unknown kind"},
		{"conv missing", edit(`"conv":`, `"linear2":`), "throughput.conv", "required"},
		{"zero rate", edit(`"median": 2e9, "min": 1e9`, `"median": 0, "min": 0`), "throughput.depthwise", "0 < min"},
		{"string rate", edit(`"median": 3e10`, `"median": "fast"`), "throughput.conv.median", "want a number"},
		{"valid with a reference step", withStep(4), "", ""},
		{"reference step batch", strings.Replace(withStep(4), `"batch": 8`, `"batch": 0`, 1), "reference_step.batch", "want 1 to 65536"},
		{"reference step seconds", strings.Replace(withStep(4), `"min": 3.6`, `"min": 4.5`, 1), "reference_step.seconds", "min <= median"},
		{"reference step without summary", strings.Replace(withStep(4), `, "summary": `+refSummary, ``, 1), "reference_step.summary", "required"},
		{"reference step summary unknown field", strings.Replace(withStep(4), `"param_bytes": 4`, `"param_bytes": 4, "bogus": 1`, 1), "reference_step.summary.bogus", "unknown field"},
		{"reference step summary invalid", strings.Replace(withStep(4), `"name": "residual"`, `"name": ""`, 1), "reference_step.summary.name", "required"},
		{"reference step without work", strings.Replace(strings.Replace(withStep(4), `"flops_per_sample": 1000000000`, `"flops_per_sample": 0`, 1),
			`"flops_by_kind": {"conv": 600000000, "depthwise": 200000000, "linear": 100000000}, `, ``, 1), "reference_step.summary.flops_per_sample", "must do work"},
		{"trailing", validProbe + "x", "", "trailing"},
		{"truncated", validProbe[:60], "", "unexpected end"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			p, err := DecodeProbe([]byte(tt.in))
			if tt.reason == "" {
				if err != nil {
					t.Fatalf("DecodeProbe: %v", err)
				}
				if p.NodeType != "lab-cpu" || p.RuntimeRSS.Max != 270000000 || p.rate(WorkConv) != 3e10 {
					t.Fatalf("decoded %+v", p)
				}
				return
			}
			var fe *FieldError
			if !errors.As(err, &fe) || !errors.Is(err, ErrInvalid) {
				t.Fatalf("error %v (%T), want a *FieldError", err, err)
			}
			if (tt.field != "" && fe.Field != tt.field) || !strings.Contains(fe.Reason, tt.reason) {
				t.Fatalf("error field %q reason %q, want field %q reason containing %q", fe.Field, fe.Reason, tt.field, tt.reason)
			}
		})
	}
}

func mustProbe(t *testing.T, s string) *Probe {
	t.Helper()
	p, err := DecodeProbe([]byte(s))
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// TestRepeatSpread: the spread between repeats of one reference network
// counts, the difference between reference networks does not.
func TestRepeatSpread(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		name       string
		in         string
		spread, fw int64
	}{
		{"one reference network", validProbe, 3000000, 273000000},
		{"per reference", validProbeRefs, 1000000, 271000000},
	} {
		site := mustSite(t, "../../examples/site-lab.json")
		p := mustProbe(t, tt.in)
		if err := site.SetProbe(p); err != nil {
			t.Fatal(err)
		}
		if got := p.RepeatSpread(); got != tt.spread {
			t.Errorf("%s: RepeatSpread %d, want %d", tt.name, got, tt.spread)
		}
		if got, _ := site.FrameworkBytes(site.NodeType("lab-cpu")); got != tt.fw {
			t.Errorf("%s: FrameworkBytes %d, want %d", tt.name, got, tt.fw)
		}
	}
}

// TestFrameworkBytes: the probed node type takes the largest runtime RSS
// measured plus the repeat spread, the others the assumed figure; memory
// estimates follow.
func TestFrameworkBytes(t *testing.T) {
	t.Parallel()
	site := mustSite(t, "../../examples/site-lab.json")
	if err := site.SetProbe(mustProbe(t, validProbe)); err != nil {
		t.Fatal(err)
	}
	m := &Model{V: 1, Name: "m", Parameters: 1000, TrainableParameters: 1000, ParamBytes: 4,
		ActivationBytesPerSample: 1000, FLOPsPerSample: 1e6, InputShape: []int{10}}
	tr := Training{"sgd", PrecFP32}
	tests := []struct {
		nodeType string
		want     int64
		probed   bool
		overhead int64 // of StaticMemoryOn
	}{
		{"lab-cpu", 273000000, true, 273000000}, // max 270 MB + pooled spread 3 MB (no references)
		{"lab-dev", CPUFrameworkBytes, false, CPUFrameworkBytes},
		{"lab-gdev", CPUFrameworkBytes, false, CPUFrameworkBytes}, // emulated GPU: host memory, no probe
	}
	for _, tt := range tests {
		nt := site.NodeType(tt.nodeType)
		got, probed := site.FrameworkBytes(nt)
		if got != tt.want || probed != tt.probed {
			t.Errorf("%s: FrameworkBytes %d, %v; want %d, %v", tt.nodeType, got, probed, tt.want, tt.probed)
		}
		mem := site.StaticMemoryOn(m, tr, 4, nt)
		if mem.Overhead != tt.overhead || mem.Activations != StaticMemory(m, tr, 4, false).Activations {
			t.Errorf("%s: StaticMemoryOn %+v, want overhead %d", tt.nodeType, mem, tt.overhead)
		}
		if b := site.StaticBasis(nt); strings.HasPrefix(b, "probed") != tt.probed || strings.HasPrefix(b, "assumed") == tt.probed {
			t.Errorf("%s: StaticBasis %q", tt.nodeType, b)
		}
	}
	// a GPU node type keeps the CUDA context whatever its probe says
	seed := mustSite(t, "../../examples/site-seed.json")
	p := mustProbe(t, strings.Replace(validProbe, `"lab-cpu"`, `"v100-32g"`, 1))
	if err := seed.SetProbe(p); err != nil {
		t.Fatal(err)
	}
	if mem := seed.StaticMemoryOn(m, tr, 4, seed.NodeType("v100-32g")); mem.Overhead != GPUContextBytes {
		t.Errorf("v100 with a probe: overhead %d, want the CUDA context", mem.Overhead)
	}
	if err := seed.SetProbe(mustProbe(t, validProbe)); err == nil {
		t.Error("SetProbe of a node type the catalogue lacks: no error")
	}
}

// TestProbedIterSeconds checks the per-kind time model by hand.
func TestProbedIterSeconds(t *testing.T) {
	t.Parallel()
	p := mustProbe(t, validProbe) // conv 3e10, depthwise 2e9, linear 1e10, elementwise 1e9
	noEW := mustProbe(t, strings.Replace(validProbe, `,
  "elementwise": {"median": 1e9, "min": 1e9, "max": 1e9, "repeats": 6}`, ``, 1))
	if noEW.rate(WorkElementwise) != 0 {
		t.Fatal("test bug: the elementwise rate is still there")
	}
	withOpt := mustProbe(t, strings.Replace(validProbe, `"elementwise":`, `"optimizer": {"median": 4e9, "min": 4e9, "max": 4e9, "repeats": 2},
  "elementwise":`, 1))
	m := &Model{V: 1, Name: "m", Parameters: 1000, TrainableParameters: 1000, ParamBytes: 4,
		ActivationBytesPerSample: 1e6, FLOPsPerSample: 1e9, InputShape: []int{10},
		FLOPsByKind: map[string]int64{"conv": 6e8, "depthwise": 2e8, "linear": 1e8}}
	old := *m
	old.FLOPsByKind = nil
	const step = 1000 * 4 * 3 / 1e9 // params x 4 B x (weights, grads, momentum) at 1 GB/s
	tests := []struct {
		name  string
		p     *Probe
		m     *Model
		tr    Training
		batch int
		want  float64
		ok    bool
	}{
		{"per kind", p, m, Training{"momentum", PrecFP32}, 8,
			8*(3*6e8/3e10+3*2e8/2e9+3*1e8/1e10+3*1e8/3e10+1e6/1e9) + step, true},
		{"optimizer rate", withOpt, m, Training{"adam", PrecFP32}, 8,
			8*(3*6e8/3e10+3*2e8/2e9+3*1e8/1e10+3*1e8/3e10+1e6/1e9) + 1000*4*4/4e9, true},
		{"no kinds: all conv", p, &old, Training{"momentum", PrecFP32}, 8, 8*(3*1e9/3e10+1e6/1e9) + step, true},
		{"no elementwise rate", noEW, m, Training{"momentum", PrecFP32}, 2,
			2 * (3*6e8/3e10 + 3*2e8/2e9 + 3*1e8/1e10 + 3*1e8/3e10), true},
		{"half precision: not modelled", p, m, Training{"momentum", PrecBF16}, 8, 0, false},
		{"no probe", nil, m, Training{"momentum", PrecFP32}, 8, 0, false},
	}
	for _, tt := range tests {
		got, ok := probedIterSeconds(tt.p, tt.m, tt.tr, tt.batch)
		if ok != tt.ok || !near(got, tt.want, 1e-12) {
			t.Errorf("%s: %.9f s, %v; want %.9f s, %v", tt.name, got, ok, tt.want, tt.ok)
		}
	}
	// through the site: the probed node type uses it, the others do not
	site := mustSite(t, "../../examples/site-lab.json")
	before := site.StaticIterSeconds(m, site.NodeType("lab-cpu"), Training{"momentum", PrecFP32}, 8)
	if err := site.SetProbe(p); err != nil {
		t.Fatal(err)
	}
	nt := site.NodeType("lab-cpu")
	want, _ := probedIterSeconds(p, m, Training{"momentum", PrecFP32}, 8)
	if got := site.StaticIterSeconds(m, nt, Training{"momentum", PrecFP32}, 8); !near(got, want/batchEfficiency(nt, 8), 1e-12) || near(got, before, 1e-3) {
		t.Errorf("lab-cpu with a probe: %.6f s, want %.6f (without: %.6f)", got, want/batchEfficiency(nt, 8), before)
	}
}

// TestLoadProbes reads probes/<node type>.json beside a catalogue: a
// missing file is no probe, a bad one an error naming the file.
func TestLoadProbes(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	site := mustSite(t, "../../examples/site-lab.json")
	if err := site.LoadProbes(dir); err != nil || site.Probe(site.NodeType("lab-cpu")) != nil {
		t.Fatalf("no probes/: %v, %v", err, site.Probe(site.NodeType("lab-cpu")))
	}
	path := ProbePath(dir, "lab-cpu")
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(validProbe), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := site.LoadProbes(dir); err != nil || site.Probe(site.NodeType("lab-cpu")) == nil || site.Probe(site.NodeType("lab-dev")) != nil {
		t.Fatalf("with probes/lab-cpu.json: %v", err)
	}
	// lab-cpu's record copied to lab-dev's name
	if err := os.WriteFile(ProbePath(dir, "lab-dev"), []byte(validProbe), 0o644); err != nil {
		t.Fatal(err)
	}
	err := mustSite(t, "../../examples/site-lab.json").LoadProbes(dir)
	if !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), "lab-dev.json") || !strings.Contains(err.Error(), "node_type") {
		t.Fatalf("probe of another node type: %v", err)
	}
	if err := os.WriteFile(ProbePath(dir, "lab-dev"), []byte(`{"v": 1}`), 0o644); err != nil {
		t.Fatal(err)
	}
	err = mustSite(t, "../../examples/site-lab.json").LoadProbes(dir)
	if !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), "lab-dev.json") {
		t.Fatalf("malformed probe: %v", err)
	}
}

// TestStaticBands: a static CPU row carries the grid's calibration band of
// its static model (probed or assumed) around its figures; a GPU row and a
// measured row carry none of it.
func TestStaticBands(t *testing.T) {
	t.Parallel()
	site := mustSite(t, "../../examples/site-seed.json")
	probed := mustSite(t, "../../examples/site-seed.json")
	p := mustProbe(t, validProbe)
	p.NodeType = "xeon-40c"
	if err := probed.SetProbe(p); err != nil {
		t.Fatal(err)
	}
	m := mustModel(t, "testdata/resnet50.json")
	for _, tc := range []struct {
		name string
		s    *Site
		want StaticBand
	}{{"assumed", site, StaticBandFor(false)}, {"probed", probed, StaticBandFor(true)}} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			if tc.want.Cells == 0 || tc.want.MemLow > 1 || tc.want.MemHigh < 1 || tc.want.TimeLow > 1 || tc.want.TimeHigh < 1 {
				t.Fatalf("band %+v: not generated from a grid, or does not hold the estimate", tc.want)
			}
			rows, err := tc.s.Estimate(Request{Model: m, Training: Training{"adam", PrecFP32}, Samples: 1000, Epochs: 1, Batches: []int{16}})
			if err != nil {
				t.Fatal(err)
			}
			for _, r := range rows {
				if r.NodeType.Kind != KindCPU {
					// the recorded GPU grids' memory band (fp32), no time band;
					// the plan asks for the band's top
					mem, g := float64(r.Mem), staticBandGPU[PrecFP32]
					if want := (Band{mem * g.MemLow, mem, mem * g.MemHigh}); r.MemBand != want || r.IterBand != (Band{}) || r.FitMem() != int64(mem*g.MemHigh) {
						t.Errorf("%s: GPU row has bands %v %v, fit %d; want memory %v, fit its top", r.NodeType.Name, r.MemBand, r.IterBand, r.FitMem(), want)
					}
					continue
				}
				mem := float64(r.Mem)
				if want := (Band{mem * tc.want.MemLow, mem, mem * tc.want.MemHigh}); r.MemBand != want {
					t.Errorf("%s: memory band %v, want %v", r.NodeType.Name, r.MemBand, want)
				}
				// issue 30: the assumed model's time band spans 40x: no band,
				// the row says its time is unmeasured instead
				want := Band{}
				if tc.name == "probed" {
					want = Band{r.IterSeconds * tc.want.TimeLow, r.IterSeconds, r.IterSeconds * tc.want.TimeHigh}
				}
				if r.IterBand != want || r.TimeUnmeasured != (tc.name == "assumed") {
					t.Errorf("%s: time band %v unmeasured %v, want %v", r.NodeType.Name, r.IterBand, r.TimeUnmeasured, want)
				}
			}
		})
	}
}

// TestStepFactor: the probed time is scaled by how much slower the
// reference network's whole step ran than the per-kind rates say, never
// scaled down.
func TestStepFactor(t *testing.T) {
	t.Parallel()
	m := &Model{V: 1, Name: "m", Parameters: 1000, TrainableParameters: 1000, ParamBytes: 4,
		ActivationBytesPerSample: 1e6, FLOPsPerSample: 1e9, InputShape: []int{10},
		FLOPsByKind: map[string]int64{"conv": 6e8, "depthwise": 2e8, "linear": 1e8}}
	tr := Training{"momentum", PrecFP32}
	base, _ := probedIterSeconds(mustProbe(t, validProbe), m, tr, 16)
	const rates = 3.208012 // the reference step at batch 8 from validProbe's rates
	for _, tc := range []struct {
		name   string
		probe  string
		factor float64
	}{
		{"no reference step", validProbe, 1},
		{"the step ran 1.5x the rates", withStep(1.5 * rates), 1.5},
		{"the step ran faster than the rates: not scaled down", withStep(0.5 * rates), 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := mustProbe(t, tc.probe)
			if got := p.StepFactor(); !near(got, tc.factor, 1e-9) {
				t.Errorf("StepFactor %.6f, want %.6f", got, tc.factor)
			}
			if got, _ := probedIterSeconds(p, m, tr, 16); !near(got, base*tc.factor, 1e-9) {
				t.Errorf("probed %.6f s, want %.6f (x%.2f)", got, base*tc.factor, tc.factor)
			}
			site := mustSite(t, "../../examples/site-lab.json")
			if err := site.SetProbe(p); err != nil {
				t.Fatal(err)
			}
			basis := site.StaticBasis(site.NodeType("lab-cpu"))
			if want := map[float64]string{1.5: "whole step x1.50 ", 1: "whole step x1 ("}[tc.factor]; tc.probe != validProbe && !strings.Contains(basis, want) {
				t.Errorf("basis %q, want %q", basis, want)
			}
		})
	}
}
