// Package relay is isched-relay: the only holder of the reporter's Redis
// password. Wrappers connect to it over TCP, prove their uid with a MUNGE
// credential and send their signed reports; the relay appends each to the
// cluster's ingest stream itself, with "*" ids, its own approximate
// MAXLEN, bounded entries and a per-uid ration of entries and bytes. A job
// user then holds no Redis password at all, so they cannot trim the stream
// (XADD MAXLEN 0), choose ids, name other keys or fill Redis's memory
// (issue 18 item 1, docs/threat-model.md).
//
// The relay is transport, not trust: the coordinator still checks each
// report's MUNGE-sealed session and HMAC as before. The relay only learns
// who is sending (MUNGE's uid, never the client's word) so that it can
// ration and tag by uid.
//
// Protocol (one TCP connection, frames both ways): a frame is a 4-byte
// big-endian length and that many bytes of JSON, at most MaxFrame. The
// client's first frame is a Hello with its credential; the relay answers
// one Reply. Then each client frame is an Entry, each answered by a Reply
// in order (the entry's stream id, or why it was refused).
package relay

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"

	"github.com/isched/isched/internal/report"
)

// MaxFrame bounds every frame either way: an Entry with the largest report
// (report.MaxPayload, at most doubled by JSON string escaping: reports are
// JSON whose control characters are escaped already) and its MAC.
const MaxFrame = 2*report.MaxPayload + 1024

// ErrFrame marks a frame that breaks the protocol (too long, empty,
// truncated): the connection is closed.
var ErrFrame = errors.New("relay: bad frame")

// readFrame reads one frame into a new buffer, refusing one longer than
// max before reading its body.
func readFrame(r io.Reader, max int) ([]byte, error) {
	var h [4]byte
	if _, err := io.ReadFull(r, h[:]); err != nil {
		return nil, err
	}
	n := binary.BigEndian.Uint32(h[:])
	if n == 0 {
		return nil, fmt.Errorf("%w: empty frame", ErrFrame)
	}
	if uint64(n) > uint64(max) {
		return nil, fmt.Errorf("%w: frame of %d bytes, limit %d", ErrFrame, n, max)
	}
	b := make([]byte, n)
	if _, err := io.ReadFull(r, b); err != nil {
		return nil, fmt.Errorf("%w: truncated frame: %w", ErrFrame, err)
	}
	return b, nil
}

// appendFrame appends body as a frame to dst.
func appendFrame(dst, body []byte) []byte {
	dst = binary.BigEndian.AppendUint32(dst, uint32(len(body)))
	return append(dst, body...)
}
