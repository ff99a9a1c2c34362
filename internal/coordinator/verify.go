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

// RejectReasons lists every reason, for metrics.
var RejectReasons = []string{RejectMalformed, RejectNotReport, RejectForeignCluster, RejectUnauth, RejectBadCred,
	RejectForged, RejectBadMAC, RejectForeignJob, RejectForeignLineage, RejectReplay, RejectUnknownSession, RejectUnknownJob, RejectOversize,
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

func (c *Coordinator) saveSession(ctx context.Context, s *session) error {
	b, _ := json.Marshal(s)
	c.sessions[s.SID] = s
	return c.store.HSet(ctx, c.keys.Sessions(), s.SID, string(b))
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

// verify judges one entry. On acceptance it returns the envelope and the
// session it belongs to; a rejected entry that decoded comes back with its
// envelope too, for the log.
func (c *Coordinator) verify(ctx context.Context, e stream.Entry, jobs jobIndex, now time.Time) (*report.Envelope, *session, verdict, string, error) {
	if e.Oversize {
		return nil, nil, rejected, RejectOversize, nil
	}
	env, err := report.Decode(e.Payload)
	if err != nil {
		return nil, nil, rejected, RejectMalformed, nil
	}
	switch env.Kind {
	case report.KindStart, report.KindSample, report.KindCheckpoint, report.KindSignal, report.KindEnd:
	default:
		return env, nil, rejected, RejectNotReport, nil
	}
	if env.Job.Cluster != c.keys.Cluster {
		return env, nil, rejected, RejectForeignCluster, nil
	}
	tooOld := entryAge(e.ID, now) > c.cfg.DeferLimit
	s, err := c.loadSession(ctx, env.SID)
	if err != nil {
		return nil, nil, rejected, "", err // store trouble: leave the entry pending
	}
	if env.Kind == report.KindStart && (s == nil || s.LastSeq == 0) {
		if s == nil {
			if env.Start.Cred == "" {
				return env, nil, rejected, RejectUnauth, nil
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
				return env, nil, rejected, RejectBadCred, nil
			}
			if v.RestrictedTo(c.uid) != nil {
				return env, nil, rejected, RejectUnrestricted, nil
			}
			if v.SID != env.SID || v.JobID != env.Job.JobID || v.Lineage != env.Job.Lineage || v.Cluster != env.Job.Cluster || v.UID != env.Job.UID {
				return env, nil, rejected, RejectForged, nil
			}
			if auth.Verify(v.Key, e.Payload, e.MAC) != nil {
				return env, nil, rejected, RejectBadMAC, nil
			}
			// MUNGE opens a credential once: keep the opened session even
			// while its ownership cannot be confirmed yet
			s = &session{SID: v.SID, Key: hex.EncodeToString(v.Key), UID: v.UID, JobID: v.JobID, Lineage: v.Lineage,
				Rank: env.Job.Rank, OpenedMS: now.UnixMilli()}
			if err := c.saveSession(ctx, s); err != nil {
				return nil, nil, rejected, "", err
			}
		}
	}
	if s == nil {
		if tooOld {
			return env, nil, rejected, RejectUnknownSession, nil
		}
		return nil, nil, deferred, "", nil
	}
	key, _ := hex.DecodeString(s.Key)
	if auth.Verify(key, e.Payload, e.MAC) != nil {
		return env, nil, rejected, RejectBadMAC, nil
	}
	if env.Job.JobID != s.JobID || env.Job.Lineage != s.Lineage || env.Job.UID != s.UID {
		return env, nil, rejected, RejectForged, nil
	}
	if !s.Confirmed {
		j, ok := jobs[s.JobID]
		if !ok {
			if tooOld {
				return env, nil, rejected, RejectUnknownJob, nil
			}
			return nil, nil, deferred, "", nil
		}
		if j.UID != s.UID {
			return env, nil, rejected, RejectForeignJob, nil
		}
		s.Confirmed = true
	}
	// a name reserved for another job or uid (see reserved) is refused
	// before its state is looked up; without the job in the table an
	// array task's name cannot be told, so only a claim is refused then
	j, listed := jobs[s.JobID]
	if !listed {
		j = report.Job{JobID: s.JobID, UID: s.UID}
	}
	foreign, _ := reserved(c.keys.Cluster, s.Lineage, j)
	if foreign && listed {
		return env, nil, rejected, RejectForeignLineage, nil
	}
	l, err := c.getLineage(ctx, s.Lineage)
	if err != nil {
		return nil, nil, rejected, "", err
	}
	if uid, known := l.owner(); !known {
		if foreign {
			return env, nil, rejected, RejectForeignLineage, nil
		}
		uid := s.UID
		l.OwnerUID, l.dirty = &uid, true
	} else if uid != s.UID {
		return env, nil, rejected, RejectForeignLineage, nil
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
