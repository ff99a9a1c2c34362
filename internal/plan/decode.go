package plan

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"reflect"
	"strconv"
	"unicode/utf8"

	"github.com/isched/isched/internal/strictjson"
)

// ErrInvalid is matched (errors.Is) by every decoding and validation error
// of a model summary or a site catalogue.
var ErrInvalid = errors.New("invalid")

// FieldError is a problem with one value of an input file. Field is its
// JSON path ("layers[3].params"); empty when the whole document is wrong.
type FieldError struct {
	Field  string
	Reason string
}

func (e *FieldError) Error() string {
	if e.Field == "" {
		return e.Reason
	}
	return fmt.Sprintf("field %s: %s", e.Field, e.Reason)
}

// Unwrap makes every FieldError match ErrInvalid.
func (e *FieldError) Unwrap() error { return ErrInvalid }

func fieldErr(field, format string, args ...any) error {
	return &FieldError{Field: field, Reason: fmt.Sprintf(format, args...)}
}

// fieldCheck is one check of a validator's table: when bad, the error
// names field, with the reason format and args.
type fieldCheck struct {
	bad    bool
	field  string
	format string
	args   []any
}

// firstBad is the error of the first bad check, in table order; nil when
// none is bad. Every check's condition is evaluated, so none may depend
// on an earlier one passing.
func firstBad(cs []fieldCheck) error {
	for _, c := range cs {
		if c.bad {
			return fieldErr(c.field, c.format, c.args...)
		}
	}
	return nil
}

// within says lo <= v <= hi.
func within[T int | int64](v, lo, hi T) bool { return v >= lo && v <= hi }

func joinField(prefix, elem string) string { return strictjson.Join(prefix, elem) }

// maxDocument bounds an input file: a model summary with one line per
// layer of a very large network is a few MB.
const maxDocument = 32 << 20

// decodeStrict decodes one JSON object into v (a pointer to struct) and
// refuses what encoding/json would quietly accept: unknown keys, keys that
// differ only in case, duplicate keys, a wrong type (with the path of the
// value, which encoding/json does not give for array elements), a fraction
// into an integer, and anything after the object. The walk is
// internal/strictjson's, shared with internal/report; this file words it.
//
// decodeChecked is decodeStrict, then v's own Validate.
func decodeChecked(b []byte, v interface{ Validate() error }, required ...string) error {
	if err := decodeStrict(b, v, required...); err != nil {
		return err
	}
	return v.Validate()
}

// required names top-level keys that must be present, so that a missing
// count is not read as a zero.
func decodeStrict(b []byte, v any, required ...string) error {
	if len(b) > maxDocument {
		return fieldErr("", "document is %d bytes (max %d)", len(b), maxDocument)
	}
	if !utf8.Valid(b) {
		return fieldErr("", "not valid UTF-8")
	}
	n := strictjson.Schema(reflect.TypeOf(v).Elem(), strictjson.Options{}).Require(required...)
	if !json.Valid(b) {
		sp := strictjson.Syntax(b)
		if sp != nil && sp.Trailing { // the value's own problems first
			if p := strictjson.Walk(b[:sp.End], n); p != nil {
				return problemErr(p)
			}
		}
		return syntaxErr(b, sp)
	}
	if p := strictjson.Walk(b, n); p != nil {
		return problemErr(p)
	}
	d := json.NewDecoder(bytes.NewReader(b))
	d.DisallowUnknownFields() // checked above; a second lock
	if err := d.Decode(v); err != nil {
		return fieldErr("", "%v", err)
	}
	return nil
}

// where is a byte offset of b as a person finds it in an editor.
func where(b []byte, off int) string {
	line, col := strictjson.LineCol(b, off)
	return fmt.Sprintf("line %d, column %d (byte %d)", line, col, off)
}

// syntaxErr words why a document (valid UTF-8) is not one JSON value.
func syntaxErr(b []byte, p *strictjson.SyntaxProblem) error {
	if p == nil {
		return fieldErr("", "not one JSON value") // unreachable: json.Valid said it is not
	}
	path := pathString(p.Path)
	var se *json.SyntaxError
	switch {
	case p.Trailing:
		return fieldErr("", "trailing data after the JSON object at %s", where(b, int(p.Offset)))
	case errors.As(p.Err, &se):
		return fieldErr(path, "JSON syntax error at %s: %v", where(b, int(se.Offset)), se)
	case p.Err == io.EOF || errors.Is(p.Err, io.ErrUnexpectedEOF):
		return fieldErr(path, "unexpected end of the document")
	}
	return fieldErr(path, "%v", p.Err)
}

// pathString renders a path: "layers[3].params" (map keys as fields).
func pathString(p []strictjson.Elem) string {
	path := ""
	for _, e := range p {
		if e.Kind == strictjson.IndexElem {
			path = joinField(path, "["+strconv.Itoa(e.Index)+"]")
		} else {
			path = joinField(path, e.Key)
		}
	}
	return path
}

// problemErr words a schema problem as a *FieldError.
func problemErr(p *strictjson.Problem) error {
	path := pathString(p.Path)
	switch p.Code {
	case strictjson.Mismatch:
		return fieldErr(path, "want %s, got %s", p.Want.Want(), strictjson.Got(p.Got, p.Lit))
	case strictjson.UnknownField:
		return fieldErr(path, "unknown field%s", strictjson.Suggest(p.Path[len(p.Path)-1].Key, p.Node))
	case strictjson.DuplicateField:
		return fieldErr(path, "duplicate field")
	case strictjson.DuplicateKey:
		return fieldErr(path, "duplicate key")
	case strictjson.RequiredMissing:
		return fieldErr(path, "required field missing")
	case strictjson.NotInteger:
		// 8.2e9 is a fine way to write an integer; 1.5 is not one.
		if f, err := strconv.ParseFloat(p.Lit, 64); err == nil && f == float64(int64(f)) && f < 9e18 && f > -9e18 {
			return fieldErr(path, "want an integer written without a fraction or exponent, got %s", p.Lit)
		}
		return fieldErr(path, "want an integer, got %s", p.Lit)
	case strictjson.OutOfRange, strictjson.Negative:
		if p.Want == strictjson.Float {
			return fieldErr(path, "number out of range: %s", p.Lit)
		}
		return fieldErr(path, "integer out of range: %s", p.Lit)
	}
	return fieldErr(path, "%s", p.Lit)
}
