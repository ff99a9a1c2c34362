package relayproto

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"reflect"
	"strconv"
	"sync"
	"unicode/utf8"

	"github.com/isched/isched/internal/strictjson"
)

// Version is the protocol version a Hello carries.
const Version = 1

// Hello is the client's first frame.
type Hello struct {
	V    int    `json:"v"`
	Cred string `json:"cred"` // a MUNGE credential of Credential's claims
	// Mode is what the connection's frames are: "" Entry frames (a
	// wrapper's reports), ModeQuery Query frames (isched status).
	Mode string `json:"mode,omitempty"`
}

// Entry is one report to append: its exact bytes and their MAC (the
// session's HMAC, checked by the coordinator, not here).
type Entry struct {
	M   string `json:"m"`
	MAC string `json:"mac"`
}

// Reply answers a Hello or an Entry. OK with ID (an entry's stream id) or
// Code and Err; RetryMS with Code "throttled": when the uid's ration has
// room again.
type Reply struct {
	OK      bool   `json:"ok,omitempty"`
	ID      string `json:"id,omitempty"`
	Code    string `json:"code,omitempty"`
	Err     string `json:"err,omitempty"`
	RetryMS int64  `json:"retry_ms,omitempty"`
}

// Reply codes.
const (
	CodeAuth      = "auth"      // the credential was refused; the connection closes
	CodeBusy      = "busy"      // too many connections (of this uid, or unauthenticated)
	CodeOversize  = "oversize"  // the entry is over the entry limit
	CodeBadEntry  = "bad-entry" // the entry is malformed (not JSON, no MAC)
	CodeThrottled = "throttled" // the uid's ration of entries or bytes is spent
	CodeUnavail   = "unavailable"
)

// ErrRefused is a Reply with a code: Refused says which.
var ErrRefused = errors.New("relay: refused")

// Refused is the error of a Reply that is not OK.
type Refused struct{ Reply }

func (r *Refused) Error() string {
	if r.RetryMS > 0 {
		return fmt.Sprintf("relay: refused (%s): %s; retry in %d ms", r.Code, r.Err, r.RetryMS)
	}
	return fmt.Sprintf("relay: refused (%s): %s", r.Code, r.Err)
}

func (r *Refused) Unwrap() error { return ErrRefused }

// DecodeStrict decodes one JSON object into v (a pointer to a struct) and
// refuses what encoding/json alone would quietly accept: unknown keys,
// keys that differ from a field's only in case, a key given twice (where
// the last would win), a wrong type, and anything after the object. The
// check is internal/strictjson's, as for reports and plans: a frame is
// read by the relay from a job user and by the wrapper from the network,
// so neither side may read a frame otherwise than the other wrote it.
func DecodeStrict(b []byte, v any) error {
	if !utf8.Valid(b) {
		return errors.New("not valid UTF-8")
	}
	if !json.Valid(b) {
		switch p := strictjson.Syntax(b); {
		case p == nil:
		case p.Trailing:
			return errors.New("data after the JSON object")
		case errors.Is(p.Err, io.EOF) || errors.Is(p.Err, io.ErrUnexpectedEOF):
			return errors.New("unexpected end of the JSON object")
		case p.Err != nil:
			return p.Err
		}
		return errors.New("not one JSON value") // unreachable: json.Valid said it is not
	}
	if p := strictjson.Walk(b, frameSchema(reflect.TypeOf(v).Elem())); p != nil {
		return problemErr(p)
	}
	return json.Unmarshal(b, v)
}

// frameSchemas caches each frame type's schema: derived once, not per frame.
var frameSchemas sync.Map // reflect.Type -> *strictjson.Node

func frameSchema(t reflect.Type) *strictjson.Node {
	if n, ok := frameSchemas.Load(t); ok {
		return n.(*strictjson.Node)
	}
	n, _ := frameSchemas.LoadOrStore(t, strictjson.Schema(t, strictjson.Options{}))
	return n.(*strictjson.Node)
}

// problemErr words a schema problem with the path of the value.
func problemErr(p *strictjson.Problem) error {
	path := ""
	for _, e := range p.Path {
		if e.Kind == strictjson.IndexElem {
			path = strictjson.Join(path, "["+strconv.Itoa(e.Index)+"]")
		} else {
			path = strictjson.Join(path, e.Key)
		}
	}
	var why string
	switch p.Code {
	case strictjson.Mismatch:
		why = "wrong type (got " + strictjson.GotKind(p.Got) + ")"
	case strictjson.UnknownField:
		why = "unknown field"
	case strictjson.DuplicateField, strictjson.DuplicateKey:
		why = "duplicate field"
	case strictjson.RequiredMissing:
		why = "required field missing"
	case strictjson.NotInteger:
		why = "want an integer, got " + p.Lit
	case strictjson.Negative, strictjson.OutOfRange:
		why = "out of range: " + p.Lit
	default:
		why = p.Lit
	}
	if path == "" {
		return errors.New(why)
	}
	return fmt.Errorf("%s %q", why, path)
}

// Encode marshals v without HTML escaping (a report's "<" stays one byte:
// the MAC is over its exact bytes, which a JSON string keeps either way,
// but escaping would inflate the frame).
func Encode(v any) ([]byte, error) {
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return nil, err
	}
	return bytes.TrimSuffix(b.Bytes(), []byte("\n")), nil
}
