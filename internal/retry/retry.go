// Package retry is the capped exponential backoff, with a rate-limited log
// of the failures and of the recovery, that every isched loop talking to an
// outside party (Redis, slurmctld) uses until its context ends: the agent's
// poll and action loops, the coordinator's rounds, the wrapper's reporter.
package retry

import (
	"context"
	"log/slog"
	"time"
)

// Backoff is one retrying loop's state. The zero value of each field has a
// default; it is not safe for concurrent use (one loop owns it).
type Backoff struct {
	// Min is the first wait (default 200 ms); each failure doubles it, up to
	// Max (default 30 s).
	Min, Max time.Duration
	// Log receives the first failure, then at most one line per LogEvery
	// (default 1 min) with the count, then the recovery. Nil: no logging.
	Log *slog.Logger
	// What names the loop in the log ("poll", "reports").
	What string
	// Level of the failure lines (default Warn).
	Level    slog.Level
	LogEvery time.Duration
	// Now is the clock (default time.Now).
	Now func() time.Time

	cur      time.Duration
	failures int
	since    time.Time
	lastLog  time.Time
}

func (b *Backoff) now() time.Time {
	if b.Now != nil {
		return b.Now()
	}
	return time.Now()
}

// Failed records a failure and returns how long to wait before trying again.
func (b *Backoff) Failed(err error) time.Duration {
	lo, hi, every := b.Min, b.Max, b.LogEvery
	if lo <= 0 {
		lo = 200 * time.Millisecond
	}
	if hi <= 0 {
		hi = 30 * time.Second
	}
	if every <= 0 {
		every = time.Minute
	}
	now := b.now()
	b.failures++
	if b.failures == 1 {
		b.since = now
	}
	b.cur = min(max(2*b.cur, lo), max(hi, lo))
	if b.Log != nil && (b.failures == 1 || now.Sub(b.lastLog) >= every) {
		level := b.Level
		if level == 0 {
			level = slog.LevelWarn
		}
		b.Log.Log(context.Background(), level, b.What+" failing; retrying", "err", err, "failures", b.failures,
			"since", b.since.Format(time.RFC3339), "retry_in", b.cur)
		b.lastLog = now
	}
	return b.cur
}

// OK records a success: after failures it logs the recovery, and the next
// failure starts again from Min.
func (b *Backoff) OK() {
	if b.failures > 0 && b.Log != nil {
		b.Log.Info(b.What+" recovered", "failures", b.failures, "down_for", b.now().Sub(b.since).Round(time.Millisecond).String())
	}
	b.failures, b.cur = 0, 0
}

// Failures is the number of failures since the last success.
func (b *Backoff) Failures() int { return b.failures }
