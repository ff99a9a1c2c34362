package relay

import (
	"io"
	"net"
	"sync"
	"sync/atomic"
)

// pending is a connection that has not authenticated yet, counted against
// its source.
type pending struct {
	nc      net.Conn
	src     string
	evicted bool
	// spoke: its first bytes have arrived (a client sends its Hello at
	// once after connecting; a socket held open to take a place sends
	// nothing)
	spoke atomic.Bool
}

// speaking is a connection's reader that marks p once bytes arrive.
type speaking struct {
	r io.Reader
	p *pending
}

func (s speaking) Read(b []byte) (int, error) {
	n, err := s.r.Read(b)
	if n > 0 {
		s.p.spoke.Store(true)
	}
	return n, err
}

// unauthPool bounds connections that have not authenticated: max in all,
// perSource from one source (sourceOf). When it is full, a connection from
// a source holding fewer than the largest holder less one takes the place
// of that holder's oldest, so one source (bob's uid, or his host) can hold
// the pool only until someone else connects (issue 26: 520 idle
// connections of bob's locked alice out).
//
// A source at its share takes a new connection too, in the place of that
// source's oldest silent one (none of its bytes arrived yet), else its
// oldest: off the relay's host a source is an address, which every user
// of a compute node shares (issue 44: bob's 70 idle sockets from c1 kept
// alice's job on c1 from reporting for as long as he held them). A client
// that sends its Hello as it connects is silent for one round trip; a
// holder must open a new connection for each one of the share's places it
// takes back, and each new one replaces a silent one first, so the
// holder cannot push out a client that has spoken unless every place of
// the source is taken by connections that have spoken too, and then only
// after as many new connections as the share holds (AuthTimeout closes
// each one that never completes its Hello).
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
const fullPool = "too many unauthenticated connections"

// admit counts p; why says why not. When it made room, evicted is the
// connection p replaced: the caller closes it.
func (u *unauthPool) admit(p *pending) (evicted *pending, why string) {
	u.mu.Lock()
	defer u.mu.Unlock()
	mine := len(u.by[p.src])
	if mine >= u.perSource {
		evicted = oldest(u.by[p.src])
		evicted.evicted = true
		u.removeLocked(evicted)
		mine--
	}
	if evicted == nil && u.n >= u.max {
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

// largestBeyond is the oldest connection (silent first) of the source
// holding the most, if that is more than n.
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
	return oldest(most)
}

// oldest is the oldest of ps (in arrival order) that has not spoken, else
// the oldest; ps is not empty.
func oldest(ps []*pending) *pending {
	for _, p := range ps {
		if !p.spoke.Load() {
			return p
		}
	}
	return ps[0]
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
