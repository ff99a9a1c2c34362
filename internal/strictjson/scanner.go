package strictjson

import "strings"

// Scanner reads valid JSON bytes B from offset I without decoding them.
type Scanner struct {
	B []byte
	I int
}

func (s *Scanner) skipSpace() {
	for s.I < len(s.B) {
		switch s.B[s.I] {
		case ' ', '\t', '\n', '\r':
			s.I++
		default:
			return
		}
	}
}

// Peek returns the next non-space byte (0 at the end), moving I to it.
func (s *Scanner) Peek() byte {
	s.skipSpace()
	if s.I >= len(s.B) {
		return 0
	}
	return s.B[s.I]
}

// Str reads the string at I and returns its raw content (without the
// quotes) and whether it holds escapes; ok false: it does not end.
func (s *Scanner) Str() (raw []byte, escaped, ok bool) {
	s.I++ // '"'
	start := s.I
	for s.I < len(s.B) {
		switch s.B[s.I] {
		case '\\':
			escaped = true
			s.I += 2
			continue
		case '"':
			raw = s.B[start:s.I]
			s.I++
			return raw, escaped, true
		}
		s.I++
	}
	return nil, false, false
}

// Skip moves past the value at I without checking it.
func (s *Scanner) Skip() {
	depth := 0
	for {
		switch s.Peek() {
		case '{', '[':
			depth++
			s.I++
		case '}', ']':
			depth--
			s.I++
		case ',', ':':
			s.I++
		case '"':
			s.Str()
		case 0:
			return
		default:
			for s.I < len(s.B) && strings.IndexByte(",:]} \t\n\r", s.B[s.I]) < 0 {
				s.I++
			}
		}
		if depth == 0 {
			return
		}
	}
}
