package progress

import (
	"bytes"
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"
)

// Version is the first field of every line of the current format.
const Version = "isched1"

// MaxLineLen bounds a progress-file line, without its newline.
const MaxLineLen = 4096

// NoValue marks an absent Step or Epoch (0 is a real step and a real epoch).
const NoValue = -1

// Kind says what an Event reports.
type Kind string

const (
	KindStep   Kind = "step"   // the loop finished a step
	KindCkpt   Kind = "ckpt"   // the loop finished writing a checkpoint
	KindResume Kind = "resume" // the loop resumed from a checkpoint
)

// Source says where an Event was read.
const (
	SourceFile    = "file"    // the progress file (Tail)
	SourcePattern = "pattern" // the child's output (Matcher)
)

// Event is one thing the training loop reported.
type Event struct {
	Kind Kind
	// Step is the global step, NoValue when unknown (ckpt lines without step=).
	Step int64
	// Epoch is the 0-based epoch in progress, NoValue when unknown.
	Epoch   int
	Samples int64
	// Loss is nil when absent or not finite; NonFinite is set for nan/inf so a
	// diverging run is visible without carrying NaN into JSON encoders.
	Loss      *float64
	NonFinite bool
	// LoopTime is the loop's own clock (Unix seconds), 0 when absent.
	LoopTime      float64
	Total         int64
	Epochs        int
	StepsPerEpoch int64
	// Path is the decoded checkpoint path of ckpt and resume events.
	Path string
	// At is when the reader saw the event (not part of the line).
	At time.Time
	// Source is SourceFile or SourcePattern (not part of the line).
	Source string
}

// ErrNotEvent is returned (wrapped) by ParseLine for a line that does not
// start with an "isched<N>" version field.
var ErrNotEvent = errors.New("not an isched progress line")

// ErrVersion is returned (wrapped) for an "isched<N>" line of another version.
var ErrVersion = errors.New("unsupported progress line version")

// ParseError describes a rejected line. Key names the offending key ("" for
// errors about the line as a whole).
type ParseError struct {
	Key string
	Msg string
	Err error // ErrNotEvent, ErrVersion or nil
}

func (e *ParseError) Error() string {
	if e.Key != "" {
		return fmt.Sprintf("progress line: key %q: %s", e.Key, e.Msg)
	}
	return "progress line: " + e.Msg
}

func (e *ParseError) Unwrap() error { return e.Err }

// quoteShort quotes a value for an error message without echoing a whole
// hostile line into the logs.
func quoteShort(b []byte) string {
	const max = 40
	if len(b) > max {
		return strconv.Quote(string(b[:max])) + "..."
	}
	return strconv.Quote(string(b))
}

// keys allowed per kind; a missing entry is an unknown key.
var allowedKeys = map[Kind]map[string]bool{
	KindStep: {"step": true, "epoch": true, "samples": true, "loss": true, "t": true,
		"total": true, "epochs": true, "steps_per_epoch": true},
	KindCkpt:   {"path": true, "step": true, "epoch": true, "t": true},
	KindResume: {"step": true, "path": true, "epoch": true, "t": true},
}

var knownKeys = map[string]bool{"step": true, "epoch": true, "samples": true, "loss": true,
	"t": true, "total": true, "epochs": true, "steps_per_epoch": true, "path": true}

// ParseLine parses one progress line. A single trailing "\n" or "\r\n" is
// ignored. The returned Event has no At or Source: the reader sets them.
func ParseLine(line []byte) (Event, error) {
	line = bytes.TrimSuffix(line, []byte("\n"))
	line = bytes.TrimSuffix(line, []byte("\r"))
	if len(line) > MaxLineLen {
		return Event{}, &ParseError{Msg: fmt.Sprintf("line too long (%d > %d bytes)", len(line), MaxLineLen)}
	}
	fields := splitFields(line)
	if len(fields) == 0 || !isVersionField(fields[0]) {
		return Event{}, &ParseError{Msg: "missing isched version field", Err: ErrNotEvent}
	}
	if string(fields[0]) != Version {
		return Event{}, &ParseError{Msg: fmt.Sprintf("version %s, want %s", quoteShort(fields[0]), Version), Err: ErrVersion}
	}
	fields = fields[1:]
	ev := Event{Kind: KindStep, Step: NoValue, Epoch: NoValue}
	if len(fields) > 0 && bytes.IndexByte(fields[0], '=') < 0 {
		switch k := Kind(fields[0]); k {
		case KindCkpt, KindResume:
			ev.Kind = k
		default:
			return Event{}, &ParseError{Msg: fmt.Sprintf("unknown event kind %s", quoteShort(fields[0]))}
		}
		fields = fields[1:]
	}
	allowed := allowedKeys[ev.Kind]
	seen := make(map[string]bool, len(fields))
	for _, f := range fields {
		k, v, ok := bytes.Cut(f, []byte("="))
		key := string(k)
		if !ok {
			return Event{}, &ParseError{Key: key, Msg: "missing '='"}
		}
		if !knownKeys[key] {
			return Event{}, &ParseError{Key: key, Msg: "unknown key"}
		}
		if !allowed[key] {
			return Event{}, &ParseError{Key: key, Msg: fmt.Sprintf("not allowed in a %s line", ev.Kind)}
		}
		if seen[key] {
			return Event{}, &ParseError{Key: key, Msg: "repeated"}
		}
		seen[key] = true
		if err := setKey(&ev, key, v); err != nil {
			return Event{}, err
		}
	}
	switch ev.Kind {
	case KindStep, KindResume:
		if !seen["step"] {
			return Event{}, &ParseError{Key: "step", Msg: fmt.Sprintf("required in a %s line", ev.Kind)}
		}
	case KindCkpt:
		if !seen["path"] {
			return Event{}, &ParseError{Key: "path", Msg: "required in a ckpt line"}
		}
	}
	return ev, nil
}

func setKey(ev *Event, key string, v []byte) error {
	bad := func(what string) error {
		return &ParseError{Key: key, Msg: fmt.Sprintf("%s: %s", what, quoteShort(v))}
	}
	switch key {
	case "step", "samples", "total", "steps_per_epoch", "epoch", "epochs":
		n, ok := parseUint(v)
		if !ok {
			return bad("not an unsigned integer")
		}
		if why := setUint(ev, key, n); why != "" {
			return bad(why)
		}
	case "loss":
		f, ok := parseFloat(v)
		if !ok {
			return bad("not a float")
		}
		if math.IsNaN(f) || math.IsInf(f, 0) {
			ev.NonFinite = true
		} else {
			ev.Loss = &f
		}
	case "t":
		f, ok := parseFloat(v)
		if !ok || math.IsNaN(f) || math.IsInf(f, 0) || f <= 0 {
			return bad("not a positive finite float")
		}
		ev.LoopTime = f
	case "path":
		p, err := unescapePath(v)
		if err != nil {
			return bad(err.Error())
		}
		ev.Path = p
	}
	return nil
}

// setUint sets the unsigned field key to n; it returns why n is wrong
// for it, or "".
func setUint(ev *Event, key string, n int64) string {
	switch key {
	case "step":
		ev.Step = n
	case "samples":
		ev.Samples = n
	case "total":
		ev.Total = n
	case "steps_per_epoch":
		ev.StepsPerEpoch = n
	case "epoch", "epochs":
		if n > math.MaxInt32 {
			return "out of range"
		}
		if key == "epoch" {
			ev.Epoch = int(n)
		} else {
			ev.Epochs = int(n)
		}
	}
	if n == 0 && (key == "total" || key == "epochs" || key == "steps_per_epoch") {
		return "must be positive"
	}
	return ""
}

// splitFields splits on runs of spaces and tabs only (bytes.Fields would also
// split on Unicode spaces inside a path).
func splitFields(line []byte) [][]byte {
	var out [][]byte
	for len(line) > 0 {
		i := 0
		for i < len(line) && (line[i] == ' ' || line[i] == '\t') {
			i++
		}
		line = line[i:]
		j := 0
		for j < len(line) && line[j] != ' ' && line[j] != '\t' {
			j++
		}
		if j > 0 {
			out = append(out, line[:j])
		}
		line = line[j:]
	}
	return out
}

// isVersionField reports whether f is "isched" followed by one or more digits.
func isVersionField(f []byte) bool {
	rest, ok := bytes.CutPrefix(f, []byte("isched"))
	if !ok || len(rest) == 0 {
		return false
	}
	for _, c := range rest {
		if c < '0' || c > '9' {
			return false
		}
	}
	return true
}

func parseUint(v []byte) (int64, bool) {
	if len(v) == 0 || len(v) > 19 {
		return 0, false
	}
	for _, c := range v {
		if c < '0' || c > '9' {
			return 0, false
		}
	}
	n, err := strconv.ParseInt(string(v), 10, 64)
	return n, err == nil
}

// parseFloat accepts decimal floats and nan/inf spellings; it refuses the hex
// floats and digit separators strconv would also take.
func parseFloat(v []byte) (float64, bool) {
	if len(v) == 0 || len(v) > 64 {
		return 0, false
	}
	s := string(v)
	switch strings.ToLower(strings.TrimLeft(s, "+-")) {
	case "nan", "inf", "infinity":
	default:
		for _, c := range v {
			if (c < '0' || c > '9') && c != '.' && c != 'e' && c != 'E' && c != '+' && c != '-' {
				return 0, false
			}
		}
	}
	f, err := strconv.ParseFloat(s, 64)
	if err != nil {
		// Out-of-range decimals parse as ±Inf with ErrRange; refuse them rather
		// than invent a divergence.
		return 0, false
	}
	return f, true
}

func unescapePath(v []byte) (string, error) {
	if len(v) == 0 {
		return "", errors.New("empty")
	}
	out := make([]byte, 0, len(v))
	for i := 0; i < len(v); i++ {
		c := v[i]
		switch {
		case c == '%':
			if i+2 >= len(v) || unhex(v[i+1]) < 0 || unhex(v[i+2]) < 0 {
				return "", errors.New("bad %-escape")
			}
			b := byte(unhex(v[i+1])<<4 | unhex(v[i+2]))
			if b == 0 {
				return "", errors.New("NUL in path")
			}
			out = append(out, b)
			i += 2
		case c < 0x21 || c == 0x7f:
			return "", errors.New("control character")
		default:
			out = append(out, c)
		}
	}
	return string(out), nil
}

func unhex(c byte) int {
	switch {
	case '0' <= c && c <= '9':
		return int(c - '0')
	case 'a' <= c && c <= 'f':
		return int(c - 'a' + 10)
	case 'A' <= c && c <= 'F':
		return int(c - 'A' + 10)
	}
	return -1
}
