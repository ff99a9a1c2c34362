package relay

import (
	"math"
	"sync"
	"time"
)

// Ration is what one uid may append: token buckets of entries and bytes,
// refilled at the given rates up to the bursts. An entry that does not fit
// is refused at once (never queued): a flooding uid spends its own ration,
// not other uids' time.
type Ration struct {
	EntriesPerSec float64
	EntryBurst    float64
	BytesPerSec   float64
	ByteBurst     float64
}

// DefaultRation fits a user with 1 000 jobs each sending a sample every
// 5 s (200 entries/s) with room for bursts of starts and checkpoints, and
// stops a single uid from writing more than ~2 MiB/s into Redis.
var DefaultRation = Ration{EntriesPerSec: 200, EntryBurst: 2000, BytesPerSec: 2 << 20, ByteBurst: 16 << 20}

type bucket struct {
	entries, bytes float64
	last           time.Time
}

// rations holds one bucket per uid that sent recently.
type rations struct {
	lim Ration
	mu  sync.Mutex
	by  map[int]*bucket
}

func newRations(lim Ration) *rations { return &rations{lim: lim, by: map[int]*bucket{}} }

// take spends one entry of size bytes from uid's buckets; when they do not
// hold it, nothing is spent and wait says when they will.
func (r *rations) take(uid, size int, now time.Time) (ok bool, wait time.Duration) {
	r.mu.Lock()
	defer r.mu.Unlock()
	b := r.by[uid]
	if b == nil {
		if len(r.by) >= 1<<16 {
			r.prune(now)
		}
		b = &bucket{entries: r.lim.EntryBurst, bytes: r.lim.ByteBurst, last: now}
		r.by[uid] = b
	}
	r.refill(b, now)
	need := float64(size)
	if b.entries >= 1 && b.bytes >= need {
		b.entries--
		b.bytes -= need
		return true, 0
	}
	w := 0.0
	if b.entries < 1 {
		w = (1 - b.entries) / r.lim.EntriesPerSec
	}
	if b.bytes < need {
		w = math.Max(w, (need-b.bytes)/r.lim.BytesPerSec)
	}
	return false, time.Duration(math.Ceil(w*1e3)) * time.Millisecond
}

func (r *rations) refill(b *bucket, now time.Time) {
	dt := now.Sub(b.last).Seconds()
	if dt <= 0 {
		return
	}
	b.last = now
	b.entries = math.Min(r.lim.EntryBurst, b.entries+dt*r.lim.EntriesPerSec)
	b.bytes = math.Min(r.lim.ByteBurst, b.bytes+dt*r.lim.BytesPerSec)
}

// prune forgets full buckets (a uid that comes back starts full anyway).
func (r *rations) prune(now time.Time) {
	for uid, b := range r.by {
		r.refill(b, now)
		if b.entries >= r.lim.EntryBurst && b.bytes >= r.lim.ByteBurst {
			delete(r.by, uid)
		}
	}
}
