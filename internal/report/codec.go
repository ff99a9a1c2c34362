package report

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

	"github.com/isched/isched/internal/strictjson"
)

// Encode validates e and returns its JSON encoding, without a trailing
// newline. HTML characters are not escaped: nothing renders envelopes as
// HTML, and "\u003c" would cost six bytes of MaxPayload for every "<" in a
// batch script.
func Encode(e *Envelope) ([]byte, error) {
	if err := e.Validate(); err != nil {
		return nil, err
	}
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(e); err != nil {
		// Validate rules out everything json.Marshal can fail on.
		return nil, fmt.Errorf("report: encode %s: %w", e.Kind, err)
	}
	b := bytes.TrimSuffix(buf.Bytes(), []byte("\n"))
	if max := maxFor(e.Kind); len(b) > max {
		return nil, fmt.Errorf("%w: %s envelope is %d bytes (max %d)", ErrTooLarge, e.Kind, len(b), max)
	}
	return b, nil
}

// maxFor is the size limit of a kind: the agent's cluster tables (written
// to keys only the agent may write, read with DecodeTable) may be large; a
// cluster of 10,000 jobs needs about 3 MiB. Everything else, and everything
// on a stream, stays within MaxPayload.
func maxFor(k Kind) int {
	if k == KindSnapshot || k == KindJobs {
		return MaxTablePayload
	}
	return MaxPayload
}

// DecodeTable decodes the agent's snapshot or job table, which may exceed
// MaxPayload (up to MaxTablePayload). Any other kind is refused.
func DecodeTable(b []byte) (*Envelope, error) {
	if len(b) > MaxTablePayload {
		return nil, fmt.Errorf("%w: %d bytes (max %d)", ErrTooLarge, len(b), MaxTablePayload)
	}
	e, err := decode(b)
	if err != nil {
		return nil, err
	}
	if e.Kind != KindSnapshot && e.Kind != KindJobs {
		return nil, fmt.Errorf("%w: kind %q is not a cluster table", ErrInvalid, e.Kind)
	}
	return e, nil
}

// DecodeTableOf is DecodeTable for one kind of table (KindSnapshot or
// KindJobs): an envelope of the other kind is an error.
func DecodeTableOf(b []byte, kind Kind) (*Envelope, error) {
	env, err := DecodeTable(b)
	if err != nil {
		return nil, err
	}
	if env.Kind != kind {
		return nil, fmt.Errorf("want a %s envelope, got %s", kind, env.Kind)
	}
	return env, nil
}

// Decode parses and validates one envelope. It never panics and never
// returns a partly filled envelope: on error the envelope is nil and the
// error wraps [ErrTooLarge], [ErrVersion] or [ErrInvalid] (see the package
// documentation for what "strict" means here).
func Decode(b []byte) (*Envelope, error) {
	if len(b) > MaxPayload {
		return nil, fmt.Errorf("%w: %d bytes (max %d)", ErrTooLarge, len(b), MaxPayload)
	}
	return decode(b)
}

func decode(b []byte) (*Envelope, error) {
	// encoding/json would quietly turn invalid UTF-8 into U+FFFD, so two
	// different inputs would decode alike.
	if !utf8.Valid(b) {
		return nil, fmt.Errorf("%w: not valid UTF-8", ErrInvalid)
	}
	if err := checkVersion(b); err != nil {
		return nil, err
	}
	// b is one valid JSON object from here on.
	if err := walkSchema(b, envelopeSchema()); err != nil {
		return nil, err
	}
	// The walk has matched every key exactly, refused duplicates and checked
	// every type and range, so json.Unmarshal (which would ignore an unknown
	// field) only converts; FuzzDecode holds the two to agreeing with a
	// strict json.Decoder.
	var e Envelope
	if err := json.Unmarshal(b, &e); err != nil {
		return nil, decodeError(err)
	}
	if err := e.Validate(); err != nil {
		return nil, err
	}
	return &e, nil
}

// checkVersion makes sure b is exactly one JSON object and reads its "v"
// before anything else looks at the fields, so that an envelope from a newer
// schema fails as ErrVersion rather than with an unknown-field error.
func checkVersion(b []byte) error {
	if json.Valid(b) {
		if v, ok := topLevelVersion(b); ok && v == strconv.Itoa(Version) {
			return nil
		}
	}
	// Not valid, or not a plain object with one good "v": the slow path says
	// exactly what is wrong.
	dec := json.NewDecoder(bytes.NewReader(b))
	var top map[string]json.RawMessage
	if err := dec.Decode(&top); err != nil {
		return decodeError(err)
	}
	if _, err := dec.Token(); err != io.EOF {
		return fmt.Errorf("%w: trailing data after the JSON object at byte %d", ErrInvalid, dec.InputOffset())
	}
	if top == nil {
		return fail("", "want object, got null")
	}
	raw, ok := top["v"]
	if !ok {
		return fmt.Errorf("%w: field \"v\" missing (this build speaks %d)", ErrVersion, Version)
	}
	if v, err := strconv.Atoi(string(raw)); err != nil || v != Version {
		var c bytes.Buffer
		if json.Compact(&c, raw) != nil {
			c.Reset()
			c.Write(raw)
		}
		return fmt.Errorf("%w %s (this build speaks %d)", ErrVersion, truncate(c.String(), maxQuoted), Version)
	}
	// A right version the fast path could not read (behind an escaped key).
	return nil
}

// topLevelVersion returns the literal of the one unescaped "v" key of the
// valid JSON object b, without decoding the other values; ok is false when b
// is not an object or "v" is missing, repeated or behind an escaped key.
func topLevelVersion(b []byte) (v string, ok bool) {
	w := strictjson.Scanner{B: b}
	if w.Peek() != '{' {
		return "", false
	}
	w.I++
	found := false
	for first := true; ; first = false {
		if w.Peek() == '}' {
			return v, found
		}
		if !first {
			w.I++ // ','
			w.Peek()
		}
		raw, escaped, ok := w.Str()
		if !ok || escaped {
			return "", false
		}
		w.Peek()
		w.I++ // ':'
		w.Peek()
		start := w.I
		w.Skip()
		if string(raw) == "v" {
			if found {
				return "", false
			}
			found, v = true, string(b[start:w.I])
		}
	}
}

// decodeError turns an encoding/json error into one wrapping ErrInvalid,
// a *FieldError when the error names a field.
func decodeError(err error) error {
	var (
		typeErr *json.UnmarshalTypeError
		synErr  *json.SyntaxError
	)
	switch {
	case errors.As(err, &typeErr):
		// Field is the dotted path of JSON names (without array indexes) since
		// Go 1.20; empty for the top-level value.
		return fail(typeErr.Field, "want %s, got %s", jsonKind(typeErr.Type), typeErr.Value)
	case errors.As(err, &synErr):
		return fmt.Errorf("%w: malformed JSON at byte %d: %v", ErrInvalid, synErr.Offset, synErr)
	case err == io.EOF:
		return fmt.Errorf("%w: empty input", ErrInvalid)
	case err == io.ErrUnexpectedEOF:
		return fmt.Errorf("%w: malformed JSON: unexpected end of input", ErrInvalid)
	}
	// encoding/json has no type for unknown fields; the message is stable.
	if name, ok := strings.CutPrefix(err.Error(), "json: unknown field "); ok {
		if unq, err := strconv.Unquote(name); err == nil {
			name = unq
		}
		return fail(truncate(name, maxQuoted), "unknown field")
	}
	return fmt.Errorf("%w: %v", ErrInvalid, err)
}

func jsonKind(t reflect.Type) string {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	switch t.Kind() {
	case reflect.Struct, reflect.Map:
		return "object"
	case reflect.Slice, reflect.Array:
		return "array"
	case reflect.Bool:
		return "boolean"
	case reflect.String:
		return "string"
	case reflect.Float32, reflect.Float64:
		return "number"
	}
	return "integer"
}
