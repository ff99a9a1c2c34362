package strictjson

import (
	"encoding/json"
	"errors"
	"io"
	"reflect"
	"testing"
)

type inner struct {
	N int64 `json:"n"`
}

type doc struct {
	Name  string           `json:"name"`
	Count uint8            `json:"count,omitempty"`
	Rate  float32          `json:"rate,omitempty"`
	Items []inner          `json:"items,omitempty"`
	Tags  map[string]bool  `json:"tags,omitempty"`
	Opt   *inner           `json:"opt,omitempty"`
	Deep  map[string]inner `json:"deep,omitempty"`
}

func TestWalk(t *testing.T) {
	t.Parallel()
	n := Schema(reflect.TypeFor[doc](), Options{RequiredByTag: true})
	for _, tc := range []struct {
		in   string
		code Code
		path []Elem
		lit  string
	}{
		{in: `{"name": "a", "items": [{"n": 1}], "tags": {"x": true}, "opt": null, "deep": {"k": {"n": 2}}}`, code: 255},
		{in: `{}`, code: RequiredMissing, path: []Elem{{Key: "name"}}},
		{in: `{"name": 1}`, code: Mismatch, path: []Elem{{Key: "name"}}, lit: "1"},
		{in: `{"name": "a", "nme": 1}`, code: UnknownField, path: []Elem{{Key: "nme"}}},
		{in: `{"name": "a", "Name": "b"}`, code: UnknownField, path: []Elem{{Key: "Name"}}},
		{in: `{"name": "a", "name": "b"}`, code: DuplicateField, path: []Elem{{Key: "name"}}},
		{in: `{"name": "a", "tags": {"x": true, "x": false}}`, code: DuplicateKey, path: []Elem{{Key: "tags"}, {Key: "x", Kind: MapKeyElem}}},
		{in: `{"name": "a", "count": 1.5}`, code: NotInteger, path: []Elem{{Key: "count"}}, lit: "1.5"},
		{in: `{"name": "a", "count": -1}`, code: Negative, path: []Elem{{Key: "count"}}, lit: "-1"},
		{in: `{"name": "a", "count": 256}`, code: OutOfRange, path: []Elem{{Key: "count"}}, lit: "256"},
		{in: `{"name": "a", "rate": 1e39}`, code: OutOfRange, path: []Elem{{Key: "rate"}}, lit: "1e39"},
		{in: `{"name": "a", "items": [{"n": 1}, {}]}`, code: RequiredMissing, path: []Elem{{Key: "items"}, {Index: 1, Kind: IndexElem}, {Key: "n"}}},
		{in: `{"name": "a", "items": null}`, code: Mismatch, path: []Elem{{Key: "items"}}},
		{in: `{"name": "a", "deep": {"k": {"n": "x"}}}`, code: Mismatch, path: []Elem{{Key: "deep"}, {Key: "k", Kind: MapKeyElem}, {Key: "n"}}},
		{in: `{"na\u006de": "a", "n\u0061me": "b"}`, code: DuplicateField, path: []Elem{{Key: "name"}}},
	} {
		p := Walk([]byte(tc.in), n)
		if tc.code == 255 {
			if p != nil {
				t.Errorf("%s: %+v", tc.in, p)
			}
			continue
		}
		if p == nil || p.Code != tc.code || !reflect.DeepEqual(p.Path, tc.path) || p.Lit != tc.lit {
			t.Errorf("%s: got %+v, want code %d path %v lit %q", tc.in, p, tc.code, tc.path, tc.lit)
		}
	}
	// NullCollections: null for a slice is fine
	if p := Walk([]byte(`{"name": "a", "items": null}`), Schema(reflect.TypeFor[doc](), Options{NullCollections: true})); p != nil {
		t.Errorf("null slice with NullCollections: %+v", p)
	}
	// Require: a field made required without the tag option
	if p := Walk([]byte(`{"name": "a"}`), Schema(reflect.TypeFor[doc](), Options{}).Require("rate")); p == nil || p.Code != RequiredMissing {
		t.Errorf("Require: %+v", p)
	}
}

func TestSyntax(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		in       string
		path     []Elem
		eof      bool
		trailing bool
	}{
		{in: `{"a": [1, 2]}`},
		{in: `{"a": [1, {"b": tru}]}`, path: []Elem{{Key: "a"}, {Index: 1, Kind: IndexElem}, {Key: "b"}}},
		{in: `{"a": "x`, path: []Elem{{Key: "a"}}, eof: true},
		{in: `{"a": 1,`, path: nil, eof: true},
		{in: `{"a": 1} {}`, trailing: true},
	} {
		p := Syntax([]byte(tc.in))
		if tc.path == nil && !tc.eof && !tc.trailing {
			if p != nil || !json.Valid([]byte(tc.in)) {
				t.Errorf("%s: %+v", tc.in, p)
			}
			continue
		}
		if p == nil || !reflect.DeepEqual(p.Path, tc.path) || p.Trailing != tc.trailing ||
			tc.eof != (errors.Is(p.Err, io.ErrUnexpectedEOF) || p.Err == io.EOF) {
			t.Errorf("%s: got %+v, want path %v eof %v trailing %v", tc.in, p, tc.path, tc.eof, tc.trailing)
		}
		if tc.trailing && (p.End != 8 || p.Offset <= p.End) {
			t.Errorf("%s: end %d offset %d", tc.in, p.End, p.Offset)
		}
	}
}

func TestJoin(t *testing.T) {
	t.Parallel()
	for _, tc := range [][3]string{{"", "a", "a"}, {"a", "b", "a.b"}, {"a", "[1]", "a[1]"}, {"a", "", "a"}} {
		if got := Join(tc[0], tc[1]); got != tc[2] {
			t.Errorf("Join(%q, %q) = %q, want %q", tc[0], tc[1], got, tc[2])
		}
	}
}

func TestOffsetAndLineCol(t *testing.T) {
	t.Parallel()
	n := Schema(reflect.TypeFor[doc](), Options{RequiredByTag: true})
	for _, tc := range []struct {
		in        string
		line, col int
	}{
		{in: "{\"name\": \"a\",\n \"name\": \"b\"}", line: 2, col: 2},                         // the second key
		{in: "{\"name\": \"a\",\n\"tags\": {\"x\": true,\n  \"x\": false}}", line: 3, col: 3}, // a map key
		{in: "{\"name\": \"a\", \"count\":\n 1.5}", line: 2, col: 2},                          // the value
		{in: "{\"name\": \"a\", \"nme\": 1}", line: 1, col: 15},                               // an unknown key
		{in: "{\"name\": \"a\", \"items\": [\n{}\n]}", line: 2, col: 2},                       // the closing brace
	} {
		p := Walk([]byte(tc.in), n)
		if p == nil {
			t.Errorf("%q: no problem", tc.in)
			continue
		}
		if l, c := LineCol([]byte(tc.in), p.Offset); l != tc.line || c != tc.col {
			t.Errorf("%q: %+v at %d:%d, want %d:%d", tc.in, p, l, c, tc.line, tc.col)
		}
	}
	if l, c := LineCol([]byte("ab\ncd"), 99); l != 2 || c != 3 {
		t.Errorf("LineCol past the end: %d:%d", l, c)
	}
}

type custom int

func TestCustomAny(t *testing.T) {
	t.Parallel()
	type d struct {
		C custom `json:"c"`
		N int    `json:"n"`
	}
	o := Options{Custom: func(t reflect.Type) *Node {
		if t == reflect.TypeFor[custom]() {
			return &Node{Kind: Any}
		}
		return nil
	}}
	n := Schema(reflect.TypeFor[d](), o)
	for in, want := range map[string]Code{`{"c": "x", "n": 1}`: 255, `{"c": [1, {"a": 2}], "n": 1}`: 255,
		`{"c": 1, "c": 2}`: DuplicateField, `{"c": 1, "n": "x"}`: Mismatch} {
		p := Walk([]byte(in), n)
		if (want == 255) != (p == nil) || p != nil && p.Code != want {
			t.Errorf("%s: %+v, want code %d", in, p, want)
		}
	}
}

// TestGotAndSuggest: the two phrases every strict decoder's errors use.
func TestGotAndSuggest(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		c    byte
		lit  string
		want string
	}{
		{'{', "", "an object"}, {'[', "", "an array"}, {'"', "", "a string"}, {'t', "", "a boolean"},
		{'f', "", "a boolean"}, {'n', "", "null"}, {'-', "-1.5", "the number -1.5"}, {'7', "7", "the number 7"},
	} {
		if got := Got(tc.c, tc.lit); got != tc.want {
			t.Errorf("Got(%q, %q) = %q, want %q", tc.c, tc.lit, got, tc.want)
		}
	}
	n := Schema(reflect.TypeOf(doc{}), Options{})
	for key, want := range map[string]string{
		"Name":  ` (did you mean "name"?)`,  // case
		"item":  ` (did you mean "items"?)`, // singular
		"rates": ` (did you mean "rate"?)`,  // plural
		"nope":  "",
	} {
		if got := Suggest(key, n); got != want {
			t.Errorf("Suggest(%q) = %q, want %q", key, got, want)
		}
	}
}
