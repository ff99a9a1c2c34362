package estimate

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strconv"
)

// The JSON codecs of the lists a job's state carries (Observations,
// MemPoints): each element is a short JSON array, and a whole list is
// written and read in one pass rather than one MarshalJSON call per
// element, which made a warm job's save cost about 0.3 ms.

// appendList appends list as a JSON array of its elements (null for nil).
func appendList[E any](b []byte, list []E, elem func([]byte, E) ([]byte, error)) ([]byte, error) {
	if list == nil {
		return append(b, "null"...), nil
	}
	b = append(b, '[')
	for i, e := range list {
		if i > 0 {
			b = append(b, ',')
		}
		var err error
		if b, err = elem(b, e); err != nil {
			return nil, fmt.Errorf("element %d: %w", i, err)
		}
	}
	return append(b, ']'), nil
}

// decodeList reads a JSON array of raw element arrays R and converts each
// with conv (nil for null); what names the list in errors.
func decodeList[E, R any](b []byte, what string, conv func(R) (E, error)) ([]E, error) {
	var raw []R
	if err := json.Unmarshal(b, &raw); err != nil {
		return nil, fmt.Errorf("estimate: %s: %w", what, err)
	}
	if raw == nil {
		return nil, nil
	}
	out := make([]E, len(raw))
	for i, r := range raw {
		e, err := conv(r)
		if err != nil {
			return nil, fmt.Errorf("estimate: %s: element %d: %w", what, i, err)
		}
		out[i] = e
	}
	return out, nil
}

// appendInts appends [v0,v1,...].
func appendInts(b []byte, vs ...int64) []byte {
	b = append(b, '[')
	for i, v := range vs {
		if i > 0 {
			b = append(b, ',')
		}
		b = strconv.AppendInt(b, v, 10)
	}
	return append(b, ']')
}

// member is a list member of a JSON object and its encoder.
type member struct {
	key    string // `"window":`
	encode func([]byte) ([]byte, error)
}

// splice appends head, an object json.Marshal encoded with the members'
// lists set to nil, with each member's null replaced by its list: the
// lists are written once, not written and then re-scanned by encoding/json
// (which checks and compacts every MarshalJSON result). The members must be
// in head's order; their keys cannot occur elsewhere in head, whose other
// members are numbers and booleans.
func splice(b, head []byte, members ...member) ([]byte, error) {
	for _, m := range members {
		i := bytes.Index(head, []byte(m.key+"null"))
		if i < 0 {
			return nil, fmt.Errorf("estimate: encoding: no %snull in %.80s", m.key, head)
		}
		b = append(b, head[:i+len(m.key)]...)
		var err error
		if b, err = m.encode(b); err != nil {
			return nil, err
		}
		head = head[i+len(m.key)+len("null"):]
	}
	return append(b, head...), nil
}

func (os Observations) appendTo(b []byte) ([]byte, error) {
	b, err := appendList(b, os, appendObs)
	if err != nil {
		return nil, fmt.Errorf("estimate: observations: %w", err)
	}
	return b, nil
}

func (ps MemPoints) appendTo(b []byte) ([]byte, error) { return appendList(b, ps, appendMemPoint) }

// AppendJSON appends what json.Marshal(e) writes, at a fraction of its
// cost for a full window (TestAppendJSONIsMarshal).
func (e *IterEstimator) AppendJSON(b []byte) ([]byte, error) {
	s := *e
	s.Window, s.Warm, s.Run, s.order = nil, nil, nil, windowOrder{}
	head, err := json.Marshal(&s)
	if err != nil {
		return nil, err
	}
	return splice(b, head, member{`"window":`, e.Window.appendTo}, member{`"warm":`, e.Warm.appendTo}, member{`"run":`, e.Run.appendTo})
}

// AppendJSON appends what json.Marshal(m) writes, at a fraction of its
// cost (TestAppendJSONIsMarshal).
func (m *MemTracker) AppendJSON(b []byte) ([]byte, error) {
	s := *m
	s.Points = nil
	head, err := json.Marshal(&s)
	if err != nil {
		return nil, err
	}
	return splice(b, head, member{`"points":`, m.Points.appendTo})
}
