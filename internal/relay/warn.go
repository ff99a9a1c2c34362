package relay

import (
	"context"
	"log/slog"
	"sync"
	"time"
)

// warnLimiter bounds the relay's warnings: a client decides how often a
// refusal, a bad frame or a failed credential happens, so logging each one
// lets any user fill the relay's disk (issue 26: a reconnect loop of
// 500 000 connections in 30 s wrote 71.6 MB of log). Each kind of warning
// (its message) is logged Burst times an Interval; the rest of that
// interval's are counted and told in one summary line. The metrics still
// count every event: the log is for reading, the counters are for totals.
type warnLimiter struct {
	log      *slog.Logger
	now      func() time.Time
	interval time.Duration
	burst    int

	mu    sync.Mutex
	kinds map[string]*warnWindow
}

// warnWindow is one kind's current interval.
type warnWindow struct {
	start              time.Time
	logged, suppressed int
}

// Warning rate defaults: the first few of a kind show what is happening,
// the summary how much.
const (
	warnInterval = 10 * time.Second
	warnBurst    = 5
)

func newWarnLimiter(log *slog.Logger, now func() time.Time) *warnLimiter {
	return &warnLimiter{log: log, now: now, interval: warnInterval, burst: warnBurst, kinds: map[string]*warnWindow{}}
}

// warn logs msg on log (a logger of the connection, with its attributes)
// unless this interval's burst of msg is spent. The kinds are the relay's
// own constant messages, never a client's text, so the map stays small.
func (l *warnLimiter) warn(log *slog.Logger, msg string, args ...any) {
	l.mu.Lock()
	now := l.now()
	w := l.kinds[msg]
	if w == nil {
		w = &warnWindow{start: now}
		l.kinds[msg] = w
	}
	l.rollLocked(msg, w, now)
	ok := w.logged < l.burst
	if ok {
		w.logged++
	} else {
		w.suppressed++
	}
	l.mu.Unlock()
	if ok {
		log.Warn(msg, args...)
	}
}

// rollLocked starts a new interval for w once its own has ended, first
// telling how many of its warnings were not logged.
func (l *warnLimiter) rollLocked(msg string, w *warnWindow, now time.Time) {
	if now.Sub(w.start) < l.interval {
		return
	}
	if w.suppressed > 0 {
		l.log.Warn("relay warnings suppressed", "warning", msg, "suppressed", w.suppressed,
			"logged", w.logged, "in_last", now.Sub(w.start).Round(time.Millisecond).String())
	}
	*w = warnWindow{start: now}
}

// flush tells the counts of intervals that have ended, so that the last
// burst of an attack that then stops is summed up too.
func (l *warnLimiter) flush() {
	l.mu.Lock()
	defer l.mu.Unlock()
	now := l.now()
	for msg, w := range l.kinds {
		l.rollLocked(msg, w, now)
		if w.logged == 0 && w.suppressed == 0 {
			delete(l.kinds, msg)
		}
	}
}

// run flushes every interval until ctx ends.
func (l *warnLimiter) run(ctx context.Context) {
	t := time.NewTicker(l.interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			l.flush()
			return
		case <-t.C:
			l.flush()
		}
	}
}
