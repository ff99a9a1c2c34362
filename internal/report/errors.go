package report

import (
	"errors"
	"fmt"
	"strconv"

	"github.com/isched/isched/internal/strictjson"
)

// Sentinel errors. Every error returned by [Decode], [Encode] and the
// Validate methods wraps exactly one of them; test with [errors.Is].
var (
	// ErrInvalid: malformed JSON, unknown or missing fields, wrong types or
	// values that break the schema's rules. Field problems are [*FieldError].
	ErrInvalid = errors.New("report: invalid envelope")
	// ErrVersion: the schema version is missing or not [Version].
	ErrVersion = errors.New("report: unsupported schema version")
	// ErrTooLarge: the payload exceeds [MaxPayload].
	ErrTooLarge = errors.New("report: payload too large")
)

// FieldError is a problem with one value. Field is its JSON path, with dots
// between object keys and [i] for array indexes and map keys, for example
// "sample.iters[3].step"; it is empty when the problem is the whole value.
type FieldError struct {
	Field  string
	Reason string
}

func (e *FieldError) Error() string {
	if e.Field == "" {
		return "report: " + e.Reason
	}
	return fmt.Sprintf("report: field %q: %s", e.Field, e.Reason)
}

// Unwrap makes every FieldError match [ErrInvalid].
func (e *FieldError) Unwrap() error { return ErrInvalid }

// fail builds a *FieldError, returned as error so callers can chain checks.
func fail(field, format string, args ...any) error {
	return &FieldError{Field: field, Reason: fmt.Sprintf(format, args...)}
}

// within prefixes the path of a *FieldError returned by a nested Validate.
func within(prefix string, err error) error {
	var fe *FieldError
	if err == nil || !errors.As(err, &fe) {
		return err
	}
	return &FieldError{Field: joinPath(prefix, fe.Field), Reason: fe.Reason}
}

// joinPath appends a JSON path element ("name" or "[i]") to prefix.
func joinPath(prefix, elem string) string { return strictjson.Join(prefix, elem) }

// index renders an array index or map key as a path element.
func index[T int | string](i T) string {
	switch i := any(i).(type) {
	case string:
		return "[" + truncate(i, maxQuoted) + "]"
	case int:
		return "[" + strconv.Itoa(i) + "]"
	}
	panic("unreachable")
}

// first returns the first non-nil error, so simple checks read as a list.
func first(errs ...error) error {
	for _, err := range errs {
		if err != nil {
			return err
		}
	}
	return nil
}
