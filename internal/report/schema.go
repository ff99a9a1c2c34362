package report

import (
	"bytes"
	"encoding/json"
	"fmt"
	"reflect"
	"strconv"
	"strings"
	"sync"
)

// encoding/json (v1) is lenient in ways a hostile input can use: it matches
// keys case-insensitively, lets the last of duplicate keys win, treats a
// missing field as zero and reports type errors without array indexes. The
// schema walk below checks the token stream against the Go types first, so
// those cases are rejected with the exact JSON path; json.Decoder then only
// converts values it has already seen to be right.

type nodeKind uint8

const (
	nodeObject nodeKind = iota
	nodeArray
	nodeMap
	nodeString
	nodeBool
	nodeInt
	nodeUint
	nodeFloat
)

var nodeWant = [...]string{
	nodeObject: "object",
	nodeArray:  "array",
	nodeMap:    "object",
	nodeString: "string",
	nodeBool:   "boolean",
	nodeInt:    "integer",
	nodeUint:   "non-negative integer",
	nodeFloat:  "number",
}

type schemaField struct {
	name     string
	node     *schemaNode
	required bool // no omitempty: must be present, even if null
}

type schemaNode struct {
	kind     nodeKind
	nullable bool // pointer, slice or map: null is allowed
	bits     int  // for numbers
	fields   map[string]*schemaField
	order    []*schemaField // declaration order, for stable errors
	elem     *schemaNode    // array and map values
}

var envelopeSchema = sync.OnceValue(func() *schemaNode {
	return schemaOf(reflect.TypeFor[Envelope]())
})

// schemaOf derives the schema from the Go type. It panics on a type the
// wire format does not use (an exported field without a json tag, a map
// with non-string keys): that is a bug in this package, caught by its tests.
func schemaOf(t reflect.Type) *schemaNode {
	switch t.Kind() {
	case reflect.Pointer:
		n := *schemaOf(t.Elem())
		n.nullable = true
		return &n
	case reflect.Slice:
		return &schemaNode{kind: nodeArray, nullable: true, elem: schemaOf(t.Elem())}
	case reflect.Map:
		if t.Key().Kind() != reflect.String {
			panic("report: map key must be a string: " + t.String())
		}
		return &schemaNode{kind: nodeMap, nullable: true, elem: schemaOf(t.Elem())}
	case reflect.String:
		return &schemaNode{kind: nodeString}
	case reflect.Bool:
		return &schemaNode{kind: nodeBool}
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		return &schemaNode{kind: nodeInt, bits: t.Bits()}
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		return &schemaNode{kind: nodeUint, bits: t.Bits()}
	case reflect.Float32, reflect.Float64:
		return &schemaNode{kind: nodeFloat, bits: t.Bits()}
	case reflect.Struct:
		n := &schemaNode{kind: nodeObject, fields: make(map[string]*schemaField)}
		for f := range t.Fields() {
			if !f.IsExported() {
				continue
			}
			tag, ok := f.Tag.Lookup("json")
			name, opts, _ := strings.Cut(tag, ",")
			if !ok || name == "" || name == "-" || f.Anonymous {
				panic(fmt.Sprintf("report: %s.%s needs a plain json tag", t.Name(), f.Name))
			}
			sf := &schemaField{name: name, node: schemaOf(f.Type), required: true}
			for _, o := range strings.Split(opts, ",") {
				switch o {
				case "omitempty":
					sf.required = false
				case "":
				default:
					panic(fmt.Sprintf("report: %s.%s: unsupported json option %q", t.Name(), f.Name, o))
				}
			}
			if n.fields[name] != nil {
				panic(fmt.Sprintf("report: %s: duplicate json name %q", t.Name(), name))
			}
			n.fields[name] = sf
			n.order = append(n.order, sf)
		}
		return n
	}
	panic("report: unsupported type " + t.String())
}

// walkSchema checks that b, already known to be one JSON value, matches the
// schema n exactly.
func walkSchema(b []byte, n *schemaNode) error {
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.UseNumber()
	return (&walker{dec: dec}).value(n, "")
}

type walker struct {
	dec *json.Decoder
}

func (w *walker) token() (json.Token, error) {
	tok, err := w.dec.Token()
	if err != nil {
		return nil, syntaxError(err)
	}
	return tok, nil
}

func (w *walker) value(n *schemaNode, path string) error {
	tok, err := w.token()
	if err != nil {
		return err
	}
	got := tokenKind(tok)
	mismatch := func() error { return fail(path, "want %s, got %s", nodeWant[n.kind], got) }
	switch tok := tok.(type) {
	case nil:
		if !n.nullable {
			return mismatch()
		}
		return nil
	case json.Delim:
		switch {
		case tok == '{' && (n.kind == nodeObject || n.kind == nodeMap):
			return w.object(n, path)
		case tok == '[' && n.kind == nodeArray:
			return w.array(n, path)
		}
		return mismatch()
	case string:
		if n.kind != nodeString {
			return mismatch()
		}
		return nil
	case bool:
		if n.kind != nodeBool {
			return mismatch()
		}
		return nil
	case json.Number:
		return number(n, path, string(tok), mismatch)
	}
	return mismatch()
}

func (w *walker) object(n *schemaNode, path string) error {
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
		if n.kind == nodeObject {
			childPath = joinPath(path, truncate(key, maxQuoted))
			f := n.fields[key]
			if f == nil {
				return fail(childPath, "unknown field")
			}
			child = f.node
		} else {
			childPath = joinPath(path, index(key))
			child = n.elem
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
	for _, f := range n.order {
		if f.required && !seen[f.name] {
			return fail(joinPath(path, f.name), "required field missing")
		}
	}
	return nil
}

func (w *walker) array(n *schemaNode, path string) error {
	for i := 0; w.dec.More(); i++ {
		if err := w.value(n.elem, joinPath(path, index(i))); err != nil {
			return err
		}
	}
	_, err := w.token() // ']'
	return err
}

// number checks that the literal s fits the Go type exactly, as
// json.Unmarshal would, but with a reason that says what is wrong.
func number(n *schemaNode, path, s string, mismatch func() error) error {
	var err error
	switch n.kind {
	case nodeInt:
		_, err = strconv.ParseInt(s, 10, n.bits)
	case nodeUint:
		_, err = strconv.ParseUint(s, 10, n.bits)
	case nodeFloat:
		_, err = strconv.ParseFloat(s, n.bits)
	default:
		return mismatch()
	}
	if err == nil {
		return nil
	}
	switch {
	case n.kind != nodeFloat && strings.ContainsAny(s, ".eE"):
		return fail(path, "want integer, got %s", truncate(s, maxQuoted))
	case n.kind == nodeUint && strings.HasPrefix(s, "-"):
		return fail(path, "must not be negative (got %s)", truncate(s, maxQuoted))
	}
	return fail(path, "out of range for %s (got %s)", nodeWant[n.kind], truncate(s, maxQuoted))
}

func tokenKind(tok json.Token) string {
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
