package estimate

import (
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
