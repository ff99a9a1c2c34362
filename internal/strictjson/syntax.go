package strictjson

import (
	"bytes"
	"encoding/json"
	"io"
)

// SyntaxProblem says where b stops being exactly one JSON value.
type SyntaxProblem struct {
	Path []Elem // the value (or, between values, the object or array) being read
	// Err is json.Decoder's error (a *json.SyntaxError, io.EOF or
	// io.ErrUnexpectedEOF, ...); nil when the value is whole and Trailing.
	Err error
	// Trailing: something follows the value, which ends at byte End; the
	// decoder stopped at byte Offset.
	Trailing    bool
	End, Offset int64
}

// Syntax reads b as one JSON value, token by token, and says where it
// breaks; nil if b is one whole value. Walk assumes it is (json.Valid).
func Syntax(b []byte) *SyntaxProblem {
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.UseNumber()
	s := syntax{dec: dec}
	if p := s.value(); p != nil {
		return p
	}
	end := dec.InputOffset()
	if _, err := dec.Token(); err != io.EOF {
		return &SyntaxProblem{Trailing: true, End: end, Offset: dec.InputOffset()}
	}
	return nil
}

type syntax struct {
	dec  *json.Decoder
	path []Elem
}

func (s *syntax) token() (json.Token, *SyntaxProblem) {
	tok, err := s.dec.Token()
	if err != nil {
		return nil, &SyntaxProblem{Path: append([]Elem(nil), s.path...), Err: err}
	}
	return tok, nil
}

func (s *syntax) value() *SyntaxProblem {
	tok, p := s.token()
	if p != nil {
		return p
	}
	d, ok := tok.(json.Delim)
	if !ok {
		return nil
	}
	parent := s.path
	for i := 0; s.dec.More(); i++ {
		s.path = parent
		if d == '{' {
			k, p := s.token()
			if p != nil {
				return p
			}
			key, _ := k.(string)
			s.path = append(parent, Elem{Key: key})
		} else {
			s.path = append(parent, Elem{Index: i, Kind: IndexElem})
		}
		if p := s.value(); p != nil {
			return p
		}
	}
	s.path = parent
	_, p = s.token() // '}' or ']'
	return p
}

// LineCol is the line and column (both from 1; the column counts bytes)
// of byte offset off in b, for an error a person can find in an editor.
func LineCol(b []byte, off int) (line, col int) {
	off = min(max(off, 0), len(b))
	line = 1 + bytes.Count(b[:off], []byte{'\n'})
	return line, off - bytes.LastIndexByte(b[:off], '\n')
}
