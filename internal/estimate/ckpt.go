package estimate

import (
	"time"
)

// Checkpoint timing.
const (
	// DefaultCkpt is the checkpoint duration assumed before any was measured.
	DefaultCkpt = 30 * time.Second
	// ckptAlpha weighs the newest measurement in the moving average.
	ckptAlpha = 0.3
	// ckptMargin is added on top of the moving average.
	ckptMargin = 1.25
)

// CkptTimer learns how long a requested checkpoint takes to land: from the
// request (signal sent) to the wrapper's report of a complete checkpoint.
// That includes finishing the current step, writing, the wrapper's
// debounce and the report's way through Redis, all of which a decision
// must wait for. The zero value is ready to use.
//
// Checkpoints nobody asked for (the loop's own schedule) are not measured.
// A checkpoint that the loop happened to write just after a request is
// measured short; the moving average and the "never below the last one"
// rule keep one such accident from dominating.
type CkptTimer struct {
	RequestedAt time.Time `json:"requested_at,omitzero"` // zero: nothing pending
	AvgMS       float64   `json:"avg_ms"`                // exponentially weighted, α = 0.3
	LastMS      float64   `json:"last_ms"`
	MaxMS       float64   `json:"max_ms"`
	N           int       `json:"n"`
}

// Requested records a checkpoint request. While one is pending a second
// request does not move the start: the checkpoint that lands answers the first.
func (c *CkptTimer) Requested(at time.Time) {
	if c.RequestedAt.IsZero() {
		c.RequestedAt = at
	}
}

// Pending returns when the pending request was made.
func (c *CkptTimer) Pending() (time.Time, bool) {
	return c.RequestedAt, !c.RequestedAt.IsZero()
}

// Cancel forgets a pending request (it timed out, the job ended).
func (c *CkptTimer) Cancel() { c.RequestedAt = time.Time{} }

// Completed records a complete checkpoint at at. When a request was
// pending it returns the measured duration and true.
func (c *CkptTimer) Completed(at time.Time) (time.Duration, bool) {
	if c.RequestedAt.IsZero() {
		return 0, false
	}
	d := at.Sub(c.RequestedAt)
	c.RequestedAt = time.Time{}
	if d < 0 {
		return 0, false // clocks disagree; nothing learnt
	}
	ms := float64(d) / float64(time.Millisecond)
	if c.N == 0 {
		c.AvgMS = ms
	} else {
		c.AvgMS += ckptAlpha * (ms - c.AvgMS)
	}
	c.LastMS = ms
	c.MaxMS = max(c.MaxMS, ms)
	c.N++
	return d, true
}

// Estimate is the duration to plan for: DefaultCkpt before any
// measurement, then the larger of 1.25 × the moving average and the latest
// measurement, and never under a second.
func (c *CkptTimer) Estimate() time.Duration {
	if c.N == 0 {
		return DefaultCkpt
	}
	return max(msDuration(max(ckptMargin*c.AvgMS, c.LastMS)), time.Second)
}
