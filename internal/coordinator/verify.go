package coordinator

import (
	"context"
	"crypto/subtle"
	"encoding/hex"
	"encoding/json"
	"errors"
	"strconv"
	"strings"
	"time"

	"github.com/isched/isched/internal/auth"
	"github.com/isched/isched/internal/report"
	"github.com/isched/isched/internal/stream"
)

// Reasons a report is rejected (metric label values; a closed set).
const (
	RejectMalformed      = "malformed"
	RejectNotReport      = "not-a-report"
	RejectForeignCluster = "foreign-cluster"
	RejectUnauth         = "unauthenticated"
	RejectBadCred        = "bad-credential"
	RejectForged         = "forged"
	RejectBadMAC         = "bad-mac"
	RejectForeignJob     = "foreign-job"
	RejectForeignLineage = "foreign-lineage"
	RejectReplay         = "replay"
	RejectUnknownSession = "unknown-session"
	RejectUnknownJob     = "unknown-job"
	// RejectOversize: an entry over the size any report can have; Redis
	// deleted it before sending it (stream.Config.MaxEntry).
	RejectOversize = "oversize"
	// RejectUnrestricted: a start credential that is not restricted to
	// the coordinator's uid (any uid, or root only because it is root,
	// could open it and learn the session key).
	RejectUnrestricted = "unrestricted-credential"
)

func isNotFound(err error) bool { return errors.Is(err, stream.ErrNotFound) }

// RejectReasons lists every reason, for metrics.
var RejectReasons = []string{RejectMalformed, RejectNotReport, RejectForeignCluster, RejectUnauth, RejectBadCred,
	RejectForged, RejectBadMAC, RejectForeignJob, RejectForeignLineage, RejectReplay, RejectUnknownSession, RejectUnknownJob, RejectOverBudget, RejectOversize,
	RejectUnrestricted}

// session is a wrapper run whose key the coordinator holds.
type session struct {
	SID       string `json:"sid"`
	Key       string `json:"key"` // hex
	UID       int    `json:"uid"`
	JobID     uint64 `json:"job_id"`
	Lineage   string `json:"lineage"`
	Rank      int    `json:"rank"`
	LastSeq   uint64 `json:"last_seq"`
	LastMAC   string `json:"last_mac,omitempty"` // of the report numbered LastSeq
	Confirmed bool   `json:"confirmed"`          // the uid owns the job in the agent's job table
	OpenedMS  int64  `json:"opened_ms"`
	LastMS    int64  `json:"last_ms,omitempty"` // last accepted report
	// pending: opened while its job was not in the agent's table; kept in
	// memory only (a restart opens its start report again: redelivered)
	// and counted against the user's PendingPerUID until confirmed
	pending bool
}

type verdict int

const (
	accepted verdict = iota
	rejected
	deferred  // not judgeable yet (job not in the table): keep unacked, retry
	duplicate // a second copy of the session's latest report: a retransmission
)

// jobIndex is the agent's job table by job id.
type jobIndex map[uint64]report.Job

func (c *Coordinator) loadSession(ctx context.Context, sid string) (*session, error) {
	if s, ok := c.sessions[sid]; ok {
		return s, nil
	}
	v, err := c.store.HGet(ctx, c.keys.Sessions(), sid)
	if errors.Is(err, stream.ErrNotFound) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var s session
	if err := json.Unmarshal([]byte(v), &s); err != nil {
		return nil, nil // a corrupt record is as good as none
	}
	c.sessions[sid] = &s
	return &s, nil
}

// entryAge is how old a stream entry is, from its id's millisecond part.
func entryAge(id string, now time.Time) time.Duration {
	ms, _, _ := strings.Cut(id, "-")
	n, err := strconv.ParseInt(ms, 10, 64)
	if err != nil {
		return 0
	}
	return now.Sub(time.UnixMilli(n))
}

// judgement is what verify returns, for its phases to end it early.
type judgement struct {
	env    *report.Envelope
	s      *session
	v      verdict
	reason string
	err    error
}

func judged(env *report.Envelope, s *session, v verdict, reason string, err error) *judgement {
	return &judgement{env, s, v, reason, err}
}

func reject(env *report.Envelope, reason string) *judgement {
	return &judgement{env: env, v: rejected, reason: reason}
}

// verify judges one entry. On acceptance it returns the envelope and the
// session it belongs to; a rejected entry that decoded comes back with its
// envelope too, for the log. Its phases: decodeEntry, openStart (a new
// session's credential), checkSession (MAC, identity, owner), claimLineage
// and the sequence check.
func (c *Coordinator) verify(ctx context.Context, e stream.Entry, jobs jobIndex, now time.Time) (*report.Envelope, *session, verdict, string, error) {
	env, reason := c.decodeEntry(e)
	if reason != "" {
		return env, nil, rejected, reason, nil
	}
	tooOld := entryAge(e.ID, now) > c.cfg.DeferLimit
	s, err := c.loadSession(ctx, env.SID)
	if err != nil {
		return nil, nil, rejected, "", err // store trouble: leave the entry pending
	}
	if env.Kind == report.KindStart && s == nil {
		var j *judgement
		if s, j = c.openStart(ctx, e, env, jobs, now, tooOld); j != nil {
			return j.env, j.s, j.v, j.reason, j.err
		}
	}
	if s == nil {
		if tooOld {
			return env, nil, rejected, RejectUnknownSession, nil
		}
		return c.wait(e, env, "")
	}
	if j := c.checkSession(ctx, e, env, s, jobs, tooOld); j != nil {
		return j.env, j.s, j.v, j.reason, j.err
	}
	if reason, err := c.claimLineage(ctx, s, jobs); err != nil || reason != "" {
		return env, nil, rejected, reason, err
	}
	if env.Seq <= s.LastSeq {
		// The wrapper sends again what it could not confirm: an XADD whose
		// reply was lost (Redis stopped, a timeout) is in the stream twice,
		// the copy right after the original in the session's order. That
		// copy has no effect and is no attack; any other old number is.
		if env.Seq == s.LastSeq && s.LastMAC != "" && subtle.ConstantTimeCompare([]byte(e.MAC), []byte(s.LastMAC)) == 1 {
			return env, nil, duplicate, "", nil
		}
		return env, nil, rejected, RejectReplay, nil
	}
	s.LastSeq, s.LastMAC, s.LastMS = env.Seq, e.MAC, now.UnixMilli()
	// persisted by the flush that persists what this report changes,
	// before its entry is acked
	c.dirtySessions[s.SID] = s
	return env, s, accepted, "", nil
}

// decodeEntry decodes an entry into a report of this cluster; reason is
// why not ("" when it is one).
func (c *Coordinator) decodeEntry(e stream.Entry) (*report.Envelope, string) {
	if e.Oversize {
		return nil, RejectOversize
	}
	env, err := report.Decode(e.Payload)
	if err != nil {
		return nil, RejectMalformed
	}
	switch env.Kind {
	case report.KindStart, report.KindSample, report.KindCheckpoint, report.KindSignal, report.KindEnd:
	default:
		return env, RejectNotReport
	}
	if env.Job.Cluster != c.keys.Cluster {
		return env, RejectForeignCluster
	}
	return env, ""
}

// openStart opens a start report's credential into a new session. The
// owner is checked before anything is kept: a session whose job is listed
// must be its owner's; one whose job is not listed yet waits in memory
// (MUNGE opens a credential once; a restart opens the redelivered entry
// again), within the user's budget. It is saved once confirmed, with the
// report that confirmed it. A non-nil judgement ends verify.
func (c *Coordinator) openStart(ctx context.Context, e stream.Entry, env *report.Envelope, jobs jobIndex, now time.Time, tooOld bool) (*session, *judgement) {
	if env.Start.Cred == "" {
		return nil, reject(env, RejectUnauth)
	}
	open := auth.Open
	if e.Redelivered {
		// this very entry was read before: a coordinator may have
		// died between opening its credential and saving the
		// session, and MUNGE opens a credential once. A replay by
		// someone else is a new entry, refused by Open.
		open = auth.OpenRedelivered
	}
	v, err := open(ctx, c.munger, env.Start.Cred)
	if err != nil {
		return nil, reject(env, RejectBadCred)
	}
	if v.RestrictedTo(c.uid) != nil {
		return nil, reject(env, RejectUnrestricted)
	}
	if v.SID != env.SID || v.JobID != env.Job.JobID || v.Lineage != env.Job.Lineage || v.Cluster != env.Job.Cluster || v.UID != env.Job.UID {
		return nil, reject(env, RejectForged)
	}
	if auth.Verify(v.Key, e.Payload, e.MAC) != nil {
		return nil, reject(env, RejectBadMAC)
	}
	s := &session{SID: v.SID, Key: hex.EncodeToString(v.Key), UID: v.UID, JobID: v.JobID, Lineage: v.Lineage,
		Rank: env.Job.Rank, OpenedMS: now.UnixMilli()}
	j, listed := jobs[s.JobID]
	if listed && j.UID != s.UID {
		return nil, reject(env, RejectForeignJob)
	}
	reason, err := c.admitSession(ctx, s, listed)
	switch {
	case err != nil:
		return nil, judged(env, nil, rejected, "", err)
	case reason != "" && !listed && !tooOld:
		// over the user's pending budget: the start waits
		// unacked (HeldStartsPerUID, per user) and is opened
		// again when redelivered, by then usually listed.
		// Refusing it would lose the session for good: a user
		// who starts 20 jobs at once is no flood.
		return nil, judged(c.wait(e, env, heldStartsOf+strconv.Itoa(s.UID)))
	case reason != "":
		return nil, reject(env, reason)
	}
	return s, nil
}

// checkSession checks a report against its session (MAC, job, lineage and
// uid), keeps it behind the session's waiting reports and confirms a
// pending session's owner from the job table. A non-nil judgement ends
// verify.
func (c *Coordinator) checkSession(ctx context.Context, e stream.Entry, env *report.Envelope, s *session, jobs jobIndex, tooOld bool) *judgement {
	key, _ := hex.DecodeString(s.Key)
	if auth.Verify(key, e.Payload, e.MAC) != nil {
		return reject(env, RejectBadMAC)
	}
	if env.Job.JobID != s.JobID || env.Job.Lineage != s.Lineage || env.Job.UID != s.UID {
		return reject(env, RejectForged)
	}
	if !e.Redelivered && c.holding(s.SID) {
		// older reports of this session wait: this one waits behind them
		// (judged before them it would make the start report a replay)
		return judged(c.wait(e, env, s.SID))
	}
	if s.Confirmed {
		return nil
	}
	j, ok := jobs[s.JobID]
	if !ok {
		if tooOld {
			c.dropPending(s)
			return reject(env, RejectUnknownJob)
		}
		return judged(c.wait(e, env, s.SID))
	}
	if j.UID != s.UID {
		c.dropPending(s)
		return reject(env, RejectForeignJob)
	}
	if reason, err := c.confirmPending(ctx, s); err != nil || reason != "" {
		return judged(env, nil, rejected, reason, err)
	}
	s.Confirmed = true
	return nil
}

// claimLineage checks that the session's lineage is its user's, claiming
// an unowned one; reason is why not. A name reserved for another job or
// uid (see reserved) is refused before its state is looked up; without the
// job in the table an array task's name cannot be told, so only a claim is
// refused then.
func (c *Coordinator) claimLineage(ctx context.Context, s *session, jobs jobIndex) (reason string, err error) {
	j, listed := jobs[s.JobID]
	if !listed {
		j = report.Job{JobID: s.JobID, UID: s.UID}
	}
	foreign, _ := reserved(c.keys.Cluster, s.Lineage, j)
	if foreign && listed {
		return RejectForeignLineage, nil
	}
	if ok, err := c.admitLineage(ctx, s); err != nil || !ok {
		return RejectOverBudget, err
	}
	l, err := c.getLineage(ctx, s.Lineage)
	if err != nil {
		return "", err
	}
	if uid, known := l.owner(); !known {
		if foreign {
			return RejectForeignLineage, nil
		}
		uid := s.UID
		l.OwnerUID, l.dirty = &uid, true
	} else if uid != s.UID {
		return RejectForeignLineage, nil
	}
	return "", nil
}

// wait defers an entry (its job or session is not known yet), within the
// caps on held entries: over them it is rejected, so one user's flood
// cannot fill the pending list the coordinator retries every tick.
func (c *Coordinator) wait(e stream.Entry, env *report.Envelope, sid string) (*report.Envelope, *session, verdict, string, error) {
	if !c.hold(e.ID, sid) {
		return env, nil, rejected, RejectOverBudget, nil
	}
	return nil, nil, deferred, "", nil
}
