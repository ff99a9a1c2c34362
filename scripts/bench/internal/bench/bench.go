package bench

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/isched/isched/internal/auth"
	"github.com/isched/isched/internal/report"
	"github.com/isched/isched/internal/retry"
	"github.com/isched/isched/internal/stream"
)

// Appender is the reporter user's one permission (XADD to the ingest stream).
type Appender interface {
	Append(ctx context.Context, stream string, payload []byte, mac string, maxLen int64) (string, error)
}

// Setter is what the agent user does here: write the snapshot and the job table.
type Setter interface {
	Set(ctx context.Context, key string, val []byte, ttl time.Duration) error
}

// Admin reads status keys, measures and deletes the benchmark's keys.
type Admin interface {
	Get(ctx context.Context, key string) ([]byte, error)
	Del(ctx context.Context, keys ...string) error
	MemoryUsage(ctx context.Context, key string) (int64, error)
	Len(ctx context.Context, stream string) (int64, error)
	List(ctx context.Context, key string) ([][]byte, error)
}

// Observer reads the coordinator under test: its Prometheus metrics and its
// process figures.
type Observer interface {
	Metrics(ctx context.Context) (Metrics, error)
	Proc() (Proc, error)
}

// HeapProber is an Observer that can also measure the coordinator's live
// heap after a forced collection (0 when it cannot).
type HeapProber interface {
	LiveHeap(ctx context.Context) (int64, error)
}

// Config is one benchmark run.
type Config struct {
	Cluster string // a name of the benchmark's own: every key carries it
	Jobs    int
	// Duration is the measured window; Settle runs before it, after the last
	// batch of jobs started.
	Duration, Settle time.Duration
	Every            time.Duration // one sample per wrapper this often (the wrapper's --report-interval)
	Iters            int           // iterations per sample (Every / iteration time)
	Probes           int           // jobs whose decision latency is measured
	// Aged jobs report AgedIters iterations per sample, so that within the
	// run their state reaches the coordinator's caps (estimator window,
	// series length): their Redis footprint is a job's after hours of
	// training. They are left out of the per-job figures.
	Aged, AgedIters int
	GPUs            int // GPU devices in each sample (0: a CPU job)
	UID             int // uid the credentials are made by (this process's) and the job table lists
	User            string
	CoordinatorUID  int // the credential is restricted to it
	IssueWorkers    int // concurrent munge commands
	// CoordTick is the coordinator's decision interval: it reads the job
	// table once per tick, so starts are sent a tick after a table.
	CoordTick time.Duration
	// AgentPoll: the job table and snapshot are rewritten this often (the agent's poll interval).
	AgentPoll time.Duration
	// AcceptTimeout bounds the wait for one batch of starts to be accepted.
	AcceptTimeout time.Duration
	// LatencyDeadline: a probe sample not applied this long after its XADD counts as missed.
	LatencyDeadline time.Duration
	BaseJobID       uint64
	StreamMaxLen    int64 // XADD MAXLEN ~, as the wrapper (100000)
	Seed            uint64
	// RedisPID, when set, adds redis-server's CPU and RSS over the window.
	RedisPID int

	// Soak, when SoakEvery > 0: during the window, sample the processes'
	// and the run's Redis memory every SoakEvery, and judge growth after
	// WarmUp (see JudgeSoak).
	SoakEvery, WarmUp time.Duration

	Munger   auth.Munger
	Reporter Appender
	// Agent plays the agent's part (job table and snapshot) when Slurm is
	// nil; with Slurm, a real isched-agent publishes them from the fake
	// Slurm's output and AgentProc observes it.
	Agent     Setter
	Slurm     Queue
	AgentProc func() (Proc, error)
	// AgentHeap, when set, measures the real agent's live heap in a soak
	// (HTTPObserver.LiveHeap on its -pprof-listen address).
	AgentHeap func(context.Context) (int64, error)
	Admin     Admin
	Observer  Observer
	Log       *slog.Logger
}

// Queue is the fake Slurm's job list, and what it counted (FakeSlurm).
type Queue interface {
	SetJobs(rows []report.Job) error
	Calls() (map[string]int64, error)
}

func (c *Config) defaults() error {
	if c.Jobs <= 0 {
		return errors.New("bench: Jobs must be positive")
	}
	if !stream.ValidName(c.Cluster) {
		return fmt.Errorf("bench: cluster name %q", c.Cluster)
	}
	if c.Munger == nil || c.Reporter == nil || c.Admin == nil || c.Observer == nil {
		return errors.New("bench: Munger, Reporter, Admin and Observer are required")
	}
	if (c.Agent == nil) == (c.Slurm == nil) || (c.Slurm != nil && c.AgentProc == nil) {
		return errors.New("bench: either Agent (simulated agent) or Slurm and AgentProc (a real agent)")
	}
	def := func(d *time.Duration, v time.Duration) {
		if *d <= 0 {
			*d = v
		}
	}
	def(&c.Duration, time.Minute)
	def(&c.Settle, 10*time.Second)
	def(&c.Every, 5*time.Second)
	def(&c.CoordTick, 2*time.Second)
	def(&c.AgentPoll, 5*time.Second)
	def(&c.AcceptTimeout, 3*time.Minute)
	def(&c.LatencyDeadline, 60*time.Second)
	if c.Iters <= 0 {
		c.Iters = 5
	}
	if c.AgedIters <= 0 {
		c.AgedIters = 400
	}
	if c.IssueWorkers <= 0 {
		c.IssueWorkers = 4
	}
	if c.BaseJobID == 0 {
		c.BaseJobID = 10_000_000
	}
	if c.StreamMaxLen <= 0 {
		c.StreamMaxLen = 100_000
	}
	if c.User == "" {
		c.User = "bench"
	}
	if c.Log == nil {
		c.Log = slog.Default()
	}
	c.Probes = min(c.Probes, c.Jobs)
	return nil
}

// sim is one simulated wrapper.
type sim struct {
	job     report.JobRef
	sess    auth.Session
	cred    string
	seq     uint64
	step    int64
	iters   int
	aged    bool
	probe   chan probeSample // nil unless a probe
	startAt time.Time
}

type probeSample struct {
	step int64
	sent time.Time
}

// Bench is one prepared run. Create it with New, then Run, then Cleanup.
type Bench struct {
	cfg  Config
	keys stream.Keys
	sims []*sim
	rng  *rand.Rand

	mu     sync.Mutex
	window []report.Job // the job table being published

	sent      atomic.Int64 // reports appended (all kinds)
	sendErrs  atomic.Int64
	measuring atomic.Bool
	winSent   atomic.Int64 // appended during the window

	lat  *latencies
	goAt time.Time // when sampling began (written before the go signal closes)
}

// New prepares the sessions of a run (keys and ids; no credential yet).
func New(cfg Config) (*Bench, error) {
	if err := cfg.defaults(); err != nil {
		return nil, err
	}
	b := &Bench{cfg: cfg, keys: stream.Keys{Cluster: cfg.Cluster}, rng: rand.New(rand.NewPCG(cfg.Seed, 0x15c4ed)), lat: &latencies{}}
	total := cfg.Jobs + cfg.Aged
	for i := range total {
		id := cfg.BaseJobID + uint64(i)
		sess, err := auth.NewSession()
		if err != nil {
			return nil, err
		}
		s := &sim{sess: sess, iters: cfg.Iters, job: report.JobRef{Cluster: cfg.Cluster, JobID: id,
			Lineage: cfg.Cluster + "-" + strconv.FormatUint(id, 10), User: cfg.User, UID: cfg.UID,
			Partition: "gpu", Node: "gpu" + strconv.Itoa(1+i%2), NRanks: 1}}
		if cfg.GPUs == 0 {
			s.job.Partition, s.job.Node = "cpu", "cpu"+strconv.Itoa(1+i%2)
		}
		if i < cfg.Aged { // in the first batch: the longest time to age
			s.aged, s.iters = true, cfg.AgedIters
		}
		b.sims = append(b.sims, s)
	}
	// probes: spread over the plain jobs
	plain := b.sims[cfg.Aged:]
	for _, k := range b.rng.Perm(len(plain))[:cfg.Probes] {
		plain[k].probe = make(chan probeSample, 64)
	}
	return b, nil
}

// Run starts the simulated wrappers batch by batch, lets them settle,
// measures for Duration and returns the figures. The simulated wrappers stop
// when Run returns; the coordinator is left running (stop it, then Cleanup).
func (b *Bench) Run(ctx context.Context) (*Result, error) {
	cfg := b.cfg
	r := &runner{Bench: b, goSignal: make(chan struct{}),
		res: &Result{Jobs: cfg.Jobs, Aged: cfg.Aged, Every: cfg.Every, Iters: cfg.Iters, Window: cfg.Duration}}
	r.runCtx, r.stop = context.WithCancel(ctx)
	defer r.probes.Wait()
	defer r.closeProbes()

	if err := r.startAgentAndProbes(ctx); err != nil {
		return nil, err
	}
	if err := r.ramp(ctx); err != nil {
		return nil, err
	}
	b.goAt = time.Now()
	close(r.goSignal)
	cfg.Log.Info("sampling", "sessions", len(b.sims), "every", cfg.Every, "settle", cfg.Settle)
	if err := sleep(ctx, cfg.Settle); err != nil {
		return nil, err
	}
	if err := r.measure(ctx); err != nil {
		return nil, err
	}
	if err := r.drain(ctx); err != nil {
		return nil, err
	}
	return r.finish(ctx)
}

// runner is one Run in progress: the simulated wrappers' context and the
// goroutines that must end before the probe channels close.
type runner struct {
	*Bench
	res      *Result
	runCtx   context.Context // the publisher's and the simulated wrappers'
	stop     context.CancelFunc
	wg       sync.WaitGroup // the publisher and the simulated wrappers
	probes   sync.WaitGroup // the probe watchers
	once     sync.Once
	goSignal chan struct{} // closed when every session is accepted: samples begin
}

// closeProbes ends the probe watchers once nothing can send to them any
// more; each finishes the samples it still waits for first.
func (r *runner) closeProbes() {
	r.once.Do(func() {
		r.stop()
		r.wg.Wait()
		for _, s := range r.sims {
			if s.probe != nil {
				close(s.probe)
			}
		}
	})
}

// startAgentAndProbes publishes the agent's part (snapshot and job table;
// with a real agent, from the fake Slurm's queue, empty so far), rewrites it
// every AgentPoll when the agent is simulated, and starts the probe watchers.
func (r *runner) startAgentAndProbes(ctx context.Context) error {
	if err := r.publish(ctx); err != nil {
		return fmt.Errorf("publish job table: %w", err)
	}
	if r.cfg.Slurm == nil {
		r.wg.Add(1)
		go func() {
			defer r.wg.Done()
			r.publishEvery(r.runCtx, r.cfg.AgentPoll)
		}()
	}
	for _, s := range r.sims {
		if s.probe != nil {
			r.probes.Add(1)
			go func() { defer r.probes.Done(); r.watchProbe(ctx, s) }()
		}
	}
	return nil
}

// publishEvery rewrites the snapshot and job table every period until ctx ends.
func (b *Bench) publishEvery(ctx context.Context, period time.Duration) {
	t := time.NewTicker(period)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			if err := b.publish(ctx); err != nil && ctx.Err() == nil {
				b.cfg.Log.Warn("job table not published", "err", err)
			}
		}
	}
}

// ramp sends starts only, one job-table-sized batch at a time (a burst of
// starts is not the steady state being measured); samples begin together
// once every session is accepted (goSignal).
func (r *runner) ramp(ctx context.Context) error {
	cfg, log := r.cfg, r.cfg.Log
	capacity, need, err := tableCapacity(cfg.Cluster, r.rows(r.sims), time.Now())
	if err != nil {
		return err
	}
	r.res.TableCapacity, r.res.TableBytesNeeded = capacity, need
	log.Info("job table", "sessions", len(r.sims), "fit_in_one_envelope", capacity, "bytes_for_all", need, "max_bytes", report.MaxTablePayload)

	rampStart := time.Now()
	for next := 0; next < len(r.sims); {
		n, _, err := tableCapacity(cfg.Cluster, r.rows(r.sims[next:]), time.Now())
		if err != nil {
			return err
		}
		if n == 0 {
			return errors.New("bench: not even one job fits a job table")
		}
		batch := r.sims[next:min(next+n, len(r.sims))]
		if err := r.startBatch(ctx, r.sims[:next+len(batch)], batch); err != nil {
			return err
		}
		next += len(batch)
		log.Info("batch accepted", "started", next, "of", len(r.sims), "elapsed", time.Since(rampStart).Round(time.Millisecond))
	}
	r.res.Ramp = time.Since(rampStart)
	return nil
}

// startBatch publishes a job table with the batch (a real agent lists
// started, every job started so far), sends the batch's start reports a
// coordinator tick later, starts its simulated wrappers and waits until the
// coordinator accepted every start.
func (r *runner) startBatch(ctx context.Context, started, batch []*sim) error {
	r.setWindow(batch)
	if r.cfg.Slurm != nil {
		r.setWindow(started)
	}
	published := time.Now()
	if err := r.publish(ctx); err != nil {
		return fmt.Errorf("publish job table: %w", err)
	}
	if r.cfg.Slurm != nil {
		var err error
		if published, err = r.awaitAgentTable(ctx, published); err != nil {
			return err
		}
	}
	t0 := time.Now()
	if err := r.issue(ctx, batch); err != nil {
		return err
	}
	r.res.CredIssue += time.Since(t0)
	// the coordinator reads the table at its next tick
	if err := sleep(ctx, time.Until(published.Add(r.cfg.CoordTick+300*time.Millisecond))); err != nil {
		return err
	}
	for _, s := range batch {
		r.wg.Add(1)
		go func() { defer r.wg.Done(); r.simulate(r.runCtx, s, r.goSignal) }()
	}
	return r.awaitStarts(ctx, batch)
}

// figures is what the measured window is the difference of.
type figures struct {
	metrics Metrics
	coord   Proc
	gen     time.Duration // this process's CPU
	redis   Proc
	agent   Proc
	calls   map[string]int64 // Slurm commands run so far
}

func (b *Bench) figures(ctx context.Context) (figures, error) {
	var f figures
	var err error
	if f.metrics, err = b.cfg.Observer.Metrics(ctx); err != nil {
		return f, fmt.Errorf("coordinator metrics: %w", err)
	}
	if f.coord, err = b.cfg.Observer.Proc(); err != nil {
		return f, err
	}
	f.gen = selfCPU()
	f.redis, _ = b.redisProc()
	f.agent, f.calls, err = b.agentFigures()
	return f, err
}

// measure runs the measured window (a soak samples memory through it),
// then stops the simulated wrappers and records the window's figures.
func (r *runner) measure(ctx context.Context) error {
	f0, err := r.figures(ctx)
	if err != nil {
		return err
	}
	w0 := time.Now()
	r.measuring.Store(true)
	r.cfg.Log.Info("measuring", "for", r.cfg.Duration)
	if r.cfg.SoakEvery > 0 {
		if r.res.Soak, err = r.soak(ctx, w0); err != nil {
			return err
		}
	} else if err := sleep(ctx, r.cfg.Duration); err != nil {
		return err
	}
	r.measuring.Store(false)
	f1, err := r.figures(ctx)
	if err != nil {
		return err
	}
	win := time.Since(w0)
	sentAtEnd := r.sent.Load()
	r.closeProbes() // the wrappers stop; the coordinator works off what is queued
	r.record(f0, f1, win, sentAtEnd)
	return nil
}

// record fills the result's window figures: f1 minus f0 over win.
func (r *runner) record(f0, f1 figures, win time.Duration, sentAtEnd int64) {
	res, m0, m1 := r.res, f0.metrics, f1.metrics
	perSec := func(d time.Duration) float64 { return d.Seconds() / win.Seconds() }
	if r.cfg.Slurm != nil {
		res.AgentReal = true
		res.AgentRSS, res.AgentHWM = f1.agent.RSS, f1.agent.HWM
		res.AgentCPU = perSec(f1.agent.CPU - f0.agent.CPU)
		res.SlurmCalls = map[string]int64{}
		var total int64
		for k, v := range f1.calls {
			if d := v - f0.calls[k]; d > 0 {
				res.SlurmCalls[k] = d
				total += d
			}
		}
		res.SlurmPerMin = float64(total) / win.Minutes()
	}
	res.Window = win
	res.Offered = float64(r.winSent.Load()) / win.Seconds()
	res.Accepted = (m1.Reports["accepted"] - m0.Reports["accepted"]) / win.Seconds()
	res.RejectedInWindow = m1.Reports["rejected"] - m0.Reports["rejected"]
	res.Rejected = m1.Rejected
	res.Decisions = m1.Decisions
	if dc := m1.IngestCount - m0.IngestCount; dc > 0 {
		res.IngestMeanMS = 1000 * (m1.IngestSum - m0.IngestSum) / dc
	}
	if dc := m1.WriteCount - m0.WriteCount; dc > 0 {
		res.WriteMeanMS = 1000 * (m1.WriteSum - m0.WriteSum) / dc
	}
	res.Backlog = float64(sentAtEnd) - (m1.Reports["accepted"] + m1.Reports["rejected"])
	res.CoordRSS, res.CoordHWM = f1.coord.RSS, f1.coord.HWM
	res.CoordCPU = perSec(f1.coord.CPU - f0.coord.CPU)
	res.GenCPU = perSec(f1.gen - f0.gen)
	res.RedisCPU = perSec(f1.redis.CPU - f0.redis.CPU)
	res.RedisRSS = f1.redis.RSS
	res.SendErrors = r.sendErrs.Load()
}

// drain lets the probes finish and the coordinator catch up with what was
// sent; Result.Drain is how long that took (-1: it did not).
func (r *runner) drain(ctx context.Context) error {
	cfg := r.cfg
	cfg.Log.Info("window over; waiting for outstanding probe samples and the backlog")
	drainStart := time.Now()
	var lastJudged float64
	still := 0 // metrics reads in a row with nothing new judged and no lag
	for {
		m, err := cfg.Observer.Metrics(ctx)
		judged := m.Reports["accepted"] + m.Reports["rejected"]
		if err == nil && judged >= float64(r.sent.Load()) {
			r.res.Drain = time.Since(drainStart)
			return nil
		}
		// reports trimmed unread never arrive: stop once the coordinator
		// has read everything there is (its lag, read each tick, holds
		// only the lost reports)
		if err == nil && judged == lastJudged && m.Lag <= m.Trimmed && time.Since(drainStart) > 2*cfg.CoordTick {
			if still++; still >= 2*int(cfg.CoordTick/(500*time.Millisecond)) {
				r.res.Drain = -1
				return nil
			}
		} else {
			still = 0
		}
		lastJudged = judged
		if time.Since(drainStart) > cfg.LatencyDeadline+30*time.Second {
			r.res.Drain = -1
			return nil
		}
		if err := sleep(ctx, 500*time.Millisecond); err != nil {
			return err
		}
	}
}

// finish records what is known once the backlog is drained: what was
// trimmed or never judged, the soak's verdicts, the probes' latencies and
// the Redis memory of the run.
func (r *runner) finish(ctx context.Context) (*Result, error) {
	res, cfg := r.res, r.cfg
	if m, err := cfg.Observer.Metrics(ctx); err == nil {
		res.Trimmed = m.Trimmed
		res.Unjudged = max(float64(r.sent.Load())-(m.Reports["accepted"]+m.Reports["rejected"]), 0)
	}
	if len(res.Soak) > 0 {
		res.SoakVerdicts = JudgeSoak(res.Soak, cfg.WarmUp)
	}
	r.probes.Wait()
	res.Latency = r.lat.summary()
	if p, err := cfg.Observer.Proc(); err == nil {
		res.CoordHWM = p.HWM
	}
	mem, err := r.memory(ctx)
	if err != nil {
		return nil, err
	}
	res.Memory = mem
	return res, nil
}

// awaitAgentTable waits for the real agent to publish a job table taken
// after the queue changed at since, and returns when it did.
func (b *Bench) awaitAgentTable(ctx context.Context, since time.Time) (time.Time, error) {
	deadline := time.Now().Add(3*b.cfg.AgentPoll + 30*time.Second)
	for {
		raw, err := b.cfg.Admin.Get(ctx, b.keys.Jobs())
		if err != nil && !errors.Is(err, stream.ErrNotFound) {
			return time.Time{}, err
		}
		if err == nil {
			e, err := report.DecodeTable(raw)
			if err != nil {
				return time.Time{}, fmt.Errorf("bench: the agent's job table: %w", err)
			}
			if e.Jobs != nil && e.Jobs.TakenMS >= since.UnixMilli() {
				return time.Now(), nil
			}
		}
		if time.Now().After(deadline) {
			return time.Time{}, errors.New("bench: the agent did not publish a job table from the new queue in time (see its log)")
		}
		if err := sleep(ctx, 200*time.Millisecond); err != nil {
			return time.Time{}, err
		}
	}
}

// agentFigures reads the real agent's process and the Slurm commands run
// so far (zero values with a simulated agent).
func (b *Bench) agentFigures() (Proc, map[string]int64, error) {
	if b.cfg.Slurm == nil {
		return Proc{}, nil, nil
	}
	p, err := b.cfg.AgentProc()
	if err != nil {
		return Proc{}, nil, fmt.Errorf("bench: agent process: %w", err)
	}
	calls, err := b.cfg.Slurm.Calls()
	if err != nil {
		return Proc{}, nil, fmt.Errorf("bench: slurm calls: %w", err)
	}
	return p, calls, nil
}

// setWindow makes batch the job table the agent publishes.
func (b *Bench) setWindow(batch []*sim) {
	rows := b.rows(batch)
	b.mu.Lock()
	b.window = rows
	b.mu.Unlock()
}

// issue makes the batch's MUNGE credentials, IssueWorkers at a time.
func (b *Bench) issue(ctx context.Context, batch []*sim) error {
	work := make(chan *sim)
	errs := make(chan error, b.cfg.IssueWorkers)
	var wg sync.WaitGroup
	for range b.cfg.IssueWorkers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for s := range work {
				cred, err := auth.Issue(ctx, b.cfg.Munger, s.sess, s.job.Cluster, s.job.JobID, s.job.Lineage,
					b.cfg.CoordinatorUID, 10*time.Minute, time.Now())
				if err != nil {
					select {
					case errs <- err:
					default:
					}
					continue
				}
				s.cred = cred
			}
		}()
	}
	for _, s := range batch {
		work <- s
	}
	close(work)
	wg.Wait()
	select {
	case err := <-errs:
		return fmt.Errorf("bench: munge credential: %w", err)
	default:
		return nil
	}
}

// awaitStarts waits until the coordinator has a status for every job of the
// batch: their start reports were accepted (credential opened, owner confirmed).
func (b *Bench) awaitStarts(ctx context.Context, batch []*sim) error {
	deadline := time.Now().Add(b.cfg.AcceptTimeout)
	left := batch
	for {
		var still []*sim
		for _, s := range left {
			if _, err := b.cfg.Admin.Get(ctx, b.keys.JobStatus(s.job.Lineage)); err != nil {
				if !errors.Is(err, stream.ErrNotFound) {
					return err
				}
				still = append(still, s)
			}
		}
		if len(still) == 0 {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("bench: the coordinator accepted %d of %d start reports of a batch within %s (rejections: see its metrics and log)",
				len(batch)-len(still), len(batch), b.cfg.AcceptTimeout)
		}
		left = still
		if err := sleep(ctx, 250*time.Millisecond); err != nil {
			return err
		}
	}
}

func (b *Bench) redisProc() (Proc, error) {
	if b.cfg.RedisPID <= 0 {
		return Proc{}, errors.New("no redis pid")
	}
	return ReadProc(b.cfg.RedisPID)
}

func sleep(ctx context.Context, d time.Duration) error { return retry.Sleep(ctx, d) }
