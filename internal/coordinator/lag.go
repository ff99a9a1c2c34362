package coordinator

import (
	"context"
	"time"

	"github.com/isched/isched/internal/stream"
)

// repairer puts a damaged ingest stream right (optional, as lagReader).
type repairer interface {
	RepairGroup(ctx context.Context, stream, group string, now time.Time, skew time.Duration) (stream.Repair, error)
}

// futureSkew: an ingest entry id further ahead of the coordinator's clock
// than this was chosen by its writer (wrappers let Redis choose, "*").
const futureSkew = 10 * time.Minute

// repairIngest finds and undoes what a hostile writer can do to the ingest
// stream's ids and group: the stream or the group deleted, an explicit id
// far ahead (the last possible one exhausts the stream: every wrapper's
// XADD fails, and the group, having read it, sits at the end). Logged and
// counted (isched_coordinator_ingest_repairs_total).
func (c *Coordinator) repairIngest(ctx context.Context) {
	rp, ok := c.store.(repairer)
	if !ok {
		return
	}
	r, err := rp.RepairGroup(ctx, c.keys.Ingest(), group, c.now(), futureSkew)
	if err != nil {
		c.log.Warn("ingest stream not checked for damage", "err", err)
		return
	}
	if r.Any() {
		// entries that waited may be gone with the old stream or group:
		// what is still pending is held again when next read
		clear(c.quota.held)
		clear(c.quota.heldBy)
	}
	if r.Recreated != "" {
		c.metrics.repairs.WithLabelValues("recreated-" + r.Recreated).Inc()
		c.log.Warn("ingest stream damaged: created again", "missing", r.Recreated)
	}
	if r.FutureIDs > 0 {
		c.metrics.repairs.WithLabelValues("future-ids").Inc()
		c.log.Warn("ingest stream damaged: entries with ids from the future deleted, last id and group position set back",
			"deleted", r.FutureIDs, "last_id", r.LastID)
	}
}

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
	c.repairIngest(ctx)
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
	c.log.Warn("reports lost: trimmed from the ingest stream before the coordinator read them. "+
		"With jobs reporting through isched-relay (the default) the coordinator fell behind the relay's cap (from Redis's maxmemory); "+
		"where jobs write to Redis themselves (report_direct), a job user's XADD MAXLEN may have trimmed them. "+
		"Runs that end meanwhile without an end report are not continued (their last seen step may be stale)",
		"lost", n-c.trimmedCounted, "lost_total", n, "stream_len", l.Length, "lag", l.Lag,
		"last_read", l.LastDelivered, "first_entry", l.FirstEntry)
	c.trimmedCounted = n
	c.lossMS = c.now().UnixMilli()
}
