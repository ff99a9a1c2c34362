package cli

import (
	"fmt"
	"time"
)

// The style of every --json output (docs/json.md): snake_case keys; times
// as jsonTime, RFC 3339 in UTC with milliseconds, null when unknown;
// durations as seconds, their key ending in _s; sizes as bytes, their key
// ending in _bytes. The stored and wire types (report.JobStatus, the
// receipts) keep their own encoding: --json prints views made from them
// here, so that the coordinator's records and the CLI's output can change
// apart (TestJSONStyle walks every view).

// jsonTimeLayout is RFC 3339 with milliseconds; in UTC it ends in Z.
const jsonTimeLayout = "2006-01-02T15:04:05.000Z07:00"

// jsonTime is a time in --json output: "2026-11-27T15:04:05.123Z".
type jsonTime struct{ time.Time }

// MarshalJSON writes the time in UTC with exactly three fraction digits.
func (t jsonTime) MarshalJSON() ([]byte, error) {
	return []byte(`"` + t.UTC().Format(jsonTimeLayout) + `"`), nil
}

// UnmarshalJSON reads any RFC 3339 time (the tests read output back).
func (t *jsonTime) UnmarshalJSON(b []byte) error {
	if string(b) == "null" {
		return nil // encoding/json's convention: null leaves it as it is
	}
	if len(b) < 2 || b[0] != '"' || b[len(b)-1] != '"' {
		return fmt.Errorf("time %s: want an RFC 3339 string", b)
	}
	v, err := time.Parse(time.RFC3339Nano, string(b[1:len(b)-1]))
	if err != nil {
		return fmt.Errorf("time: %w", err)
	}
	t.Time = v.UTC()
	return nil
}

// msTime is a unix-milliseconds time of a stored record.
func msTime(ms int64) jsonTime { return jsonTime{time.UnixMilli(ms).UTC()} }

// msTimeOrNil is msTime, or nil (null) for 0 or less: not known, not yet.
func msTimeOrNil(ms int64) *jsonTime {
	if ms <= 0 {
		return nil
	}
	t := msTime(ms)
	return &t
}

// timeOrNil is t as a jsonTime, nil for the zero time.
func timeOrNil(t time.Time) *jsonTime {
	if t.IsZero() {
		return nil
	}
	return &jsonTime{t.UTC()}
}

// msSeconds is a duration of milliseconds in seconds.
func msSeconds(ms float64) float64 { return ms / 1000 }
