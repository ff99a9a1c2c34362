package coordinator

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"sync"
	"time"

	"github.com/isched/isched/internal/auth"
	"github.com/isched/isched/internal/coordconfig"
	"github.com/isched/isched/internal/policy"
	"github.com/isched/isched/internal/report"
	"github.com/isched/isched/internal/retry"
	"github.com/isched/isched/internal/stream"
)

// Config tunes the coordinator.
type Config struct {
	// Tick is how often decisions are taken (and the agent's snapshot read).
	Tick time.Duration
	// StaleAfter: a snapshot older than this is not acted on.
	StaleAfter time.Duration
	// LeaderTTL: a dead leader's lock lapses after this; the standby takes over.
	LeaderTTL time.Duration
	// DeferLimit: a report whose job or session stays unknown this long is rejected.
	DeferLimit time.Duration
	// ClaimIdle: entries a dead consumer held this long are taken over.
	ClaimIdle time.Duration
	// StallFactor: no iteration for this many expected iteration times is a stall.
	StallFactor float64
	// RequeueWait: a requeued job not started again after this is no longer waited for.
	RequeueWait time.Duration
	SeriesLen   int64
	// EndedTTL: how long an ended job's status (its verdict included),
	// state and series stay in Redis for `isched status`. Default 7 days;
	// config file "ended_ttl".
	EndedTTL time.Duration
	// AdminComment: at a run's end, ask the agent to write the efficiency
	// verdict into the job's AdminComment (sacct and jobstats-style tools
	// show it). Only root or a Slurm operator may, so the agent must run as
	// one; off by default; config "admin_comment".
	AdminComment bool
	// MaxJobSeries caps the lineages exported as per-job metrics
	// (isched_job_*); default coordconfig.DefaultMaxJobSeries; config "max_job_series".
	MaxJobSeries int
	// EndGrace: after an attempt's end report, how long the job may be
	// missing from the job table (or preempted) before the lineage is
	// taken as ended; a requeue within it continues the lineage. A final
	// Slurm state (COMPLETED, FAILED, ...) ends it at once. Default 1 min.
	EndGrace time.Duration
	// SessionRetention: a session opened longer ago than this (and idle
	// for an hour) is forgotten; it must exceed the wrappers' MUNGE
	// credential TTL (24 h). Default 25 h.
	SessionRetention time.Duration
	// Limits bounds what one job or user can make the coordinator keep.
	Limits Limits
	Policy policy.Config
	Logger *slog.Logger
	Now    func() time.Time
	// ID names this coordinator (consumer name, lock owner); default host-pid-random.
	ID string
	// Heartbeat, if set, is called once per round, failed or not (the
	// systemd watchdog: a loop that stops calling it is restarted).
	Heartbeat func()
}

func (c *Config) defaults() {
	if c.Tick <= 0 {
		c.Tick = coordconfig.DefaultTick
	}
	if c.StaleAfter <= 0 {
		c.StaleAfter = coordconfig.DefaultStaleAfter
	}
	if c.LeaderTTL <= 0 {
		c.LeaderTTL = coordconfig.DefaultLeaderTTL
	}
	if c.DeferLimit <= 0 {
		c.DeferLimit = 2 * time.Minute
	}
	if c.ClaimIdle <= 0 {
		c.ClaimIdle = 30 * time.Second
	}
	if c.StallFactor <= 0 {
		c.StallFactor = 10
	}
	if c.RequeueWait <= 0 {
		c.RequeueWait = policy.DefaultRequeueWait
	}
	if c.SeriesLen <= 0 {
		c.SeriesLen = 1000 // ~90 KiB per job: 1,000 points of one sample report each
	}
	if c.SessionRetention <= 0 {
		c.SessionRetention = 25 * time.Hour
	}
	if c.EndGrace <= 0 {
		c.EndGrace = coordconfig.DefaultEndGrace
	}
	if c.EndedTTL <= 0 {
		c.EndedTTL = coordconfig.DefaultEndedTTL
	}
	c.Limits.defaults()
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	if c.Now == nil {
		c.Now = time.Now
	}
	if c.ID == "" {
		h, _ := os.Hostname()
		b := make([]byte, 4)
		_, _ = rand.Read(b)
		c.ID = fmt.Sprintf("%s-%d-%s", h, os.Getpid(), hex.EncodeToString(b))
	}
}

const group = "coordinator"

// Coordinator is the service. Create it with New, run it with Run (or
// Start/Close).
type Coordinator struct {
	cfg     Config
	store   Store
	munger  auth.Munger
	uid     int // this process's: start credentials must be restricted to it
	keys    stream.Keys
	log     *slog.Logger
	metrics *Metrics
	now     func() time.Time

	// owned by the Run goroutine
	sessions  map[string]*session
	quota     quota
	lineages  map[string]*lineage
	jobs      jobIndex
	jobsAt    time.Time
	snap      *report.Snapshot
	resultsID string
	receipts  [][]byte
	// heldReceipts: receipts waiting for a job table newer than their
	// run's end (settleReceipt)
	heldReceipts []heldReceipt
	speeds       speedBook
	leader       bool
	kick         bool // a decision is due before the next tick
	rejectLogAt  map[string]time.Time
	// sessionsSweptAt: the last pruneSessions sweep
	sessionsSweptAt time.Time
	// trimmedCounted: reports already counted as trimmed unread (the
	// group's cumulative figure, see stream.GroupLag.TrimmedUnread)
	trimmedCounted int64
	// lossMS: when checkLag last found reports trimmed unread (0: never
	// since the start); a run whose end report is missing and whose
	// attempt overlaps a loss is not judged from its last seen step
	lossMS int64
	// inputs: the agent's snapshot and job table as last read and decoded
	// (readInputs), by input name; inputDecodes counts decodes (tests)
	inputs       map[string]decodedInput
	inputDecodes int
	annotations  []annotation // verdicts for AdminComment, sent at the next tick

	// pipeline: the reads ahead and writes behind, and what is queued
	// for the next write
	pipeline

	cancel context.CancelFunc
	done   chan struct{}
	once   sync.Once
}

// New builds a coordinator on a store (the coordinator's Redis user) and a
// MUNGE decoder running as the uid wrappers restrict their credentials to.
func New(cfg Config, store Store, munger auth.Munger, m *Metrics) *Coordinator {
	cfg.defaults()
	if m == nil {
		m = NewMetrics()
	}
	if cfg.MaxJobSeries > 0 {
		m.jobs.max = cfg.MaxJobSeries
	}
	return &Coordinator{cfg: cfg, store: store, munger: munger, uid: os.Geteuid(), keys: store.Keys(), metrics: m,
		log: cfg.Logger.With("component", "coordinator", "cluster", store.Keys().Cluster), now: cfg.Now,
		sessions: map[string]*session{}, lineages: map[string]*lineage{}, rejectLogAt: map[string]time.Time{},
		inputs: map[string]decodedInput{}, quota: newQuota(), pipeline: newPipeline()}
}

// Start runs the coordinator in the background until Close.
func (c *Coordinator) Start(ctx context.Context) {
	ctx, c.cancel = context.WithCancel(ctx)
	c.done = make(chan struct{})
	go func() {
		defer close(c.done)
		if err := c.Run(ctx); err != nil && !errors.Is(err, context.Canceled) {
			c.log.Error("coordinator stopped", "err", err)
		}
	}()
}

// Close stops a started coordinator and waits for it.
func (c *Coordinator) Close(ctx context.Context) error {
	c.once.Do(func() {
		if c.cancel != nil {
			c.cancel()
		}
	})
	if c.done == nil {
		return nil
	}
	select {
	case <-c.done:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Run leads or stands by until ctx ends. Errors from Redis are retried with
// capped backoff; only ctx ends it.
func (c *Coordinator) Run(ctx context.Context) error {
	b := retry.Backoff{Min: 200 * time.Millisecond, Max: 10 * time.Second, Log: c.log, What: "coordinator round"}
	lastTick := time.Time{}
	for {
		if err := ctx.Err(); err != nil {
			c.stepDown()
			return err
		}
		if c.cfg.Heartbeat != nil {
			c.cfg.Heartbeat()
		}
		err := c.round(ctx, &lastTick)
		if err == nil {
			b.OK()
			continue
		}
		if ctx.Err() != nil {
			c.stepDown()
			return ctx.Err()
		}
		wait := b.Failed(err)
		// what we hold in memory may be older than Redis now: reload
		c.forget()
		select {
		case <-ctx.Done():
		case <-time.After(wait):
		}
	}
}

func (c *Coordinator) stepDown() {
	c.forget() // a failed last write leaves its entries pending: read again by the next leader
	if c.leader {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		_ = c.store.Unlock(ctx, c.keys.Leader(), c.cfg.ID)
		c.leader = false
		c.metrics.leader.Set(0)
	}
}

// forget drops cached state (after an error or losing the lead): Redis is the truth.
func (c *Coordinator) forget() {
	// the write in flight must land (or fail) before Redis is read again;
	// if it failed, its entries are still pending and are read again.
	c.pipeline.drop()
	c.sessions = map[string]*session{}
	c.quota = newQuota()
	c.lineages = map[string]*lineage{}
	c.metrics.jobs.reset()
	c.annotations = nil
	c.snap, c.jobs = nil, nil
	c.inputs = map[string]decodedInput{}
	c.speeds = speedBook{} // another leader may have written receipts since
}

// round is one pass: keep the lead, read reports, and on each tick decide.
func (c *Coordinator) round(ctx context.Context, lastTick *time.Time) error {
	leading, err := c.keepLead(ctx, lastTick)
	if err != nil || !leading {
		return err
	}
	if err := c.tickIfDue(ctx, lastTick); err != nil {
		return err
	}
	ents, err := c.nextEntries(ctx)
	if err != nil {
		return err
	}
	return c.ingest(ctx, ents)
}

// keepLead takes or keeps the leader lock and says whether this
// coordinator leads. A standby waits a while before it says no; a new
// leader starts from Redis (and ticks at once).
func (c *Coordinator) keepLead(ctx context.Context, lastTick *time.Time) (bool, error) {
	ok, err := c.store.Lock(ctx, c.keys.Leader(), c.cfg.ID, c.cfg.LeaderTTL)
	if err != nil {
		return false, err
	}
	if !ok {
		c.standBy(ctx)
		return false, nil
	}
	if !c.leader {
		if err := c.takeLead(ctx); err != nil {
			return false, err
		}
		*lastTick = time.Time{}
	}
	return true, nil
}

// standBy gives up what a lost lead held and waits before the next try.
func (c *Coordinator) standBy(ctx context.Context) {
	if c.leader {
		c.log.Warn("lost the lead")
		c.forget()
	}
	c.leader = false
	c.metrics.leader.Set(0)
	select {
	case <-ctx.Done():
	case <-time.After(c.cfg.LeaderTTL / 4):
	}
}

// takeLead starts leading: nothing held from before is trusted, and the
// entries a dead leader read but never acked are taken over.
func (c *Coordinator) takeLead(ctx context.Context) error {
	c.log.Info("leading", "id", c.cfg.ID)
	c.forget()
	c.leader = true
	c.metrics.leader.Set(1)
	if err := c.store.EnsureGroup(ctx, c.keys.Ingest(), group); err != nil {
		return err
	}
	// entries a dead leader read but never acked are ours now
	_, err := c.store.Claim(ctx, c.keys.Ingest(), group, c.cfg.ID, 0, 10000)
	return err
}

// nextEntries returns the entries to judge next: what the read ahead
// found, or else what a read waiting a while for new ones finds. When
// there are some, it reads ahead again.
func (c *Coordinator) nextEntries(ctx context.Context) ([]stream.Entry, error) {
	var ents []stream.Entry
	var err error
	if c.reading != nil {
		ents, err = c.readDone()
	} else {
		block := min(c.cfg.Tick, c.cfg.LeaderTTL/3)
		ents, err = c.store.ReadGroup(ctx, c.keys.Ingest(), group, c.cfg.ID, readCount, block)
	}
	if err != nil {
		return nil, err
	}
	if len(ents) > 0 {
		c.pipeline.readAhead(func() ([]stream.Entry, error) {
			return c.store.ReadGroup(ctx, c.keys.Ingest(), group, c.cfg.ID, readCount, 0)
		})
	}
	return ents, nil
}

// readCount is how many entries one read takes.
const readCount = 512

// ingest judges and applies entries, acking each one judged.
func (c *Coordinator) ingest(ctx context.Context, ents []stream.Entry) error {
	if len(ents) == 0 {
		return nil
	}
	now := c.now()
	var ack, drop []string
	for _, e := range ents {
		start := time.Now()
		env, s, v, reason, err := c.verify(ctx, e, c.jobs, now)
		if err != nil {
			return err
		}
		if v != deferred {
			c.release(e.ID)
		}
		switch v {
		case accepted:
			if err := c.apply(ctx, env, s, c.jobs, now); err != nil {
				return err
			}
			c.metrics.reports.WithLabelValues("accepted").Inc()
			ack = append(ack, e.ID)
		case rejected:
			c.metrics.rejected.WithLabelValues(reason).Inc()
			c.metrics.reports.WithLabelValues("rejected").Inc()
			c.logRejected(e, env, reason)
			ack, drop = append(ack, e.ID), append(drop, e.ID)
		case deferred:
			c.metrics.reports.WithLabelValues("deferred").Inc()
		case duplicate:
			c.metrics.reports.WithLabelValues("duplicate").Inc()
			c.log.Debug("report received twice (a retransmission); the copy is dropped", "entry", e.ID, "sid", env.SID, "seq", env.Seq)
			ack = append(ack, e.ID)
		}
		c.metrics.ingestLatency.Observe(time.Since(start).Seconds())
	}
	// the entries judged are acked with what they changed, in one
	// MULTI/EXEC written behind: a crash lands both or neither
	if err := c.settleOrDrop(); err != nil {
		return err
	}
	if err := c.queueFlush(false); err != nil {
		return err
	}
	c.batch.Ack(c.keys.Ingest(), group, ack...)
	// a rejected report is of no use to anyone: gone at once, so a flood
	// of them holds no memory (accepted ones stay for the writers' MAXLEN)
	c.batch.Delete(c.keys.Ingest(), drop...)
	c.pipeline.writeBehind(func(b *stream.Batch) error { return c.writeBatch(ctx, b) })
	return nil
}

// writeBatch sends a batch in one round trip, timed, and empties it
// (whatever the outcome: after a failure the round fails, and forget()
// reloads from Redis).
func (c *Coordinator) writeBatch(ctx context.Context, b *stream.Batch) error {
	start := time.Now()
	err := c.store.WriteBatch(ctx, b)
	c.metrics.writeLatency.Observe(time.Since(start).Seconds())
	b.Reset()
	return err
}

// logDue says whether a warning of this key may be logged now, at most
// one every 10 s per key, and if so counts it as logged.
func (c *Coordinator) logDue(key string) bool {
	if t, ok := c.rejectLogAt[key]; ok && time.Since(t) < 10*time.Second {
		return false
	}
	c.rejectLogAt[key] = time.Now()
	return true
}

func (c *Coordinator) logRejected(e stream.Entry, env *report.Envelope, reason string) {
	if !c.logDue(reason) {
		return // rate limit: a flood of forgeries must not flood the log
	}
	attrs := []any{"reason", reason, "entry", e.ID}
	if env != nil && env.Job != nil {
		// what the report claimed (not vouched for: that is why it is refused)
		attrs = append(attrs, "claimed_job", env.Job.JobID, "claimed_lineage", env.Job.Lineage, "claimed_uid", env.Job.UID, "kind", env.Kind)
	}
	c.log.Warn("report rejected", attrs...)
}

// flush persists now, in one round trip, every lineage changed since the
// last flush, the sessions whose sequence numbers moved, the queued series
// points and the receipts (after the write in flight, if any).
func (c *Coordinator) flush(ctx context.Context, all bool) error {
	if err := c.settleOrDrop(); err != nil {
		return err
	}
	if err := c.queueFlush(all); err != nil {
		return err
	}
	if c.batch.Len() == 0 {
		return nil
	}
	return c.writeBatch(ctx, &c.batch)
}

// queueFlush queues in the round's batch what flush persists. It looks for
// changed lineages among all of them (all: a tick's flush) or among those
// fetched since the last flush. What it queued counts as saved: if the
// batch's write fails, the round fails and forget() drops it all.
func (c *Coordinator) queueFlush(all bool) error {
	look := c.touched
	if all {
		look = c.lineages
	}
	for name, l := range look {
		if l.dirty {
			if err := c.queueSave(name, l); err != nil {
				return err
			}
			l.dirty = false
		}
	}
	// on a Redis Cluster the sessions' sequence numbers, the receipts and
	// the acks land only after the states they vouch for (Batch.Then)
	c.batch.Then()
	if len(c.dirtySessions) > 0 {
		fv := make([]string, 0, 2*len(c.dirtySessions))
		for sid, s := range c.dirtySessions {
			b, err := json.Marshal(s)
			if err != nil {
				return fmt.Errorf("coordinator: session %s: %w", sid, err)
			}
			fv = append(fv, sid, string(b))
		}
		c.batch.HSet(c.keys.Sessions(), fv...)
	}
	c.batch.PushList(c.keys.Receipts(), 10000, c.receipts...)
	clear(c.dirtySessions)
	clear(c.touched)
	c.receipts = nil
	return nil
}
