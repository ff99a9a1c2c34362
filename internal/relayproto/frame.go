// Package relayproto is isched-relay's wire protocol and the clients that
// speak it: the wrapper's Client (reports) and the CLI's QueryClient
// (status queries), the frames and messages, and the MUNGE credential a
// client opens a connection with. The relay (internal/relay, the app)
// serves it; the wrapper and the CLI import this library, never the app.
//
// Protocol (one TCP connection, frames both ways): a frame is a 4-byte
// big-endian length and that many bytes of JSON, at most MaxFrame. The
// client's first frame is a Hello with its credential; the relay answers
// one Reply. Then each client frame is an Entry, each answered by a Reply
// in order (the entry's stream id, or why it was refused).
package relayproto

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

// MaxHello bounds a Hello frame: a credential is at most 8 KiB
// (MungeVerifier), so a connection that has not authenticated never needs
// the room of a report.
const MaxHello = 16 << 10

// ReadFrame reads one frame into a new buffer, refusing one longer than
// max before reading its body. The clients read their replies with it;
// the relay reads clients with a reader of its own that borrows memory.
func ReadFrame(r io.Reader, max int) ([]byte, error) {
	n, err := ReadHeader(r, max)
	if err != nil {
		return nil, err
	}
	b := make([]byte, n)
	if _, err := io.ReadFull(r, b); err != nil {
		return nil, fmt.Errorf("%w: truncated frame: %w", ErrFrame, err)
	}
	return b, nil
}

// ReadHeader reads a frame's length and checks it.
func ReadHeader(r io.Reader, max int) (int, error) {
	var h [4]byte
	if _, err := io.ReadFull(r, h[:]); err != nil {
		return 0, err
	}
	n := binary.BigEndian.Uint32(h[:])
	if n == 0 {
		return 0, fmt.Errorf("%w: empty frame", ErrFrame)
	}
	if uint64(n) > uint64(max) {
		return 0, fmt.Errorf("%w: frame of %d bytes, limit %d", ErrFrame, n, max)
	}
	return int(n), nil
}

// AppendFrame appends body as a frame to dst.
func AppendFrame(dst, body []byte) []byte {
	dst = binary.BigEndian.AppendUint32(dst, uint32(len(body)))
	return append(dst, body...)
}
