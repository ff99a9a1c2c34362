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

// MaxHello bounds a Hello frame: a credential is at most 8 KiB
// (MungeVerifier), so a connection that has not authenticated never needs
// the room of a report.
const MaxHello = 16 << 10

// frameChunk is a frame buffer's first size; it doubles as bytes arrive.
const frameChunk = 4 << 10

// readFrame reads one frame into a new buffer, refusing one longer than
// max before reading its body. The client reads its replies with it (from
// the relay); the relay reads clients with a frameReader.
func readFrame(r io.Reader, max int) ([]byte, error) {
	n, err := readHeader(r, max)
	if err != nil {
		return nil, err
	}
	b := make([]byte, n)
	if _, err := io.ReadFull(r, b); err != nil {
		return nil, fmt.Errorf("%w: truncated frame: %w", ErrFrame, err)
	}
	return b, nil
}

// readHeader reads a frame's length and checks it.
func readHeader(r io.Reader, max int) (int, error) {
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

// frameReader reads a client's frames with memory lent by a frameBudget:
// the declared length is only a bound, the buffer grows as bytes arrive,
// and nothing is kept between frames (no read buffer per connection: an
// idle connection holds no frame memory at all).
type frameReader struct {
	r      io.Reader
	budget *frameBudget
	key    string // whom the bytes are lent to
	held   int64
}

// next reads one frame of at most max bytes. Its bytes stay lent until
// release (or the next call); errBudget when the budget cannot lend them.
func (f *frameReader) next(max int) ([]byte, error) {
	f.release()
	n, err := readHeader(f.r, max)
	if err != nil {
		return nil, err
	}
	var b []byte
	for len(b) < n {
		if len(b) == cap(b) {
			if b, err = f.grow(b, n); err != nil {
				return nil, err
			}
		}
		k, err := f.r.Read(b[len(b):cap(b)])
		b = b[:len(b)+k]
		f.budget.received.Add(int64(k))
		if err != nil && len(b) < n {
			if errors.Is(err, io.EOF) {
				err = io.ErrUnexpectedEOF
			}
			return nil, fmt.Errorf("%w: truncated frame: %w", ErrFrame, err)
		}
	}
	return b, nil
}

// grow doubles b's room (frameChunk at first, n at most), lent first.
func (f *frameReader) grow(b []byte, n int) ([]byte, error) {
	size := min(n, max(frameChunk, 2*cap(b)))
	if err := f.budget.reserve(f.key, int64(size-cap(b))); err != nil {
		return nil, err
	}
	f.held += int64(size - cap(b))
	nb := make([]byte, len(b), size)
	copy(nb, b)
	return nb, nil
}

// release gives back the last frame's memory: its buffer is the caller's
// garbage now.
func (f *frameReader) release() {
	f.budget.release(f.key, f.held)
	f.held = 0
}

// appendFrame appends body as a frame to dst.
func appendFrame(dst, body []byte) []byte {
	dst = binary.BigEndian.AppendUint32(dst, uint32(len(body)))
	return append(dst, body...)
}
