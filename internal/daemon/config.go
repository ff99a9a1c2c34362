package daemon

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"reflect"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/isched/isched/internal/strictjson"
)

// Duration is a time.Duration that a config file writes as Go's duration
// string ("90s", "5m", "720h"); a number or a malformed string is an error
// that names the field.
type Duration time.Duration

// D returns d as a time.Duration.
func (d Duration) D() time.Duration { return time.Duration(d) }

// String is time.Duration's.
func (d Duration) String() string { return time.Duration(d).String() }

// MarshalJSON writes d as a duration string.
func (d Duration) MarshalJSON() ([]byte, error) { return json.Marshal(time.Duration(d).String()) }

// UnmarshalJSON reads a duration string. Its error is a
// *json.UnmarshalTypeError, which encoding/json completes with the field's
// path (policy.margin), so DecodeJSON can name the field.
func (d *Duration) UnmarshalJSON(b []byte) error {
	var s string
	bad := &json.UnmarshalTypeError{Value: string(b), Type: reflect.TypeFor[Duration]()}
	if err := json.Unmarshal(b, &s); err != nil {
		return bad
	}
	v, err := time.ParseDuration(s)
	if err != nil {
		return bad
	}
	*d = Duration(v)
	return nil
}

// Bound is a limit on a count that may also be "unbounded", said so in
// words rather than by a negative number. A config file writes a count
// (0 or more) or the string "unbounded"; a negative count, the spelling
// before "unbounded" existed, still reads as unbounded.
type Bound struct {
	N         int  // the limit, when not Unbounded
	Unbounded bool // no limit
}

// Limit is the bound n.
func Limit(n int) Bound { return Bound{N: n} }

// Unbounded is no bound.
func Unbounded() Bound { return Bound{Unbounded: true} }

func (b Bound) String() string {
	if b.Unbounded {
		return "unbounded"
	}
	return strconv.Itoa(b.N)
}

// MarshalJSON writes b as a count or "unbounded".
func (b Bound) MarshalJSON() ([]byte, error) {
	if b.Unbounded {
		return []byte(`"unbounded"`), nil
	}
	return []byte(strconv.Itoa(b.N)), nil
}

// UnmarshalJSON reads an integer or "unbounded"; its error is a
// *json.UnmarshalTypeError, like Duration's.
func (b *Bound) UnmarshalJSON(data []byte) error {
	var n int
	var s string
	switch {
	case string(data) == "null": // json.Unmarshal would leave n 0
	case json.Unmarshal(data, &n) == nil:
		*b = Limit(n)
		if n < 0 {
			*b = Unbounded()
		}
		return nil
	case json.Unmarshal(data, &s) == nil && s == "unbounded":
		*b = Unbounded()
		return nil
	}
	return &json.UnmarshalTypeError{Value: string(data), Type: reflect.TypeFor[Bound]()}
}

// Ptr returns a pointer to v (for pointer fields in config literals).
func Ptr[T any](v T) *T { return &v }

// FieldError is a config file error that names its field.
type FieldError struct {
	Field string // dotted path: "policy.margin", "policy.dev_windows[1]"; "" for the whole file
	// Line and Col say where in the file (from 1; 0 when not known);
	// LoadJSON puts them after the file's name (file:line:col).
	Line, Col int
	Err       error
}

func (e *FieldError) Error() string {
	if e.Field == "" {
		return e.Err.Error()
	}
	return fmt.Sprintf("config field %q: %v", e.Field, e.Err)
}
func (e *FieldError) Unwrap() error { return e.Err }

// Errorf returns a *FieldError for field.
func Errorf(field, format string, args ...any) error {
	return &FieldError{Field: field, Err: fmt.Errorf(format, args...)}
}

// maxConfig bounds a config file: they are a few KB.
const maxConfig = 1 << 20

// LoadJSON decodes the JSON file at path into v like DecodeJSON; the error
// starts with the file's name, and its line and column where known
// ("config /etc/isched/coordinator.json:3:5: ...").
func LoadJSON(path string, v any, version int) error {
	b, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	if err := DecodeJSON(b, v, version); err != nil {
		return fmt.Errorf("config %s%s: %w", path, Position(err), err)
	}
	return nil
}

// Position is ":line:col" for a *FieldError that knows where it is, else "".
func Position(err error) string {
	if fe := (*FieldError)(nil); errors.As(err, &fe) && fe.Line > 0 {
		return fmt.Sprintf(":%d:%d", fe.Line, fe.Col)
	}
	return ""
}

// DecodeJSON decodes the JSON object b onto v (a pointer to a struct that
// holds the defaults: a key the file leaves out keeps its default)
// strictly. Refused, each with an error naming the field and, where it can,
// the line and column: a syntax error, an unknown key or one differing only
// in case, a key given twice (in an object or a map), a null, a value of
// the wrong type, anything after the object, and a file whose "v" is not
// version (absent: version 1, the files written before "v" existed). The
// walk is internal/strictjson's, shared with the site catalogue and
// reports.
func DecodeJSON(b []byte, v any, version int) error {
	if len(b) > maxConfig {
		return &FieldError{Err: fmt.Errorf("%d bytes: larger than %d", len(b), maxConfig)}
	}
	if !utf8.Valid(b) {
		return &FieldError{Err: errors.New("not valid UTF-8")}
	}
	n := strictjson.Schema(reflect.TypeOf(v).Elem(), strictjson.Options{Custom: customNode})
	if !json.Valid(b) {
		sp := strictjson.Syntax(b)
		if sp != nil && sp.Trailing {
			if p := strictjson.Walk(b[:sp.End], n); p != nil { // the object's own problems first
				return problemErr(b, p)
			}
		}
		return syntaxErr(b, sp)
	}
	if err := checkVersion(b, version); err != nil {
		return err
	}
	if p := strictjson.Walk(b, n); p != nil {
		return problemErr(b, p)
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields() // checked by the walk; a second lock
	if err := dec.Decode(v); err != nil {
		var te *json.UnmarshalTypeError
		if errors.As(err, &te) && te.Field != "" {
			want := te.Type.String()
			switch te.Type {
			case reflect.TypeFor[Duration]():
				want = `a duration like "90s" or "5m"`
			case reflect.TypeFor[Bound]():
				want = `a count (0 or more) or "unbounded"`
			}
			return &FieldError{Field: te.Field, Err: fmt.Errorf("%s is not %s", te.Value, want)}
		}
		return &FieldError{Err: err}
	}
	return nil
}

// customNode is the schema of the config types that read their own JSON.
func customNode(t reflect.Type) *strictjson.Node {
	switch t {
	case reflect.TypeFor[Duration](), reflect.TypeFor[Bound]():
		// Any, not String: their UnmarshalJSON words a wrong value
		// better ("90 is not a duration like ...") than the walk could
		return &strictjson.Node{Kind: strictjson.Any}
	}
	return nil
}

// checkVersion refuses a file of another format version before its keys
// are checked, so that a newer file is refused for its version, not for
// the first key this program does not know.
func checkVersion(b []byte, version int) error {
	var head struct {
		V json.RawMessage `json:"v"`
	}
	if json.Unmarshal(b, &head) != nil || head.V == nil {
		return nil // not an object (the walk says so), or no "v": version 1
	}
	v, err := strconv.Atoi(string(head.V))
	if err == nil && v == version {
		return nil
	}
	return Errorf("v", "version %s is not supported: this program reads version %d (a file without \"v\" is version 1)", head.V, version)
}

// problemErr words a schema problem as a *FieldError with its position.
func problemErr(b []byte, p *strictjson.Problem) error {
	path := ""
	for _, e := range p.Path {
		if e.Kind == strictjson.IndexElem {
			path = strictjson.Join(path, "["+strconv.Itoa(e.Index)+"]")
		} else {
			path = strictjson.Join(path, e.Key)
		}
	}
	line, col := strictjson.LineCol(b, p.Offset)
	fe := &FieldError{Field: path, Line: line, Col: col}
	switch p.Code {
	case strictjson.Mismatch:
		g := strictjson.Got(p.Got, p.Lit)
		if g == "null" {
			g += " (leave the field out for its default)"
		}
		fe.Err = fmt.Errorf("want %s, got %s", p.Want.Want(), g)
	case strictjson.UnknownField:
		fe.Err = errors.New("unknown field" + strictjson.Suggest(p.Path[len(p.Path)-1].Key, p.Node))
	case strictjson.DuplicateField:
		fe.Err = errors.New("given twice")
	case strictjson.DuplicateKey:
		fe.Err = errors.New("key given twice")
	case strictjson.RequiredMissing:
		fe.Err = errors.New("required field missing")
	case strictjson.NotInteger:
		fe.Err = fmt.Errorf("want an integer, got %s", p.Lit)
	case strictjson.OutOfRange, strictjson.Negative:
		fe.Err = fmt.Errorf("number out of range: %s", p.Lit)
	default:
		fe.Err = errors.New(p.Lit)
	}
	return fe
}

// syntaxErr words why b (valid UTF-8) is not one JSON object.
func syntaxErr(b []byte, p *strictjson.SyntaxProblem) error {
	if p == nil {
		return &FieldError{Err: errors.New("not one JSON value")} // unreachable: json.Valid said it is not
	}
	path := ""
	for _, e := range p.Path {
		if e.Kind == strictjson.IndexElem {
			path = strictjson.Join(path, "["+strconv.Itoa(e.Index)+"]")
		} else {
			path = strictjson.Join(path, e.Key)
		}
	}
	fe := &FieldError{Field: path}
	var se *json.SyntaxError
	switch {
	case p.Trailing:
		off := int(p.End)
		for off < len(b) && strings.IndexByte(" \t\r\n", b[off]) >= 0 {
			off++
		}
		fe.Field, fe.Err = "", errors.New("data after the JSON object")
		fe.Line, fe.Col = strictjson.LineCol(b, off)
	case errors.As(p.Err, &se):
		// the Decoder's Offset is not always the byte at fault (inside a
		// literal it is not); json.Unmarshal's scanner's is, less one
		var v any
		if err := json.Unmarshal(b, &v); errors.As(err, &se) {
			fe.Line, fe.Col = strictjson.LineCol(b, int(se.Offset)-1)
		}
		fe.Err = fmt.Errorf("JSON syntax error: %v", se)
	default: // io.EOF, io.ErrUnexpectedEOF
		fe.Line, fe.Col = strictjson.LineCol(b, len(b))
		fe.Err = errors.New("unexpected end of the file")
	}
	return fe
}
