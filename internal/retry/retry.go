// Package retry is the capped exponential backoff with jitter, and a
// rate-limited log of the failures and of the recovery, that every isched
// loop talking to an outside party (Redis, slurmctld) uses until its context
// ends: the agent's and the coordinator's first connection to Redis, the
// agent's poll and action loops, the coordinator's rounds, the wrapper's
// reporter.
//
// Jitter: a thousand wrappers that lose Redis together would otherwise
// retry in lockstep, each retry a thundering herd. Each wait is drawn from
// [d/2, d] where d is the capped exponential value ("equal jitter"): the
// retries spread over half the interval, and a loop still waits at least
// half of it, so a failing party is never hammered.
package retry

import (
	"context"
	"log/slog"
	"math/rand/v2"
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
	// Rand returns a number in [0, 1] that places the wait in [d/2, d]
	// (default math/rand/v2's Float64; tests inject their own).
	Rand func() float64

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

// Jitter returns the wait for the exponential value d and a random r in
// [0, 1]: d/2 + r·d/2 (r outside [0, 1] is clamped).
func Jitter(d time.Duration, r float64) time.Duration {
	r = min(max(r, 0), 1)
	half := d / 2
	return half + time.Duration(r*float64(d-half))
}

// Failed records a failure and returns how long to wait before trying
// again: the doubled, capped value with jitter (see Jitter).
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
	rnd := b.Rand
	if rnd == nil {
		rnd = rand.Float64
	}
	wait := Jitter(b.cur, rnd())
	if b.Log != nil && (b.failures == 1 || now.Sub(b.lastLog) >= every) {
		level := b.Level
		if level == 0 {
			level = slog.LevelWarn
		}
		b.Log.Log(context.Background(), level, b.What+" failing; retrying", "err", err, "failures", b.failures,
			"since", b.since.Format(time.RFC3339), "retry_in", wait)
		b.lastLog = now
	}
	return wait
}

// OK records a success: after failures it logs the recovery, and the next
// failure starts again from Min.
func (b *Backoff) OK() {
	if b.failures > 0 && b.Log != nil {
		b.Log.Info(b.What+" recovered", "failures", b.failures, "down_for", b.now().Sub(b.since).Round(time.Millisecond).String())
	}
	b.failures, b.cur = 0, 0
}

// Do calls f until it succeeds, ctx ends, or permanent(err) says an error
// is not worth a retry (a configuration error); it waits b.Failed(err)
// between tries. It returns f's last error or ctx's.
func Do(ctx context.Context, b *Backoff, f func(context.Context) error, permanent func(error) bool) error {
	for {
		err := f(ctx)
		if err == nil {
			b.OK()
			return nil
		}
		if permanent != nil && permanent(err) {
			return err
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
		if err := Sleep(ctx, b.Failed(err)); err != nil {
			return err
		}
	}
}

// Sleep waits d or until ctx ends, and returns ctx's error if it ended
// (at once for d <= 0).
func Sleep(ctx context.Context, d time.Duration) error {
	if d <= 0 {
		return ctx.Err()
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}
