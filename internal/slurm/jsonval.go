package slurm

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strconv"
)

// Slurm's JSON changes types between versions for the same field:
//
//	22.05 (openapi v0.0.38)  "time_limit": 60            "job_state": "RUNNING"
//	23.02+                   "time_limit": {"set": true, "infinite": false, "number": 60}
//	23.02+                                               "job_state": ["RUNNING"]
//
// and 22.05 writes its C sentinels as plain numbers (INFINITE = 4294967295,
// NO_VAL = 4294967294) or null. The types below read every spelling of the
// fields this package uses; testdata/README.md lists them.

// Slurm's sentinels (slurm.h).
const (
	noVal32      = 0xfffffffe
	infinite32   = 0xffffffff
	noVal64      = 0xfffffffffffffffe
	infinite64   = 0xffffffffffffffff
	maxPlainUint = 1<<63 - 1
)

// num is an integer field: a number, null, or a {"set","infinite","number"}
// object. Set is false for null, NO_VAL and {"set": false}; Inf is true for
// INFINITE and {"infinite": true}.
type num struct {
	V   int64
	Set bool
	Inf bool
}

func (n *num) UnmarshalJSON(b []byte) error {
	*n = num{}
	b = bytes.TrimSpace(b)
	if len(b) == 0 {
		return fmt.Errorf("empty value")
	}
	switch b[0] {
	case 'n':
		if string(b) == "null" {
			return nil
		}
	case '{':
		// Same reader as ParseSqueue's, so both agree on keys (exact, not
		// encoding/json's case-insensitive match) and on what is valid.
		sc := &scanner{b: b}
		if err := sc.num(n); err != nil {
			return err
		}
		if sc.peek() != 0 {
			return sc.fail("trailing data after the value")
		}
		return nil
	default:
		if v, err := strconv.ParseInt(string(b), 10, 64); err == nil {
			n.set(v, v)
			return nil
		}
		if u, err := strconv.ParseUint(string(b), 10, 64); err == nil {
			switch u {
			case noVal64:
			case infinite64:
				n.Inf, n.Set = true, true
			default:
				n.V, n.Set = maxPlainUint, true
			}
			return nil
		}
		if f, err := strconv.ParseFloat(string(b), 64); err == nil && f == float64(int64(f)) {
			n.set(int64(f), int64(f))
			return nil
		}
	}
	return fmt.Errorf("want a number, got %.64s", b)
}

func (n *num) set(v, raw int64) {
	switch raw {
	case noVal32:
		return
	case infinite32:
		n.Inf, n.Set = true, true
		return
	}
	n.V, n.Set = v, true
}

// int returns the value, or def when unset or infinite.
func (n num) int(def int64) int64 {
	if !n.Set || n.Inf {
		return def
	}
	return n.V
}

// words is a state field: "RUNNING" (22.05) or ["RUNNING", "COMPLETING"]
// (23.02+). The first word is the base state, the rest are flags.
type words []string

func (w *words) UnmarshalJSON(b []byte) error {
	b = bytes.TrimSpace(b)
	switch {
	case len(b) > 0 && b[0] == '"':
		var s string
		if err := json.Unmarshal(b, &s); err != nil {
			return err
		}
		*w = words{s}
		return nil
	case len(b) > 0 && b[0] == '[':
		var ss []string
		if err := json.Unmarshal(b, &ss); err != nil {
			return fmt.Errorf("want a string or a list of strings, got %.64s", b)
		}
		*w = ss
		return nil
	case string(b) == "null":
		*w = nil
		return nil
	}
	return fmt.Errorf("want a string or a list of strings, got %.64s", b)
}

func (w words) first() string {
	if len(w) == 0 {
		return ""
	}
	return w[0]
}

// slurmErrors is the "errors" member of every Slurm JSON answer; its items
// changed keys between versions, so they are read loosely.
type slurmErrors []map[string]any

func (e slurmErrors) err(cmd string) error {
	if len(e) == 0 {
		return nil
	}
	msg := ""
	for i, m := range e {
		if i > 0 {
			msg += "; "
		}
		for _, k := range []string{"description", "error"} {
			if s, ok := m[k].(string); ok && s != "" {
				msg += s
				break
			}
		}
		for _, k := range []string{"error_number", "errno", "error_code"} {
			if v, ok := m[k]; ok {
				msg += fmt.Sprintf(" (%s %v)", k, v)
				break
			}
		}
	}
	return fmt.Errorf("%s reported errors: %s", cmd, msg)
}
