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
// The wire protocol and the clients that speak it are internal/relayproto.
package relay

import (
	"errors"
	"fmt"
	"io"

	"github.com/isched/isched/internal/relayproto"
)

// frameChunk is a frame buffer's first size; it doubles as bytes arrive.
const frameChunk = 4 << 10

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
	n, err := relayproto.ReadHeader(f.r, max)
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
			return nil, fmt.Errorf("%w: truncated frame: %w", relayproto.ErrFrame, err)
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
