package coordinator

import (
	"context"
	"encoding/json"
	"time"
)

// sessionSweep is how often the leader looks for sessions to forget.
const sessionSweep = 10 * time.Minute

// pruneSessions forgets wrapper sessions that are over: idle for an hour
// and opened longer ago than SessionRetention. The retention must exceed
// the life of the MUNGE credential that opened the session (the wrapper's
// is 24 h): until it expires, MUNGE refuses a replayed credential, and
// after it expires nobody can open it, so a forgotten session can never
// be reopened by replaying its start report. Without this the session
// hash grows by one entry per wrapper run, forever.
func (c *Coordinator) pruneSessions(ctx context.Context, now time.Time) error {
	if !c.sessionsSweptAt.IsZero() && now.Sub(c.sessionsSweptAt) < sessionSweep {
		return nil
	}
	c.sessionsSweptAt = now
	all, err := c.store.HGetAll(ctx, c.keys.Sessions())
	if err != nil {
		return err
	}
	var drop []string
	var gone []session
	for sid, v := range all {
		var s session
		if json.Unmarshal([]byte(v), &s) != nil {
			drop = append(drop, sid) // corrupt: as good as none already
			continue
		}
		last := time.UnixMilli(max(s.LastMS, s.OpenedMS))
		if now.Sub(time.UnixMilli(s.OpenedMS)) > c.cfg.SessionRetention && now.Sub(last) > time.Hour {
			drop = append(drop, sid)
			gone = append(gone, s)
		}
	}
	if c.quota.loaded {
		c.forgetSessions(gone)
	}
	for len(drop) > 0 {
		n := min(len(drop), 1000)
		if err := c.store.HDel(ctx, c.keys.Sessions(), drop[:n]...); err != nil {
			return err
		}
		for _, sid := range drop[:n] {
			delete(c.sessions, sid)
			delete(c.dirtySessions, sid)
		}
		c.log.Info("wrapper sessions forgotten", "count", n, "kept", len(all)-n)
		drop = drop[n:]
	}
	return nil
}
