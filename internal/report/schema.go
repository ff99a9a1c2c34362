package report

import (
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
	ord      int  // place in the struct's order: its bit in the walker's seen set
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
			if len(n.order) == 64 {
				panic(fmt.Sprintf("report: %s has more than 64 json fields", t.Name()))
			}
			sf.ord = len(n.order)
			n.fields[name] = sf
			n.order = append(n.order, sf)
		}
		return n
	}
	panic("report: unsupported type " + t.String())
}

// walkSchema checks that b, already known to be valid UTF-8 and valid JSON,
// matches the schema n exactly. It scans the bytes itself: json.Decoder's
// Token allocates an error for every number it ends (the next byte is "after
// the top-level value") and the walk used to build a path string for every
// value; here a path exists only in an error.
func walkSchema(b []byte, n *schemaNode) error {
	w := walker{b: b}
	return w.value(n)
}

type walker struct {
	b    []byte
	i    int
	path []pathElem // the keys and indexes down to the value being checked
}

// pathElem is a struct field's name, a map key or an array index.
type pathElem struct {
	key   string
	index int
	kind  pathKind
}

type pathKind uint8

const (
	pathField pathKind = iota
	pathMapKey
	pathIndex
)

// pathString renders the walker's path as FieldError.Field does.
func (w *walker) pathString() string {
	p := ""
	for _, e := range w.path {
		switch e.kind {
		case pathField:
			p = joinPath(p, truncate(e.key, maxQuoted))
		case pathMapKey:
			p = joinPath(p, index(e.key))
		case pathIndex:
			p = joinPath(p, index(e.index))
		}
	}
	return p
}

func (w *walker) fail(format string, args ...any) error {
	return fail(w.pathString(), format, args...)
}

func (w *walker) skipSpace() {
	for w.i < len(w.b) {
		switch w.b[w.i] {
		case ' ', '\t', '\n', '\r':
			w.i++
		default:
			return
		}
	}
}

// peek returns the next non-space byte (0 at the end).
func (w *walker) peek() byte {
	w.skipSpace()
	if w.i >= len(w.b) {
		return 0
	}
	return w.b[w.i]
}

// kindAt names the JSON kind starting with c, for "want X, got Y".
func kindAt(c byte) string {
	switch c {
	case '{':
		return "object"
	case '[':
		return "array"
	case '"':
		return "string"
	case 't', 'f':
		return "boolean"
	case 'n':
		return "null"
	}
	return "number"
}

func (w *walker) value(n *schemaNode) error {
	c := w.peek()
	mismatch := func() error { return w.fail("want %s, got %s", nodeWant[n.kind], kindAt(c)) }
	switch c {
	case 'n':
		if !n.nullable {
			return mismatch()
		}
		w.i += len("null")
		return nil
	case '{':
		if n.kind != nodeObject && n.kind != nodeMap {
			return mismatch()
		}
		return w.object(n)
	case '[':
		if n.kind != nodeArray {
			return mismatch()
		}
		return w.array(n)
	case '"':
		if n.kind != nodeString {
			return mismatch()
		}
		_, _, err := w.str()
		return err
	case 't', 'f':
		if n.kind != nodeBool {
			return mismatch()
		}
		if c == 't' {
			w.i += len("true")
		} else {
			w.i += len("false")
		}
		return nil
	}
	start := w.i
	for w.i < len(w.b) && strings.IndexByte("+-.0123456789eE", w.b[w.i]) >= 0 {
		w.i++
	}
	if w.i == start {
		return w.fail("invalid JSON at byte %d", w.i) // unreachable after json.Valid
	}
	return w.number(n, w.b[start:w.i], mismatch)
}

// str reads a string at w.i and returns its raw content (without the
// quotes) and whether it holds escapes.
func (w *walker) str() (raw []byte, escaped bool, err error) {
	w.i++ // '"'
	start := w.i
	for w.i < len(w.b) {
		switch w.b[w.i] {
		case '\\':
			escaped = true
			w.i += 2
			continue
		case '"':
			raw = w.b[start:w.i]
			w.i++
			return raw, escaped, nil
		}
		w.i++
	}
	return nil, false, w.fail("unterminated string") // unreachable after json.Valid
}

// key reads an object key, unescaped as encoding/json would.
func (w *walker) key() (string, error) {
	w.peek()
	start := w.i
	raw, escaped, err := w.str()
	if err != nil {
		return "", err
	}
	if !escaped {
		return string(raw), nil
	}
	var k string
	if err := json.Unmarshal(w.b[start:w.i], &k); err != nil {
		return "", fmt.Errorf("%w: object key at byte %d: %w", ErrInvalid, start, err)
	}
	return k, nil
}

// expect consumes c, the next non-space byte.
func (w *walker) expect(c byte) error {
	if w.peek() != c {
		return w.fail("want %q at byte %d", c, w.i) // unreachable after json.Valid
	}
	w.i++
	return nil
}

func (w *walker) object(n *schemaNode) error {
	w.i++ // '{'
	var (
		seenField uint64          // struct fields by their place in n.order
		seenKey   map[string]bool // map keys
	)
	if n.kind == nodeMap {
		seenKey = make(map[string]bool)
	}
	depth := len(w.path)
	w.path = append(w.path, pathElem{})
	for first := true; ; first = false {
		c := w.peek()
		if c == '}' {
			w.i++
			break
		}
		if !first {
			if err := w.expect(','); err != nil {
				return err
			}
		}
		var (
			child *schemaNode
			dup   bool
		)
		if n.kind == nodeObject {
			w.peek()
			start := w.i
			raw, escaped, err := w.str()
			if err != nil {
				return err
			}
			f := n.fields[string(raw)] // no allocation: the map lookup borrows raw
			if escaped {
				w.i = start
				k, err := w.key()
				if err != nil {
					return err
				}
				f = n.fields[k]
				if f == nil {
					w.path[depth] = pathElem{key: k}
				}
			} else if f == nil {
				w.path[depth] = pathElem{key: string(raw)}
			}
			if f == nil {
				return w.fail("unknown field")
			}
			w.path[depth] = pathElem{key: f.name}
			dup = seenField&(1<<f.ord) != 0
			seenField |= 1 << f.ord
			child = f.node
		} else {
			k, err := w.key()
			if err != nil {
				return err
			}
			w.path[depth] = pathElem{key: k, kind: pathMapKey}
			dup = seenKey[k]
			seenKey[k] = true
			child = n.elem
		}
		if dup {
			return w.fail("duplicate field")
		}
		if err := w.expect(':'); err != nil {
			return err
		}
		if err := w.value(child); err != nil {
			return err
		}
	}
	w.path = w.path[:depth]
	for _, f := range n.order {
		if f.required && seenField&(1<<f.ord) == 0 {
			return fail(joinPath(w.pathString(), f.name), "required field missing")
		}
	}
	return nil
}

func (w *walker) array(n *schemaNode) error {
	w.i++ // '['
	depth := len(w.path)
	w.path = append(w.path, pathElem{})
	for i := 0; ; i++ {
		if w.peek() == ']' {
			w.i++
			break
		}
		if i > 0 {
			if err := w.expect(','); err != nil {
				return err
			}
		}
		w.path[depth] = pathElem{index: i, kind: pathIndex}
		if err := w.value(n.elem); err != nil {
			return err
		}
	}
	w.path = w.path[:depth]
	return nil
}

// number checks that the literal fits the Go type exactly, as json.Unmarshal
// would, but with a reason that says what is wrong.
func (w *walker) number(n *schemaNode, lit []byte, mismatch func() error) error {
	var err error
	switch n.kind {
	case nodeInt:
		_, err = strconv.ParseInt(string(lit), 10, n.bits)
	case nodeUint:
		_, err = strconv.ParseUint(string(lit), 10, n.bits)
	case nodeFloat:
		_, err = strconv.ParseFloat(string(lit), n.bits)
	default:
		return mismatch()
	}
	if err == nil {
		return nil
	}
	s := string(lit)
	switch {
	case n.kind != nodeFloat && strings.ContainsAny(s, ".eE"):
		return w.fail("want integer, got %s", truncate(s, maxQuoted))
	case n.kind == nodeUint && strings.HasPrefix(s, "-"):
		return w.fail("must not be negative (got %s)", truncate(s, maxQuoted))
	}
	return w.fail("out of range for %s (got %s)", nodeWant[n.kind], truncate(s, maxQuoted))
}

// skip moves past the value at w.i (valid JSON) without checking it.
func (w *walker) skip() {
	depth := 0
	for {
		switch w.peek() {
		case '{', '[':
			depth++
			w.i++
		case '}', ']':
			depth--
			w.i++
		case ',', ':':
			w.i++
		case '"':
			_, _, _ = w.str()
		case 0:
			return
		default:
			for w.i < len(w.b) && strings.IndexByte(",:]} \t\n\r", w.b[w.i]) < 0 {
				w.i++
			}
		}
		if depth == 0 {
			return
		}
	}
}
