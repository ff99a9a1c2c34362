package slurm

import (
	"encoding/json"
	"fmt"
	"unicode/utf8"
)

// scanner is a minimal single-pass JSON reader for the one document that
// can be large: `squeue --json` (~3.6 KB per job; 35 MB for 10,000 jobs).
// encoding/json scans its input twice (validate, then decode) and reflects
// on every member; this reads each byte once, skips the ~90 members per job
// isched does not use without allocating, and hands the ~20 it uses to the
// same value types (num, words) the rest of the package uses. It validates
// the JSON grammar of everything it passes over, so malformed output is an
// error, not a silent zero; FuzzParseSqueue checks it against encoding/json.
type scanner struct {
	b     []byte
	i     int
	depth int
}

// maxDepth bounds nesting so hostile input cannot exhaust the stack.
const maxDepth = 200

type syntaxError struct {
	off int
	msg string
}

func (e *syntaxError) Error() string {
	return fmt.Sprintf("malformed JSON at byte %d: %s", e.off, e.msg)
}

func (s *scanner) fail(format string, args ...any) error {
	return &syntaxError{off: s.i, msg: fmt.Sprintf(format, args...)}
}

func (s *scanner) ws() {
	for s.i < len(s.b) {
		switch s.b[s.i] {
		case ' ', '\t', '\n', '\r':
			s.i++
		default:
			return
		}
	}
}

// peek returns the next non-space byte (0 at the end).
func (s *scanner) peek() byte {
	s.ws()
	if s.i >= len(s.b) {
		return 0
	}
	return s.b[s.i]
}

func (s *scanner) expect(c byte) error {
	if s.peek() != c {
		if s.i >= len(s.b) {
			return s.fail("unexpected end of input, want %q", c)
		}
		return s.fail("want %q, got %q", c, s.b[s.i])
	}
	s.i++
	return nil
}

// rawString scans a string at s.i and returns its bytes without the quotes,
// and whether it contains escapes.
func (s *scanner) rawString() ([]byte, bool, error) {
	if s.peek() != '"' {
		return nil, false, s.fail("want a string")
	}
	start := s.i + 1
	escaped := false
	for i := start; i < len(s.b); i++ {
		switch c := s.b[i]; {
		case c == '"':
			s.i = i + 1
			return s.b[start:i], escaped, nil
		case c == '\\':
			escaped = true
			if i+1 >= len(s.b) {
				s.i = i
				return nil, false, s.fail("unterminated string")
			}
			switch s.b[i+1] {
			case '"', '\\', '/', 'b', 'f', 'n', 'r', 't':
				i++
			case 'u':
				if i+5 >= len(s.b) || !isHex4(s.b[i+2:i+6]) {
					s.i = i
					return nil, false, s.fail(`bad \u escape`)
				}
				i += 5
			default:
				s.i = i
				return nil, false, s.fail("bad escape \\%c", s.b[i+1])
			}
		case c < 0x20:
			s.i = i
			return nil, false, s.fail("control character in string")
		}
	}
	s.i = len(s.b)
	return nil, false, s.fail("unterminated string")
}

func isHex4(b []byte) bool {
	for _, c := range b {
		if !('0' <= c && c <= '9' || 'a' <= c && c <= 'f' || 'A' <= c && c <= 'F') {
			return false
		}
	}
	return true
}

// str decodes a string value. Escapes and invalid UTF-8 (which
// encoding/json turns into U+FFFD) go through encoding/json, so both readers
// agree byte for byte; plain strings are copied directly.
func (s *scanner) str() (string, error) {
	start := s.i
	raw, escaped, err := s.rawString()
	if err != nil {
		return "", err
	}
	if !escaped && utf8.Valid(raw) {
		return string(raw), nil
	}
	var out string
	if err := json.Unmarshal(s.b[start:s.i], &out); err != nil {
		return "", &syntaxError{off: start, msg: err.Error()}
	}
	return out, nil
}

// number scans a number per the JSON grammar and returns its bytes.
func (s *scanner) number() ([]byte, error) {
	s.ws()
	start, i, b := s.i, s.i, s.b
	digits := func() int {
		n := 0
		for i < len(b) && '0' <= b[i] && b[i] <= '9' {
			i++
			n++
		}
		return n
	}
	if i < len(b) && b[i] == '-' {
		i++
	}
	switch {
	case i < len(b) && b[i] == '0':
		i++
	case digits() == 0:
		s.i = i
		return nil, s.fail("bad number")
	}
	if i < len(b) && b[i] == '.' {
		i++
		if digits() == 0 {
			s.i = i
			return nil, s.fail("bad number: no digits after '.'")
		}
	}
	if i < len(b) && (b[i] == 'e' || b[i] == 'E') {
		i++
		if i < len(b) && (b[i] == '+' || b[i] == '-') {
			i++
		}
		if digits() == 0 {
			s.i = i
			return nil, s.fail("bad number: no digits in exponent")
		}
	}
	s.i = i
	return b[start:i], nil
}

func (s *scanner) literal(word string) error {
	if len(s.b)-s.i < len(word) || string(s.b[s.i:s.i+len(word)]) != word {
		return s.fail("bad literal, want %s", word)
	}
	s.i += len(word)
	return nil
}

// skip passes over one value of any type, checking its grammar.
func (s *scanner) skip() error {
	switch c := s.peek(); {
	case c == '"':
		_, _, err := s.rawString()
		return err
	case c == '{':
		return s.object(func(key []byte, escaped bool) error { return s.skip() })
	case c == '[':
		return s.array(s.skip)
	case c == 't':
		return s.literal("true")
	case c == 'f':
		return s.literal("false")
	case c == 'n':
		return s.literal("null")
	case c == '-' || '0' <= c && c <= '9':
		_, err := s.number()
		return err
	case c == 0 && s.i >= len(s.b):
		return s.fail("unexpected end of input")
	default:
		return s.fail("unexpected %q", c)
	}
}

// value passes over one value and returns its bytes.
func (s *scanner) value() ([]byte, error) {
	s.ws()
	start := s.i
	if err := s.skip(); err != nil {
		return nil, err
	}
	return s.b[start:s.i], nil
}

// object reads an object, calling member with each key (raw bytes, and
// whether they hold escapes) positioned at the member's value, which member
// must consume.
func (s *scanner) object(member func(key []byte, escaped bool) error) error {
	if err := s.expect('{'); err != nil {
		return err
	}
	if s.depth++; s.depth > maxDepth {
		return s.fail("nested too deep")
	}
	defer func() { s.depth-- }()
	if s.peek() == '}' {
		s.i++
		return nil
	}
	for {
		key, escaped, err := s.rawString()
		if err != nil {
			return err
		}
		if err := s.expect(':'); err != nil {
			return err
		}
		if err := member(key, escaped); err != nil {
			return err
		}
		switch s.peek() {
		case ',':
			s.i++
		case '}':
			s.i++
			return nil
		default:
			if s.i >= len(s.b) {
				return s.fail("unexpected end of input in object")
			}
			return s.fail("want ',' or '}' in object, got %q", s.b[s.i])
		}
	}
}

// array reads an array, calling item positioned at each element.
func (s *scanner) array(item func() error) error {
	if err := s.expect('['); err != nil {
		return err
	}
	if s.depth++; s.depth > maxDepth {
		return s.fail("nested too deep")
	}
	defer func() { s.depth-- }()
	if s.peek() == ']' {
		s.i++
		return nil
	}
	for {
		if err := item(); err != nil {
			return err
		}
		switch s.peek() {
		case ',':
			s.i++
		case ']':
			s.i++
			return nil
		default:
			if s.i >= len(s.b) {
				return s.fail("unexpected end of input in list")
			}
			return s.fail("want ',' or ']' in list, got %q", s.b[s.i])
		}
	}
}

// keyString returns an object key as a string, decoding escapes.
func keyString(raw []byte, escaped bool) string {
	if !escaped {
		return string(raw)
	}
	var k string
	quoted := make([]byte, 0, len(raw)+2)
	quoted = append(append(append(quoted, '"'), raw...), '"')
	if json.Unmarshal(quoted, &k) != nil {
		return string(raw)
	}
	return k
}

// typeError is a member whose JSON type is not what the field takes.
type typeError struct {
	want string
	got  []byte
}

func (e *typeError) Error() string { return fmt.Sprintf("want %s, got %.64s", e.want, e.got) }

// fieldError names the member at fault.
type fieldError struct {
	field string
	err   error
}

func (e *fieldError) Error() string { return "field " + e.field + ": " + e.err.Error() }
func (e *fieldError) Unwrap() error { return e.err }
