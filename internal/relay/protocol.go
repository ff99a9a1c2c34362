package relay

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
)

// Version is the protocol version a Hello carries.
const Version = 1

// Hello is the client's first frame.
type Hello struct {
	V    int    `json:"v"`
	Cred string `json:"cred"` // a MUNGE credential of Credential's claims
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

// decodeStrict decodes one JSON object into v: unknown fields and
// anything after it are errors.
func decodeStrict(b []byte, v any) error {
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return err
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return errors.New("data after the JSON object")
	}
	return nil
}

// encode marshals v without HTML escaping (a report's "<" stays one byte:
// the MAC is over its exact bytes, which a JSON string keeps either way,
// but escaping would inflate the frame).
func encode(v any) ([]byte, error) {
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return nil, err
	}
	return bytes.TrimSuffix(b.Bytes(), []byte("\n")), nil
}
