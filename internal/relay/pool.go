package relay

import (
	"net"
	"sync"
)

// pending is a connection that has not authenticated yet, counted against
// its source.
type pending struct {
	nc      net.Conn
	src     string
	seq     uint64 // admission order, over the whole pool
	evicted bool
	// verifying: its Hello was read whole and its credential is being
	// checked; it leaves the pool within AuthTimeout, so it is never
	// evicted
	verifying bool
}

// unauthPool bounds connections that have not authenticated: max in all,
// perSource from one source (sourceOf). When it is full, a connection from
// a source holding fewer than the largest holder less one takes the place
// of that holder's oldest, so one source (bob's uid, or his host) can hold
// the pool only until someone else connects (issue 26: 520 idle
// connections of bob's locked alice out).
//
// A source at its share takes a new connection too, in the place of that
// source's oldest: off the relay's host a source is an address, which
// every user of a compute node shares (issue 44: bob's 70 idle sockets
// from c1 kept alice's job on c1 from reporting for as long as he held
// them). The bound against a holder who reconnects as fast as he can: a
// client sends its Hello as it connects, so its connection is its
// source's newest while the Hello is read, and once the Hello is read
// whole the connection is being verified and is never evicted. To close
// it before then, perSource other connections of its source must be
// admitted after it (each eviction takes the oldest; it starts newest)
// in the time between its admission and the reading of its Hello, which
// is microseconds when the Hello came with the connection, as it does.
//
// Age, not silence, picks the one to close: whether a connection has sent
// a byte is the holder's to fake (one byte on each of his sockets), and a
// pool that spared connections that had spoken would make a newcomer,
// silent for its first round trip, the next to go at his first
// reconnect. Only a whole Hello protects, and it cannot hold a place: a
// bad credential closes the connection at once, a good one leaves the
// pool for its uid's limit (MaxConnsPerUID). A source whose every place
// is being verified refuses the newcomer (busy; the client retries).
type unauthPool struct {
	max, perSource int

	mu  sync.Mutex
	n   int
	seq uint64
	by  map[string][]*pending
}

func newUnauthPool(max, perSource int) *unauthPool {
	return &unauthPool{max: max, perSource: perSource, by: map[string][]*pending{}}
}

// Why a connection was not admitted.
const (
	fullSource = "too many connections from this source are being authenticated"
	fullPool   = "too many unauthenticated connections"
)

// admit counts p; why says why not. When it made room, evicted is the
// connection p replaced (of p's own source when that was at its share,
// else of the largest): the caller closes it.
func (u *unauthPool) admit(p *pending) (evicted *pending, why string) {
	u.mu.Lock()
	defer u.mu.Unlock()
	mine := u.by[p.src]
	switch {
	case len(mine) >= u.perSource:
		if evicted = oldestEvictable(mine); evicted == nil {
			return nil, fullSource
		}
	case u.n >= u.max:
		if evicted = u.largestBeyond(len(mine) + 1); evicted == nil {
			return nil, fullPool
		}
	}
	if evicted != nil {
		evicted.evicted = true
		u.removeLocked(evicted)
	}
	u.seq++
	p.seq = u.seq
	u.by[p.src] = append(u.by[p.src], p)
	u.n++
	return evicted, ""
}

// largestBeyond is the oldest evictable connection of the sources holding
// the most, if that is more than n. Among sources that hold as many, the
// oldest connection goes: a newcomer is the last of them to.
func (u *unauthPool) largestBeyond(n int) *pending {
	most := 0
	for _, ps := range u.by {
		most = max(most, len(ps))
	}
	if most <= n {
		return nil
	}
	var victim *pending
	for _, ps := range u.by {
		if len(ps) != most {
			continue
		}
		if p := oldestEvictable(ps); p != nil && (victim == nil || p.seq < victim.seq) {
			victim = p
		}
	}
	return victim
}

// oldestEvictable is the oldest of ps (kept in admission order) that is
// not being verified.
func oldestEvictable(ps []*pending) *pending {
	for _, p := range ps {
		if !p.verifying {
			return p
		}
	}
	return nil
}

// verify marks p as being verified (its Hello read whole); false when it
// was evicted first.
func (u *unauthPool) verify(p *pending) bool {
	u.mu.Lock()
	defer u.mu.Unlock()
	if p.evicted {
		return false
	}
	p.verifying = true
	return true
}

// release uncounts p (once it authenticated or ended); an evicted one was
// uncounted when it was evicted.
func (u *unauthPool) release(p *pending) {
	u.mu.Lock()
	defer u.mu.Unlock()
	if !p.evicted {
		u.removeLocked(p)
	}
}

func (u *unauthPool) removeLocked(p *pending) {
	ps := u.by[p.src]
	for i, q := range ps {
		if q == p {
			ps = append(ps[:i:i], ps[i+1:]...)
			break
		}
	}
	if len(ps) == 0 {
		delete(u.by, p.src)
	} else {
		u.by[p.src] = ps
	}
	u.n--
}

// wasEvicted says whether p was closed to make room for another.
func (u *unauthPool) wasEvicted(p *pending) bool {
	u.mu.Lock()
	defer u.mu.Unlock()
	return p.evicted
}
