package sim

import (
	"container/heap"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"time"

	"github.com/isched/isched/internal/lifecycle"
	"github.com/isched/isched/internal/plan"
	"github.com/isched/isched/internal/policy"
)

// Variant is one way of running the cluster.
type Variant struct {
	Name string
	// Isched: adopted jobs are submitted through isched's planner
	// (Policy, default --policy immediate) and moved by its policy.
	Isched bool
	// Policy is the submission policy (plan.PolicyImmediate when empty;
	// plan.PolicyAuto is the CLI's default: the recommended plan).
	Policy string
	// Dev: the dev partitions are open to isched in the dev windows.
	Dev bool
	// NoContinue: continuations are off (coordinator max_continuations 0).
	NoContinue bool
	// Trim: rule 6 lowers running jobs' time limits to their predicted
	// end at worst (coordinator trim_time_limits).
	Trim bool
	// Order: rule 7 exchanges the priorities of isched's pending jobs,
	// shortest predicted run left first (coordinator order_by_remaining;
	// with the multifactor scheduler only: the EASY model has no
	// priorities).
	Order bool
	// Preempt: rule 8 checkpoints a long run of isched's and requeues it
	// held so that a much shorter one waiting behind it starts in its
	// place (coordinator preempt_for_short).
	Preempt bool
	// MultiPart: every job lists all the regular partitions of its kind
	// whose nodes fit it (sbatch -p gpu,gpu-old), the one asked first, and
	// starts on whichever can start it first (Slurm alone otherwise).
	MultiPart bool
	// Elastic: rule 9 grows isched's one-GPU runs (submitted as
	// --gpus 1-ElasticMax) onto idle GPUs and shrinks them back when jobs
	// wait (coordinator elastic).
	Elastic bool
	// KeepPlace: rule 10 keeps a twin pending on the ideal partition of
	// a run that runs elsewhere; when the scheduler starts it, the run
	// checkpoints and resumes on the twin's nodes (coordinator
	// keep_place).
	KeepPlace bool
}

// Variants are the baselines of docs/evaluation.md, Slurm alone first.
var Variants = []Variant{
	{Name: "slurm"},
	{Name: "isched", Isched: true},
	{Name: "isched+dev", Isched: true, Dev: true},
	{Name: "isched-nocont", Isched: true, NoContinue: true},
	{Name: "isched-auto", Isched: true, Policy: plan.PolicyAuto},
	{Name: "slurm-multi", MultiPart: true},
	{Name: "isched+trim", Isched: true, Trim: true},
	{Name: "isched+order", Isched: true, Order: true},
	{Name: "isched+preempt", Isched: true, Preempt: true},
	{Name: "isched+levers", Isched: true, Order: true, Trim: true, Preempt: true},
	// rules 7 and 8 without 6: the predicted limits lose on the busy
	// traces (docs/evaluation.md), and trim_time_limits is off by default
	{Name: "isched+order+preempt", Isched: true, Order: true, Preempt: true},
	{Name: "isched+elastic", Isched: true, Elastic: true},
	// rules 7, 8 and 9: every lever that pays on Philly
	{Name: "isched+order+preempt+elastic", Isched: true, Order: true, Preempt: true, Elastic: true},
	// the same with lever e: submitted as `isched submit` does by default
	// (--policy auto: start elsewhere only when it pays)
	{Name: "isched-auto+order+preempt+elastic", Isched: true, Policy: plan.PolicyAuto, Order: true, Preempt: true, Elastic: true},
	// rule 10, alone and with the levers that pay on Philly
	{Name: "isched+keep", Isched: true, KeepPlace: true},
	{Name: "isched+order+preempt+keep", Isched: true, Order: true, Preempt: true, KeepPlace: true},
	{Name: "isched+order+preempt+elastic+keep", Isched: true, Order: true, Preempt: true, Elastic: true, KeepPlace: true},
}

// DefaultElasticMax is the largest size of the replay's elastic runs
// (GPUs, capped at a node's): isched submit --gpus 1-4.
const DefaultElasticMax = 4

// Config is one replay.
type Config struct {
	Site          *plan.Site
	DevPartitions []string        // partitions that are dev partitions
	DevWindows    []policy.Window // when they are free (after hours); empty: always
	Variant       Variant
	Seed          uint64
	// Adoption is the fraction of the jobs isched could plan (one node,
	// one GPU: a training run on one device) that are submitted through it; the others are the
	// untouched jobs whose wait shows harm.
	Adoption float64
	// AnyShape: adopted jobs of every shape run under isched, not only
	// one-GPU ones. A job of another shape keeps its user's own request
	// (isched submit job.sbatch: the script's partition, nodes, CPUs and
	// time limit) and is never moved: only the coordinator's rules on a
	// running job act on it (continuation at the limit, rule 6's trim).
	// The time-limit replay of a Slurm site's own history (Curie) uses it.
	AnyShape bool
	// PredictErr is the sigma of the log-normal error of isched's
	// estimate of a run before it starts (0: exact): the planner and
	// rule 7 see the run's work times the error, the run's measured
	// iterations the truth.
	PredictErr float64
	Tick       float64 // the coordinator's decision interval, seconds
	Poll       float64 // the agent's poll interval: age of the state plans see
	CkptEvery  float64 // seconds of run (on the asked partition) between periodic checkpoints
	CkptDur    float64 // seconds a requested checkpoint takes
	UserDelay  float64 // seconds before a user resubmits a run cut by its time limit
	Depth      int     // jobs a scheduling pass tests (Slurm's queue depth)
	// StepSeconds is how long one step of a trace job takes on the
	// partition it asked for (0: 1 s): its run is Run/StepSeconds steps.
	StepSeconds float64
	// Start and Restart are the seconds before an attempt's first step:
	// the first attempt's (the script's start-up), and a later one's
	// (requeue, start-up and checkpoint loading).
	Start, Restart float64
	// Policy is the coordinator's policy configuration (a site's
	// coordinator.json: coordconfig.LoadPolicy); nil: the defaults with
	// each partition's speed from the catalogue.
	Policy *policy.Config
	// Sched is Slurm's scheduler: the multifactor priority and backfill
	// (SlurmSched), or the older model (the zero value).
	Sched Sched
	// Scaling is the replayed runs' true throughput kept per doubling of
	// GPUs at a constant global batch (0: policy.DefaultScalingEfficiency,
	// the policy's own prior); the policy sees it only through the
	// runs' measured step times.
	Scaling float64
	// ElasticMax is the elastic runs' largest size (isched submit --gpus
	// 1-ElasticMax; 0: DefaultElasticMax), capped at a node's GPUs.
	ElasticMax int
	// Progress, when set, is called with the jobs done so far.
	Progress func(done, total int)
}

// DefaultConfig is a replay of site with the defaults of docs/evaluation.md.
func DefaultConfig(site *plan.Site) Config {
	return Config{Site: site, Variant: Variants[0], Adoption: 0.5, Tick: 30, Poll: 30, CkptEvery: 1800, CkptDur: 30, UserDelay: 1800, Depth: 500,
		StepSeconds: 1, Restart: secs(policy.DefaultMoveCost)}
}

// LabConfig is a replay of the lab cluster (scripts/dev-cluster) as the
// lab replay runs it (internal/e2e TestLabReplay, docs/evaluation.md
// "Validation against the lab"): every one-GPU job through isched, the
// coordinator's 1 s tick and the agent's 1 s poll, steps of 0.25 s on the
// gpu partition, a periodic checkpoint every 30 s of run, and the lab's
// measured delays (a requested checkpoint lands in about 1 s, a first
// start takes 2 s, a restart 5 s). pol is the coordinator's policy.
func LabConfig(site *plan.Site, pol *policy.Config) Config {
	cfg := DefaultConfig(site)
	cfg.Variant, cfg.Adoption, cfg.Policy = Variants[1], 1, pol
	cfg.DevPartitions = pol.DevPartitions
	cfg.Tick, cfg.Poll, cfg.StepSeconds, cfg.CkptEvery = 1, 1, 0.25, 30
	cfg.CkptDur, cfg.Start, cfg.Restart = 1, 2, 5
	return cfg
}

// Epoch is the wall-clock time of a trace's second 0 (a Monday, midnight
// UTC): dev windows are times of day.
var Epoch = time.Date(2026, 1, 5, 0, 0, 0, 0, time.UTC)

// Event kinds.
const (
	evArrive   = iota // submission (or a user's resubmission)
	evEnd             // the attempt's last step
	evLimit           // the attempt's time limit
	evCkpt            // a requested checkpoint lands
	evTick            // the coordinator's decision round
	evBackfill        // sched/backfill's pass (Sched.Backfill)
)

type event struct {
	t    float64
	seq  uint64
	kind uint8
	job  int32
	gen  int32
}

type eventHeap []event

func (h eventHeap) Len() int { return len(h) }
func (h eventHeap) Less(i, j int) bool {
	if h[i].t != h[j].t {
		return h[i].t < h[j].t
	}
	return h[i].seq < h[j].seq
}
func (h eventHeap) Swap(i, j int) { h[i], h[j] = h[j], h[i] }
func (h *eventHeap) Push(x any)   { *h = append(*h, x.(event)) }
func (h *eventHeap) Pop() any {
	old := *h
	e := old[len(old)-1]
	*h = old[:len(old)-1]
	return e
}

// sim is one replay in progress.
type sim struct {
	cfg      Config
	cl       *cluster
	jobs     []jobState
	now      float64
	events   eventHeap
	seq      uint64
	pending  []int
	dirty    bool
	rng      *rand.Rand
	pol      policy.Config
	planSite *plan.Site // what the planner sees: no dev partition unless Variant.Dev
	pc       []partCount
	use      map[userPart]usage
	acct     accounting
	csAt     float64
	cs       plan.ClusterState
	done     int
	managedN int
	events0  int64 // events handled
	live     int   // events other than ticks in the heap
	rejected int   // jobs no partition of the site can hold
	// pver counts allocation changes per partition; resvCache keeps EASY
	// reservations while their partition's count stands.
	pver      []uint64
	resvCache map[resvKey]reservation
	preempt   int   // running jobs on preemptible partitions
	active    []int // isched jobs submitted and not done
	// refused is the first lifecycle transition the table refused: a
	// protocol bug, which fails the replay (Run's error).
	refused error
	// accts are the Slurm accounts (limits, fair-share); prio is each
	// job's priority in the pass that sorted it.
	accts *accounts
	keys  []prioKey
	// quotas are the accounts' GPU quotas as the snapshot publishes them.
	quotas []quotaRow
	// bfDirty: something changed since the last backfill pass; bfQueued:
	// the next one is in the heap.
	bfDirty, bfQueued bool
	// orderedAt is when rule 7 last exchanged priorities (every
	// PriorityCalcPeriod, when Slurm recomputes them).
	orderedAt float64
	// yielding counts the runs requeued held by rule 8: the rounds go on
	// until each is released.
	yielding int
	// nJobs is the trace's jobs, the first of s.jobs; twins' slots follow
	// (rule 10). twinIdle is the GPU-seconds twins held without running
	// their run: from the twin's start to the handover, or its cancel.
	nJobs    int
	twinIdle float64
}

// to moves an isched job's lifecycle on ev, as the coordinator's to
// does; a refused transition leaves it as it was and fails the replay.
func (s *sim) to(js *jobState, ev lifecycle.Event) {
	next, err := lifecycle.Next(js.phase, ev)
	if err != nil {
		if s.refused == nil {
			s.refused = fmt.Errorf("sim: job %d at %.0f s: %w", js.j.ID, s.now, err)
		}
		return
	}
	if next != js.phase {
		js.phase, js.phaseSince = next, s.now
	}
}

// Run replays trace (sorted by submission) under cfg.
func Run(cfg Config, trace []Job) (*Result, error) {
	s, err := newSim(cfg, trace)
	if err != nil {
		return nil, err
	}
	s.loop()
	if s.refused != nil {
		return nil, s.refused
	}
	return s.result(), nil
}

func newSim(cfg Config, trace []Job) (*sim, error) {
	if cfg.Site == nil {
		return nil, fmt.Errorf("sim: no site")
	}
	if cfg.Tick <= 0 || cfg.Poll <= 0 || cfg.CkptEvery <= 0 || cfg.CkptDur <= 0 || cfg.Depth <= 0 {
		return nil, fmt.Errorf("sim: tick, poll, checkpoint period and duration and depth must be positive")
	}
	if cfg.StepSeconds < 0 || cfg.Start < 0 || cfg.Restart < 0 {
		return nil, fmt.Errorf("sim: step seconds, start and restart must not be negative")
	}
	cfg.StepSeconds = cfg.stepSeconds()
	dev := cfg.DevPartitions
	cl, err := newCluster(cfg.Site, dev)
	if err != nil {
		return nil, err
	}
	s := &sim{cfg: cfg, cl: cl, rng: rand.New(rand.NewPCG(cfg.Seed, 0x15c4ed)), use: map[userPart]usage{}, csAt: math.Inf(-1)}
	s.pc = make([]partCount, len(cl.parts))
	s.pver, s.resvCache = make([]uint64, len(cl.parts)), map[resvKey]reservation{}
	for pi := range cl.parts {
		s.pc[pi] = partCount{nodesIdle: len(cl.parts[pi].nodes), gpusIdle: cl.parts[pi].gpus, cpusIdle: cl.parts[pi].cpus}
	}
	s.accts = newAccounts(cfg.Sched, trace)
	s.quotas = quotaRows(s.accts, cfg.Sched)
	s.pol = s.policyConfig()
	s.planSite = cfg.PlannerSite()
	s.jobs = make([]jobState, 0, len(trace)*(1+btoi(cfg.Variant.KeepPlace)))
	for k := range trace {
		if _, err := s.askedPartition(&trace[k]); err != nil {
			s.rejected++ // as sbatch refuses a job no partition can hold
			continue
		}
		i := len(s.jobs)
		s.jobs = append(s.jobs, jobState{})
		if err := s.initJob(i, &trace[k]); err != nil {
			return nil, err
		}
		s.push(trace[k].Submit, evArrive, i, 0)
	}
	s.nJobs = len(s.jobs)
	if cfg.Variant.KeepPlace {
		s.addTwinSlots()
	}
	if len(trace) > 0 {
		s.acct.from, s.acct.to = trace[0].Submit, trace[len(trace)-1].Submit
	}
	if cfg.Variant.Isched && len(trace) > 0 {
		s.push(trace[0].Submit, evTick, -1, 0)
	}
	return s, nil
}

// policyConfig is the coordinator's policy configuration for the site:
// the defaults, speeds per partition from the catalogue (as a site
// configures them), and the dev partitions and windows for Variant.Dev.
func (s *sim) policyConfig() policy.Config {
	if s.cfg.Policy != nil {
		c := *s.cfg.Policy
		c.NoContinuations = c.NoContinuations || s.cfg.Variant.NoContinue
		c.TrimLimits = c.TrimLimits || s.cfg.Variant.Trim
		c.OrderByRemaining = c.OrderByRemaining || s.cfg.Variant.Order
		c.PreemptForShort = c.PreemptForShort || s.cfg.Variant.Preempt
		c.Elastic = c.Elastic || s.cfg.Variant.Elastic
		c.KeepPlace = c.KeepPlace || s.cfg.Variant.KeepPlace
		if !s.cfg.Variant.Dev {
			c.DevPartitions, c.DevWindows = nil, nil
		}
		return c
	}
	c := policy.Config{Speed: map[string]float64{}, DefaultCkpt: time.Duration(s.cfg.CkptDur * float64(time.Second)),
		NoContinuations: s.cfg.Variant.NoContinue, TrimLimits: s.cfg.Variant.Trim,
		OrderByRemaining: s.cfg.Variant.Order, PreemptForShort: s.cfg.Variant.Preempt, Elastic: s.cfg.Variant.Elastic,
		KeepPlace: s.cfg.Variant.KeepPlace, Location: time.UTC}
	for pi := range s.cl.parts {
		c.Speed[s.cl.parts[pi].name] = s.cl.partSpeed(pi)
	}
	if s.cfg.Variant.Dev {
		c.DevPartitions = s.cfg.DevPartitions
		c.DevWindows = s.cfg.DevWindows
	}
	return c
}

// PlannerSite is the site as isched's planner sees it in this replay:
// without its dev partitions unless the variant opens them (a site that
// does not open them to isched lists them nowhere).
func (c Config) PlannerSite() *plan.Site {
	if c.Variant.Dev || len(c.DevPartitions) == 0 {
		return c.Site
	}
	cp := *c.Site
	cp.Partitions = slices.DeleteFunc(slices.Clone(c.Site.Partitions), func(p plan.PartitionSpec) bool {
		return slices.Contains(c.DevPartitions, p.Name)
	})
	return &cp
}

// RunSpec is trace job j as isched plans it: its run time in steps of
// StepSeconds on the partition it asked for, whose node type's speed
// gives a step's work. ok is false when the site has no such partition.
func (c Config) RunSpec(j *Job) (r RunSpec, ok bool) {
	ps := c.Site.Partition(j.Partition)
	if ps == nil || len(ps.NodeTypes) == 0 {
		return r, false
	}
	nt := c.Site.NodeType(ps.NodeTypes[0])
	if nt == nil {
		return r, false
	}
	iters, work := stepsOf(j.Run, c.stepSeconds(), speedOf(c.Site, nt))
	return RunSpec{User: j.User, Total: iters, Left: iters, Work: work, MemMiB: j.MemMiB}, true
}

func (c Config) stepSeconds() float64 {
	if c.StepSeconds > 0 {
		return c.StepSeconds
	}
	return 1
}

// stepsOf is a run of run seconds as steps of step seconds on a device of
// the given speed: how many, and each one's work (seconds at speed 1).
func stepsOf(run, step, speed float64) (iters int64, work float64) {
	run = max(run, step)
	return int64(math.Ceil(run/step - 1e-9)), step * speed
}

func (s *sim) push(t float64, kind uint8, job, gen int) {
	s.seq++
	if kind != evTick && kind != evBackfill {
		s.live++
	}
	heap.Push(&s.events, event{t: t, seq: s.seq, kind: kind, job: int32(job), gen: int32(gen)})
}

// loop handles every event in time order.
func (s *sim) loop() { s.runUntil(math.Inf(1)) }

// runUntil handles the events up to time t in time order; the scheduler
// runs once all events of an instant are in, as slurmctld's does after a
// batch of changes.
func (s *sim) runUntil(t float64) {
	for {
		if s.dirty && (s.events.Len() == 0 || s.events[0].t > s.now) {
			s.schedule()
			continue // the pass may have added events at now
		}
		if s.events.Len() == 0 || s.events[0].t > t {
			return
		}
		e := heap.Pop(&s.events).(event)
		if e.kind != evTick && e.kind != evBackfill {
			s.live--
		}
		s.now = max(s.now, e.t)
		s.events0++
		s.handle(e)
	}
}

func (s *sim) handle(e event) {
	switch e.kind {
	case evArrive:
		s.arrive(int(e.job))
	case evEnd, evLimit:
		js := &s.jobs[e.job]
		if js.state != stRunning || js.gen != int(e.gen) {
			return
		}
		switch {
		case e.kind == evEnd:
			s.finish(int(e.job))
		case e.t >= js.limitEnd: // an older limit, before an Extend, is stale
			s.timeout(int(e.job))
		}
	case evCkpt:
		js := &s.jobs[e.job]
		if js.state == stRunning && js.gen == int(e.gen) {
			s.ckptLanded(int(e.job))
		}
	case evBackfill:
		s.bfQueued = false
		if s.dirty {
			s.schedule()
		}
		s.backfill()
	case evTick:
		if s.dirty {
			// slurmctld schedules on a job's end at once; the agent's
			// snapshot the coordinator decides on comes after that pass
			s.schedule()
		}
		s.tick()
		// nothing else left to happen: a job that can never start stays
		// pending rather than ticking for ever
		if s.done < s.nJobs && (s.live > 0 || s.dirty || s.yielding > 0) {
			s.push(s.now+s.cfg.Tick, evTick, -1, 0)
		}
	}
}

// at is the wall-clock time of simulated second t.
func at(t float64) time.Time { return Epoch.Add(time.Duration(t * float64(time.Second))) }

func btoi(b bool) int {
	if b {
		return 1
	}
	return 0
}

// secs is a duration in seconds.
func secs(d time.Duration) float64 { return d.Seconds() }
