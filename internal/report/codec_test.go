package report

import (
	"bytes"
	"encoding/json"
	"errors"
	"flag"
	"math"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

var update = flag.Bool("update", false, "rewrite testdata/golden/*.json from the fixtures")

// TestRoundTrip encodes the fixture of every kind, compares it with the
// golden file (the wire format other components and people read) and
// decodes it back.
func TestRoundTrip(t *testing.T) {
	t.Parallel()
	for _, kind := range allKinds {
		t.Run(string(kind), func(t *testing.T) {
			t.Parallel()
			want := fixture(kind)
			b := mustEncode(t, want)

			var pretty bytes.Buffer
			if err := json.Indent(&pretty, b, "", "  "); err != nil {
				t.Fatal(err)
			}
			pretty.WriteByte('\n')
			golden := filepath.Join("testdata", "golden", string(kind)+".json")
			if *update {
				if err := os.WriteFile(golden, pretty.Bytes(), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			g, err := os.ReadFile(golden)
			if err != nil {
				t.Fatalf("%v (run with -update to create)", err)
			}
			if !bytes.Equal(g, pretty.Bytes()) {
				t.Errorf("encoding differs from %s (run with -update if intended):\n%s", golden, pretty.Bytes())
			}

			for name, in := range map[string][]byte{"compact": b, "golden": g} {
				got, err := Decode(in)
				if err != nil {
					t.Fatalf("Decode(%s): %v", name, err)
				}
				if !reflect.DeepEqual(got, want) {
					t.Errorf("Decode(%s) = %+v, want %+v", name, got, want)
				}
			}
		})
	}
}

func TestDecodeRejects(t *testing.T) {
	t.Parallel()
	valid := string(mustEncode(t, fixture(KindSample)))
	replace := func(old, new string) []byte {
		if !strings.Contains(valid, old) {
			t.Fatalf("fixture lacks %q", old)
		}
		return []byte(strings.Replace(valid, old, new, 1))
	}
	raw := func(s string) json.RawMessage { return json.RawMessage(s) }

	tests := []struct {
		name  string
		in    []byte
		is    error  // sentinel the error must wrap
		field string // FieldError.Field, when the error is about one field
		msg   string // substring of the message
	}{
		// Size and framing.
		{name: "oversize", in: append([]byte(valid), bytes.Repeat([]byte(" "), MaxPayload)...), is: ErrTooLarge, msg: "max 65536"},
		{name: "oversize garbage not parsed", in: bytes.Repeat([]byte("{"), MaxPayload+1), is: ErrTooLarge},
		{name: "empty", in: nil, is: ErrInvalid, msg: "empty input"},
		{name: "not json", in: []byte("hello"), is: ErrInvalid, msg: "malformed JSON at byte 1"},
		{name: "truncated", in: []byte(valid[:len(valid)/2]), is: ErrInvalid, msg: "unexpected end"},
		{name: "invalid utf8", in: replace(`"alice"`, "\"al\xffice\""), is: ErrInvalid, msg: "UTF-8"},
		{name: "top-level array", in: []byte(`[` + valid + `]`), is: ErrInvalid, msg: "want object, got array"},
		{name: "top-level null", in: []byte(`null`), is: ErrInvalid, msg: "got null"},
		{name: "trailing garbage", in: []byte(valid + " x"), is: ErrInvalid, msg: "trailing data"},
		{name: "two values", in: []byte(valid + valid), is: ErrInvalid, msg: "trailing data"},

		// Version first.
		{name: "unknown version", in: mutate(t, KindSample, set("v", 2)), is: ErrVersion, msg: "version 2 (this build speaks 1)"},
		{name: "unknown version with unknown fields", in: mutate(t, KindSample, set("v", 2), set("new_field", 1)), is: ErrVersion, msg: "version 2"},
		{name: "missing version", in: mutate(t, KindSample, del("v")), is: ErrVersion, msg: `"v" missing`},
		{name: "version as string", in: mutate(t, KindSample, set("v", "1")), is: ErrVersion, msg: `version "1"`},
		{name: "version as float", in: mutate(t, KindSample, set("v", raw("1.0"))), is: ErrVersion, msg: "version 1.0"},
		{name: "version null", in: mutate(t, KindSample, set("v", nil)), is: ErrVersion, msg: "version null"},

		// Structure.
		{name: "unknown field", in: mutate(t, KindSample, set("extra", 1)), is: ErrInvalid, field: "extra", msg: "unknown field"},
		{name: "unknown nested field", in: mutate(t, KindSample, set("sample.cpu.rss", 1)), is: ErrInvalid, field: "sample.cpu.rss", msg: "unknown field"},
		{name: "field differing in case", in: replace(`"kind":`, `"KIND":`), is: ErrInvalid, field: "KIND", msg: "unknown field"},
		{name: "duplicate field", in: replace(`"kind":"sample",`, `"kind":"sample","kind":"end",`), is: ErrInvalid, field: "kind", msg: "duplicate"},
		{name: "missing job id", in: mutate(t, KindSample, del("job.job_id")), is: ErrInvalid, field: "job.job_id", msg: "required field missing"},
		{name: "zero job id", in: mutate(t, KindSample, set("job.job_id", 0)), is: ErrInvalid, field: "job.job_id", msg: "required"},
		{name: "job id beyond uint32", in: mutate(t, KindSample, set("job.job_id", uint64(1)<<32)), is: ErrInvalid, field: "job.job_id", msg: "uint32"},
		{name: "missing required non-pointer field", in: mutate(t, KindSample, del("sample.cpu.procs")), is: ErrInvalid, field: "sample.cpu.procs"},
		{name: "missing body", in: mutate(t, KindSample, del("sample")), is: ErrInvalid, field: "sample", msg: `required for kind "sample"`},
		{name: "two bodies", in: mutate(t, KindSample, set("end", raw(`{"exit_code":0,"wall_ms":1,"peak_rss_bytes":0,"iters":0,"median_iter_ms":0,"p90_iter_ms":0,"checkpoints":0}`))), is: ErrInvalid, field: "end", msg: "one body per envelope"},
		{name: "body not matching kind", in: mutate(t, KindSample, set("kind", "checkpoint")), is: ErrInvalid, field: "checkpoint", msg: `required for kind "checkpoint"`},
		{name: "unknown kind", in: mutate(t, KindSample, set("kind", "reboot")), is: ErrInvalid, field: "kind", msg: `unknown kind "reboot"`},
		{name: "null for non-pointer", in: mutate(t, KindSample, set("sample.cpu.procs", nil)), is: ErrInvalid, field: "sample.cpu.procs", msg: "want integer, got null"},
		{name: "object for string", in: mutate(t, KindSample, set("sid", raw(`{}`))), is: ErrInvalid, field: "sid", msg: "want string, got object"},

		// Numbers.
		{name: "negative memory", in: mutate(t, KindSample, set("sample.cpu.rss_bytes", -5)), is: ErrInvalid, field: "sample.cpu.rss_bytes", msg: "must not be negative (got -5)"},
		{name: "string for number", in: mutate(t, KindSample, set("job.job_id", "4242")), is: ErrInvalid, field: "job.job_id", msg: "want non-negative integer, got string"},
		{name: "string for number in array", in: mutate(t, KindSample, set("sample.iters.1.step", "5002")), is: ErrInvalid, field: "sample.iters[1].step", msg: "want integer, got string"},
		{name: "fraction for integer", in: mutate(t, KindSample, set("sample.cpu.procs", 1.5)), is: ErrInvalid, field: "sample.cpu.procs", msg: "want integer, got 1.5"},
		{name: "negative for unsigned", in: mutate(t, KindSample, set("seq", -1)), is: ErrInvalid, field: "seq", msg: "must not be negative"},
		{name: "int overflow", in: mutate(t, KindSample, set("ts_ms", raw("9223372036854775808"))), is: ErrInvalid, field: "ts_ms", msg: "out of range"},
		{name: "NaN literal", in: replace(`"cpu_percent":387.5`, `"cpu_percent":NaN`), is: ErrInvalid, msg: "malformed JSON"},
		{name: "NaN as string", in: mutate(t, KindSample, set("sample.iters.0.loss", "NaN")), is: ErrInvalid, field: "sample.iters[0].loss", msg: "want number, got string"},
		{name: "float overflow", in: mutate(t, KindSample, set("sample.cpu.cpu_percent", raw("1e400"))), is: ErrInvalid, field: "sample.cpu.cpu_percent", msg: "out of range"},
		{name: "loss and nonfinite", in: mutate(t, KindSample, set("sample.iters.0.loss_nonfinite", true)), is: ErrInvalid, field: "sample.iters[0].loss_nonfinite"},
		{name: "negative duration", in: mutate(t, KindSample, set("sample.iters.0.dur_ms", -0.5)), is: ErrInvalid, field: "sample.iters[0].dur_ms", msg: "must not be negative"},
		{name: "util over 100", in: mutate(t, KindSample, set("sample.gpu.devices.0.util_percent", 100.5)), is: ErrInvalid, field: "sample.gpu.devices[0].util_percent"},

		// Values.
		{name: "invalid lineage", in: mutate(t, KindSample, set("job.lineage", "a b")), is: ErrInvalid, field: "job.lineage", msg: `got "a b"`},
		{name: "empty lineage", in: mutate(t, KindSample, set("job.lineage", "")), is: ErrInvalid, field: "job.lineage", msg: "required"},
		{name: "long lineage", in: mutate(t, KindSample, set("job.lineage", strings.Repeat("a", 65))), is: ErrInvalid, field: "job.lineage"},
		{name: "bad cluster", in: mutate(t, KindSample, set("job.cluster", "lab/../x")), is: ErrInvalid, field: "job.cluster"},
		{name: "control char in user", in: mutate(t, KindSample, set("job.user", "ali\u001bce")), is: ErrInvalid, field: "job.user", msg: "printable"},
		{name: "NUL in text", in: mutate(t, KindJobs, set("jobs.jobs.0.name", "a\u0000b")), is: ErrInvalid, field: "jobs.jobs[0].name", msg: "NUL"},
		{name: "array task without job", in: mutate(t, KindSample, del("job.array_job_id")), is: ErrInvalid, field: "job.array_job_id"},
		{name: "rank beyond nranks", in: mutate(t, KindSample, set("job.rank", 2)), is: ErrInvalid, field: "job.rank"},
		{name: "missing sid", in: mutate(t, KindSample, del("sid")), is: ErrInvalid, field: "sid"},
		{name: "upper-case sid", in: mutate(t, KindSample, set("sid", "0123456789ABCDEF")), is: ErrInvalid, field: "sid", msg: "lower-case hex"},
		{name: "seq zero", in: mutate(t, KindSample, set("seq", 0)), is: ErrInvalid, field: "seq"},
		{name: "zero timestamp", in: mutate(t, KindSample, set("ts_ms", 0)), is: ErrInvalid, field: "ts_ms"},
		{name: "bad iteration source", in: mutate(t, KindSample, set("sample.iters.1.source", "stdout")), is: ErrInvalid, field: "sample.iters[1].source", msg: `must be one of "file", "pattern", "helper"`},
		{name: "job on agent kind", in: mutate(t, KindAction, set("job", raw(string(mustJSON(t, fixture(KindSample).Job))))), is: ErrInvalid, field: "job", msg: "must be absent"},
		{name: "relative checkpoint", in: mutate(t, KindCheckpoint, set("checkpoint.path", "ckpt/step-1.pt")), is: ErrInvalid, field: "checkpoint.path", msg: "absolute"},
		{name: "unclean checkpoint", in: mutate(t, KindCheckpoint, set("checkpoint.path", "/a/../etc/passwd")), is: ErrInvalid, field: "checkpoint.path", msg: "clean"},
		{name: "bad sha256", in: mutate(t, KindCheckpoint, set("checkpoint.sha256", "xyz")), is: ErrInvalid, field: "checkpoint.sha256"},
		{name: "bad forwarded", in: mutate(t, KindSignal, set("signal.forwarded", "file:relative")), is: ErrInvalid, field: "signal.forwarded"},
		{name: "negative map value", in: mutate(t, KindEnd, set("end.peak_gpu_bytes.GPU-8a1b2c3d-0000-1111-2222-333344445555", -1)), is: ErrInvalid, field: "end.peak_gpu_bytes[GPU-8a1b2c3d-0000-1111-2222-333344445555]"},
		{name: "exit code range", in: mutate(t, KindEnd, set("end.exit_code", 256)), is: ErrInvalid, field: "end.exit_code"},
		{name: "signaled without signal", in: mutate(t, KindEnd, del("end.signal")), is: ErrInvalid, field: "end.signal", msg: "required"},
		{name: "negative cgroup peak", in: mutate(t, KindEnd, set("end.cgroup_peak_bytes", -1)), is: ErrInvalid, field: "end.cgroup_peak_bytes", msg: "negative"},
		{name: "fractional mem limit", in: mutate(t, KindEnd, set("end.mem_limit_bytes", 1.5)), is: ErrInvalid, field: "end.mem_limit_bytes", msg: "want integer"},
		{name: "mem limit case", in: mutate(t, KindEnd, set("end.Mem_Limit_Bytes", 1)), is: ErrInvalid, field: "end.Mem_Limit_Bytes", msg: "unknown field"},
		{name: "duplicate partition", in: mutate(t, KindSnapshot, set("snapshot.partitions.1.name", "gpu")), is: ErrInvalid, field: "snapshot.partitions[1].name", msg: "duplicate"},
		{name: "missing nullable field", in: mutate(t, KindSnapshot, del("snapshot.partitions.0.max_time_min")), is: ErrInvalid, field: "snapshot.partitions[0].max_time_min", msg: "required field missing"},
		{name: "job state missing", in: mutate(t, KindJobs, set("jobs.jobs.1.state", "")), is: ErrInvalid, field: "jobs.jobs[1].state"},

		// Actions and results.
		{name: "bad action type", in: mutate(t, KindAction, set("action.type", "reboot")), is: ErrInvalid, field: "action.type", msg: `got "reboot"`},
		{name: "action without user", in: mutate(t, KindAction, set("action.user", "")), is: ErrInvalid, field: "action.user"},
		{name: "signal action without signal", in: mutate(t, KindAction, set("action.type", "signal"), del("action.partition"), del("action.gres"), del("action.time_limit_min"), del("action.hold")), is: ErrInvalid, field: "action.signal", msg: "required"},
		{name: "requeue with script", in: mutate(t, KindAction, set("action.script", "#!/bin/sh\n")), is: ErrInvalid, field: "action.script", msg: "must be absent"},
		{name: "bad action id", in: mutate(t, KindAction, set("action.id", "a b")), is: ErrInvalid, field: "action.id"},
		{name: "new job id on failure", in: mutate(t, KindResult, set("result.new_job_id", 5000)), is: ErrInvalid, field: "result.new_job_id"},
		{name: "bad result status", in: mutate(t, KindResult, set("result.status", "OK")), is: ErrInvalid, field: "result.status"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			got, err := Decode(tt.in)
			checkErr(t, err, tt.is, tt.field, tt.msg)
			if got != nil {
				t.Errorf("Decode returned an envelope with the error: %+v", got)
			}
		})
	}
}

func mustJSON(t testing.TB, v any) []byte {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// checkErr is the one assertion for rejections: the sentinel, the field
// path when there is one, and a substring of the message.
func checkErr(t *testing.T, err, is error, field, msg string) {
	t.Helper()
	if err == nil {
		t.Fatalf("got no error, want %v", is)
	}
	if !errors.Is(err, is) {
		t.Errorf("error %q does not wrap %q", err, is)
	}
	var fe *FieldError
	if field != "" {
		if !errors.As(err, &fe) {
			t.Errorf("error %q is not a *FieldError, want field %q", err, field)
		} else if fe.Field != field {
			t.Errorf("error %q names field %q, want %q", err, fe.Field, field)
		}
	}
	if !strings.Contains(err.Error(), msg) {
		t.Errorf("error %q does not contain %q", err, msg)
	}
}

func TestDecodeSizeLimit(t *testing.T) {
	t.Parallel()
	b := mustEncode(t, fixture(KindSample))
	padded := append(b, bytes.Repeat([]byte("\n"), MaxPayload-len(b))...)
	if _, err := Decode(padded); err != nil {
		t.Errorf("Decode(exactly MaxPayload bytes): %v", err)
	}
	if _, err := Decode(append(padded, ' ')); !errors.Is(err, ErrTooLarge) {
		t.Errorf("Decode(MaxPayload+1 bytes) = %v, want ErrTooLarge", err)
	}
}

func TestEncodeRejects(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name  string
		edit  func(*Envelope)
		is    error
		field string
		msg   string
	}{
		{"nil body", func(e *Envelope) { e.Sample = nil }, ErrInvalid, "sample", "required"},
		{"zero version", func(e *Envelope) { e.V = 0 }, ErrVersion, "", "version 0"},
		{"NaN", func(e *Envelope) { e.Sample.CPU.CPUPercent = math.NaN() }, ErrInvalid, "sample.cpu.cpu_percent", "must be finite (got NaN)"},
		{"Inf", func(e *Envelope) { e.Sample.GPU.Devices[0].PowerWatts = ptr(math.Inf(1)) }, ErrInvalid, "sample.gpu.devices[0].power_watts", "finite"},
		{"NaN loss", func(e *Envelope) { e.Sample.Iters[1].Loss = ptr(math.NaN()) }, ErrInvalid, "sample.iters[1].loss", "finite"},
		{"invalid UTF-8", func(e *Envelope) { e.Job.Node = "gpu\xff" }, ErrInvalid, "job.node", "UTF-8"},
		{"far future", func(e *Envelope) { e.TimeMS = math.MaxInt64 }, ErrInvalid, "ts_ms", "year 10000"},
		{"negative memory", func(e *Envelope) { e.Sample.CPU.RSSBytes = -5 }, ErrInvalid, "sample.cpu.rss_bytes", "must not be negative (got -5)"},
		{"too large after escaping", func(e *Envelope) {
			// Validates (a 60 KiB script is allowed) but every quote is
			// escaped on the wire, so the envelope does not fit.
			e.Kind, e.Job, e.SID, e.Seq, e.Sample = KindAction, nil, "", 0, nil
			e.Action = &Action{ID: "x", Type: ActionSubmit, Cluster: "lab", User: "alice", IssuedMS: 1,
				Script: "#!/bin/sh\n" + strings.Repeat(`"`, MaxScript-20)}
		}, ErrTooLarge, "", "action envelope"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			e := fixture(KindSample)
			tt.edit(e)
			b, err := Encode(e)
			checkErr(t, err, tt.is, tt.field, tt.msg)
			if b != nil {
				t.Errorf("Encode returned bytes with the error")
			}
		})
	}
	t.Run("nil envelope", func(t *testing.T) {
		t.Parallel()
		_, err := Encode(nil)
		checkErr(t, err, ErrInvalid, "", "nil envelope")
	})
}

func TestFieldError(t *testing.T) {
	t.Parallel()
	err := error(&FieldError{Field: "sample.cpu.rss_bytes", Reason: "must not be negative (got -5)"})
	if got, want := err.Error(), `report: field "sample.cpu.rss_bytes": must not be negative (got -5)`; got != want {
		t.Errorf("Error() = %q, want %q", got, want)
	}
	if !errors.Is(err, ErrInvalid) || errors.Is(err, ErrVersion) {
		t.Errorf("FieldError must match ErrInvalid only")
	}
	if got, want := within("sample", within("iters[2]", fail("step", "x"))).Error(), `report: field "sample.iters[2].step": x`; got != want {
		t.Errorf("nested = %q, want %q", got, want)
	}
	// A hostile value is bounded and escaped when repeated in a message.
	long := fail("job.lineage", "got %s", quote(strings.Repeat("\x1b", 1000))).Error()
	if len(long) > 400 || strings.ContainsRune(long, '\x1b') {
		t.Errorf("message not bounded or not escaped: %q", long)
	}
}

// TestDecodeError covers the mapping of encoding/json's own errors, which
// the schema walk normally pre-empts.
func TestDecodeError(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name        string
		in          string
		into        any
		field, want string
	}{
		{"type", `{"job":{"job_id":"7"}}`, &Envelope{}, "job.job_id", `report: field "job.job_id": want integer, got string`},
		{"unknown", `{"bogus":1}`, &Envelope{}, "bogus", `report: field "bogus": unknown field`},
		{"syntax", `{"v":}`, &Envelope{}, "", "malformed JSON at byte 6"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			dec := json.NewDecoder(strings.NewReader(tt.in))
			dec.DisallowUnknownFields()
			err := decodeError(dec.Decode(tt.into))
			checkErr(t, err, ErrInvalid, tt.field, tt.want)
		})
	}
}

// TestSchema checks the schema derived from the Go types: every field has
// a plain json tag (schemaOf panics otherwise), the paths tests use exist,
// and required-ness follows omitempty.
func TestSchema(t *testing.T) {
	t.Parallel()
	s := envelopeSchema()
	for _, tt := range []struct {
		path     []string
		kind     nodeKind
		required bool
	}{
		{[]string{"v"}, nodeInt, true},
		{[]string{"job"}, nodeObject, false},
		{[]string{"job", "job_id"}, nodeUint, true},
		{[]string{"sample", "iters"}, nodeArray, false},
		{[]string{"end", "peak_gpu_bytes"}, nodeMap, false},
		{[]string{"snapshot", "partitions"}, nodeArray, true},
		{[]string{"action", "time_limit_min"}, nodeInt, false},
	} {
		n, f := s, (*schemaField)(nil)
		for _, p := range tt.path {
			for n.Kind == nodeArray {
				n = n.Elem
			}
			if f = n.Fields[p]; f == nil {
				t.Fatalf("schema has no %v", tt.path)
			}
			n = f.Node
		}
		if n.Kind != tt.kind || f.Required != tt.required {
			t.Errorf("%v: kind %d required %v, want %d %v", tt.path, n.Kind, f.Required, tt.kind, tt.required)
		}
	}
	for _, bad := range []any{struct{ X int }{}, map[int]int{}, struct {
		X chan int `json:"x"`
	}{}} {
		func() {
			defer func() {
				if recover() == nil {
					t.Errorf("schemaOf(%T) did not panic", bad)
				}
			}()
			schemaOf(reflect.TypeOf(bad))
		}()
	}
}

// BenchmarkDecode measures the coordinator's per-message cost for the most
// frequent kind (three passes: version, schema walk, decode).
func BenchmarkDecode(b *testing.B) {
	in := mustEncode(b, fixture(KindSample))
	b.SetBytes(int64(len(in)))
	b.ReportAllocs()
	for b.Loop() {
		if _, err := Decode(in); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkDecodeSample200 is a sample carrying 200 iterations (fast
// training at a 5 s report interval; make soak-ci's load), where the
// per-iteration cost of the three passes dominates.
func BenchmarkDecodeSample200(b *testing.B) {
	e := fixture(KindSample)
	base := e.Sample.Iters[0]
	e.Sample.Iters = e.Sample.Iters[:0]
	for i := range 200 {
		it := base
		it.Step += int64(i)
		it.AtMS += int64(i) * 25
		it.DurMS = 24.5 + float64(i%7)
		it.Loss = ptr(2.5 / float64(i+1))
		e.Sample.Iters = append(e.Sample.Iters, it)
	}
	in := mustEncode(b, e)
	b.SetBytes(int64(len(in)))
	b.ReportAllocs()
	for b.Loop() {
		if _, err := Decode(in); err != nil {
			b.Fatal(err)
		}
	}
}
