package coordinator

import (
	"context"
	"encoding/json"
	"strings"
)

// Limits bounds what one job or one user can make the coordinator keep,
// in memory and in Redis, whatever its wrappers send (docs/threat-model.md
// lists each cap and the attack it stops). A report over a cap is
// rejected as RejectOverBudget; a state map at its cap takes no new key.
// The zero value means the defaults.
type Limits struct {
	// SessionsPerJob: wrapper sessions kept per job (one per wrapper run:
	// ranks times job steps times attempts). Default 512.
	SessionsPerJob int
	// SessionsPerUID: wrapper sessions kept per user. Default 8192.
	SessionsPerUID int
	// PendingPerUID: sessions opened whose job the agent's table does not
	// list yet (ownership unconfirmed), per user; held in memory only,
	// never saved. Default 64.
	PendingPerUID int
	// HeldStartsPerUID: start reports of one user over PendingPerUID that
	// wait unacked (their credential is opened again when they are
	// redelivered) instead of being refused: a user who starts many jobs
	// at once, before the agent lists them, loses none. Default 64.
	HeldStartsPerUID int
	// HeldPerSession: reports of one unconfirmed session waiting for its
	// job to appear (deferred). Default 16.
	HeldPerSession int
	// HeldUnknown: reports of sessions the coordinator does not know yet
	// (their start is still ahead), all users together. Default 256.
	HeldUnknown int
	// LineagesPerJob: lineages one job may report into. Default 16.
	LineagesPerJob int
	// LineagesPerUID: lineages in progress (not ended) one user owns. Default 2048.
	LineagesPerUID int
	// History: attempts (spans) a lineage's status keeps, the latest. Default 64.
	History int
	// DeviceIDs: GPU ids and ranks a lineage keeps measurements of. Default 64 GPU ids, 1024 ranks.
	DeviceIDs int
	Ranks     int
}

func (l *Limits) defaults() {
	def := func(v *int, d int) {
		if *v <= 0 {
			*v = d
		}
	}
	def(&l.SessionsPerJob, 512)
	def(&l.SessionsPerUID, 8192)
	def(&l.PendingPerUID, 64)
	def(&l.HeldStartsPerUID, 64)
	def(&l.HeldPerSession, 16)
	def(&l.HeldUnknown, 256)
	def(&l.LineagesPerJob, 16)
	def(&l.LineagesPerUID, 2048)
	def(&l.History, 64)
	def(&l.DeviceIDs, 64)
	def(&l.Ranks, 1024)
}

// RejectOverBudget: the report would make the coordinator keep more for
// its job or user than Limits allow.
const RejectOverBudget = "over-budget"

// quota counts what Limits bound, per user and per job. Saved sessions are
// counted from Redis when first needed after taking the lead (forget
// resets it); pending sessions and held entries live in memory only.
type quota struct {
	loaded     bool
	perUID     map[int]int
	perJob     map[uint64]int
	pendingUID map[int]int
	// held: entry id -> the session it waits with ("" for a session not
	// known yet); heldBy counts the entries per session
	held   map[string]string
	heldBy map[string]int
}

func newQuota() quota {
	return quota{perUID: map[int]int{}, perJob: map[uint64]int{}, pendingUID: map[int]int{},
		held: map[string]string{}, heldBy: map[string]int{}}
}

// loadQuota counts the saved sessions per user and per job, once per lead.
func (c *Coordinator) loadQuota(ctx context.Context) error {
	if c.quota.loaded {
		return nil
	}
	all, err := c.store.HGetAll(ctx, c.keys.Sessions())
	if err != nil {
		return err
	}
	clear(c.quota.perUID)
	clear(c.quota.perJob)
	for _, v := range all {
		var s session
		if json.Unmarshal([]byte(v), &s) == nil {
			c.quota.perUID[s.UID]++
			c.quota.perJob[s.JobID]++
		}
	}
	c.quota.loaded = true
	return nil
}

// admitSession decides whether a session just opened may be kept: as a
// saved session when its job is in the job table (its owner was checked
// before this), else as a pending one. It counts the session and returns
// "" when it may, RejectOverBudget when not.
func (c *Coordinator) admitSession(ctx context.Context, s *session, inTable bool) (string, error) {
	if !inTable {
		if c.quota.pendingUID[s.UID] >= c.cfg.Limits.PendingPerUID {
			return RejectOverBudget, nil
		}
		c.quota.pendingUID[s.UID]++
		s.pending = true
		c.sessions[s.SID] = s
		return "", nil
	}
	return c.keepSession(ctx, s)
}

// keepSession counts a confirmed session against its job's and user's
// caps ("" when it fits).
func (c *Coordinator) keepSession(ctx context.Context, s *session) (string, error) {
	if err := c.loadQuota(ctx); err != nil {
		return "", err
	}
	if c.quota.perJob[s.JobID] >= c.cfg.Limits.SessionsPerJob || c.quota.perUID[s.UID] >= c.cfg.Limits.SessionsPerUID {
		return RejectOverBudget, nil
	}
	c.quota.perJob[s.JobID]++
	c.quota.perUID[s.UID]++
	c.sessions[s.SID] = s
	return "", nil
}

// confirmPending turns a pending session whose owner the job table now
// confirms into a kept one ("" when it fits its caps; else it is dropped).
func (c *Coordinator) confirmPending(ctx context.Context, s *session) (string, error) {
	if !s.pending {
		return "", nil
	}
	c.dropPending(s)
	return c.keepSession(ctx, s)
}

// dropPending forgets a pending session (refused, or confirmed and counted
// as kept from now on).
func (c *Coordinator) dropPending(s *session) {
	if !s.pending {
		return
	}
	s.pending = false
	delete(c.sessions, s.SID)
	if c.quota.pendingUID[s.UID]--; c.quota.pendingUID[s.UID] <= 0 {
		delete(c.quota.pendingUID, s.UID)
	}
}

// forgetSessions uncounts sessions pruneSessions removed.
func (c *Coordinator) forgetSessions(gone []session) {
	for _, s := range gone {
		if c.quota.perUID[s.UID]--; c.quota.perUID[s.UID] <= 0 {
			delete(c.quota.perUID, s.UID)
		}
		if c.quota.perJob[s.JobID]--; c.quota.perJob[s.JobID] <= 0 {
			delete(c.quota.perJob, s.JobID)
		}
	}
}

// heldStartsOf + uid is what start reports over a user's pending budget
// wait with (hold): a session id is hex, so no session has that name.
const heldStartsOf = "starts-of-uid:"

// hold records that entry id waits (deferred) with session sid ("" for a
// session not known yet). It reports false when that is over the cap: the
// caller rejects the entry instead.
func (c *Coordinator) hold(id, sid string) bool {
	if _, ok := c.quota.held[id]; ok {
		return true
	}
	limit := c.cfg.Limits.HeldPerSession
	switch {
	case sid == "":
		limit = c.cfg.Limits.HeldUnknown
	case strings.HasPrefix(sid, heldStartsOf):
		limit = c.cfg.Limits.HeldStartsPerUID
	}
	if c.quota.heldBy[sid] >= limit {
		return false
	}
	c.quota.held[id] = sid
	c.quota.heldBy[sid]++
	return true
}

// release ends the wait of a held entry that got a verdict.
func (c *Coordinator) release(id string) {
	sid, ok := c.quota.held[id]
	if !ok {
		return
	}
	delete(c.quota.held, id)
	if c.quota.heldBy[sid]--; c.quota.heldBy[sid] <= 0 {
		delete(c.quota.heldBy, sid)
	}
}

// holding reports whether a session has entries waiting: a newer report of
// it must wait behind them, or it would overtake its own start report and
// make it a replay.
func (c *Coordinator) holding(sid string) bool { return c.quota.heldBy[sid] > 0 }

// admitLineage reports whether a session may create lineage name: it is
// known (in memory or in Redis), or its job and its user are under their
// lineage caps. Nothing is saved here.
func (c *Coordinator) admitLineage(ctx context.Context, s *session) (bool, error) {
	if _, ok := c.lineages[s.Lineage]; ok {
		return true, nil
	}
	if _, err := c.store.Get(ctx, c.keys.JobState(s.Lineage)); err == nil {
		return true, nil
	} else if !isNotFound(err) {
		return false, err
	}
	perJob, perUID := 0, 0
	for _, l := range c.lineages {
		if l.Status.JobID == s.JobID {
			perJob++
		}
		if uid, ok := l.owner(); ok && uid == s.UID && !l.ended() {
			perUID++
		}
	}
	return perJob < c.cfg.Limits.LineagesPerJob && perUID < c.cfg.Limits.LineagesPerUID, nil
}

// trimHistory keeps a lineage's latest attempts.
func (l *lineage) trimHistory(max int) {
	if h := l.Status.History; len(h) > max {
		l.Status.History = append(h[:0], h[len(h)-max:]...)
	}
}

// capped reports whether m may take key k: it has it, or room for it.
func capped[K comparable, V any](m map[K]V, k K, max int) bool {
	if _, ok := m[k]; ok {
		return true
	}
	return len(m) < max
}
