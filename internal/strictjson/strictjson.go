// Package strictjson checks a JSON document against a Go type before
// encoding/json converts it. encoding/json (v1) is lenient in ways a hostile
// input can use: it matches keys case-insensitively, lets the last of
// duplicate keys win, treats a missing field as zero and reports type errors
// without array indexes. Walk checks the document against a [Node] derived
// from the Go type (Schema) first, so those cases are refused with the exact
// JSON path; json.Unmarshal then only converts values already seen to be
// right.
//
// Walk finds what is wrong and where (a [*Problem]); the caller words it:
// internal/report and internal/plan each keep their own messages and error
// types, and share this one decoder and its path joiner ([Join]).
package strictjson

import (
	"encoding/json"
	"fmt"
	"reflect"
	"strconv"
	"strings"
)

// Kind is what a schema node accepts.
type Kind uint8

const (
	Object Kind = iota // a struct
	Array
	Map // an object with string keys
	String
	Bool
	Int
	Uint
	Float
	// Any is a value of a Go type that reads its JSON itself (a
	// json.Unmarshaler given by Options.Custom): Walk checks only its
	// duplicates' and siblings' keys, json.Unmarshal the value.
	Any
)

// Want names what a value of kind k must be, for an error message ("want
// an integer, got ..."): the decoders of site.json and of the daemons'
// config files say it the same way.
func (k Kind) Want() string {
	switch k {
	case Object, Map:
		return "an object"
	case Array:
		return "an array"
	case String:
		return "a string"
	case Bool:
		return "true or false"
	case Int, Uint:
		return "an integer"
	}
	return "a number"
}

// Field is a struct field of an Object node.
type Field struct {
	Name     string
	Node     *Node
	Required bool // must be present, even if null
	ord      int  // place in the struct's order: its bit in the walker's seen set
}

// Node is the schema of one JSON value.
type Node struct {
	Kind     Kind
	Nullable bool // null is allowed
	Bits     int  // for numbers
	Fields   map[string]*Field
	Order    []*Field // declaration order, for stable errors
	Elem     *Node    // array and map values
}

// Options choose how Schema reads a Go type.
type Options struct {
	// RequiredByTag: a field without omitempty is required.
	RequiredByTag bool
	// NullCollections: null is allowed for slices and maps, not only for
	// pointers.
	NullCollections bool
	// Custom, if set, gives the node of a type it knows (nil: derive it
	// as usual): a type with its own UnmarshalJSON, such as a duration
	// written as a string but held as an integer.
	Custom func(reflect.Type) *Node
}

// Schema derives the schema of t. It panics on a type the package's users
// do not use on the wire (an exported field without a plain json tag, a map
// with non-string keys, more than 64 fields): a bug their tests catch.
func Schema(t reflect.Type, o Options) *Node {
	if o.Custom != nil {
		if n := o.Custom(t); n != nil {
			c := *n
			return &c
		}
	}
	switch t.Kind() {
	case reflect.Pointer:
		n := *Schema(t.Elem(), o)
		n.Nullable = true
		return &n
	case reflect.Slice:
		return &Node{Kind: Array, Nullable: o.NullCollections, Elem: Schema(t.Elem(), o)}
	case reflect.Map:
		if t.Key().Kind() != reflect.String {
			panic("strictjson: map key must be a string: " + t.String())
		}
		return &Node{Kind: Map, Nullable: o.NullCollections, Elem: Schema(t.Elem(), o)}
	case reflect.String:
		return &Node{Kind: String}
	case reflect.Bool:
		return &Node{Kind: Bool}
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		return &Node{Kind: Int, Bits: t.Bits()}
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		return &Node{Kind: Uint, Bits: t.Bits()}
	case reflect.Float32, reflect.Float64:
		return &Node{Kind: Float, Bits: t.Bits()}
	case reflect.Struct:
		return structSchema(t, o)
	}
	panic("strictjson: unsupported type " + t.String())
}

func structSchema(t reflect.Type, o Options) *Node {
	n := &Node{Kind: Object, Fields: make(map[string]*Field)}
	for f := range t.Fields() {
		if !f.IsExported() {
			continue
		}
		tag, ok := f.Tag.Lookup("json")
		name, opts, _ := strings.Cut(tag, ",")
		if !ok || name == "" || name == "-" || f.Anonymous {
			panic(fmt.Sprintf("strictjson: %s.%s needs a plain json tag", t.Name(), f.Name))
		}
		sf := &Field{Name: name, Node: Schema(f.Type, o), Required: o.RequiredByTag}
		for _, opt := range strings.Split(opts, ",") {
			switch opt {
			case "omitempty":
				sf.Required = false
			case "":
			default:
				panic(fmt.Sprintf("strictjson: %s.%s: unsupported json option %q", t.Name(), f.Name, opt))
			}
		}
		if n.Fields[name] != nil {
			panic(fmt.Sprintf("strictjson: %s: duplicate json name %q", t.Name(), name))
		}
		if len(n.Order) == 64 {
			panic(fmt.Sprintf("strictjson: %s has more than 64 json fields", t.Name()))
		}
		sf.ord = len(n.Order)
		n.Fields[name] = sf
		n.Order = append(n.Order, sf)
	}
	return n
}

// Require marks the named fields of the object node n required. It panics
// on a name n does not have.
func (n *Node) Require(names ...string) *Node {
	for _, name := range names {
		f := n.Fields[name]
		if f == nil {
			panic("strictjson: no field " + name)
		}
		f.Required = true
	}
	return n
}

// Code says what a Problem is.
type Code uint8

const (
	Mismatch        Code = iota // the value's JSON kind is not the node's (Want, Got, Lit for a number)
	UnknownField                // an object key the struct does not have (the last Path element)
	DuplicateField              // a struct field given twice
	DuplicateKey                // a map key given twice
	RequiredMissing             // a required field absent (the last Path element)
	NotInteger                  // a fraction or exponent for an integer (Lit)
	Negative                    // a negative number for an unsigned integer (Lit)
	OutOfRange                  // a number the Go type cannot hold (Want, Lit)
	Invalid                     // not valid JSON (Lit: why); Walk's input must be json.Valid
)

// ElemKind is what a path element is.
type ElemKind uint8

const (
	FieldElem ElemKind = iota
	MapKeyElem
	IndexElem
)

// Elem is a struct field's name, a map key or an array index.
type Elem struct {
	Key   string
	Index int
	Kind  ElemKind
}

// Problem is what Walk found wrong, and where.
type Problem struct {
	Path []Elem
	Code Code
	Want Kind   // the node's kind
	Node *Node  // the node checked (for UnknownField: the object, whose fields a suggestion may name)
	Got  byte   // Mismatch: the value's first byte ('{', '[', '"', 't', 'f', 'n', or a number's)
	Lit  string // the number's literal, or Invalid's reason
	// Offset is the byte where the problem is: the start of the value,
	// of the key (unknown or duplicate), or the object's closing brace
	// (a required field missing). [LineCol] turns it into a position.
	Offset int
}

func (p *Problem) Error() string {
	return fmt.Sprintf("strictjson: problem %d at %v (%s)", p.Code, p.Path, p.Lit)
}

// GotKind names the JSON kind that starts with c: object, array, string,
// boolean, null or number.
func GotKind(c byte) string {
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

// Got names the JSON value that starts with c for a "want ..., got ..."
// error: "an object", "a string", "the number 1.5" (lit: the number's
// literal), "null".
func Got(c byte, lit string) string {
	switch k := GotKind(c); k {
	case "null":
		return k
	case "number":
		return "the number " + lit
	case "object", "array":
		return "an " + k
	default:
		return "a " + k
	}
}

// Suggest names the field of n that an unknown key probably meant (the
// same letters but for case, or a plural/singular slip), as
// ` (did you mean "name"?)`; "" when none is close.
func Suggest(key string, n *Node) string {
	k := strings.TrimSuffix(strings.ToLower(key), "s")
	for _, f := range n.Order {
		if strings.TrimSuffix(strings.ToLower(f.Name), "s") == k {
			return fmt.Sprintf(" (did you mean %q?)", f.Name)
		}
	}
	return ""
}

// Join appends a JSON path element ("name" or "[i]") to prefix.
func Join(prefix, elem string) string {
	switch {
	case prefix == "":
		return elem
	case elem == "":
		return prefix
	case elem[0] == '[':
		return prefix + elem
	default:
		return prefix + "." + elem
	}
}

// Walk checks that b, already known to be valid UTF-8 and valid JSON
// (json.Valid), matches the schema n exactly; nil if it does. It scans the
// bytes itself: json.Decoder's Token allocates an error for every number
// it ends and a path string per value would too; here a path exists only
// in a Problem.
func Walk(b []byte, n *Node) *Problem {
	w := walker{s: Scanner{B: b}}
	return w.value(n)
}

type walker struct {
	s    Scanner
	path []Elem // the keys and indexes down to the value being checked
	at   int    // where the key or value being checked starts
}

func (w *walker) problem(p Problem) *Problem {
	p.Path = append([]Elem(nil), w.path...)
	p.Offset = w.at
	return &p
}

func (w *walker) invalid(format string, args ...any) *Problem {
	return w.problem(Problem{Code: Invalid, Lit: fmt.Sprintf(format, args...)})
}

func (w *walker) value(n *Node) *Problem {
	c := w.s.Peek()
	w.at = w.s.I
	if n.Kind == Any {
		w.s.Skip()
		return nil
	}
	mismatch := func(lit string) *Problem {
		return w.problem(Problem{Code: Mismatch, Want: n.Kind, Node: n, Got: c, Lit: lit})
	}
	switch c {
	case 'n':
		if !n.Nullable {
			return mismatch("")
		}
		w.s.I += len("null")
		return nil
	case '{':
		if n.Kind != Object && n.Kind != Map {
			return mismatch("")
		}
		return w.object(n)
	case '[':
		if n.Kind != Array {
			return mismatch("")
		}
		return w.array(n)
	case '"':
		if n.Kind != String {
			return mismatch("")
		}
		if _, _, ok := w.s.Str(); !ok {
			return w.invalid("unterminated string")
		}
		return nil
	case 't', 'f':
		if n.Kind != Bool {
			return mismatch("")
		}
		if c == 't' {
			w.s.I += len("true")
		} else {
			w.s.I += len("false")
		}
		return nil
	}
	start := w.s.I
	for w.s.I < len(w.s.B) && strings.IndexByte("+-.0123456789eE", w.s.B[w.s.I]) >= 0 {
		w.s.I++
	}
	if w.s.I == start {
		return w.invalid("invalid JSON at byte %d", w.s.I) // unreachable after json.Valid
	}
	lit := w.s.B[start:w.s.I]
	switch n.Kind {
	case Int, Uint, Float:
		return w.number(n, lit)
	}
	return mismatch(string(lit))
}

// key reads an object key, unescaped as encoding/json would.
func (w *walker) key() (string, *Problem) {
	w.s.Peek()
	start := w.s.I
	raw, escaped, ok := w.s.Str()
	if !ok {
		return "", w.invalid("unterminated string")
	}
	if !escaped {
		return string(raw), nil
	}
	var k string
	if err := json.Unmarshal(w.s.B[start:w.s.I], &k); err != nil {
		return "", w.invalid("object key at byte %d: %v", start, err)
	}
	return k, nil
}

// expect consumes c, the next non-space byte.
func (w *walker) expect(c byte) *Problem {
	if w.s.Peek() != c {
		return w.invalid("want %q at byte %d", c, w.s.I) // unreachable after json.Valid
	}
	w.s.I++
	return nil
}

// field reads a struct field's key and returns its field (nil with the
// problem for an unknown key).
func (w *walker) field(n *Node, depth int) (*Field, *Problem) {
	w.s.Peek()
	start := w.s.I
	w.at = start
	raw, escaped, ok := w.s.Str()
	if !ok {
		return nil, w.invalid("unterminated string")
	}
	f := n.Fields[string(raw)] // no allocation: the map lookup borrows raw
	key := ""
	if escaped {
		w.s.I = start
		k, p := w.key()
		if p != nil {
			return nil, p
		}
		f, key = n.Fields[k], k
	} else if f == nil {
		key = string(raw)
	}
	if f == nil {
		w.path[depth] = Elem{Key: key}
		return nil, w.problem(Problem{Code: UnknownField, Node: n})
	}
	w.path[depth] = Elem{Key: f.Name}
	return f, nil
}

func (w *walker) object(n *Node) *Problem {
	w.s.I++ // '{'
	var (
		seenField uint64          // struct fields by their place in n.Order
		seenKey   map[string]bool // map keys
	)
	if n.Kind == Map {
		seenKey = make(map[string]bool)
	}
	depth := len(w.path)
	w.path = append(w.path, Elem{})
	end := 0
	for first := true; ; first = false {
		if w.s.Peek() == '}' {
			end = w.s.I
			w.s.I++
			break
		}
		if !first {
			if p := w.expect(','); p != nil {
				return p
			}
		}
		child, p := w.member(n, depth, &seenField, seenKey)
		if p != nil {
			return p
		}
		if p := w.expect(':'); p != nil {
			return p
		}
		if p := w.value(child); p != nil {
			return p
		}
	}
	for _, f := range n.Order {
		if f.Required && seenField&(1<<f.ord) == 0 {
			w.path[depth] = Elem{Key: f.Name}
			w.at = end
			return w.problem(Problem{Code: RequiredMissing, Node: n})
		}
	}
	w.path = w.path[:depth]
	return nil
}

// member reads an object's key: a struct field, once (seenField), or a
// map key, once (seenKey); it returns the node of the value that follows.
func (w *walker) member(n *Node, depth int, seenField *uint64, seenKey map[string]bool) (*Node, *Problem) {
	if n.Kind == Object {
		f, p := w.field(n, depth)
		if p != nil {
			return nil, p
		}
		if *seenField&(1<<f.ord) != 0 {
			return nil, w.problem(Problem{Code: DuplicateField, Node: n})
		}
		*seenField |= 1 << f.ord
		return f.Node, nil
	}
	w.s.Peek()
	w.at = w.s.I
	k, p := w.key()
	if p != nil {
		return nil, p
	}
	w.path[depth] = Elem{Key: k, Kind: MapKeyElem}
	if seenKey[k] {
		return nil, w.problem(Problem{Code: DuplicateKey, Node: n})
	}
	seenKey[k] = true
	return n.Elem, nil
}

func (w *walker) array(n *Node) *Problem {
	w.s.I++ // '['
	depth := len(w.path)
	w.path = append(w.path, Elem{})
	for i := 0; ; i++ {
		if w.s.Peek() == ']' {
			w.s.I++
			break
		}
		if i > 0 {
			if p := w.expect(','); p != nil {
				return p
			}
		}
		w.path[depth] = Elem{Index: i, Kind: IndexElem}
		if p := w.value(n.Elem); p != nil {
			return p
		}
	}
	w.path = w.path[:depth]
	return nil
}

// number checks that the literal fits the Go type exactly, as
// json.Unmarshal would, and says why not.
func (w *walker) number(n *Node, lit []byte) *Problem {
	var err error
	switch n.Kind {
	case Int:
		_, err = strconv.ParseInt(string(lit), 10, n.Bits)
	case Uint:
		_, err = strconv.ParseUint(string(lit), 10, n.Bits)
	case Float:
		_, err = strconv.ParseFloat(string(lit), n.Bits)
	}
	if err == nil {
		return nil
	}
	s := string(lit)
	p := Problem{Code: OutOfRange, Want: n.Kind, Node: n, Lit: s}
	switch {
	case n.Kind != Float && strings.ContainsAny(s, ".eE"):
		p.Code = NotInteger
	case n.Kind == Uint && strings.HasPrefix(s, "-"):
		p.Code = Negative
	}
	return w.problem(p)
}
