package relay

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os/user"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/isched/isched/internal/relayproto"
	"github.com/isched/isched/internal/stream"
)

// Status queries (issue 44 item 4): where the site hides each user's jobs
// from the others (Slurm's PrivateData=jobs), `isched status` reads the
// coordinator's records through the relay instead of with the viewer's
// Redis password, which then need not be readable by users at all. A
// connection whose Hello says ModeQuery sends Query frames, each answered
// by a QueryReply; its uid is MUNGE's, as for reports, so it cannot be
// chosen by the client. The relay reads Redis with a read-only credential
// of its own and answers only what that uid may see: its own lineages'
// status and series, the job table's rows of its own jobs, the snapshot
// without other users' limits, and receipts with other users' made
// anonymous. Root and the site's SeeAll uids (SlurmUser, operators) see
// everything, as PrivateData exempts them.

// Reader is the part of the Redis client status queries use (a
// *stream.Client as a read-only user); a missing key is stream.ErrNotFound.
type Reader interface {
	Get(ctx context.Context, key string) ([]byte, error)
	List(ctx context.Context, key string) ([][]byte, error)
}

// QueryConfig turns status queries on (Server.ServeQueries).
type QueryConfig struct {
	Reader Reader
	// Keys are the relay's cluster's: no other cluster's key is read.
	Keys stream.Keys
	// SeeAll are the uids that see every user's records (root always):
	// SlurmUser's and the Slurm operators', as PrivateData exempts them.
	SeeAll []int
	// UserName is a uid's login name, for the snapshot's per-user limits
	// (nil: os/user).
	UserName func(uid int) (string, error)
	// Concurrent bounds the queries answered at once (each may hold a
	// table of up to 32 MiB); 0: 4.
	Concurrent int
}

// queryService answers status queries.
type queryService struct {
	cfg QueryConfig
	sem chan struct{}
}

// ServeQueries makes s answer status-query connections; call it before
// Serve. Without it a query Hello is refused (CodeUnsupported).
func (s *Server) ServeQueries(q QueryConfig) error {
	if q.Reader == nil || q.Keys.Cluster == "" {
		return errors.New("relay: status queries need a Redis reader and the cluster's keys")
	}
	if q.UserName == nil {
		q.UserName = lookupUserName
	}
	if q.Concurrent <= 0 {
		q.Concurrent = 4
	}
	s.queries = &queryService{cfg: q, sem: make(chan struct{}, q.Concurrent)}
	return nil
}

func lookupUserName(uid int) (string, error) {
	u, err := user.LookupId(strconv.Itoa(uid))
	if err != nil {
		return "", fmt.Errorf("relay: uid %d: %w", uid, err)
	}
	return u.Username, nil
}

// modeRefusal is why a Hello's mode is refused, nil when it is served.
func (s *Server) modeRefusal(mode string) *relayproto.Reply {
	switch {
	case mode == "":
		return nil
	case mode == relayproto.ModeQuery && s.queries != nil:
		return nil
	case mode == relayproto.ModeQuery:
		return &relayproto.Reply{Code: relayproto.CodeUnsupported, Err: "this relay serves no status queries (started without -query-password-file)"}
	}
	return &relayproto.Reply{Code: relayproto.CodeAuth, Err: fmt.Sprintf("unknown mode %q", mode)}
}

// queryLoop answers an authenticated query connection's frames until it
// ends or breaks the protocol.
func (s *Server) queryLoop(ctx context.Context, c *conn, uid int, log *slog.Logger) {
	log.Debug("relay query connection authenticated")
	for {
		_ = c.SetReadDeadline(time.Now().Add(s.cfg.IdleTimeout))
		b, err := c.fr.next(relayproto.MaxQueryFrame)
		if errors.Is(err, errBudget) || errors.Is(err, relayproto.ErrFrame) {
			s.metrics.query(relayproto.CodeBadQuery)
			_ = c.send(relayproto.QueryReply{Code: relayproto.CodeBadQuery, Err: err.Error()}, time.Second)
			return
		}
		if err != nil {
			return
		}
		r := s.answer(ctx, uid, b, log)
		c.fr.release()
		s.metrics.query(r.Code)
		if err := c.send(r, s.cfg.AppendTimeout); err != nil {
			return
		}
	}
}

// answer checks one Query and answers it within the uid's ration and the
// service's concurrency.
func (s *Server) answer(ctx context.Context, uid int, b []byte, log *slog.Logger) relayproto.QueryReply {
	var q relayproto.Query
	if err := relayproto.DecodeStrict(b, &q); err != nil {
		return relayproto.QueryReply{Code: relayproto.CodeBadQuery, Err: "query: " + err.Error()}
	}
	if ok, wait := s.rations.take(uid, len(b), s.now()); !ok {
		return relayproto.QueryReply{Code: relayproto.CodeThrottled, Err: fmt.Sprintf("uid %d is over its ration; retry in %d ms", uid, max(wait.Milliseconds(), 1))}
	}
	qs := s.queries
	qctx, cancel := context.WithTimeout(ctx, s.cfg.AppendTimeout)
	defer cancel()
	select {
	case qs.sem <- struct{}{}:
		defer func() { <-qs.sem }()
	case <-qctx.Done():
		return relayproto.QueryReply{Code: relayproto.CodeBusy, Err: "too many status queries at once"}
	}
	r, err := qs.read(qctx, uid, q)
	if err != nil {
		s.warns.warn(log, "relay query failed", "uid", uid, "key", q.Key, "err", err)
		return relayproto.QueryReply{Code: relayproto.CodeUnavail, Err: "redis: " + err.Error()}
	}
	return r
}

// send writes v as one frame.
func (c *conn) send(v any, timeout time.Duration) error {
	b, err := relayproto.Encode(v)
	if err != nil {
		return err
	}
	if len(b) > relayproto.MaxQueryReply {
		b, _ = relayproto.Encode(relayproto.QueryReply{Code: relayproto.CodeOversize, Err: fmt.Sprintf("reply of %d bytes, limit %d", len(b), relayproto.MaxQueryReply)})
	}
	c.out = relayproto.AppendFrame(c.out[:0], b)
	_ = c.SetWriteDeadline(time.Now().Add(timeout))
	_, err = c.Write(c.out)
	if cap(c.out) > 64<<10 {
		c.out = nil // a large reply's buffer is not kept for the connection's life
	}
	return err
}

// read answers q for uid: the keys a status query may read, each filtered
// to what uid may see.
func (q *queryService) read(ctx context.Context, uid int, qr relayproto.Query) (relayproto.QueryReply, error) {
	k := q.cfg.Keys
	all := uid == 0 || slices.Contains(q.cfg.SeeAll, uid)
	switch {
	case qr.Op == relayproto.OpGet && qr.Key == k.Jobs():
		return q.jobTable(ctx, uid, all)
	case qr.Op == relayproto.OpGet && qr.Key == k.Snapshot():
		return q.snapshot(ctx, uid, all)
	case qr.Op == relayproto.OpList && qr.Key == k.Receipts():
		return q.receipts(ctx, uid, all)
	}
	lineage, name, ok := q.jobKey(qr.Key)
	if !ok || !(qr.Op == relayproto.OpGet && name == "status" || qr.Op == relayproto.OpList && name == "series") {
		return relayproto.QueryReply{Code: relayproto.CodeBadQuery, Err: fmt.Sprintf("%s %q: not a key a status query may read", qr.Op, qr.Key)}, nil
	}
	if !all {
		owner, found, err := q.owner(ctx, lineage)
		if err != nil || !found || owner != uid {
			return relayproto.QueryReply{OK: true}, err
		}
	}
	if qr.Op == relayproto.OpList {
		vals, err := q.cfg.Reader.List(ctx, qr.Key)
		return listReply(vals), err
	}
	return q.get(ctx, qr.Key, func(b []byte) ([]byte, error) { return b, nil })
}

// jobKey splits one of the cluster's per-lineage keys into the lineage
// and the key's name (status, series, state).
func (q *queryService) jobKey(key string) (lineage, name string, ok bool) {
	rest, ok := strings.CutPrefix(key, "isched:"+q.cfg.Keys.Cluster+":job:{")
	if !ok {
		return "", "", false
	}
	lineage, name, ok = strings.Cut(rest, "}:")
	if !ok || !stream.ValidName(lineage) || q.cfg.Keys.Job(lineage, name) != key {
		return "", "", false
	}
	return lineage, name, true
}

// get reads key and answers its value through filter; a missing key is
// not found.
func (q *queryService) get(ctx context.Context, key string, filter func([]byte) ([]byte, error)) (relayproto.QueryReply, error) {
	b, err := q.cfg.Reader.Get(ctx, key)
	if errors.Is(err, stream.ErrNotFound) {
		return relayproto.QueryReply{OK: true}, nil
	}
	if err != nil {
		return relayproto.QueryReply{}, err
	}
	if b, err = filter(b); err != nil {
		return relayproto.QueryReply{}, fmt.Errorf("%s: %w", key, err)
	}
	return relayproto.QueryReply{OK: true, Found: true, Value: string(b)}, nil
}

func listReply(vals [][]byte) relayproto.QueryReply {
	r := relayproto.QueryReply{OK: true, Found: len(vals) > 0, Values: make([]string, len(vals))}
	for i, v := range vals {
		r.Values[i] = string(v)
	}
	return r
}
