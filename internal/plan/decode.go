package plan

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"reflect"
	"strconv"
	"strings"
	"unicode/utf8"
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

func joinField(prefix, elem string) string {
	switch {
	case prefix == "":
		return elem
	case strings.HasPrefix(elem, "["):
		return prefix + elem
	}
	return prefix + "." + elem
}

// maxDocument bounds an input file: a model summary with one line per
// layer of a very large network is a few MB.
const maxDocument = 32 << 20

// decodeStrict decodes one JSON object into v (a pointer to struct) and
// refuses what encoding/json would quietly accept: unknown keys, keys that
// differ only in case, duplicate keys, a wrong type (with the path of the
// value, which encoding/json does not give for array elements), a fraction
// into an integer, and anything after the object.
//
// required names top-level keys that must be present, so that a missing
// count is not read as a zero.
func decodeStrict(b []byte, v any, required ...string) error {
	if len(b) > maxDocument {
		return fieldErr("", "document is %d bytes (max %d)", len(b), maxDocument)
	}
	if !utf8.Valid(b) {
		return fieldErr("", "not valid UTF-8")
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.UseNumber()
	w := &walker{dec: dec, required: required}
	if err := w.value(reflect.TypeOf(v).Elem(), ""); err != nil {
		return err
	}
	if _, err := dec.Token(); err != io.EOF {
		return fieldErr("", "trailing data after the JSON object at byte %d", dec.InputOffset())
	}
	d := json.NewDecoder(bytes.NewReader(b))
	d.DisallowUnknownFields() // checked above; a second lock
	if err := d.Decode(v); err != nil {
		return fieldErr("", "%v", err)
	}
	return nil
}

type walker struct {
	dec      *json.Decoder
	required []string // top-level keys
}

func (w *walker) token(path string) (json.Token, error) {
	tok, err := w.dec.Token()
	if err != nil {
		var se *json.SyntaxError
		switch {
		case errors.As(err, &se):
			return nil, fieldErr(path, "JSON syntax error at byte %d: %v", se.Offset, se)
		case err == io.EOF || errors.Is(err, io.ErrUnexpectedEOF):
			return nil, fieldErr(path, "unexpected end of the document")
		}
		return nil, fieldErr(path, "%v", err)
	}
	return tok, nil
}

func want(t reflect.Type) string {
	switch t.Kind() {
	case reflect.Struct, reflect.Map:
		return "an object"
	case reflect.Slice, reflect.Array:
		return "an array"
	case reflect.String:
		return "a string"
	case reflect.Bool:
		return "true or false"
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		return "an integer"
	case reflect.Float32, reflect.Float64:
		return "a number"
	case reflect.Pointer:
		return want(t.Elem())
	}
	return t.String()
}

func got(tok json.Token) string {
	switch tok := tok.(type) {
	case nil:
		return "null"
	case bool:
		return "a boolean"
	case string:
		return "a string"
	case json.Number:
		return "the number " + string(tok)
	case json.Delim:
		if tok == '{' {
			return "an object"
		}
		return "an array"
	}
	return fmt.Sprint(tok)
}

func (w *walker) value(t reflect.Type, path string) error {
	tok, err := w.token(path)
	if err != nil {
		return err
	}
	if t.Kind() == reflect.Pointer {
		if tok == nil {
			return nil
		}
		t = t.Elem()
	}
	mismatch := func() error { return fieldErr(path, "want %s, got %s", want(t), got(tok)) }
	switch tok := tok.(type) {
	case json.Delim:
		switch {
		case tok == '{' && t.Kind() == reflect.Struct:
			return w.object(t, path)
		case tok == '{' && t.Kind() == reflect.Map && t.Key().Kind() == reflect.String:
			return w.mapping(t, path)
		case tok == '[' && t.Kind() == reflect.Slice:
			for i := 0; w.dec.More(); i++ {
				if err := w.value(t.Elem(), fmt.Sprintf("%s[%d]", path, i)); err != nil {
					return err
				}
			}
			_, err := w.token(path)
			return err
		}
		return mismatch()
	case string:
		if t.Kind() != reflect.String {
			return mismatch()
		}
	case bool:
		if t.Kind() != reflect.Bool {
			return mismatch()
		}
	case json.Number:
		s := string(tok)
		switch t.Kind() {
		case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
			if _, err := strconv.ParseInt(s, 10, t.Bits()); err != nil {
				if strings.ContainsAny(s, ".eE") {
					// 8.2e9 is a fine way to write an integer; 1.5 is not one.
					if f, ferr := strconv.ParseFloat(s, 64); ferr == nil && f == float64(int64(f)) && f < 9e18 && f > -9e18 {
						return fieldErr(path, "want an integer written without a fraction or exponent, got %s", s)
					}
					return fieldErr(path, "want an integer, got %s", s)
				}
				return fieldErr(path, "integer out of range: %s", s)
			}
		case reflect.Float32, reflect.Float64:
			if _, err := strconv.ParseFloat(s, t.Bits()); err != nil {
				return fieldErr(path, "number out of range: %s", s)
			}
		default:
			return mismatch()
		}
	default: // null for a non-pointer
		return mismatch()
	}
	return nil
}

func (w *walker) object(t reflect.Type, path string) error {
	fields := map[string]reflect.Type{}
	for i := 0; i < t.NumField(); i++ {
		f := t.Field(i)
		name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
		if name == "-" || !f.IsExported() {
			continue
		}
		if name == "" {
			name = f.Name
		}
		fields[name] = f.Type
	}
	seen := map[string]bool{}
	for w.dec.More() {
		tok, err := w.token(path)
		if err != nil {
			return err
		}
		key, _ := tok.(string)
		child := joinField(path, key)
		ft, ok := fields[key]
		if !ok {
			return fieldErr(child, "unknown field%s", suggest(key, fields))
		}
		if seen[key] {
			return fieldErr(child, "duplicate field")
		}
		seen[key] = true
		if err := w.value(ft, child); err != nil {
			return err
		}
	}
	if _, err := w.token(path); err != nil {
		return err
	}
	if path == "" {
		for _, k := range w.required {
			if !seen[k] {
				return fieldErr(k, "required field missing")
			}
		}
	}
	return nil
}

func (w *walker) mapping(t reflect.Type, path string) error {
	seen := map[string]bool{}
	for w.dec.More() {
		tok, err := w.token(path)
		if err != nil {
			return err
		}
		key, _ := tok.(string)
		child := joinField(path, key)
		if seen[key] {
			return fieldErr(child, "duplicate key")
		}
		seen[key] = true
		if err := w.value(t.Elem(), child); err != nil {
			return err
		}
	}
	_, err := w.token(path)
	return err
}

// suggest names the known field an unknown key probably meant (same
// letters but for case, or a plural/singular slip).
func suggest(key string, fields map[string]reflect.Type) string {
	k := strings.TrimSuffix(strings.ToLower(key), "s")
	for name := range fields {
		if strings.TrimSuffix(strings.ToLower(name), "s") == k {
			return fmt.Sprintf(" (did you mean %q?)", name)
		}
	}
	return ""
}
