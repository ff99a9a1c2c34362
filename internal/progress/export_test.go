package progress

import "time"

// The counters and the end-of-stream flush are read by the tests only: the
// wrapper reads events, and a Tail logs its problems as they happen.

// Stats returns the counters so far.
func (m *Matcher) Stats() MatcherStats { return m.stats }

// Flush treats the buffered unterminated line as complete (the stream ended).
func (m *Matcher) Flush(at time.Time) []Event {
	var out []Event
	if !m.discarding && len(m.buf) > 0 {
		m.line(m.buf, at, &out)
	}
	m.buf = m.buf[:0]
	m.discarding = false
	return out
}

// Stats returns the counters so far.
func (t *Tail) Stats() TailStats {
	t.mu.Lock()
	last := t.lastErr
	t.mu.Unlock()
	return TailStats{
		Events: t.events.Load(), Rejected: t.rejected.Load(), TooLong: t.tooLong.Load(),
		Reopened: t.reopened.Load(), Truncated: t.truncated.Load(), ReadErrs: t.readErrs.Load(),
		LastErr: last,
	}
}
