package cli

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/isched/isched/internal/report"
)

// jsonOutputs are the types --json prints, one per writeJSON call in the
// CLI's source (TestJSONOutputsListed counts them).
var jsonOutputs = map[string]any{
	"estimate":      []jsonRow{},
	"plan":          []jsonPlan{},
	"status JOB":    statusJSON{},
	"status, Slurm": slurmStatusJSON{}, // a job the coordinator has no record of
	"submit":        submitJSON{},
	"status":        []statusJSON{},
	"report":        reportJSON{},
	"simulate":      []simRowJSON{},
	"config":        []configRow{},
	"writeJSON def": nil, // the function itself
}

var (
	snakeKey = regexp.MustCompile(`^[a-z][a-z0-9]*(_[a-z0-9]+)*$`)
	// a duration or time in another unit than seconds, or a time as a number
	badUnit  = regexp.MustCompile(`_(ms|msec|millis|sec|secs|seconds|min|mins|minutes|h|hours|days|mib|gib|kib|mb|gb)(_|$)|^(hours|minutes|seconds|size|mib)$`)
	timeWord = regexp.MustCompile(`(^|_)(at|time|start|end|started|ended|updated|mtime|eta|eta_low|eta_high|limit_end)$`)
)

var jsonTimeType = reflect.TypeOf(jsonTime{})

// styleErrors walks t and says where it leaves the --json style: a key not
// snake_case, a field without a JSON name, a unit other than seconds or
// bytes in a key, a time.Time (not jsonTime), a time-named number.
func styleErrors(t reflect.Type, path string, seen map[reflect.Type]bool) []string {
	for t.Kind() == reflect.Pointer || t.Kind() == reflect.Slice || t.Kind() == reflect.Array {
		t = t.Elem()
	}
	if t.Kind() == reflect.Map {
		if t.Key().Kind() != reflect.String {
			return []string{path + ": a map with non-string keys"}
		}
		return styleErrors(t.Elem(), path+"[key]", seen)
	}
	if t == jsonTimeType || t.Kind() != reflect.Struct || seen[t] {
		return nil
	}
	if t == reflect.TypeOf(time.Time{}) {
		return []string{path + ": time.Time (marshals without fixed milliseconds): use jsonTime"}
	}
	seen[t] = true
	var errs []string
	for i := 0; i < t.NumField(); i++ {
		f := t.Field(i)
		if !f.IsExported() {
			continue
		}
		name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
		if name == "-" {
			continue
		}
		if f.Anonymous && name == "" {
			errs = append(errs, styleErrors(f.Type, path, seen)...)
			continue
		}
		at := path + "." + name
		ft := f.Type
		for ft.Kind() == reflect.Pointer {
			ft = ft.Elem()
		}
		switch {
		case name == "":
			errs = append(errs, path+"."+f.Name+": no JSON name (the Go field name would be the key)")
		case !snakeKey.MatchString(name):
			errs = append(errs, at+": not snake_case")
		case badUnit.MatchString(name):
			errs = append(errs, at+": durations are seconds (_s), sizes bytes (_bytes)")
		case ft == reflect.TypeOf(time.Time{}):
			errs = append(errs, at+": time.Time: use jsonTime (RFC 3339, UTC, milliseconds)")
		case timeWord.MatchString(name) && scalar(ft):
			errs = append(errs, at+": a time: want jsonTime, have "+ft.String())
		}
		errs = append(errs, styleErrors(f.Type, at, seen)...)
	}
	return errs
}

// scalar is whether t is a number or a string: a time-named key of one is
// a time in another form than jsonTime (unix ms, a local layout).
func scalar(t reflect.Type) bool {
	switch t.Kind() {
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64, reflect.Uint, reflect.Uint8, reflect.Uint16,
		reflect.Uint32, reflect.Uint64, reflect.Float32, reflect.Float64, reflect.String:
		return true
	}
	return false
}

// TestJSONStyle: every --json output is in the style of docs/json.md.
func TestJSONStyle(t *testing.T) {
	for cmd, v := range jsonOutputs {
		if v == nil {
			continue
		}
		for _, e := range styleErrors(reflect.TypeOf(v), cmd, map[reflect.Type]bool{}) {
			t.Error(e)
		}
	}
}

// TestStyleErrors: the walker catches what it is there for.
func TestStyleErrors(t *testing.T) {
	type inner struct {
		When time.Time `json:"when"`
	}
	cases := []struct {
		name string
		v    any
		want string // "" : in style
	}{
		{"good", struct {
			A     int              `json:"job_id"`
			T     jsonTime         `json:"eta"`
			P     *jsonTime        `json:"ended"`
			D     float64          `json:"iter_s"`
			M     map[string]int64 `json:"gpu_bytes"`
			Inner []struct {
				At jsonTime `json:"at"`
			} `json:"events"`
		}{}, ""},
		{"Go name", struct{ Step int }{}, "no JSON name"},
		{"camel", struct {
			A int `json:"jobId"`
		}{}, "not snake_case"},
		{"epoch ms", struct {
			A int64 `json:"eta_ms"`
		}{}, "durations are seconds"},
		{"hours", struct {
			A float64 `json:"hours"`
		}{}, "durations are seconds"},
		{"seconds spelt out", struct {
			A float64 `json:"span_seconds"`
		}{}, "durations are seconds"},
		{"MiB", struct {
			A int64 `json:"peak_mib"`
		}{}, "sizes bytes"},
		{"time-named number", struct {
			A int64 `json:"updated"`
		}{}, "a time: want jsonTime"},
		{"time-named string", struct {
			A string `json:"slurm_start"`
		}{}, "a time: want jsonTime"},
		{"time-named object", struct {
			A struct {
				At jsonTime `json:"at"`
			} `json:"ended"`
		}{}, ""},
		{"nested time.Time", struct {
			I []inner `json:"items"`
		}{}, "time.Time"},
	}
	for _, c := range cases {
		errs := styleErrors(reflect.TypeOf(c.v), c.name, map[reflect.Type]bool{})
		got := strings.Join(errs, "; ")
		if (c.want == "") != (got == "") || !strings.Contains(got, c.want) {
			t.Errorf("%s: %q, want %q", c.name, got, c.want)
		}
	}
}

// TestJSONOutputsListed: every writeJSON call prints a type TestJSONStyle
// walks: a new --json output must be added to jsonOutputs.
func TestJSONOutputsListed(t *testing.T) {
	files, err := filepath.Glob("*.go")
	if err != nil {
		t.Fatal(err)
	}
	calls := 0
	for _, f := range files {
		if strings.HasSuffix(f, "_test.go") {
			continue
		}
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		calls += bytes.Count(b, []byte("writeJSON("))
		if bytes.Contains(b, []byte("json.NewEncoder(")) && f != "estimate.go" {
			t.Errorf("%s: prints JSON without writeJSON: use it, and list the type in jsonOutputs", f)
		}
	}
	if calls != len(jsonOutputs) {
		t.Errorf("%d writeJSON calls and definitions in the CLI, %d entries in jsonOutputs: list the new output's type", calls, len(jsonOutputs))
	}
}

// renamed lists, per stored type, the keys its --json view renames.
type viewOf struct {
	stored, view any
	renamed      map[string]string
}

// TestJSONViewsCoverRecords: each view printed for a stored record has
// every field of the record, under the same key or the renamed one, so
// that a field added to the record fails here until --json prints it.
func TestJSONViewsCoverRecords(t *testing.T) {
	at := map[string]string{"at_ms": "at"}
	for _, c := range []viewOf{
		{report.JobStatus{}, statusJSON{}, map[string]string{"started_ms": "started", "ended_ms": "ended", "iter_ms": "iter_s",
			"iter_low_ms": "iter_low_s", "iter_high_ms": "iter_high_s", "eta_ms": "eta", "eta_low_ms": "eta_low",
			"eta_high_ms": "eta_high", "limit_ms": "limit_end", "ckpt_ms": "ckpt_s", "updated_ms": "updated"}},
		{report.Plan{}, statusPlan{}, map[string]string{"ideal_time_minutes": "ideal_time_s"}},
		{report.Span{}, attemptJSON{}, map[string]string{"start_ms": "start", "end_ms": "end"}},
		{report.Verdict{}, verdictJSON{}, map[string]string{"cpu_seconds": "cpu_s"}},
		{report.Checkpoint{}, checkpointJSON{}, map[string]string{"size": "size_bytes", "mtime_ms": "mtime"}},
		{report.StatusEvent{}, eventJSON{}, at},
		{report.Decision{}, decisionJSON{}, at},
	} {
		have := jsonKeys(reflect.TypeOf(c.view))
		for _, k := range jsonKeys(reflect.TypeOf(c.stored)) {
			want := k
			if r, ok := c.renamed[k]; ok {
				want = r
			}
			if !slicesContains(have, want) {
				t.Errorf("%T has %q; its --json view %T has no %q", c.stored, k, c.view, want)
			}
		}
	}
}

func jsonKeys(t reflect.Type) []string {
	var out []string
	for i := 0; i < t.NumField(); i++ {
		f := t.Field(i)
		name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
		if !f.IsExported() || name == "-" {
			continue
		}
		if name == "" {
			name = f.Name
		}
		out = append(out, name)
	}
	return out
}

func slicesContains(s []string, v string) bool {
	for _, x := range s {
		if x == v {
			return true
		}
	}
	return false
}

// TestJSONTime: times print in UTC with exactly three fraction digits
// and read back.
func TestJSONTime(t *testing.T) {
	cases := []struct {
		in   time.Time
		want string
	}{
		{time.Date(2026, 11, 27, 15, 4, 5, 123e6, time.UTC), `"2026-11-27T15:04:05.123Z"`},
		{time.Date(2026, 11, 27, 15, 4, 5, 0, time.UTC), `"2026-11-27T15:04:05.000Z"`},
		{time.Date(2026, 11, 27, 16, 4, 5, 120e6, time.FixedZone("CET", 3600)), `"2026-11-27T15:04:05.120Z"`},
		{time.Date(2026, 11, 27, 15, 4, 5, 123456789, time.UTC), `"2026-11-27T15:04:05.123Z"`},
	}
	for _, c := range cases {
		b, err := json.Marshal(jsonTime{c.in})
		if err != nil || string(b) != c.want {
			t.Errorf("%v: %s %v, want %s", c.in, b, err, c.want)
		}
		var back jsonTime
		if err := json.Unmarshal(b, &back); err != nil || !back.Equal(c.in.Truncate(time.Millisecond)) {
			t.Errorf("%s read back as %v (%v)", b, back, err)
		}
	}
	for _, bad := range []string{`1732719845123`, `"yesterday"`, `"2026-11-27 15:04:05"`} {
		var v jsonTime
		if err := json.Unmarshal([]byte(bad), &v); err == nil {
			t.Errorf("%s: read as %v", bad, v)
		}
	}
	var p *jsonTime
	if err := json.Unmarshal([]byte(`null`), &p); err != nil || p != nil {
		t.Errorf("null: %v %v", p, err)
	}
	if msTimeOrNil(0) != nil || msTimeOrNil(-1) != nil || timeOrNil(time.Time{}) != nil {
		t.Error("an unknown time is not null")
	}
}
