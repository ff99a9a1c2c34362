package agent

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/isched/isched/internal/report"
	"github.com/isched/isched/internal/retry"
	"github.com/isched/isched/internal/slurm"
	"github.com/isched/isched/internal/stream"
)

// Slurm is what the agent needs from Slurm; *slurm.Client implements it.
type Slurm interface {
	Poll(ctx context.Context) (*slurm.State, error)
	Jobs(ctx context.Context) ([]report.Job, error)
	ShowJob(ctx context.Context, jobID string) (*slurm.JobInfo, error)
	Signal(ctx context.Context, jobID, sig string, batchOnly bool) error
	Move(ctx context.Context, jobID string, spec slurm.MoveSpec) (slurm.MoveResult, error)
	Update(ctx context.Context, jobID string, u slurm.UpdateSpec) error
	Release(ctx context.Context, jobID string) error
	Cancel(ctx context.Context, jobID string) error
	SetAdminComment(ctx context.Context, jobID, text string) error
	SubmitWith(ctx context.Context, script []byte, spec slurm.SubmitSpec) (string, error)
	BatchScript(ctx context.Context, jobID string) ([]byte, error)
}

// Store is what the agent needs from Redis; *stream.Client implements it.
type Store interface {
	Set(ctx context.Context, key string, val []byte, ttl time.Duration) error
	Get(ctx context.Context, key string) ([]byte, error)
	Del(ctx context.Context, keys ...string) error
	Append(ctx context.Context, stream string, payload []byte, mac string, maxLen int64) (string, error)
	ReadAfter(ctx context.Context, stream, afterID string, count int64, block time.Duration) ([]stream.Entry, error)
	HSet(ctx context.Context, key string, fieldValues ...string) error
	HGet(ctx context.Context, key, field string) (string, error)
}

// Config tunes the agent. Zero values take the documented defaults
// (setDefaults); negative durations are errors (Validate).
type Config struct {
	Cluster string // required: names every key

	PollInterval time.Duration // default 5 s
	// SnapshotTTL is how long a published snapshot/job table lives in
	// Redis; default 3 poll intervals, at least 15 s.
	SnapshotTTL time.Duration
	// MinBackoff and MaxBackoff bound the retry delay after Slurm or Redis
	// failures, doubled from MinBackoff on each failure; default 1 s and 1 min.
	MinBackoff time.Duration
	MaxBackoff time.Duration
	// ActionBlock is how long one XREAD waits for new actions; default 2 s.
	ActionBlock time.Duration
	// ActionTimeout bounds one action, results included; default 5 min
	// (a requeue waits for a job that ignores SIGTERM up to KillWait).
	ActionTimeout time.Duration
	// MaxActionAge refuses actions issued longer ago; default 15 min.
	MaxActionAge time.Duration
	// ResultsMaxLen bounds the results stream (XADD MAXLEN ~); default 10000.
	ResultsMaxLen int64
	// AllowRootSubmit lets submit actions run sbatch as root.
	AllowRootSubmit bool
	// ScriptDir is where the batch scripts of isched jobs are saved at
	// their first sight, for a resubmission once slurmctld forgot the job
	// (scripts.go); empty: none are saved and resubmit actions are refused.
	ScriptDir string
	// ScriptTTL is how long a saved script is kept; default 7 days.
	ScriptTTL time.Duration
	// LimitsInterval is how often the accounting's per-user limits are
	// read again (sacctmgr; limits.go); default 1 min.
	LimitsInterval time.Duration

	// Metrics, when set, counts polls and actions (NewMetrics).
	Metrics *Metrics

	Logger *slog.Logger     // default slog.Default()
	Now    func() time.Time // default time.Now
	// Heartbeat, if set, is called once per poll round, failed or not (the
	// systemd watchdog: a poll loop that stops calling it is restarted).
	Heartbeat func()
}

// Validate checks the configuration; errors name the field.
func (c Config) Validate() error {
	if !stream.ValidName(c.Cluster) {
		return fmt.Errorf("agent: cluster name %q: want 1-64 of [A-Za-z0-9._-]", c.Cluster)
	}
	for _, d := range []struct {
		field string
		v     time.Duration
	}{
		{"PollInterval", c.PollInterval}, {"SnapshotTTL", c.SnapshotTTL}, {"MinBackoff", c.MinBackoff}, {"MaxBackoff", c.MaxBackoff},
		{"ActionBlock", c.ActionBlock}, {"ActionTimeout", c.ActionTimeout}, {"MaxActionAge", c.MaxActionAge},
		{"LimitsInterval", c.LimitsInterval},
	} {
		if d.v < 0 {
			return fmt.Errorf("agent: %s %s is negative (0: the default)", d.field, d.v)
		}
	}
	if c.ResultsMaxLen < 0 {
		return fmt.Errorf("agent: ResultsMaxLen %d is negative (0: the default)", c.ResultsMaxLen)
	}
	return nil
}

// setDefaults gives every zero field its documented default.
func (c *Config) setDefaults() {
	if c.PollInterval == 0 {
		c.PollInterval = 5 * time.Second
	}
	if c.SnapshotTTL == 0 {
		c.SnapshotTTL = max(3*c.PollInterval, 15*time.Second)
	}
	if c.MinBackoff == 0 {
		c.MinBackoff = time.Second
	}
	if c.MaxBackoff == 0 {
		c.MaxBackoff = time.Minute
	}
	if c.ActionBlock == 0 {
		c.ActionBlock = 2 * time.Second
	}
	if c.ActionTimeout == 0 {
		c.ActionTimeout = 5 * time.Minute
	}
	if c.MaxActionAge == 0 {
		c.MaxActionAge = 15 * time.Minute
	}
	if c.ResultsMaxLen == 0 {
		c.ResultsMaxLen = 10000
	}
	if c.LimitsInterval == 0 {
		c.LimitsInterval = time.Minute
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	if c.Now == nil {
		c.Now = time.Now
	}
}

// Agent publishes the cluster's state and executes actions.
type Agent struct {
	cfg   Config
	slurm Slurm
	store Store
	keys  stream.Keys
	log   *slog.Logger
	// scripts is the saved batch scripts (nil: off); its seen set is the
	// poll loop's, its files are read by the action loop.
	scripts   *scriptStore
	lastSweep time.Time
	limits    limitsCache // the poll loop's
}

// New builds an agent; Run runs it.
func New(cfg Config, sl Slurm, st Store) (*Agent, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg.setDefaults()
	keys, err := stream.NewKeys(cfg.Cluster)
	if err != nil {
		return nil, err
	}
	a := &Agent{cfg: cfg, slurm: sl, store: st, keys: keys, log: cfg.Logger.With("component", "agent", "cluster", cfg.Cluster)}
	if cfg.ScriptDir != "" {
		if a.scripts, err = openScriptStore(cfg.ScriptDir, cfg.ScriptTTL); err != nil {
			a.log.Warn("batch scripts not saved: a job slurmctld forgot cannot be resubmitted", "err", err)
		}
	}
	return a, nil
}

// Run runs both loops until ctx is done. An action being executed when ctx
// ends is finished first (up to ActionTimeout): stopping must not leave a
// job held half-way through a move.
func (a *Agent) Run(ctx context.Context) error {
	var wg sync.WaitGroup
	var actionErr error
	wg.Add(2)
	go func() { defer wg.Done(); a.pollLoop(ctx) }()
	go func() { defer wg.Done(); actionErr = a.actionLoop(ctx) }()
	wg.Wait()
	if actionErr != nil && !errors.Is(actionErr, context.Canceled) {
		return actionErr
	}
	return nil
}

// pollLoop publishes a snapshot every PollInterval, backing off while
// Slurm or Redis fail.
func (a *Agent) pollLoop(ctx context.Context) {
	b := a.backoff("poll")
	var delay time.Duration
	for {
		if !sleep(ctx, delay) {
			return
		}
		if a.cfg.Heartbeat != nil {
			a.cfg.Heartbeat()
		}
		start := time.Now()
		err := a.PublishOnce(ctx)
		a.cfg.Metrics.observePoll(time.Since(start), err)
		if err != nil {
			if ctx.Err() != nil {
				return // stopping: not a Slurm failure
			}
			delay = b.Failed(err)
			continue
		}
		b.OK()
		delay = max(a.cfg.PollInterval-time.Since(start), 0)
	}
}

// PublishOnce polls Slurm once (four commands) and publishes the snapshot
// and the job table. On any Slurm failure it publishes nothing.
func (a *Agent) PublishOnce(ctx context.Context) error {
	st, err := a.slurm.Poll(ctx)
	if err != nil {
		return fmt.Errorf("poll slurm: %w", err)
	}
	now := a.cfg.Now()
	snap := st.Snapshot(a.cfg.Cluster, now)
	snap.Limits = a.userLimits(ctx, st.Jobs, now)
	env := report.NewEnvelope(report.KindSnapshot, now)
	env.Snapshot = &snap
	sb, err := report.Encode(env)
	if err != nil {
		return fmt.Errorf("encode snapshot: %w", err)
	}
	table := st.JobTable(a.cfg.Cluster, now)
	jb, kept, err := encodeJobTable(table, now)
	if err != nil {
		return fmt.Errorf("encode job table: %w", err)
	}
	if kept < len(table.Jobs) {
		a.log.Warn("job table trimmed to fit one envelope", "jobs", len(table.Jobs), "kept", kept, "max_bytes", report.MaxTablePayload)
	}
	if err := a.store.Set(ctx, a.keys.Snapshot(), sb, a.cfg.SnapshotTTL); err != nil {
		return err
	}
	if err := a.store.Set(ctx, a.keys.Jobs(), jb, a.cfg.SnapshotTTL); err != nil {
		return err
	}
	a.saveNew(ctx, table.Jobs)
	if a.scripts != nil && now.Sub(a.lastSweep) > 10*time.Minute {
		a.lastSweep = now
		listed := make(map[uint64]bool, len(table.Jobs))
		for _, j := range table.Jobs {
			listed[j.JobID] = true
		}
		if err := a.scripts.sweep(now, listed); err != nil {
			a.log.Warn("saved batch scripts not swept", "err", err)
		}
	}
	return nil
}

// encodeJobTable encodes the table, dropping rows when it does not fit
// report.MaxTablePayload (32 MiB, some 100,000 jobs): opted-in jobs are kept
// first, then pending, then running, and ended jobs go first. It returns how
// many rows were kept.
func encodeJobTable(t report.JobTable, now time.Time) ([]byte, int, error) {
	enc := func(jobs []report.Job) ([]byte, error) {
		tt := t
		tt.Jobs = jobs
		env := report.NewEnvelope(report.KindJobs, now)
		env.Jobs = &tt
		return report.Encode(env)
	}
	b, err := enc(t.Jobs)
	if err == nil || !errors.Is(err, report.ErrTooLarge) {
		return b, len(t.Jobs), err
	}
	ranked := make([]report.Job, 0, len(t.Jobs))
	for rank := 0; rank < 4; rank++ {
		for _, j := range t.Jobs {
			if jobRank(j) == rank {
				ranked = append(ranked, j)
			}
		}
	}
	// Largest prefix that fits, by bisection.
	lo, hi := 0, len(ranked)
	var best []byte
	for lo < hi {
		mid := (lo + hi + 1) / 2
		b, err := enc(ranked[:mid])
		switch {
		case err == nil:
			lo, best = mid, b
		case errors.Is(err, report.ErrTooLarge):
			hi = mid - 1
		default:
			return nil, 0, err
		}
	}
	if best == nil {
		b, err := enc([]report.Job{})
		return b, 0, err
	}
	return best, lo, nil
}

func jobRank(j report.Job) int {
	switch {
	case OptedIn(j.Name, j.Comment):
		return 0
	case j.State == slurm.StatePending:
		return 1
	case !slurm.Ended(j.State):
		return 2
	}
	return 3
}

// sleep waits d or until ctx is done; it reports whether ctx is still live.
func sleep(ctx context.Context, d time.Duration) bool { return retry.Sleep(ctx, d) == nil }

// backoff is a retrying loop's backoff and rate-limited error log: the
// first failure, then one line a minute with the count, then the recovery.
func (a *Agent) backoff(what string) *retry.Backoff {
	return &retry.Backoff{Min: a.cfg.MinBackoff, Max: a.cfg.MaxBackoff, Log: a.log, What: what, Level: slog.LevelError}
}
