package report

import (
	"bytes"
	"encoding/json"
	"errors"
	"math"
	"os"
	"path/filepath"
	"reflect"
	"strconv"
	"strings"
	"testing"
	"unicode/utf8"
)

// FuzzDecode: Decode never panics, every error wraps a sentinel, and what it
// accepts re-encodes to an equal envelope whose encoding is a fixed point.
// Seeds: testdata/fuzz/FuzzDecode and the golden files.
func FuzzDecode(f *testing.F) {
	addGolden(f)
	f.Fuzz(func(t *testing.T, in []byte) { checkDecode(t, in) })
}

// checkDecode is the FuzzDecode property for one input; it reports whether
// Decode accepted the input.
func checkDecode(t *testing.T, in []byte) (accepted bool) {
	checkWalkers(t, in)
	e1, err := Decode(in)
	if err != nil {
		if e1 != nil {
			t.Fatalf("Decode returned an envelope with error %v", err)
		}
		if !errors.Is(err, ErrInvalid) && !errors.Is(err, ErrVersion) && !errors.Is(err, ErrTooLarge) {
			t.Fatalf("error wraps no sentinel: %v", err)
		}
		return false
	}
	// Decode converts with the lenient json.Unmarshal after its own schema
	// walk; a strict decoder must take the same input to the same envelope.
	dec := json.NewDecoder(bytes.NewReader(in))
	dec.DisallowUnknownFields()
	var strict Envelope
	if err := dec.Decode(&strict); err != nil {
		t.Fatalf("Decode accepted what a strict json.Decoder refuses: %v\ninput: %q", err, in)
	}
	if !reflect.DeepEqual(e1, &strict) {
		t.Fatalf("Decode and a strict json.Decoder disagree\nDecode: %+v\nstrict: %+v", e1, &strict)
	}
	b2, err := Encode(e1)
	if errors.Is(err, ErrTooLarge) {
		// Re-encoding can grow: U+2028 is escaped, exponents gain a sign.
		return true
	}
	if err != nil {
		t.Fatalf("Decode accepted what Encode refuses: %v\ninput: %q", err, in)
	}
	e2, err := Decode(b2)
	if err != nil {
		t.Fatalf("Decode(Encode(e)): %v\ninput:   %q\nencoded: %q", err, in, b2)
	}
	normalize(reflect.ValueOf(e1))
	if !reflect.DeepEqual(e1, e2) {
		t.Fatalf("round trip changed the envelope\nfirst:  %+v\nsecond: %+v", e1, e2)
	}
	b3, err := Encode(e2)
	if err != nil || !bytes.Equal(b2, b3) {
		t.Fatalf("encoding is not a fixed point: %v\n%q\n%q", err, b2, b3)
	}
	return true
}

// checkWalkers holds the byte walker (walkSchema) to the Token walker it
// replaced (refWalkSchema) on what decode gives it (valid UTF-8 and valid
// JSON): the same verdict, and on a refusal the same field and reason.
func checkWalkers(t *testing.T, in []byte) {
	if !utf8.Valid(in) || !json.Valid(in) {
		return
	}
	got, want := walkSchema(in, envelopeSchema()), refWalkSchema(in, envelopeSchema())
	if (got == nil) != (want == nil) {
		t.Fatalf("schema walk: byte walker %v, Token walker %v\ninput: %q", got, want, in)
	}
	if got == nil {
		return
	}
	var gfe, wfe *FieldError
	if !errors.As(got, &gfe) || !errors.As(want, &wfe) || *gfe != *wfe {
		t.Fatalf("schema walk: byte walker %v, Token walker %v\ninput: %q", got, want, in)
	}
}

// addGolden seeds a fuzz target with the golden envelopes.
func addGolden(f *testing.F) {
	f.Helper()
	golden, _ := filepath.Glob(filepath.Join("testdata", "golden", "*.json"))
	for _, g := range golden {
		b, err := os.ReadFile(g)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
}

// FuzzWalkSchema compares the two schema walks on inputs that are valid
// JSON more often than FuzzDecode's (the seeds are the golden envelopes).
func FuzzWalkSchema(f *testing.F) {
	addGolden(f)
	for _, in := range []string{
		`{"v":1,"kind":"sample","\u0076":2,"job":{"user":"a","User":"b"}}`,
		`{"v":1,"end":{"peak_gpu_bytes":{"GPU-0":1,"GPU-\u0030":2}}}`,
		`{"v":1,"end":{"peak_gpu_bytes":{"GPU-0":-1.5,"x":"y"}}}`,
		`{"v":1,"sample":{"iters":[{"step":1},{"step":2,"step":3}]}}`,
		`{"v":1,"sample":{"iters":[{"step":1e3},{"step":-1,"epoch":1}],"gaps":99999999999999999999}}`,
		`{"v":1,"sample":{"iters":[{"step":1,"epoch":2,"at_ms":3,"dur_ms":4,"source":"file"},null,[]]}}`,
		`{"v":1,"job":{"array_task_id":null,"uid":-1}}`,
	} {
		f.Add([]byte(in))
	}
	f.Fuzz(func(t *testing.T, in []byte) { checkWalkers(t, in) })
}

// TestDecodeMutations is a structured complement to FuzzDecode, whose byte
// mutations rarely produce well-formed JSON: every value of every fixture
// is replaced in turn by hostile values (and deleted), and each result must
// satisfy the FuzzDecode property.
func TestDecodeMutations(t *testing.T) {
	t.Parallel()
	replacements := []any{
		nil, true, "", "x", "\u2028\x1b", json.RawMessage("-1"), json.RawMessage("0"), json.RawMessage("1.5"),
		json.RawMessage("1e400"), json.RawMessage("18446744073709551616"), json.RawMessage("{}"), json.RawMessage("[]"),
	}
	for _, kind := range allKinds {
		t.Run(string(kind), func(t *testing.T) {
			t.Parallel()
			var paths []string
			var collect func(prefix string, v any)
			collect = func(prefix string, v any) {
				if prefix != "" {
					paths = append(paths, prefix)
				}
				switch v := v.(type) {
				case map[string]any:
					for k, c := range v {
						collect(strings.TrimPrefix(prefix+"."+k, "."), c)
					}
				case []any:
					for i, c := range v {
						collect(prefix+"."+strconv.Itoa(i), c)
					}
				}
			}
			var m map[string]any
			if err := json.Unmarshal(mutate(t, kind), &m); err != nil {
				t.Fatal(err)
			}
			collect("", m)
			accepted := 0
			for _, p := range paths {
				for _, r := range replacements {
					if checkDecode(t, mutate(t, kind, set(p, r))) {
						accepted++
					}
				}
				checkDecode(t, mutate(t, kind, del(p)))
			}
			if accepted == 0 {
				t.Errorf("no mutation was accepted: the test is not reaching the round trip")
			}
		})
	}
}

// normalize replaces empty slices and maps in omitempty fields by nil, which
// is what they decode to after Encode omitted them.
func normalize(v reflect.Value) {
	switch v.Kind() {
	case reflect.Pointer:
		if !v.IsNil() {
			normalize(v.Elem())
		}
	case reflect.Slice:
		for i := range v.Len() {
			normalize(v.Index(i))
		}
	case reflect.Struct:
		for i := range v.NumField() {
			f := v.Field(i)
			omit := strings.Contains(v.Type().Field(i).Tag.Get("json"), ",omitempty")
			if omit && (f.Kind() == reflect.Slice || f.Kind() == reflect.Map) && f.Len() == 0 {
				f.SetZero()
				continue
			}
			normalize(f)
		}
	}
}

// roundTrip is the property of the Encode fuzzers: Encode succeeds exactly
// when Validate does, and what it produces decodes to the same value.
func roundTrip(t *testing.T, e *Envelope) {
	verr := e.Validate()
	b, err := Encode(e)
	switch {
	case errors.Is(err, ErrTooLarge):
		return
	case (verr == nil) != (err == nil):
		t.Fatalf("Validate() = %v but Encode() = %v", verr, err)
	case err != nil:
		if !errors.Is(err, ErrInvalid) && !errors.Is(err, ErrVersion) {
			t.Fatalf("error wraps no sentinel: %v", err)
		}
		return
	}
	got, err := Decode(b)
	if err != nil {
		t.Fatalf("Decode(Encode(e)): %v\nencoded: %q", err, b)
	}
	normalize(reflect.ValueOf(e))
	if !reflect.DeepEqual(got, e) {
		t.Fatalf("round trip changed the envelope\nsent: %+v\ngot:  %+v", e, got)
	}
}

// FuzzEncodeSample drives the numeric checks: anything Validate lets
// through (NaN, Inf, negative sizes must not) survives JSON unchanged.
func FuzzEncodeSample(f *testing.F) {
	f.Add(int64(1<<30), 12.5, 0.25, false, int64(10), 50.0, "file", int64(1_700_000_000_000))
	f.Add(int64(-1), math.NaN(), math.Inf(-1), true, int64(-1), 101.0, "stdout", int64(0))
	f.Add(int64(0), math.SmallestNonzeroFloat64, math.Copysign(0, -1), false, int64(math.MaxInt64), math.MaxFloat64, "helper", int64(maxTimeMS+1))
	f.Fuzz(func(t *testing.T, rss int64, cpu, loss float64, nonFinite bool, step int64, util float64, source string, at int64) {
		e := fixture(KindSample)
		s := e.Sample
		s.CPU.RSSBytes, s.CPU.CPUPercent = rss, cpu
		s.GPU.Devices[0].UtilPercent = &util
		s.Iters = []Iter{{Step: step, Loss: &loss, LossNonFinite: nonFinite, AtMS: at, DurMS: cpu, Source: source}}
		roundTrip(t, e)
	})
}

// FuzzEncodeAction drives the string checks: anything Validate lets through
// (invalid UTF-8 and injection characters must not) survives JSON unchanged.
func FuzzEncodeAction(f *testing.F) {
	f.Add("signal", "USR1", "all", "", "", int64(0), false, "", "alice", "lab:1:a")
	f.Add("submit", "", "", "gpu,cpu", "gpu:a100:2", int64(90), true, "#!/bin/sh\necho \"<&>\" \u2028\n", "bob", "x")
	f.Add("update", "", "", "gpu TimeLimit=1", "gpu:1\x00", int64(-1), true, "", "\xff", "a b")
	f.Fuzz(func(t *testing.T, typ, signal, steps, partition, gres string, limit int64, hold bool, script, user, id string) {
		e := NewEnvelope(KindAction, testNow)
		e.Action = &Action{
			ID: id, Type: ActionType(typ), Cluster: "lab", JobID: 1, User: user,
			Signal: signal, Steps: steps, Partition: partition, Gres: gres, TimeLimitMin: limit,
			Hold: hold, Script: script, Reason: script, IssuedMS: 1,
		}
		if e.Action.Type == ActionSubmit {
			e.Action.JobID = 0
		}
		roundTrip(t, e)
	})
}

// TestFuzzCorpus keeps the committed FuzzDecode seeds meaningful as the
// schema changes: "valid-*" must decode, "invalid-*" must not.
func TestFuzzCorpus(t *testing.T) {
	t.Parallel()
	files, err := filepath.Glob(filepath.Join("testdata", "fuzz", "FuzzDecode", "*"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no FuzzDecode corpus: %v", err)
	}
	for _, file := range files {
		name := filepath.Base(file)
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			raw, err := os.ReadFile(file)
			if err != nil {
				t.Fatal(err)
			}
			lines := strings.SplitN(strings.TrimSpace(string(raw)), "\n", 2)
			lit, ok := strings.CutPrefix(lines[len(lines)-1], "[]byte(")
			if lines[0] != "go test fuzz v1" || !ok {
				t.Fatalf("not a one-[]byte corpus file")
			}
			in, err := strconv.Unquote(strings.TrimSuffix(lit, ")"))
			if err != nil {
				t.Fatal(err)
			}
			_, err = Decode([]byte(in))
			switch {
			case strings.HasPrefix(name, "valid-") && err != nil:
				t.Errorf("Decode: %v", err)
			case strings.HasPrefix(name, "invalid-") && err == nil:
				t.Errorf("Decode accepted it")
			}
		})
	}
}
