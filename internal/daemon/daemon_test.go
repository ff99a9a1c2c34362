package daemon

import (
	"bytes"
	"encoding/json"
	"errors"
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func TestDuration(t *testing.T) {
	t.Parallel()
	type cfg struct {
		D   Duration  `json:"d"`
		Opt *Duration `json:"opt"`
	}
	var c cfg
	if err := DecodeJSON([]byte(`{"d": "90s"}`), &c, 1); err != nil || c.D.D() != 90*time.Second || c.Opt != nil {
		t.Fatalf("decode: %+v %v", c, err)
	}
	b, err := json.Marshal(cfg{D: Duration(5 * time.Minute), Opt: Ptr(Duration(0))})
	if err != nil || string(b) != `{"d":"5m0s","opt":"0s"}` {
		t.Fatalf("marshal: %s %v", b, err)
	}
	var back cfg
	if err := DecodeJSON(b, &back, 1); err != nil || back.D.D() != 5*time.Minute || back.Opt == nil || *back.Opt != 0 {
		t.Fatalf("round trip: %+v %v", back, err)
	}
	for body, want := range map[string]string{
		`{"d": "soon"}`:       `config field "d": "soon" is not a duration like "90s"`,
		`{"d": 90}`:           `config field "d": 90 is not a duration`,
		`{"opt": true}`:       `config field "opt": true is not a duration`,
		`{"d": "1s", "e": 1}`: `config field "e": unknown field`,
		`{"d": "1s"} []`:      "data after the JSON object",
		`{"d": "1s"`:          "unexpected end of the file",
		`{"d": null}`:         `config field "d": null is not a duration`,
	} {
		var c cfg
		err := DecodeJSON([]byte(body), &c, 1)
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: error %v, want ~%q", body, err, want)
		}
		var fe *FieldError
		if strings.Contains(want, "config field") && !errors.As(err, &fe) {
			t.Errorf("%s: %v is not a *FieldError", body, err)
		}
	}
}

func TestBound(t *testing.T) {
	t.Parallel()
	type cfg struct {
		B Bound `json:"b"`
	}
	for body, want := range map[string]Bound{
		`{"b": 3}`: Limit(3), `{"b": 0}`: Limit(0), `{"b": "unbounded"}`: Unbounded(),
		`{"b": -1}`: Unbounded(), // the spelling before "unbounded"
		`{}`:        Limit(7),    // absent: the default already there
	} {
		c := cfg{B: Limit(7)}
		if err := DecodeJSON([]byte(body), &c, 1); err != nil || c.B != want {
			t.Errorf("%s: %v %v, want %v", body, c.B, err, want)
		}
	}
	for _, body := range []string{`{"b": "many"}`, `{"b": 1.5}`, `{"b": null}`, `{"b": true}`} {
		var c cfg
		err := DecodeJSON([]byte(body), &c, 1)
		if err == nil || !strings.Contains(err.Error(), `config field "b": `) || !strings.Contains(err.Error(), `"unbounded"`) {
			t.Errorf("%s: error %v", body, err)
		}
	}
	for b, want := range map[Bound]string{Limit(4): "4", Unbounded(): `"unbounded"`} {
		if got, err := json.Marshal(b); err != nil || string(got) != want {
			t.Errorf("marshal %v: %s %v", b, got, err)
		}
	}
}

// TestDecodeStrict: what encoding/json would accept quietly is refused,
// with the field and, where the walk knows it, the line and column.
func TestDecodeStrict(t *testing.T) {
	t.Parallel()
	type inner struct {
		N     int                `json:"n"`
		Speed map[string]float64 `json:"speed"`
	}
	type cfg struct {
		V     int      `json:"v"`
		Name  string   `json:"name"`
		D     Duration `json:"d"`
		Inner inner    `json:"inner"`
		List  []string `json:"list"`
	}
	for _, tc := range []struct {
		body      string
		want      string // in the error
		line, col int    // 0: no position
	}{
		{body: "{\"name\": \"a\",\n \"name\": \"b\"}", want: `config field "name": given twice`, line: 2, col: 2},
		{body: "{\"inner\": {\"speed\": {\"gpu\": 8,\n    \"gpu\": 2}}}", want: `config field "inner.speed.gpu": key given twice`, line: 2, col: 5},
		{body: "{\"Name\": \"a\"}", want: `config field "Name": unknown field (did you mean "name"?)`, line: 1, col: 2},
		{body: "{\n\"inner\": {\"n\": \"x\"}}", want: `config field "inner.n": want an integer, got a string`, line: 2, col: 16},
		{body: "{\"inner\": {\"n\": 1.5}}", want: `want an integer, got 1.5`, line: 1, col: 17},
		{body: "{\"list\": null}", want: `config field "list": want an array, got null`, line: 1, col: 10},
		{body: "{\"name\": \"a\"\n  \"d\": \"1s\"}", want: `JSON syntax error: invalid character '"' after object key:value pair`, line: 2, col: 3},
		{body: "{\"d\": \"1s\", \"name\": tru}", want: `config field "name": JSON syntax error: invalid character '}' in literal true`, line: 1, col: 24},
		{body: "{\"list\": [\"a\",]}", want: `config field "list[1]": JSON syntax error`, line: 1, col: 15},
		{body: "{\"name\": \"a\"}\n\n {}", want: "data after the JSON object", line: 3, col: 2},
		{body: "{\"name\": \"a\",\n", want: "unexpected end of the file", line: 2, col: 1},
		{body: "{\"v\": 2, \"new\": 1}", want: `config field "v": version 2 is not supported: this program reads version 1`},
		{body: "{\"v\": \"1\"}", want: `config field "v": version "1" is not supported`},
		{body: "\xff", want: "not valid UTF-8"},
	} {
		var c cfg
		err := DecodeJSON([]byte(tc.body), &c, 1)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%q: error %v, want ~%q", tc.body, err, tc.want)
			continue
		}
		var fe *FieldError
		if !errors.As(err, &fe) || fe.Line != tc.line || fe.Col != tc.col {
			t.Errorf("%q: %#v, want line %d col %d", tc.body, err, tc.line, tc.col)
		}
	}
	// "v" absent or 1: read; LoadJSON names file:line:col
	for _, body := range []string{`{"name": "a"}`, `{"v": 1, "name": "a"}`} {
		var c cfg
		if err := DecodeJSON([]byte(body), &c, 1); err != nil || c.Name != "a" {
			t.Errorf("%s: %+v %v", body, c, err)
		}
	}
	p := filepath.Join(t.TempDir(), "c.json")
	if err := os.WriteFile(p, []byte("{\"name\": \"a\",\n\"nme\": 1}"), 0o600); err != nil {
		t.Fatal(err)
	}
	var c cfg
	if err := LoadJSON(p, &c, 1); err == nil || !strings.HasPrefix(err.Error(), "config "+p+":2:1: config field \"nme\": unknown field") {
		t.Errorf("LoadJSON: %v", err)
	}
}

func TestFlags(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		args []string
		code int
		ok   bool
		err  string
	}{
		{nil, 0, true, ""},
		{[]string{"-log-format", "text", "-log-level", "debug"}, 0, true, ""},
		{[]string{"-log-format", "xml"}, 0, true, "want json or text"},
		{[]string{"-log-level", "loud"}, 0, true, "-log-level"},
		{[]string{"-h"}, ExitOK, false, ""},
		{[]string{"-nope"}, ExitUsage, false, ""},
	} {
		var f Flags
		fs := flag.NewFlagSet("d", flag.ContinueOnError)
		fs.SetOutput(&bytes.Buffer{})
		f.Register(fs, "127.0.0.1:1")
		code, ok := Parse(fs, tc.args)
		if code != tc.code || ok != tc.ok {
			t.Errorf("%q: Parse = %d %v, want %d %v", tc.args, code, ok, tc.code, tc.ok)
			continue
		}
		if !ok {
			continue
		}
		if f.MetricsListen != "127.0.0.1:1" || FlagSet(fs, "metrics-listen") {
			t.Errorf("%q: metrics default %q", tc.args, f.MetricsListen)
		}
		var out bytes.Buffer
		log, err := f.Logger(&out)
		if tc.err != "" {
			if err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Errorf("%q: Logger error %v, want ~%q", tc.args, err, tc.err)
			}
			continue
		}
		if err != nil {
			t.Fatal(err)
		}
		log.Info("hello")
		if json := strings.HasPrefix(out.String(), "{"); json != (f.LogFormat == "json") {
			t.Errorf("%q: logged %q", tc.args, out.String())
		}
	}
}
