package sim

import (
	"math"

	"github.com/isched/isched/internal/estimate"
	"github.com/isched/isched/internal/lifecycle"
	"github.com/isched/isched/internal/policy"
	"github.com/isched/isched/internal/report"
)

// Job is one job of a trace.
type Job struct {
	ID   int
	User string
	// Account is the Slurm account (its GrpTRES limit and fair-share);
	// "": the user.
	Account string
	Submit  float64 // seconds from the trace's start
	Nodes   int     // nodes, each with CPUs and GPUs
	CPUs    int     // per node
	GPUs    int     // per node
	MemMiB  int64   // per node; 0: unknown
	// Run is how long the job ran (seconds) on Partition, all of its work.
	Run float64
	// Limit is the time limit asked (seconds); 0: plan.TimeLimit of Run.
	Limit float64
	// Partition asked; "" or unknown: the first partition that fits.
	Partition string
	// Censored: still running when the trace ended; Run is cut there.
	Censored bool
	recorded float64 // the wait a log recorded (ReadCurie)
}

// Job states.
const (
	stWaiting = iota // not submitted yet, or resubmitted later by its user
	stPending
	stRunning
	stDone
)

// jobState is a job as the simulation runs it.
type jobState struct {
	j       *Job
	managed bool    // isched plans and moves it
	isched  bool    // adopted: managed in every variant that runs isched
	asked   int     // the partition its user asked for
	active  bool    // in sim.active
	acct    int     // the job's account (sim.accts)
	nice    float64 // rule 7's nice value, in priority units (multifactor only)
	predErr float64 // isched's pre-run estimate of the run's work over the truth (1: exact)

	iters   int64   // steps of the whole run
	work    float64 // seconds per step at speed 1
	ckptK   int64   // a periodic checkpoint every ckptK steps
	state   int
	parts   []int   // partitions it pends on
	gpus    int     // per node, current request
	cpus    int     // per node, current request
	limit   float64 // current time limit, seconds (0: partition maximum)
	order   float64 // queue order: when it became eligible
	pendSin float64 // pending since (for rule 3)

	alloc   []int // nodes of the running attempt
	pi      int   // partition of the running attempt
	start   float64
	startup float64 // seconds before its first step (restart, loading)
	// limitEnd is when the attempt's time limit ends it (+Inf: never);
	// Extend moves it.
	limitEnd float64
	step0    int64 // step the attempt resumed from
	iterSec  float64
	gen      int // attempt generation: events of older attempts are stale

	lastCkpt    int64
	lastCkptAt  float64 // -1: none
	ckptReqStep int64
	ckptsAt     int // checkpoints when the attempt began
	ckpts       int

	plan       *report.Plan
	est        estimate.IterEstimator
	ckptT      estimate.CkptTimer
	estOn      string          // node type the estimator measured
	phase      lifecycle.State // changed only by sim.to (lifecycle.Next), as the coordinator changes it
	phaseSince float64
	lastMove   float64 // -1: never
	moves      int
	conts      int
	pendingDec policy.Decision
	// rule 8: the preemptions of the run, and while it yields (requeued
	// held) the job it yields to (its index + 1) and since when
	preempts   int
	yieldTo    int
	yieldSince float64
	// rule 9: an elastic run's resizes, and its measured steps per second
	// at each size it ran at (the coordinator's learned rates)
	resizes int
	rates   map[int]float64
	elastic bool // a run rule 9 makes elastic (in every variant: elasticPlan)
	estSize int  // the size the estimator measured

	// rule 10: the slot of the run's twin (its index + 1; 0: none), and
	// for a twin's slot its run's (index + 1); when WantTwin may be asked
	// again; twins submitted and handovers done
	twin, twinOf int
	twinCheck    float64
	twins        int
	handovers    int

	firstStart float64 // -1: not started
	end        float64
	lost       int64
	attempts   int
	cost       float64
	touched    bool // isched moved, checkpointed or continued it
	onOther    bool // ran anywhere but the partition its user asked for
	resubmits  int  // by the user, after a time limit
	path       []Hop
}

// Hop is the start of one attempt of a job: when, and on which partition.
type Hop struct {
	At        float64 `json:"at"` // seconds from the trace's start
	Partition string  `json:"partition"`
	GPUs      int     `json:"gpus,omitempty"` // its GPUs, all nodes together
}

// stepAt is the steps done by t in the running attempt.
func (s *jobState) stepAt(t float64) int64 {
	if s.state != stRunning {
		return s.lastCkpt
	}
	d := t - s.start - s.startup
	if d <= 0 {
		return s.step0
	}
	return min(s.iters, s.step0+int64(math.Floor(d/s.iterSec)))
}

// periodicCkpt is the last periodic checkpoint by t of the running
// attempt (never below the one it resumed from).
func (s *jobState) periodicCkpt(t float64) int64 {
	st := s.stepAt(t)
	return max(s.lastCkpt, st/s.ckptK*s.ckptK)
}

// periodicBetween counts the periodic checkpoints of steps in (a, b].
func (s *jobState) periodicBetween(a, b int64) int {
	if b <= a {
		return 0
	}
	return int(b/s.ckptK - a/s.ckptK)
}

// timeOfStep is when the running attempt reaches step n.
func (s *jobState) timeOfStep(n int64) float64 {
	return s.start + s.startup + float64(n-s.step0)*s.iterSec
}

// planned is whether isched plans the job (isched submit -- CMD): a
// training run on one device, one node and one GPU.
func (j *Job) planned() bool { return j.Nodes == 1 && j.GPUs == 1 }
