package relay

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"
)

// The ingest stream is bounded in bytes by construction (issue 26, item
// 2): its entry cap (XADD MAXLEN ~) is derived from Redis's maxmemory so
// that the stream, every entry at the largest size the relay accepts,
// fits in a share of it. A cap in entries alone (100 000 × 64 KiB ≈
// 6.25 GiB) was three times the lab's `maxmemory 2gb`: one uid at its
// ration reached OOM (noeviction: every write refused, for everyone) in
// ~15 minutes.
//
// Why a count derived from the worst case rather than a running byte
// count: the count is enforced by Redis itself on every XADD, holds
// whatever the relay knew before a restart, and holds with several relays
// on one stream (MAXLEN counts every relay's entries). A byte count kept
// by one relay knows neither what it appended before it restarted nor
// what the others append. The price: a stream of typical ~600-byte
// reports holds as many entries as one of 64 KiB reports (docs/
// deployment.md, "Redis memory", has the figures).

// DefaultStreamFraction is the share of maxmemory the ingest stream may
// take at worst. The rest is the coordinator's keys (~100 KiB per job at
// its caps), the agent's job table (up to 32 MiB, and a second copy while
// it is replaced), client buffers (a coordinator read of 512 entries of
// 64 KiB is 32 MiB of output buffer) and the consumer group's pending
// list.
const DefaultStreamFraction = 0.25

// entryOverhead bounds what Redis spends on an entry beyond its value:
// field names, the mac and uid fields, listpack headers, the radix tree
// node of the entry's listpack.
const entryOverhead = 512

// minStreamCap: below it the cap is refused. XADD MAXLEN ~ trims whole
// listpack nodes of up to 100 entries (stream-node-max-entries), so a
// smaller cap would not be kept.
const minStreamCap = 100

// EntryCost bounds the memory one stream entry of a report of up to
// maxEntry bytes takes in Redis: the value plus entryOverhead, rounded up
// by at most a quarter (jemalloc's size classes are four per doubling, so
// an allocation wastes under 25 %). Measured on Redis 7.0.15: an entry
// with a 64 KiB report takes 81 987 bytes; EntryCost(64 KiB) is 83 072.
func EntryCost(maxEntry int) int64 {
	return (int64(maxEntry)+entryOverhead)*5/4 + entryOverhead
}

// StreamCap is the ingest stream's entry cap and how it was derived.
type StreamCap struct {
	// Entries is the cap given to XADD MAXLEN ~.
	Entries int64
	// MaxMemory is Redis's maxmemory (0: unlimited), Budget the stream's
	// share of it, EntryCost the most one entry takes: Entries+1 (MAXLEN
	// ~ may keep one node more) entries at EntryCost fit in Budget.
	MaxMemory, Budget, EntryCost int64
	// Why says which bound set Entries.
	Why string
}

// CapRequest is what the cap is derived from.
type CapRequest struct {
	// MaxMemory is Redis's maxmemory in bytes, 0 for unlimited.
	MaxMemory int64
	// MaxEntry is the largest report the relay accepts.
	MaxEntry int
	// Fraction is the stream's share of MaxMemory, in (0, 1).
	Fraction float64
	// MaxLen is -max-len; Explicit says it was given on the command line
	// (rather than its default): then a MaxLen the budget cannot hold is
	// an error, not silently lowered.
	MaxLen   int64
	Explicit bool
}

// DeriveStreamCap is the cap that bounds the ingest stream's memory by
// construction: (Entries+1) × EntryCost(MaxEntry) ≤ Fraction × MaxMemory.
// With MaxMemory 0 (no limit) the cap is MaxLen and Budget 0: nothing
// bounds Redis's memory, which the caller must say.
func DeriveStreamCap(r CapRequest) (StreamCap, error) {
	switch {
	case r.MaxLen <= 0:
		return StreamCap{}, fmt.Errorf("relay: -max-len %d: want > 0", r.MaxLen)
	case r.MaxEntry <= 0:
		return StreamCap{}, fmt.Errorf("relay: largest entry %d bytes: want > 0", r.MaxEntry)
	case !(r.Fraction > 0 && r.Fraction < 1):
		return StreamCap{}, fmt.Errorf("relay: stream memory fraction %g: want between 0 and 1", r.Fraction)
	case r.MaxMemory < 0:
		return StreamCap{}, fmt.Errorf("relay: maxmemory %d: want ≥ 0", r.MaxMemory)
	}
	c := StreamCap{MaxMemory: r.MaxMemory, EntryCost: EntryCost(r.MaxEntry)}
	if r.MaxMemory == 0 {
		c.Entries, c.Why = r.MaxLen, "-max-len (Redis has no maxmemory: nothing bounds its memory)"
		return c, nil
	}
	c.Budget = int64(float64(r.MaxMemory) * r.Fraction)
	fit := c.Budget/c.EntryCost - 1
	if fit < minStreamCap {
		return StreamCap{}, fmt.Errorf("relay: maxmemory %d × %g = %d bytes holds %d entries of up to %d bytes (%d each in Redis), want ≥ %d: raise maxmemory or -stream-memory-fraction",
			r.MaxMemory, r.Fraction, c.Budget, max(fit, 0), r.MaxEntry, c.EntryCost, minStreamCap)
	}
	switch {
	case r.MaxLen <= fit:
		c.Entries, c.Why = r.MaxLen, "-max-len (below the memory budget)"
	case r.Explicit:
		return StreamCap{}, fmt.Errorf("relay: -max-len %d entries of up to %d bytes take up to %d bytes in Redis, over %g of maxmemory %d (%d bytes, %d entries): lower -max-len or raise maxmemory",
			r.MaxLen, r.MaxEntry, (r.MaxLen+1)*c.EntryCost, r.Fraction, r.MaxMemory, c.Budget, fit)
	default:
		c.Entries, c.Why = fit, "maxmemory (the stream's share holds this many entries of the largest size)"
	}
	return c, nil
}

// MemoryReader reads Redis's maxmemory (a *stream.Client).
type MemoryReader interface {
	MaxMemory(ctx context.Context) (int64, error)
}

// capWatch re-derives the cap when Redis's maxmemory changes (CONFIG SET
// at run time): the relay then appends with the new cap. A -max-len
// given explicitly that the new maxmemory cannot hold is lowered to what
// it can, with an error logged: refusing every report would be worse.
type capWatch struct {
	mem  MemoryReader
	req  CapRequest
	cur  StreamCap
	set  func(StreamCap)
	log  *slog.Logger
	warn func(*slog.Logger, string, ...any)
}

// check reads maxmemory once and applies a changed cap; it returns the
// cap in force.
func (w *capWatch) check(ctx context.Context) StreamCap {
	m, err := w.mem.MaxMemory(ctx)
	if err != nil {
		w.warn(w.log, "relay cannot read maxmemory: keeping the stream cap", "err", err, "max_len", w.cur.Entries)
		return w.cur
	}
	if m == w.cur.MaxMemory {
		return w.cur
	}
	r := w.req
	r.MaxMemory = m
	c, err := DeriveStreamCap(r)
	if err != nil && r.Explicit {
		w.log.Error("relay stream cap: -max-len no longer fits maxmemory: lowered", "err", err)
		r.Explicit = false
		c, err = DeriveStreamCap(r)
	}
	if err != nil {
		w.log.Error("relay stream cap: maxmemory changed to one that cannot hold the stream: keeping the cap", "err", err, "max_len", w.cur.Entries)
		return w.cur
	}
	logCap(w.log, "relay stream cap changed", c)
	w.cur = c
	w.set(c)
	return c
}

// run checks every period until ctx ends.
func (w *capWatch) run(ctx context.Context, period time.Duration) {
	t := time.NewTicker(period)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			w.check(ctx)
		}
	}
}

// logCap says the cap and why; with no maxmemory it warns.
func logCap(log *slog.Logger, msg string, c StreamCap) {
	args := []any{"max_len", c.Entries, "why", c.Why, "maxmemory", c.MaxMemory, "stream_budget_bytes", c.Budget, "entry_cost_bytes", c.EntryCost}
	if c.MaxMemory == 0 {
		log.Warn(msg+": Redis has no maxmemory, the stream is capped in entries only", args...)
		return
	}
	log.Info(msg, args...)
}

// errNoMaxMemory wraps a failure to read maxmemory at start.
var errNoMaxMemory = errors.New("relay: cannot read Redis's maxmemory (the reporter's ACL needs +info|memory, docs/deployment.md)")

// startCap derives the cap at start from Redis's maxmemory.
func startCap(ctx context.Context, mem MemoryReader, req CapRequest) (StreamCap, error) {
	m, err := mem.MaxMemory(ctx)
	if err != nil {
		return StreamCap{}, fmt.Errorf("%w: %w", errNoMaxMemory, err)
	}
	req.MaxMemory = m
	return DeriveStreamCap(req)
}
