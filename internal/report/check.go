package report

import (
	"math"
	"path"
	"strconv"
	"strings"
	"unicode"
	"unicode/utf8"
)

// Limits of free-text fields, in bytes, for producers that must cut their
// data to fit (see [TruncateText]).
const (
	MaxArg     = 8 << 10  // one Start.Argv element
	MaxText    = 1024     // job names and comments, reasons, Action.Reason
	MaxMessage = 4096     // Result.Message, pending reasons, node lists
	MaxStderr  = 8 << 10  // Result.Stderr
	MaxScript  = 60 << 10 // Action.Script; escaping may still push the envelope over MaxPayload
)

// Internal limits.
const (
	maxName      = 128     // cluster, user, partition, node, device ids
	maxPath      = 4096    // PATH_MAX
	maxCred      = 8 << 10 // MUNGE credential
	maxLineage   = 64
	maxActionID  = 128
	maxQuoted    = 64              // how much of a bad value an error message repeats
	maxTimeMS    = 253402300799999 // 9999-12-31T23:59:59.999Z: beyond it is a broken clock, not a time
	maxSlurmID   = math.MaxUint32  // Slurm job ids are uint32_t
	maxUID       = math.MaxUint32
	minSIDLen    = 16
	maxSIDLen    = 64
	maxTimeLimit = math.MaxInt32 // minutes
)

// Character sets for identifiers. They are deliberately narrow where a value
// becomes a Redis key or an argument to a Slurm command.
const (
	setToken   = "._-"     // lineage, cluster, step id
	setID      = "._:-"    // action ids
	setDevice  = "._:-"    // Start.Device
	setPartArg = "._,-"    // partition argument to scontrol/sbatch (comma: list)
	setGresArg = "._:/,=-" // gres argument ("gpu:a100:2", "gres/gpu:1")
)

// TruncateText makes s acceptable to a free-text field of max bytes:
// invalid UTF-8 becomes U+FFFD, NUL bytes are dropped and the result is cut
// at a rune boundary. Use it on data the producer does not control (a
// command's stderr, argv, Slurm output).
func TruncateText(s string, max int) string {
	s = strings.ReplaceAll(strings.ToValidUTF8(s, "\uFFFD"), "\x00", "")
	return truncate(s, max)
}

// inf is the open upper bound of finiteRange.
var inf = math.Inf(1)

type integer interface {
	~int | ~int64
}

func nonNeg[T integer](field string, v T) error {
	if v < 0 {
		return fail(field, "must not be negative (got %d)", v)
	}
	return nil
}

func nonNegPtr[T integer](field string, v *T) error {
	if v == nil {
		return nil
	}
	return nonNeg(field, *v)
}

// finite rejects NaN and ±Inf, which JSON cannot carry: a Go value holding
// one would make json.Marshal fail half-way through.
func finite(field string, v float64) error {
	if math.IsNaN(v) || math.IsInf(v, 0) {
		return fail(field, "must be finite (got %v)", v)
	}
	return nil
}

func finiteNonNeg(field string, v float64) error {
	if err := finite(field, v); err != nil {
		return err
	}
	if v < 0 {
		return fail(field, "must not be negative (got %v)", v)
	}
	return nil
}

func finiteRange(field string, v *float64, lo, hi float64) error {
	if v == nil {
		return nil
	}
	if err := finite(field, *v); err != nil {
		return err
	}
	if *v < lo || *v > hi {
		return fail(field, "must be within [%v, %v] (got %v)", lo, hi, *v)
	}
	return nil
}

// unixMS checks a Unix time in milliseconds; 0 means unknown when optional.
func unixMS(field string, v int64, required bool) error {
	switch {
	case v == 0 && !required:
		return nil
	case v <= 0:
		return fail(field, "must be a positive Unix time in milliseconds (got %d)", v)
	case v > maxTimeMS:
		return fail(field, "must be a Unix time in milliseconds before year 10000 (got %d)", v)
	}
	return nil
}

// slurmID checks a Slurm job id; 0 means unset when optional.
func slurmID(field string, v uint64, required bool) error {
	switch {
	case v == 0 && required:
		return fail(field, "required (Slurm job id > 0)")
	case v > maxSlurmID:
		return fail(field, "must fit a Slurm job id (uint32, got %d)", v)
	}
	return nil
}

func uid(field string, v int) error {
	if v < 0 || int64(v) > maxUID {
		return fail(field, "must be a uid in [0, %d] (got %d)", int64(maxUID), v)
	}
	return nil
}

// text accepts any valid UTF-8 without NUL up to max bytes. NUL is refused
// because every consumer ends in a C string (Slurm, a terminal, a log).
func text(field, s string, max int, required bool) error {
	switch {
	case s == "" && required:
		return fail(field, "required")
	case len(s) > max:
		return fail(field, "too long (%d bytes, max %d)", len(s), max)
	case !utf8.ValidString(s):
		return fail(field, "must be valid UTF-8")
	case strings.IndexByte(s, 0) >= 0:
		return fail(field, "must not contain NUL")
	}
	return nil
}

// printable is text without control or other non-printing characters, for
// values that are identities or end up on a terminal unescaped.
func printable(field, s string, max int, required bool) error {
	if err := text(field, s, max, required); err != nil {
		return err
	}
	for _, r := range s {
		if !unicode.IsPrint(r) {
			return fail(field, "must be printable (got %s)", quote(s))
		}
	}
	return nil
}

// token accepts ASCII letters, digits and the bytes in extra.
func token(field, s string, max int, required bool, extra string) error {
	if s == "" {
		if required {
			return fail(field, "required")
		}
		return nil
	}
	ok := len(s) <= max
	for i := 0; ok && i < len(s); i++ {
		c := s[i]
		ok = 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || strings.IndexByte(extra, c) >= 0
	}
	if !ok {
		return fail(field, "must match [A-Za-z0-9%s]{1,%d} (got %s)", extra, max, quote(s))
	}
	return nil
}

func oneOf[T ~string](field string, v T, allowed ...T) error {
	for _, a := range allowed {
		if v == a {
			return nil
		}
	}
	return fail(field, "must be one of %s (got %s)", list(allowed), quote(string(v)))
}

// absPath requires a clean absolute path: consumers compare paths as
// strings, so "/a/../b" and "/b/" must not be spelled two ways.
func absPath(field, s string, required bool) error {
	if err := text(field, s, maxPath, required); err != nil || s == "" {
		return err
	}
	if !path.IsAbs(s) || path.Clean(s) != s {
		return fail(field, "must be a clean absolute path (got %s)", quote(s))
	}
	return nil
}

// signalName accepts "SIG" followed by upper-case letters, digits and "+-"
// (SIGRTMIN+1), as Go's and the kernel's names are spelled.
func signalName(field, s string, required bool) error {
	if s == "" {
		if required {
			return fail(field, "required")
		}
		return nil
	}
	rest, ok := strings.CutPrefix(s, "SIG")
	ok = ok && rest != "" && len(s) <= 16
	for i := 0; ok && i < len(rest); i++ {
		c := rest[i]
		ok = 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '+' || c == '-'
	}
	if !ok {
		return fail(field, "must be a signal name like SIGUSR1 (got %s)", quote(s))
	}
	return nil
}

func lowerHex(field, s string, minLen, maxLen int) error {
	ok := len(s) >= minLen && len(s) <= maxLen
	for i := 0; ok && i < len(s); i++ {
		c := s[i]
		ok = '0' <= c && c <= '9' || 'a' <= c && c <= 'f'
	}
	if !ok {
		if minLen == maxLen {
			return fail(field, "must be %d lower-case hex digits (got %s)", minLen, quote(s))
		}
		return fail(field, "must be %d-%d lower-case hex digits (got %s)", minLen, maxLen, quote(s))
	}
	return nil
}

// quote repeats a bad value in an error message, bounded and escaped:
// the value may come from a hostile job and the message ends up in logs.
func quote(s string) string {
	t := truncate(s, maxQuoted)
	if t != s {
		return strconv.Quote(t) + "..."
	}
	return strconv.Quote(s)
}

// truncate cuts s to at most n bytes without splitting a rune.
func truncate(s string, n int) string {
	if n < 0 {
		n = 0
	}
	if len(s) <= n {
		return s
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n]
}

func list[T ~string](vs []T) string {
	var b strings.Builder
	for i, v := range vs {
		if i > 0 {
			b.WriteString(", ")
		}
		b.WriteString(strconv.Quote(string(v)))
	}
	return b.String()
}
