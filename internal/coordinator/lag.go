package coordinator

import (
	"context"

	"github.com/isched/isched/internal/stream"
)

// lagReader is the store's view of the ingest stream's counters (optional:
// a store without it, such as a test double, skips the check).
type lagReader interface {
	Lag(ctx context.Context, stream, group string) (stream.GroupLag, error)
}

// checkLag exports how far the group is behind and makes lost reports loud.
// Wrappers append with MAXLEN ~, so a coordinator that falls more than the
// cap behind loses the oldest unread reports without any error anywhere:
// here they are counted (isched_coordinator_ingest_trimmed_unread_total)
// and each tick that finds a new loss logs a warning.
func (c *Coordinator) checkLag(ctx context.Context) {
	lr, ok := c.store.(lagReader)
	if !ok {
		return
	}
	l, err := lr.Lag(ctx, c.keys.Ingest(), group)
	if err != nil {
		c.log.Debug("ingest lag not read", "err", err)
		return
	}
	if l.Lag >= 0 {
		c.metrics.ingestLag.Set(float64(l.Lag))
	}
	n, ok := l.TrimmedUnread()
	if !ok || n <= c.trimmedCounted {
		return
	}
	c.metrics.trimmed.Add(float64(n - c.trimmedCounted))
	c.log.Warn("reports trimmed from the ingest stream before they were read: the coordinator fell behind the stream's cap",
		"lost", n-c.trimmedCounted, "lost_total", n, "stream_len", l.Length, "lag", l.Lag,
		"last_read", l.LastDelivered, "first_entry", l.FirstEntry)
	c.trimmedCounted = n
}
