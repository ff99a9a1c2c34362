package relay

import (
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
)

// errBudget: reading a frame further would take more memory than the
// relay lends to frames being read, in all or to this key.
var errBudget = errors.New("relay: in-flight frame bytes over budget")

// frameBudget bounds the memory of frames being read. A frame's buffer is
// lent to it as its bytes arrive and given back once the frame is handled
// or its connection ends, so a client that declares a large frame and then
// sends part of it holds only what it sent, and all of them together at
// most max bytes (issue 26: 1 015 half-sent 131 KB frames took the relay
// from 45 to 154 MB). perKey bounds one key (a uid, or an unauthenticated
// connection's source) so that one user cannot spend it all.
type frameBudget struct {
	max, perKey int64
	metrics     *Metrics

	mu    sync.Mutex
	total int64
	by    map[string]int64

	// received counts frame body bytes read (tests wait on it);
	// refused counts reservations refused.
	received, refused atomic.Int64
}

func newFrameBudget(max, perKey int64, m *Metrics) *frameBudget {
	return &frameBudget{max: max, perKey: perKey, metrics: m, by: map[string]int64{}}
}

// reserve lends n bytes to key, or refuses when that would put key or the
// total over its bound.
func (b *frameBudget) reserve(key string, n int64) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	switch {
	case b.total+n > b.max:
		b.refused.Add(1)
		return fmt.Errorf("%w: %d bytes of frames being read, limit %d", errBudget, b.total, b.max)
	case b.by[key]+n > b.perKey:
		b.refused.Add(1)
		return fmt.Errorf("%w: %d bytes of this sender's frames being read, limit %d", errBudget, b.by[key], b.perKey)
	}
	b.total += n
	b.by[key] += n
	b.metrics.inFlight(b.total)
	return nil
}

// release gives back n bytes lent to key.
func (b *frameBudget) release(key string, n int64) {
	if n == 0 {
		return
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	b.total -= n
	if b.by[key] -= n; b.by[key] <= 0 {
		delete(b.by, key)
	}
	b.metrics.inFlight(b.total)
}
