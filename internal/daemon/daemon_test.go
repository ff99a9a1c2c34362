package daemon

import (
	"bytes"
	"encoding/json"
	"errors"
	"flag"
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
	if err := DecodeJSON([]byte(`{"d": "90s"}`), &c); err != nil || c.D.D() != 90*time.Second || c.Opt != nil {
		t.Fatalf("decode: %+v %v", c, err)
	}
	b, err := json.Marshal(cfg{D: Duration(5 * time.Minute), Opt: Ptr(Duration(0))})
	if err != nil || string(b) != `{"d":"5m0s","opt":"0s"}` {
		t.Fatalf("marshal: %s %v", b, err)
	}
	var back cfg
	if err := DecodeJSON(b, &back); err != nil || back.D.D() != 5*time.Minute || back.Opt == nil || *back.Opt != 0 {
		t.Fatalf("round trip: %+v %v", back, err)
	}
	for body, want := range map[string]string{
		`{"d": "soon"}`:       `config field "d": "soon" is not a duration like "90s"`,
		`{"d": 90}`:           `config field "d": 90 is not a duration`,
		`{"opt": true}`:       `config field "opt": true is not a duration`,
		`{"d": "1s", "e": 1}`: `unknown field "e"`,
		`{"d": "1s"} []`:      "data after the JSON object",
		`{"d": "1s"`:          "unexpected EOF",
	} {
		var c cfg
		err := DecodeJSON([]byte(body), &c)
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: error %v, want ~%q", body, err, want)
		}
		var fe *FieldError
		if strings.Contains(want, "config field") && !errors.As(err, &fe) {
			t.Errorf("%s: %v is not a *FieldError", body, err)
		}
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
