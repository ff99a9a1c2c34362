package relay

// Read by the tests only (the budget's total is also a gauge).

// inFlight is the bytes lent, in all and to how many keys.
func (b *frameBudget) inFlight() (total int64, keys int) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.total, len(b.by)
}

// count is how many connections are pending, in all and from src.
func (u *unauthPool) count(src string) (all, fromSrc int) {
	u.mu.Lock()
	defer u.mu.Unlock()
	return u.n, len(u.by[src])
}
