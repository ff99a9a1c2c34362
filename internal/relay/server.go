package relay

import (
	"context"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/isched/isched/internal/relayproto"
	"github.com/isched/isched/internal/report"
)

// Appender is the part of the Redis client the relay uses (a
// *stream.Client as the reporter user).
type Appender interface {
	AppendFrom(ctx context.Context, stream string, payload []byte, mac string, uid int, maxLen int64) (string, error)
}

// Config is the relay's fixed behaviour; nothing of it comes from clients.
type Config struct {
	// Stream is the one key entries go to: the cluster's ingest stream.
	Stream string
	// MaxLen is the stream's approximate cap (XADD MAXLEN ~) at start:
	// Main derives it from Redis's maxmemory (DeriveStreamCap) and
	// SetMaxLen changes it at run time.
	MaxLen int64
	// MaxEntry bounds a report's bytes (report.MaxPayload).
	MaxEntry int
	Ration   Ration
	// AuthTimeout: a connection that has not sent its Hello by then is
	// closed (a client sends it as it connects: a few seconds cover a
	// slow network and MUNGE's check, and bound how long a socket held
	// open to take a place keeps it). IdleTimeout: an authenticated one
	// that sends nothing for that long is closed.
	AuthTimeout, IdleTimeout time.Duration
	// AppendTimeout bounds one XADD.
	AppendTimeout time.Duration
	// MaxConnsPerUID and MaxUnauthenticated bound open connections;
	// MaxUnauthenticatedPerSource bounds the unauthenticated ones of one
	// source: a uid for a client on the relay's host when the kernel
	// tells (diagPeers), else an IP.
	MaxConnsPerUID, MaxUnauthenticated, MaxUnauthenticatedPerSource int
	// InFlightBytes bounds the memory of frames being read, in all;
	// InFlightBytesPerUID that of one uid's (or, before it authenticates,
	// one source's). Memory is lent as a frame's bytes arrive, not as
	// its header declares.
	InFlightBytes, InFlightBytesPerUID int64
}

// DefaultConfig is the relay's configuration for stream.
func DefaultConfig(stream string) Config {
	return Config{Stream: stream, MaxLen: 100000, MaxEntry: report.MaxPayload, Ration: DefaultRation,
		AuthTimeout: 3 * time.Second, IdleTimeout: 10 * time.Minute, AppendTimeout: 5 * time.Second,
		MaxConnsPerUID: 1024, MaxUnauthenticated: 512, MaxUnauthenticatedPerSource: 64,
		InFlightBytes: 64 << 20, InFlightBytesPerUID: 8 << 20}
}

func (c Config) validate() error {
	switch {
	case c.Stream == "":
		return errors.New("relay: no stream")
	case c.MaxLen <= 0:
		return fmt.Errorf("relay: MaxLen %d: want > 0", c.MaxLen)
	case c.MaxEntry <= 0 || c.MaxEntry > report.MaxPayload:
		return fmt.Errorf("relay: MaxEntry %d: want 1..%d", c.MaxEntry, report.MaxPayload)
	case c.Ration.EntriesPerSec <= 0 || c.Ration.EntryBurst < 1 || c.Ration.BytesPerSec <= 0:
		return fmt.Errorf("relay: ration %+v: rates must be > 0 and the entry burst ≥ 1", c.Ration)
	case c.Ration.ByteBurst < float64(c.MaxEntry):
		return fmt.Errorf("relay: byte burst %.0f below the entry limit %d: the largest report could never pass", c.Ration.ByteBurst, c.MaxEntry)
	case c.AuthTimeout <= 0 || c.IdleTimeout <= 0 || c.AppendTimeout <= 0:
		return errors.New("relay: timeouts must be > 0")
	case c.MaxConnsPerUID <= 0 || c.MaxUnauthenticated <= 0:
		return errors.New("relay: connection limits must be > 0")
	case c.MaxUnauthenticatedPerSource <= 0:
		return fmt.Errorf("relay: MaxUnauthenticatedPerSource %d: want > 0", c.MaxUnauthenticatedPerSource)
	case c.InFlightBytesPerUID < relayproto.MaxFrame || c.InFlightBytes < c.InFlightBytesPerUID:
		return fmt.Errorf("relay: in-flight bytes %d per uid, %d in all: want %d (the largest frame) ≤ per uid ≤ in all", c.InFlightBytesPerUID, c.InFlightBytes, relayproto.MaxFrame)
	}
	return nil
}

// Server relays authenticated reports to Redis.
type Server struct {
	cfg     Config
	verify  Verifier
	redis   Appender
	now     func() time.Time
	log     *slog.Logger
	metrics *Metrics
	rations *rations
	warns   *warnLimiter
	frames  *frameBudget
	pool    *unauthPool
	peers   peerUIDs
	maxLen  atomic.Int64
	queries *queryService // nil: no status queries (ServeQueries)

	mu      sync.Mutex
	perUID  map[int]int
	conns   map[net.Conn]struct{}
	closing bool
}

// NewServer checks cfg; now nil is time.Now, metrics nil counts nothing.
func NewServer(cfg Config, v Verifier, a Appender, now func() time.Time, m *Metrics, log *slog.Logger) (*Server, error) {
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	if now == nil {
		now = time.Now
	}
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	s := &Server{cfg: cfg, verify: v, redis: a, now: now, log: log, metrics: m, rations: newRations(cfg.Ration),
		warns: newWarnLimiter(log, now), frames: newFrameBudget(cfg.InFlightBytes, cfg.InFlightBytesPerUID, m),
		pool: newUnauthPool(cfg.MaxUnauthenticated, cfg.MaxUnauthenticatedPerSource), peers: defaultPeers(), perUID: map[int]int{}, conns: map[net.Conn]struct{}{}}
	s.maxLen.Store(cfg.MaxLen)
	return s, nil
}

// SetMaxLen changes the stream's cap for the appends that follow (the
// cap watch, when Redis's maxmemory changes); n ≤ 0 is ignored.
func (s *Server) SetMaxLen(n int64) {
	if n > 0 {
		s.maxLen.Store(n)
	}
}

// Serve accepts connections on ln until ctx ends, then closes ln and every
// connection and returns once their goroutines have.
func (s *Server) Serve(ctx context.Context, ln net.Listener) error {
	var wg sync.WaitGroup
	stop := context.AfterFunc(ctx, func() {
		s.mu.Lock()
		s.closing = true
		for c := range s.conns {
			_ = c.Close()
		}
		s.mu.Unlock()
		_ = ln.Close()
	})
	defer stop()
	defer wg.Wait()
	// the flusher ends with Serve, whichever way it returns
	fctx, cancel := context.WithCancel(ctx)
	defer cancel()
	wg.Add(1)
	go func() { defer wg.Done(); s.warns.run(fctx) }()
	backoff := 5 * time.Millisecond
	for {
		c, err := ln.Accept()
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			if errors.Is(err, net.ErrClosed) {
				return fmt.Errorf("relay: accept: %w", err)
			}
			// out of file descriptors and the like: wait it out
			s.warns.warn(s.log, "relay accept failed", "err", err, "retry_in", backoff.String())
			time.Sleep(backoff)
			backoff = min(2*backoff, time.Second)
			continue
		}
		backoff = 5 * time.Millisecond
		if !s.track(c) {
			_ = c.Close()
			return nil
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer s.untrack(c)
			s.handle(ctx, c)
		}()
	}
}

func (s *Server) track(c net.Conn) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closing {
		return false
	}
	s.conns[c] = struct{}{}
	return true
}

func (s *Server) untrack(c net.Conn) {
	_ = c.Close()
	s.mu.Lock()
	delete(s.conns, c)
	s.mu.Unlock()
}

// admit counts an authenticated connection of uid.
func (s *Server) admit(uid int) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.perUID[uid] >= s.cfg.MaxConnsPerUID {
		return false
	}
	s.perUID[uid]++
	return true
}

func (s *Server) release(uid int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.perUID[uid]--; s.perUID[uid] <= 0 {
		delete(s.perUID, uid)
	}
}

// conn is one client's connection.
type conn struct {
	net.Conn
	fr   *frameReader
	out  []byte
	mode string // the Hello's: ModeQuery, or "" for reports
}

func (c *conn) reply(r relayproto.Reply, timeout time.Duration) error {
	b, err := relayproto.Encode(r)
	if err != nil {
		return err
	}
	c.out = relayproto.AppendFrame(c.out[:0], b)
	_ = c.SetWriteDeadline(time.Now().Add(timeout))
	_, err = c.Write(c.out)
	return err
}

// handle runs one connection: its admission among the unauthenticated
// ones, the Hello within AuthTimeout, then entries.
func (s *Server) handle(ctx context.Context, nc net.Conn) {
	// the source is looked up here, not in the accept loop: asking the
	// kernel must not hold up other connections
	p := &pending{nc: nc, src: sourceOf(nc, s.peers)}
	// until it authenticates, a connection's frame bytes are lent to its
	// source
	c := &conn{Conn: nc, fr: &frameReader{r: nc, budget: s.frames, key: p.src}}
	defer c.fr.release()
	log := s.log.With("remote", nc.RemoteAddr().String())
	if !s.admitPending(c, p, log) {
		return
	}
	uid, ok := s.hello(ctx, c, p, log)
	s.pool.release(p)
	if !ok {
		return
	}
	if r := s.modeRefusal(c.mode); r != nil {
		s.metrics.conn(r.Code)
		_ = c.reply(*r, time.Second)
		return
	}
	if !s.admit(uid) {
		s.metrics.conn("busy")
		s.warns.warn(log, "relay connection refused: too many connections of this uid", "uid", uid, "limit", s.cfg.MaxConnsPerUID)
		_ = c.reply(relayproto.Reply{Code: relayproto.CodeBusy, Err: fmt.Sprintf("uid %d has %d connections", uid, s.cfg.MaxConnsPerUID)}, time.Second)
		return
	}
	defer s.release(uid)
	if err := c.reply(relayproto.Reply{OK: true}, s.cfg.AuthTimeout); err != nil {
		return
	}
	s.metrics.conn("ok")
	c.fr.release()
	c.fr.key = "uid " + strconv.Itoa(uid)
	if c.mode == relayproto.ModeQuery {
		s.queryLoop(ctx, c, uid, log.With("uid", uid))
		return
	}
	s.entries(ctx, c, uid, log.With("uid", uid))
}

// admitPending counts p among the unauthenticated connections, closing
// the one it replaces, or answers why not.
func (s *Server) admitPending(c *conn, p *pending, log *slog.Logger) bool {
	evicted, why := s.pool.admit(p)
	if evicted != nil {
		_ = evicted.nc.Close()
		s.metrics.conn("evicted")
		msg := "relay unauthenticated connection closed: the pool is full and its source holds the most"
		if evicted.src == p.src {
			msg = "relay unauthenticated connection closed: its source is at its share and it was the oldest"
		}
		s.warns.warn(log, msg, "evicted_remote", evicted.nc.RemoteAddr().String(), "evicted_source", evicted.src)
	}
	if why == "" {
		return true
	}
	s.metrics.conn("busy")
	s.warns.warn(log, "relay connection refused: "+why, "source", p.src,
		"limit", s.cfg.MaxUnauthenticated, "source_limit", s.cfg.MaxUnauthenticatedPerSource)
	_ = c.reply(relayproto.Reply{Code: relayproto.CodeBusy, Err: why}, time.Second)
	return false
}

// entries answers an authenticated connection's entries until it ends or
// breaks the protocol.
func (s *Server) entries(ctx context.Context, c *conn, uid int, log *slog.Logger) {
	log.Debug("relay connection authenticated")
	for {
		_ = c.SetReadDeadline(time.Now().Add(s.cfg.IdleTimeout))
		b, err := c.fr.next(relayproto.MaxFrame)
		switch {
		case errors.Is(err, errBudget):
			s.metrics.entry(relayproto.CodeBusy)
			s.warns.warn(log, "relay connection closed: frame over the in-flight budget", "err", err)
			_ = c.reply(relayproto.Reply{Code: relayproto.CodeBusy, Err: err.Error()}, time.Second)
			return
		case errors.Is(err, relayproto.ErrFrame):
			s.metrics.entry(relayproto.CodeBadEntry)
			s.warns.warn(log, "relay connection closed: bad frame", "err", err)
			_ = c.reply(relayproto.Reply{Code: relayproto.CodeBadEntry, Err: err.Error()}, time.Second)
			return
		case err != nil:
			return
		}
		r := s.entry(ctx, uid, b, log)
		c.fr.release()
		s.metrics.entry(r.Code)
		if err := c.reply(r, s.cfg.AppendTimeout); err != nil {
			return
		}
	}
}

// hello reads and checks the first frame; it answers a refusal itself.
func (s *Server) hello(ctx context.Context, c *conn, p *pending, log *slog.Logger) (int, bool) {
	_ = c.SetReadDeadline(time.Now().Add(s.cfg.AuthTimeout))
	b, err := c.fr.next(relayproto.MaxHello)
	if errors.Is(err, errBudget) {
		s.metrics.conn("busy")
		s.warns.warn(log, "relay connection refused: hello over the in-flight budget", "err", err)
		_ = c.reply(relayproto.Reply{Code: relayproto.CodeBusy, Err: err.Error()}, time.Second)
		return -1, false
	}
	if err != nil && s.pool.wasEvicted(p) {
		return -1, false // counted as evicted
	}
	if err != nil {
		s.metrics.conn(relayproto.CodeAuth)
		s.warns.warn(log, "relay connection closed before it authenticated", "err", err)
		if errors.Is(err, relayproto.ErrFrame) {
			_ = c.reply(relayproto.Reply{Code: relayproto.CodeAuth, Err: err.Error()}, time.Second)
		}
		return -1, false
	}
	if !s.pool.verify(p) {
		return -1, false // evicted as its last bytes came: counted as evicted
	}
	var h relayproto.Hello
	err = relayproto.DecodeStrict(b, &h)
	c.mode = h.Mode
	if err == nil && h.V != relayproto.Version {
		err = fmt.Errorf("protocol version %d, want %d", h.V, relayproto.Version)
	}
	uid := -1
	if err == nil {
		vctx, cancel := context.WithTimeout(ctx, s.cfg.AuthTimeout)
		uid, err = s.verify.Verify(vctx, h.Cred)
		cancel()
	}
	if err != nil {
		s.metrics.conn(relayproto.CodeAuth)
		s.warns.warn(log, "relay credential refused", "err", err)
		_ = c.reply(relayproto.Reply{Code: relayproto.CodeAuth, Err: err.Error()}, time.Second)
		return -1, false
	}
	return uid, true
}

// entry checks one Entry frame and appends it: refusals name the reason.
func (s *Server) entry(ctx context.Context, uid int, b []byte, log *slog.Logger) relayproto.Reply {
	var e relayproto.Entry
	if err := relayproto.DecodeStrict(b, &e); err != nil {
		return relayproto.Reply{Code: relayproto.CodeBadEntry, Err: "entry: " + err.Error()}
	}
	if len(e.M) > s.cfg.MaxEntry {
		s.warns.warn(log, "relay entry refused: oversize", "bytes", len(e.M), "limit", s.cfg.MaxEntry)
		return relayproto.Reply{Code: relayproto.CodeOversize, Err: fmt.Sprintf("report of %d bytes, limit %d", len(e.M), s.cfg.MaxEntry)}
	}
	if len(e.M) == 0 || !json.Valid([]byte(e.M)) {
		return relayproto.Reply{Code: relayproto.CodeBadEntry, Err: "report is not JSON"}
	}
	if mac, err := hex.DecodeString(e.MAC); err != nil || len(mac) != 32 {
		return relayproto.Reply{Code: relayproto.CodeBadEntry, Err: "mac is not 32 hex bytes"}
	}
	size := len(e.M) + len(e.MAC)
	if ok, wait := s.rations.take(uid, size, s.now()); !ok {
		return relayproto.Reply{Code: relayproto.CodeThrottled, Err: fmt.Sprintf("uid %d is over its ration (%.0f entries/s, %.0f bytes/s)", uid, s.cfg.Ration.EntriesPerSec, s.cfg.Ration.BytesPerSec), RetryMS: max(wait.Milliseconds(), 1)}
	}
	actx, cancel := context.WithTimeout(ctx, s.cfg.AppendTimeout)
	defer cancel()
	id, err := s.redis.AppendFrom(actx, s.cfg.Stream, []byte(e.M), e.MAC, uid, s.maxLen.Load())
	if err != nil {
		s.warns.warn(log, "relay append failed", "err", err)
		return relayproto.Reply{Code: relayproto.CodeUnavail, Err: "redis: " + err.Error()}
	}
	return relayproto.Reply{OK: true, ID: id}
}
