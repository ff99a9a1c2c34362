package plan

import (
	"strings"
	"testing"
)

// validFootprint: a venv importing transformers besides torch; repeat
// spreads 1 MB (wide) and 2 MB (residual), so Bytes is 402 MB + 2 MB.
const validFootprint = `{"v": 1, "environment": "/home/alice/venv/bin/python", "node_type": "lab-cpu", "host": "n1",
 "measured_at": "2026-11-27T09:00:00Z", "framework": "pytorch 1.13.0", "python": "3.11.2", "threads": 2, "load_average": 0.5,
 "imports": ["transformers", "pandas.core"],
 "import_rss_bytes": {"median": 380000000, "min": 379000000, "max": 381000000, "repeats": 3},
 "runtime_rss_bytes": {"median": 399000000, "min": 398000000, "max": 402000000, "repeats": 6},
 "runtime_references": {"wide": {"median": 398500000, "min": 398000000, "max": 399000000, "repeats": 3},
  "residual": {"median": 401000000, "min": 400000000, "max": 402000000, "repeats": 3}}}`

func TestDecodeFootprint(t *testing.T) {
	t.Parallel()
	edit := func(old, new string) string {
		if !strings.Contains(validFootprint, old) {
			t.Fatalf("test bug: %q not in the valid record", old)
		}
		return strings.Replace(validFootprint, old, new, 1)
	}
	tests := []struct {
		name, in      string
		field, reason string // reason "" = valid
	}{
		{"valid", validFootprint, "", ""},
		{"relative environment", edit(`"/home/alice/venv/bin/python"`, `"venv/bin/python"`), "environment", "absolute path"},
		{"missing environment", edit(`"environment": "/home/alice/venv/bin/python", `, ``), "environment", "required"},
		{"bad module", edit(`"pandas.core"`, `"pandas core"`), "imports[1]", "dotted module name"},
		{"a probe record's field", edit(`"imports"`, `"throughput"`), "throughput", "unknown field"},
		{"min above median", edit(`"min": 379000000`, `"min": 380500000`), "import_rss_bytes", "min <= median <= max"},
		{"runtime below import", edit(`"median": 399000000, "min": 398000000`, `"median": 370000000, "min": 369000000`), "runtime_rss_bytes.median", "below import"},
		{"reference outside the pool", edit(`"max": 402000000, "repeats": 3}}`, `"max": 403000000, "repeats": 3}}`), "runtime_references.residual", "outside"},
		{"version", edit(`"v": 1`, `"v": 2`), "v", "want 1"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			f, err := DecodeFootprint([]byte(tt.in))
			if tt.reason == "" {
				if err != nil {
					t.Fatalf("DecodeFootprint: %v", err)
				}
				if f.Environment != "/home/alice/venv/bin/python" || f.Bytes() != 404000000 || len(f.Imports) != 2 {
					t.Fatalf("decoded %+v, bytes %d", f, f.Bytes())
				}
				return
			}
			wantFieldErr(t, err, tt.field, tt.reason)
		})
	}
}

// TestEnvironmentFootprint: the user's environment raises the fixed part
// of host-memory node types where it is larger than theirs, never lowers
// it, and leaves device memory alone.
func TestEnvironmentFootprint(t *testing.T) {
	t.Parallel()
	big := mustFootprint(t, validFootprint) // 404 MB
	small := mustFootprint(t, strings.NewReplacer(`"median": 380000000, "min": 379000000, "max": 381000000`, `"median": 100000000, "min": 100000000, "max": 100000000`,
		`"median": 399000000, "min": 398000000, "max": 402000000`, `"median": 110000000, "min": 110000000, "max": 110000000`,
		`"median": 398500000, "min": 398000000, "max": 399000000`, `"median": 110000000, "min": 110000000, "max": 110000000`,
		`"median": 401000000, "min": 400000000, "max": 402000000`, `"median": 110000000, "min": 110000000, "max": 110000000`).Replace(validFootprint))
	probe := mustProbe(t, validProbeRefs) // 270 MB + 1 MB spread
	cases := []struct {
		name   string
		probe  *Probe
		env    *Footprint
		want   int64
		probed bool
	}{
		{"neither: assumed", nil, nil, CPUFrameworkBytes, false},
		{"a larger environment over the assumed", nil, big, 404000000, true},
		{"a smaller environment: the assumed stays", nil, small, CPUFrameworkBytes, false},
		{"probe only", probe, nil, 271000000, true},
		{"a larger environment over the probe", probe, big, 404000000, true},
		{"a smaller environment: the probe stays", probe, small, 271000000, true},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			site := mustSite(t, "../../examples/site-seed.json")
			cpu, gpu := site.NodeType("xeon-40c"), site.NodeType("v100-32g")
			if cpu == nil || gpu == nil {
				t.Fatal("test bug: site-seed node types")
			}
			if c.probe != nil {
				p := *c.probe
				p.NodeType = cpu.Name
				if err := site.SetProbe(&p); err != nil {
					t.Fatal(err)
				}
			}
			site.UseEnvironment(c.env)
			if n, probed := site.FrameworkBytes(cpu); n != c.want || probed != c.probed {
				t.Errorf("framework %d (probed %v), want %d (%v)", n, probed, c.want, c.probed)
			}
			m := mustModel(t, "testdata/resnet50.json")
			if got := site.StaticMemoryOn(m, Training{"sgd", PrecFP32}, 8, cpu).Overhead; got != c.want {
				t.Errorf("static overhead on %s %d, want %d", cpu.Name, got, c.want)
			}
			if got := site.StaticMemoryOn(m, Training{"sgd", PrecFP32}, 8, gpu).Overhead; got != GPUContextBytes {
				t.Errorf("static overhead on %s %d, want the CUDA context %d", gpu.Name, got, GPUContextBytes)
			}
		})
	}
}

func mustFootprint(t *testing.T, s string) *Footprint {
	t.Helper()
	f, err := DecodeFootprint([]byte(s))
	if err != nil {
		t.Fatal(err)
	}
	return f
}
