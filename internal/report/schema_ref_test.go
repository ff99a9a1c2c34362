package report

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"strconv"
	"strings"
)

// The Token-based schema walk the byte walker in schema.go replaced (it
// allocated a syntax error per number and a path per value). Kept as the
// reference the differential tests hold the byte walker to.

func refWalkSchema(b []byte, n *schemaNode) error {
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.UseNumber()
	return (&refWalker{dec: dec}).value(n, "")
}

type refWalker struct {
	dec *json.Decoder
}

func (w *refWalker) token() (json.Token, error) {
	tok, err := w.dec.Token()
	if err != nil {
		return nil, syntaxError(err)
	}
	return tok, nil
}

func (w *refWalker) value(n *schemaNode, path string) error {
	tok, err := w.token()
	if err != nil {
		return err
	}
	got := refTokenKind(tok)
	mismatch := func() error { return fail(path, "want %s, got %s", nodeWant[n.Kind], got) }
	switch tok := tok.(type) {
	case nil:
		if !n.Nullable {
			return mismatch()
		}
		return nil
	case json.Delim:
		switch {
		case tok == '{' && (n.Kind == nodeObject || n.Kind == nodeMap):
			return w.object(n, path)
		case tok == '[' && n.Kind == nodeArray:
			return w.array(n, path)
		}
		return mismatch()
	case string:
		if n.Kind != nodeString {
			return mismatch()
		}
		return nil
	case bool:
		if n.Kind != nodeBool {
			return mismatch()
		}
		return nil
	case json.Number:
		return refNumber(n, path, string(tok), mismatch)
	}
	return mismatch()
}

func (w *refWalker) object(n *schemaNode, path string) error {
	seen := make(map[string]bool)
	for w.dec.More() {
		tok, err := w.token()
		if err != nil {
			return err
		}
		key, _ := tok.(string) // the decoder guarantees object keys are strings
		var (
			child     *schemaNode
			childPath string
		)
		if n.Kind == nodeObject {
			childPath = joinPath(path, truncate(key, maxQuoted))
			f := n.Fields[key]
			if f == nil {
				return fail(childPath, "unknown field")
			}
			child = f.Node
		} else {
			childPath = joinPath(path, index(key))
			child = n.Elem
		}
		if seen[key] {
			return fail(childPath, "duplicate field")
		}
		seen[key] = true
		if err := w.value(child, childPath); err != nil {
			return err
		}
	}
	if _, err := w.token(); err != nil { // '}'
		return err
	}
	for _, f := range n.Order {
		if f.Required && !seen[f.Name] {
			return fail(joinPath(path, f.Name), "required field missing")
		}
	}
	return nil
}

func (w *refWalker) array(n *schemaNode, path string) error {
	for i := 0; w.dec.More(); i++ {
		if err := w.value(n.Elem, joinPath(path, index(i))); err != nil {
			return err
		}
	}
	_, err := w.token() // ']'
	return err
}

// number checks that the literal s fits the Go type exactly, as
// json.Unmarshal would, but with a reason that says what is wrong.
func refNumber(n *schemaNode, path, s string, mismatch func() error) error {
	var err error
	switch n.Kind {
	case nodeInt:
		_, err = strconv.ParseInt(s, 10, n.Bits)
	case nodeUint:
		_, err = strconv.ParseUint(s, 10, n.Bits)
	case nodeFloat:
		_, err = strconv.ParseFloat(s, n.Bits)
	default:
		return mismatch()
	}
	if err == nil {
		return nil
	}
	switch {
	case n.Kind != nodeFloat && strings.ContainsAny(s, ".eE"):
		return fail(path, "want integer, got %s", truncate(s, maxQuoted))
	case n.Kind == nodeUint && strings.HasPrefix(s, "-"):
		return fail(path, "must not be negative (got %s)", truncate(s, maxQuoted))
	}
	return fail(path, "out of range for %s (got %s)", nodeWant[n.Kind], truncate(s, maxQuoted))
}

func refTokenKind(tok json.Token) string {
	switch tok := tok.(type) {
	case nil:
		return "null"
	case bool:
		return "boolean"
	case string:
		return "string"
	case json.Number, float64:
		return "number"
	case json.Delim:
		if tok == '[' {
			return "array"
		}
		return "object"
	}
	return fmt.Sprintf("%T", tok)
}

// syntaxError is decodeError for the token stream, where running out of
// input is a syntax error too.
func syntaxError(err error) error {
	if err == io.EOF {
		err = io.ErrUnexpectedEOF
	}
	return decodeError(err)
}
