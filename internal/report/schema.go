package report

import (
	"reflect"
	"sync"

	"github.com/isched/isched/internal/strictjson"
)

// The schema walk is internal/strictjson's (shared with internal/plan):
// derived from the Go types, every field without omitempty required, null
// allowed for pointers, slices and maps. This file words its problems.

type (
	schemaNode  = strictjson.Node
	schemaField = strictjson.Field
	nodeKind    = strictjson.Kind
)

const (
	nodeObject = strictjson.Object
	nodeArray  = strictjson.Array
	nodeMap    = strictjson.Map
	nodeString = strictjson.String
	nodeBool   = strictjson.Bool
	nodeInt    = strictjson.Int
	nodeUint   = strictjson.Uint
	nodeFloat  = strictjson.Float
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

var envelopeSchema = sync.OnceValue(func() *schemaNode {
	return schemaOf(reflect.TypeFor[Envelope]())
})

// schemaOf derives the schema from the Go type; it panics on a type the
// wire format does not use (strictjson.Schema).
func schemaOf(t reflect.Type) *schemaNode {
	return strictjson.Schema(t, strictjson.Options{RequiredByTag: true, NullCollections: true})
}

// walkSchema checks that b, already known to be valid UTF-8 and valid JSON,
// matches the schema n exactly; a refusal is a *FieldError.
func walkSchema(b []byte, n *schemaNode) error {
	p := strictjson.Walk(b, n)
	if p == nil {
		return nil
	}
	return fail(pathString(p.Path), "%s", reason(p))
}

// pathString renders a path as FieldError.Field does: map keys and
// indexes in brackets, long keys truncated.
func pathString(path []strictjson.Elem) string {
	s := ""
	for _, e := range path {
		switch e.Kind {
		case strictjson.FieldElem:
			s = joinPath(s, truncate(e.Key, maxQuoted))
		case strictjson.MapKeyElem:
			s = joinPath(s, index(e.Key))
		case strictjson.IndexElem:
			s = joinPath(s, index(e.Index))
		}
	}
	return s
}

// reason words a schema problem.
func reason(p *strictjson.Problem) string {
	lit := truncate(p.Lit, maxQuoted)
	switch p.Code {
	case strictjson.Mismatch:
		return "want " + nodeWant[p.Want] + ", got " + strictjson.GotKind(p.Got)
	case strictjson.UnknownField:
		return "unknown field"
	case strictjson.DuplicateField, strictjson.DuplicateKey:
		return "duplicate field"
	case strictjson.RequiredMissing:
		return "required field missing"
	case strictjson.NotInteger:
		return "want integer, got " + lit
	case strictjson.Negative:
		return "must not be negative (got " + lit + ")"
	case strictjson.OutOfRange:
		return "out of range for " + nodeWant[p.Want] + " (got " + lit + ")"
	}
	return p.Lit // Invalid: unreachable after json.Valid
}
