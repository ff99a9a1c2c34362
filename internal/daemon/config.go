package daemon

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"reflect"
	"time"
)

// Duration is a time.Duration that a config file writes as Go's duration
// string ("90s", "5m", "720h"); a number or a malformed string is an error
// that names the field. Config structs use *Duration where "absent" must
// differ from "0s".
type Duration time.Duration

// D returns d as a time.Duration.
func (d Duration) D() time.Duration { return time.Duration(d) }

// String is time.Duration's.
func (d Duration) String() string { return time.Duration(d).String() }

// MarshalJSON writes d as a duration string.
func (d Duration) MarshalJSON() ([]byte, error) { return json.Marshal(time.Duration(d).String()) }

// UnmarshalJSON reads a duration string. Its error is a
// *json.UnmarshalTypeError, which encoding/json completes with the field's
// path (policy.margin), so LoadJSON can name the field.
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

// Ptr returns a pointer to v (for pointer fields in config literals).
func Ptr[T any](v T) *T { return &v }

// FieldError is a config file error that names its field.
type FieldError struct {
	Field string // dotted path: "policy.margin", "policy.dev_windows[1]"
	Err   error
}

func (e *FieldError) Error() string { return fmt.Sprintf("config field %q: %v", e.Field, e.Err) }
func (e *FieldError) Unwrap() error { return e.Err }

// Errorf returns a *FieldError for field.
func Errorf(field, format string, args ...any) error {
	return &FieldError{Field: field, Err: fmt.Errorf(format, args...)}
}

// LoadJSON decodes the JSON file at path into v strictly: unknown fields,
// a value of the wrong type and anything after the object are errors, each
// naming the field where it can.
func LoadJSON(path string, v any) error {
	b, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	if err := DecodeJSON(b, v); err != nil {
		return fmt.Errorf("config %s: %w", path, err)
	}
	return nil
}

// DecodeJSON is LoadJSON's decoding of b.
func DecodeJSON(b []byte, v any) error {
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		var te *json.UnmarshalTypeError
		if errors.As(err, &te) && te.Field != "" {
			want := te.Type.String()
			if te.Type == reflect.TypeFor[Duration]() {
				want = `a duration like "90s" or "5m"`
			}
			return &FieldError{Field: te.Field, Err: fmt.Errorf("%s is not %s", te.Value, want)}
		}
		return err
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return errors.New("data after the JSON object")
	}
	return nil
}
