package child

import (
	"io"
	"log/slog"
	"sync/atomic"
	"time"
)

const copyBufSize = 32 << 10

// chunk is one read from the child's pipe, queued for a tap. gap marks that
// chunks were dropped before this one.
type chunk struct {
	b   []byte
	gap bool
}

// tee copies a child's piped stdout or stderr to the real output and, without
// ever waiting for it, to a tap.
type tee struct {
	name string
	r    io.ReadCloser // the read end of the child's pipe
	out  io.Writer     // nil: discard
	tap  func([]byte)
	log  *slog.Logger

	q        chan chunk
	dropped  atomic.Int64 // bytes
	abandon  atomic.Bool  // Wait gave up on the tap: drop the rest
	copyDone chan struct{}
	tapDone  chan struct{}
}

func newTee(name string, r io.ReadCloser, out io.Writer, tap func([]byte), log *slog.Logger) *tee {
	t := &tee{name: name, r: r, out: out, tap: tap, log: log,
		copyDone: make(chan struct{}), tapDone: make(chan struct{})}
	if tap != nil {
		t.q = make(chan chunk, tapQueue)
	}
	return t
}

func (t *tee) start() {
	go t.copy()
	if t.tap != nil {
		go t.feed()
	} else {
		close(t.tapDone)
	}
}

func (t *tee) copy() {
	defer close(t.copyDone)
	defer t.r.Close()
	if t.q != nil {
		defer close(t.q)
	}
	buf := make([]byte, copyBufSize)
	out := t.out
	gap := false
	for {
		n, err := t.r.Read(buf)
		if n > 0 {
			// Real output first: the job's log must not wait for, or
			// depend on, the observer.
			if out != nil {
				if _, werr := out.Write(buf[:n]); werr != nil {
					// Keep draining the pipe so the child never blocks
					// on a full pipe because our output went away.
					t.log.Error("child output lost", "stream", t.name, "err", werr)
					out = nil
				}
			}
			if t.q != nil {
				c := chunk{b: append([]byte(nil), buf[:n]...), gap: gap}
				select {
				case t.q <- c:
					gap = false
				default:
					t.dropped.Add(int64(n))
					gap = true
				}
			}
		}
		if err != nil {
			// io.EOF when every writer closed; os.ErrClosed when drain
			// gave up on a straggler holding the pipe.
			return
		}
	}
}

func (t *tee) feed() {
	defer close(t.tapDone)
	for c := range t.q {
		if t.abandon.Load() {
			t.dropped.Add(int64(len(c.b)))
			continue
		}
		if c.gap {
			t.tap(nil)
		}
		t.tap(c.b)
	}
}

// drain waits for the pipe to reach EOF and the tap to catch up, until
// deadline. A pipe still held open at the deadline (an orphaned grandchild
// inherited it) is closed, so that Wait returns; the straggler gets EPIPE or
// SIGPIPE if it writes again. A tap still behind at the deadline is
// abandoned: it finishes the call it is in and gets nothing more.
func (t *tee) drain(deadline time.Time) {
	timer := time.NewTimer(time.Until(deadline))
	defer timer.Stop()
	expired := false
	select {
	case <-t.copyDone:
	case <-timer.C:
		expired = true
		t.log.Warn("child output still open after leader exit, closing", "stream", t.name)
		t.r.Close()
		<-t.copyDone
	}
	if !expired {
		select {
		case <-t.tapDone:
			return
		case <-timer.C:
		}
	}
	select {
	case <-t.tapDone:
	default:
		t.abandon.Store(true)
		t.log.Warn("output tap too slow, abandoned", "stream", t.name)
	}
}
