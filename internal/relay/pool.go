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
	evicted bool
}

// unauthPool bounds connections that have not authenticated: max in all,
// perSource from one source (sourceOf). When it is full, a connection from
// a source holding fewer than the largest holder less one takes the place
// of that holder's oldest, so one source (bob's uid, or his host) can hold
// the pool only until someone else connects (issue 26: 520 idle
// connections of bob's locked alice out).
type unauthPool struct {
	max, perSource int

	mu sync.Mutex
	n  int
	by map[string][]*pending
}

func newUnauthPool(max, perSource int) *unauthPool {
	return &unauthPool{max: max, perSource: perSource, by: map[string][]*pending{}}
}

// Why a connection was not admitted.
const (
	fullSource = "too many unauthenticated connections from this source"
	fullPool   = "too many unauthenticated connections"
)

// admit counts p; why says why not. When it made room, evicted is the
// connection p replaced: the caller closes it.
func (u *unauthPool) admit(p *pending) (evicted *pending, why string) {
	u.mu.Lock()
	defer u.mu.Unlock()
	mine := len(u.by[p.src])
	if mine >= u.perSource {
		return nil, fullSource
	}
	if u.n >= u.max {
		evicted = u.largestBeyond(mine + 1)
		if evicted == nil {
			return nil, fullPool
		}
		evicted.evicted = true
		u.removeLocked(evicted)
	}
	u.by[p.src] = append(u.by[p.src], p)
	u.n++
	return evicted, ""
}

// largestBeyond is the oldest connection of the source holding the most,
// if that is more than n.
func (u *unauthPool) largestBeyond(n int) *pending {
	var most []*pending
	for _, ps := range u.by {
		if len(ps) > len(most) {
			most = ps
		}
	}
	if len(most) <= n {
		return nil
	}
	return most[0]
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
