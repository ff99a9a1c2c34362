package plan

import (
	"errors"
	"os"
	"strings"
	"testing"
	"time"
)

const validModel = `{"v": 1, "name": "tiny", "framework": "pytorch 1.13", "parameters": 1000, "trainable_parameters": 900,
 "param_bytes": 4, "activation_bytes_per_sample": 4096, "flops_per_sample": 20000, "input_shape": [1, 8, 8],
 "layers": [{"name": "fc", "type": "Linear", "output_shape": [2, 10], "params": 1000, "output_bytes": 40}]}`

func TestDecodeModel(t *testing.T) {
	t.Parallel()
	edit := func(old, new string) string {
		if !strings.Contains(validModel, old) {
			t.Fatalf("test bug: %q not in the valid model", old)
		}
		return strings.Replace(validModel, old, new, 1)
	}
	tests := []struct {
		name, in string
		field    string // "" = valid
		reason   string
	}{
		{"valid", validModel, "", ""},
		{"unknown field", edit(`"framework"`, `"frame_work"`), "frame_work", "unknown field"},
		{"case differs", edit(`"parameters"`, `"Parameters"`), "Parameters", `did you mean "parameters"`},
		{"missing required", edit(`"flops_per_sample": 20000,`, ``), "flops_per_sample", "required field missing"},
		{"zero FLOPs", edit(`"flops_per_sample": 20000`, `"flops_per_sample": 0`), "", ""},
		{"negative FLOPs", edit(`"flops_per_sample": 20000`, `"flops_per_sample": -1`), "flops_per_sample", "negative"},
		{"zero parameters", edit(`"parameters": 1000`, `"parameters": 0`), "parameters", "positive"},
		{"string for number", edit(`"parameters": 1000`, `"parameters": "1000"`), "parameters", "want an integer, got a string"},
		{"fraction", edit(`"parameters": 1000`, `"parameters": 1000.5`), "parameters", "want an integer"},
		{"exponent", edit(`"flops_per_sample": 20000`, `"flops_per_sample": 2e4`), "flops_per_sample", "without a fraction or exponent"},
		{"null", edit(`"parameters": 1000`, `"parameters": null`), "parameters", "got null"},
		{"nested type", edit(`"params": 1000`, `"params": true`), "layers[0].params", "want an integer, got a boolean"},
		{"nested unknown", edit(`"output_bytes": 40`, `"output_bytes": 40, "dtype": "f32"`), "layers[0].dtype", "unknown field"},
		{"duplicate", edit(`"name": "tiny",`, `"name": "tiny", "name": "other",`), "name", "duplicate"},
		{"trailing", validModel + ` {}`, "", "trailing data"},
		{"syntax error: line and column", "{\"v\": 1,\n \"name\": \"x\",\n \"parameters\": 5,,\n}", "", "JSON syntax error at line 3, column 18 (byte 40)"},
		{"version", edit(`"v": 1`, `"v": 2`), "v", "want 1"},
		{"trainable above total", edit(`"trainable_parameters": 900`, `"trainable_parameters": 2000`), "trainable_parameters", "between 0 and parameters"},
		{"param bytes", edit(`"param_bytes": 4`, `"param_bytes": 3`), "param_bytes", "want 1, 2, 4 or 8"},
		{"zero dim", edit(`[1, 8, 8]`, `[1, 0, 8]`), "input_shape[1]", "positive"},
		{"no input shape", edit(`"input_shape": [1, 8, 8],`, ``), "input_shape", "required field missing"},
		{"empty input shape", edit(`[1, 8, 8]`, `[]`), "input_shape", "dimensions"},
		{"control character in name", edit(`"tiny"`, `"ti\u001bny"`), "name", "printable"},
		{"truncated", validModel[:40], "framework", "unexpected end"},
		{"not an object", `[1,2]`, "", "want an object"},
		{"not UTF-8", "{\"v\": 1, \"name\": \"\xff\"}", "", "UTF-8"},
		{"flops by kind", edit(`"flops_per_sample": 20000,`, `"flops_per_sample": 20000, "flops_by_kind": {"conv": 15000, "linear": 5000},`), "", ""},
		{"flops by kind: unknown kind", edit(`"flops_per_sample": 20000,`, `"flops_per_sample": 20000, "flops_by_kind": {"attention": 5},`), "flops_by_kind.attention", "unknown kind"},
		{"flops by kind: over the total", edit(`"flops_per_sample": 20000,`, `"flops_per_sample": 20000, "flops_by_kind": {"conv": 15000, "linear": 10000},`), "flops_by_kind", "adds up to 25000"},
		{"flops by kind: fraction", edit(`"flops_per_sample": 20000,`, `"flops_per_sample": 20000, "flops_by_kind": {"conv": 1.5},`), "flops_by_kind.conv", "want an integer"},
		{"layer kind", edit(`"output_bytes": 40`, `"output_bytes": 40, "kind": "linear", "flops": 20000`), "", ""},
		{"layer kind unknown", edit(`"output_bytes": 40`, `"output_bytes": 40, "kind": "dense"`), "layers[0].kind", "want conv, depthwise, linear or other"},
		{"layer flops negative", edit(`"output_bytes": 40`, `"output_bytes": 40, "flops": -1`), "layers[0].flops", "negative"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			m, err := DecodeModel([]byte(tt.in))
			if tt.reason == "" {
				if err != nil {
					t.Fatalf("DecodeModel: %v", err)
				}
				if m.Name != "tiny" || m.Parameters != 1000 || len(m.Layers) != 1 {
					t.Fatalf("decoded %+v", m)
				}
				return
			}
			wantFieldErr(t, err, tt.field, tt.reason)
		})
	}
}

// wantFieldErr fails t unless err is a *FieldError (and ErrInvalid) of
// field whose reason contains reason.
func wantFieldErr(t *testing.T, err error, field, reason string) {
	t.Helper()
	var fe *FieldError
	if !errors.As(err, &fe) || !errors.Is(err, ErrInvalid) {
		t.Fatalf("error %v (%T), want a *FieldError", err, err)
	}
	if fe.Field != field || !strings.Contains(fe.Reason, reason) {
		t.Fatalf("error field %q reason %q, want field %q reason containing %q", fe.Field, fe.Reason, field, reason)
	}
}

func TestDecodeModelTestdata(t *testing.T) {
	t.Parallel()
	for _, f := range []string{"testdata/resnet50.json", "testdata/resnet50_448.json"} {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		m, err := DecodeModel(b)
		if err != nil {
			t.Fatalf("%s: %v", f, err)
		}
		// torchvision's ResNet-50: 25,557,032 parameters, 4.09 GMACs at 224x224.
		if m.Parameters != 25557032 || m.TrainableParameters != m.Parameters {
			t.Errorf("%s: parameters %d/%d", f, m.Parameters, m.TrainableParameters)
		}
	}
}

func TestDecodeSiteExamples(t *testing.T) {
	t.Parallel()
	for _, f := range []string{"../../examples/site-lab.json", "../../examples/site-seed.json", "../../systemd/site.json.example"} {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := DecodeSite(b); err != nil {
			t.Errorf("%s: %v", f, err)
		}
	}
}

const validSite = `{"v": 1, "name": "t",
 "node_types": [
  {"name": "c", "kind": "cpu", "cores": 4, "host_memory_bytes": 8000000000, "peak_flops": {"fp32": 1e11}, "efficiency": {"fp32": 0.3}, "cost_per_node_hour": 0.1},
  {"name": "g", "kind": "gpu", "cores": 8, "host_memory_bytes": 8000000000, "gpus_per_node": 2, "device_memory_bytes": 16000000000, "peak_flops": {"fp32": 1e13}, "efficiency": {"fp32": 0.5}, "cost_per_gpu_hour": 1}
 ],
 "partitions": [
  {"name": "cpu", "node_types": ["c"], "nodes": "c[1-2]", "max_time": "1-00:00:00"},
  {"name": "gpu", "node_types": ["g"], "node_count": 2}
 ]}`

func TestDecodeSite(t *testing.T) {
	t.Parallel()
	edit := func(old, new string) string {
		if !strings.Contains(validSite, old) {
			t.Fatalf("test bug: %q not in the valid site", old)
		}
		return strings.Replace(validSite, old, new, 1)
	}
	tests := []struct {
		name, in, field, reason string
	}{
		{"valid", validSite, "", ""},
		{"unknown node type", edit(`"node_types": ["g"]`, `"node_types": ["h"]`), "partitions[1].node_types[0]", `unknown node type "h"`},
		{"bad max time", edit(`"1-00:00:00"`, `"a day"`), "partitions[0].max_time", "not a Slurm time"},
		{"duplicate partition", edit(`"name": "gpu"`, `"name": "cpu"`), "partitions[1].name", "duplicate"},
		{"gpu without gpus", edit(`"gpus_per_node": 2, `, ``), "node_types[1].gpus_per_node", "required"},
		{"cpu with gpus", edit(`"cores": 4,`, `"cores": 4, "gpus_per_node": 1,`), "node_types[0].kind", "no GPUs"},
		{"bad kind", edit(`"kind": "cpu"`, `"kind": "tpu"`), "node_types[0].kind", "want \"cpu\" or \"gpu\""},
		{"no cores", edit(`"cores": 4,`, `"cores": 0,`), "node_types[0].cores", "required, must be positive"},
		{"negative cost", edit(`"cost_per_gpu_hour"`, `"cost_per_node_hour": -1, "cost_per_gpu_hour"`), "node_types[1].cost_per_node_hour", "costs must be non-negative numbers"},
		{"no speed", edit(`"peak_flops": {"fp32": 1e11}, `, ``), "node_types[0].peak_flops.fp32", "required unless relative_throughput"},
		{"efficiency above 1", edit(`"efficiency": {"fp32": 0.3}`, `"efficiency": {"fp32": 3}`), "node_types[0].efficiency", "between 0 and 1"},
		{"node count vs list", edit(`"nodes": "c[1-2]"`, `"nodes": "c[1-2]", "node_count": 3`), "partitions[0].node_count", "lists 2"},
		{"bad host list", edit(`"c[1-2]"`, `"c[2-1]"`), "partitions[0].nodes", "host list"},
		{"no count", edit(`"node_count": 2`, `"max_nodes_per_job": 1`), "partitions[1].node_count", "required"},
		{"unknown key", edit(`"cost_per_gpu_hour"`, `"cost_per_gpu_hours"`), "node_types[1].cost_per_gpu_hours", "did you mean"},
		{"wrong type deep", edit(`{"fp32": 1e13}`, `{"fp32": "fast"}`), "node_types[1].peak_flops.fp32", "want a number"},
		// one case per check of Site.Validate and PartitionSpec.validate
		{"version", edit(`"v": 1`, `"v": 2`), "v", "want 1 (this build reads site catalogue version 1), got 2"},
		{"no name", edit(`"name": "t"`, `"name": ""`), "name", "required, up to 128 printable characters"},
		{"bad currency", edit(`"name": "t"`, `"name": "t", "currency": "a\nb"`), "currency", "want up to 16 printable characters"},
		{"no node types", edit(validSite[strings.Index(validSite, `"node_types": [`):strings.Index(validSite, `"partitions"`)], `"node_types": [], `),
			"node_types", "required: at least one node type"},
		{"duplicate node type", edit(`"name": "g"`, `"name": "c"`), "node_types[1].name", `duplicate node type "c"`},
		{"no anchor", edit(`"peak_flops": {"fp32": 1e13}`, `"relative_throughput": 2`), "", ""},
		{"nothing anchored", strings.Replace(edit(`"peak_flops": {"fp32": 1e13}`, `"relative_throughput": 2`), `"peak_flops": {"fp32": 1e11}`, `"relative_throughput": 1`, 1),
			"node_types", "at least one node type needs peak_flops.fp32 (relative_throughput alone has no unit)"},
		{"no partitions", edit(validSite[strings.Index(validSite, `"partitions"`):], `"partitions": []}`), "partitions", "required: at least one partition"},
		{"bad partition name", edit(`"name": "gpu"`, `"name": "g pu"`), "partitions[1].name", `want 1-64 of [A-Za-z0-9._-], got "g pu"`},
		{"partition without node types", edit(`"node_types": ["g"]`, `"node_types": []`), "partitions[1].node_types", "required: the node types of the partition"},
		{"negative max nodes", edit(`"node_count": 2`, `"node_count": 2, "max_nodes_per_job": -1`), "partitions[1].max_nodes_per_job", "must not be negative"},
		{"negative cost factor", edit(`"node_count": 2`, `"node_count": 2, "cost_factor": -0.5`), "partitions[1].cost_factor", "must be a non-negative number"},
		{"negative per-user limit", edit(`"node_count": 2`, `"node_count": 2, "per_user": {"max_gpus": -1}`), "partitions[1].per_user", "limits must not be negative"},
		{"bad per-user time", edit(`"node_count": 2`, `"node_count": 2, "per_user": {"max_time": "soon"}`), "partitions[1].per_user.max_time", "not a Slurm time"},
		{"two defaults", strings.Replace(edit(`"node_count": 2`, `"node_count": 2, "default": true`), `"max_time"`, `"default": true, "max_time"`, 1),
			"partitions", "more than one default partition"},
		{"first bad of several", edit(`"node_count": 2`, `"node_count": 2, "cost_factor": -1, "max_nodes_per_job": -1`),
			"partitions[1].max_nodes_per_job", "must not be negative"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			_, err := DecodeSite([]byte(tt.in))
			if tt.reason == "" {
				if err != nil {
					t.Fatal(err)
				}
				return
			}
			var fe *FieldError
			if !errors.As(err, &fe) {
				t.Fatalf("error %v (%T), want a *FieldError", err, err)
			}
			if fe.Field != tt.field || !strings.Contains(fe.Reason, tt.reason) {
				t.Fatalf("error field %q reason %q, want field %q reason containing %q", fe.Field, fe.Reason, tt.field, tt.reason)
			}
		})
	}
}

func TestParseSlurmTime(t *testing.T) {
	t.Parallel()
	tests := []struct {
		in   string
		want time.Duration
		err  bool
	}{
		{"", 0, false},
		{"UNLIMITED", 0, false},
		{"90", 90 * time.Minute, false},
		{"5:30", 5*time.Minute + 30*time.Second, false},
		{"2:00:00", 2 * time.Hour, false},
		{"1-00:00:00", 24 * time.Hour, false},
		{"2-12", 60 * time.Hour, false},
		{"1-2:30", 26*time.Hour + 30*time.Minute, false},
		{"0", 0, true},
		{"-5", 0, true},
		{"1:2:3:4", 0, true},
		{"2h", 0, true},
	}
	for _, tt := range tests {
		got, err := ParseSlurmTime(tt.in)
		if (err != nil) != tt.err || got != tt.want {
			t.Errorf("ParseSlurmTime(%q) = %v, %v; want %v, error %v", tt.in, got, err, tt.want, tt.err)
		}
	}
}

func TestExpandHostlist(t *testing.T) {
	t.Parallel()
	tests := []struct {
		in   string
		want string
	}{
		{"dev1", "dev1"},
		{"cpu[1-2]", "cpu1 cpu2"},
		{"cpu[1-2],gpu[1-2]", "cpu1 cpu2 gpu1 gpu2"},
		{"n[01-03,7]", "n01 n02 n03 n7"},
		{"rack[1-2]-n[1-2]", "rack1-n1 rack1-n2 rack2-n1 rack2-n2"},
		{"c[3-1]", "error"},
		{"c[1-2", "error"},
		{"", "error"},
	}
	for _, tt := range tests {
		got, err := ExpandHostlist(tt.in)
		s := strings.Join(got, " ")
		if err != nil {
			s = "error"
		}
		if s != tt.want {
			t.Errorf("ExpandHostlist(%q) = %q (%v), want %q", tt.in, s, err, tt.want)
		}
	}
}

func FuzzDecodeModel(f *testing.F) {
	f.Add([]byte(validModel))
	f.Add([]byte(`{"v":1}`))
	f.Add([]byte(`{"layers":[{"output_shape":[1e99]}]}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		m, err := DecodeModel(b)
		if err == nil {
			if m.Validate() != nil {
				t.Fatal("decoded a model that does not validate")
			}
			_ = m.Fingerprint()
			return
		}
		if !errors.Is(err, ErrInvalid) {
			t.Fatalf("error %v does not match ErrInvalid", err)
		}
	})
}

func FuzzDecodeSite(f *testing.F) {
	f.Add([]byte(validSite))
	for _, p := range []string{"../../examples/site-lab.json", "../../examples/site-seed.json"} {
		if b, err := os.ReadFile(p); err == nil {
			f.Add(b)
		}
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		s, err := DecodeSite(b)
		if err != nil {
			if !errors.Is(err, ErrInvalid) {
				t.Fatalf("error %v does not match ErrInvalid", err)
			}
			return
		}
		// everything derived from a valid catalogue must be computable
		for i := range s.Partitions {
			_ = s.Partitions[i].MaxTimeLimit()
		}
		for i := range s.NodeTypes {
			_ = s.Throughput(&s.NodeTypes[i], PrecFP32)
		}
	})
}
