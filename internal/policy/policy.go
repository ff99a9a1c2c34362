package policy

import (
	"fmt"
	"strings"
	"time"

	"github.com/isched/isched/internal/lifecycle"

	"github.com/isched/isched/internal/estimate"
	"github.com/isched/isched/internal/report"
)

// Kind is what a decision asks for.
type Kind string

// Decision kinds.
const (
	// None: nothing to do now (the reason says why not).
	None Kind = "none"
	// Checkpoint: ask the job for a checkpoint now (signal); Then says what
	// follows once it has landed: call AfterCheckpoint then.
	Checkpoint Kind = "checkpoint"
	// Requeue: requeue the running job onto Target with Gres and TimeLimit
	// (updated while it is pending); it resumes from its last checkpoint.
	Requeue Kind = "requeue"
	// MovePending: update a pending job's partition (Target), Gres and
	// TimeLimit.
	MovePending Kind = "move-pending"
	// Extend: raise a running job's time limit to TimeLimit.
	Extend Kind = "extend"
	// Shorten: lower a running job's time limit to TimeLimit (rule 6:
	// the limit from the prediction, for backfill).
	Shorten Kind = "shorten"
	// Reorder: set a pending job's nice value to Nice (rule 7, Order: its
	// place among isched's pending jobs).
	Reorder Kind = "reorder"
	// Release: release a job isched requeued held (rule 8, once the job
	// it yielded to has started).
	Release Kind = "release"
	// Resubmit: submit the ended job's batch script again, as its owner,
	// onto Target with Gres and TimeLimit (a new job id, the same
	// lineage): rule 5's continuation of a job slurmctld no longer holds.
	Resubmit Kind = "resubmit"
	// SubmitTwin: submit a twin of the running job, as its owner and of
	// its lineage, pending on Target with Gres, CPUs and TimeLimit (rule
	// 10, WantTwin); then the event lifecycle.TwinSubmitted.
	SubmitTwin Kind = "submit-twin"
	// DropTwin: cancel the run's twin; then lifecycle.TwinCancelled. The
	// run goes on where it runs.
	DropTwin Kind = "drop-twin"
	// Handover: end the running attempt (its checkpoint has landed), or
	// cancel the run's pending job, and let the twin, started on Target,
	// resume from the last checkpoint; then lifecycle.HandedOver.
	Handover Kind = "handover"
)

// Rules, as Decision.Rule.
const (
	RuleTimeLimit = "time-limit" // 1: allocation left vs progress left
	RuleMigrate   = "migrate"    // 2 and 4: to the ideal partition
	RuleDevChunk  = "dev-chunk"  // 3: idle dev nodes for pending jobs
	RuleTrimLimit = "trim-limit" // 6: a time limit from the prediction
	RuleOrder     = "order"      // 7: isched's pending jobs, shortest remaining first
	RulePreempt   = "preempt"    // 8: a long run yields to a much shorter one
	RuleElastic   = "elastic"    // 9: an elastic run grows onto idle GPUs, shrinks when jobs wait
	RuleKeepPlace = "keep-place" // 10: a twin keeps a run's place in its ideal queue
)

// Slurm job states the policy acts on.
const (
	StateRunning = "RUNNING"
	StatePending = "PENDING"
)

// Job is what the coordinator knows of one lineage.
type Job struct {
	JobID   uint64
	User    string
	Lineage string
	State   string // StateRunning, StatePending; anything else: no decision
	// Partition the job runs on, or the comma-separated list it pends on.
	Partition string
	// Gres is the job's current GRES request from the job table ("gpu:1");
	// a job holding GPUs can only move to partitions with GPUs.
	Gres string
	// QOS, Account and CPUs are the job's from the job table: with the
	// snapshot's per-user limits they say whether a move would leave the
	// job held by its owner's limit (QOSMaxGRESPerUser, its account's
	// quota AssocGrpGRES, ...).
	QOS, Account string
	CPUs         int
	// Nodes is the job's node count from the job table (0: unknown,
	// one): an elastic run's size is its GPUs per node times its nodes.
	Nodes int
	// Mem is the memory the job asked per node (bytes; 0: unknown): a
	// partly allocated node must have it free to take the job.
	Mem int64
	// PendingReason is Slurm's reason for a pending job ("Resources",
	// "Priority", "Dependency", ...): rule 3 moves only jobs waiting for
	// resources or priority.
	PendingReason string
	Plan          *report.Plan

	StartedAt    time.Time     // start of the current allocation
	TimeLimit    time.Duration // of the current allocation; 0: unknown
	PendingSince time.Time

	Step     int64 // completed steps
	Total    int64 // total steps (helper or plan); 0: unknown (then Plan.Total is tried)
	Iter     estimate.IterEstimate
	HaveIter bool
	CkptDur  time.Duration // learned (estimate.CkptTimer); 0: Config.DefaultCkpt

	// NoStepYet: the current attempt has reported no step yet (it is
	// starting up: importing, loading data, resuming).
	NoStepYet bool

	LastCkptStep int64     // step of the last complete checkpoint
	LastCkptAt   time.Time // zero: none yet

	// LastMoveAt is the last requeue or move by isched for any rule, or the
	// start of a migration attempt (a rule 2 Checkpoint) even if it was
	// abandoned: an attempt costs a checkpoint too, and must not repeat
	// every time the ideal partition flickers idle.
	LastMoveAt    time.Time
	Moves         int // migrations (rule 2) of this lineage
	Continuations int // rule 1 requeues of this lineage
	// ResumeFailures counts attempts that were given a checkpoint and
	// restarted behind it (the loop's first step said so): at
	// MaxResumeFailures the run is neither continued nor moved, since every
	// new attempt would redo the work.
	ResumeFailures int
	NoExtend       bool // an Extend was refused: do not ask again

	// Phase is what isched has under way for the run (the lifecycle's
	// state; the coordinator and the replay keep it), since PhaseSince.
	Phase      lifecycle.State
	PhaseSince time.Time

	// TwinReason is Slurm's pending reason of the run's twin (rule 10,
	// lifecycle.TwinPending): "AssocGrpGRES", "QOSMaxGRESPerUser" and the
	// other Assoc* and QOS* reasons say a limit holds it.
	TwinReason string

	// ETAHigh is the end of the coordinator's calibrated ETA band (zero:
	// none): rule 6 trims a limit to the later of it and the estimate's.
	ETAHigh time.Time
}

// Decision is what to do, and why.
type Decision struct {
	Kind Kind   `json:"kind"`
	Rule string `json:"rule,omitempty"` // RuleTimeLimit, RuleMigrate, RuleDevChunk
	// Target partition for Requeue and MovePending (and for the Requeue
	// that follows a Checkpoint).
	Target string `json:"target,omitempty"`
	// Gres to set with the move; empty: leave the job's request unchanged.
	Gres string `json:"gres,omitempty"`
	// TimeLimit to set, whole minutes; 0: leave unchanged.
	TimeLimit time.Duration `json:"time_limit,omitempty"`
	// CPUs per task to set with a move onto the plan's ideal partition
	// (the plan's IdealCPUs); 0: leave the job's request unchanged.
	CPUs int `json:"cpus,omitempty"`
	// Reason is for the user and the audit trail, with the numbers.
	Reason string `json:"reason"`
	// Then is what follows a Checkpoint once it has landed: Requeue (to
	// Target, confirmed by AfterCheckpoint) or None.
	Then Kind `json:"then,omitempty"`
	// Abandoned: a move in progress is given up (the checkpoint did not
	// arrive, or the target has no room any more). The job stays where it is.
	Abandoned bool `json:"abandoned,omitempty"`
	// Nice is Reorder's new nice value for the pending job.
	Nice *int64 `json:"nice,omitempty"`
	// Hold: the Requeue leaves the job held (rule 8: until YieldTo, the
	// job it yields to, has started); Release lets it go.
	Hold    bool   `json:"hold,omitempty"`
	YieldTo uint64 `json:"yield_to,omitempty"`
	// Tasks and Nodes are rule 9's new size for the requeue (one task per
	// GPU, Gres per node); 0: leave the job's request unchanged.
	Tasks int `json:"tasks,omitempty"`
	Nodes int `json:"nodes,omitempty"`
	// CancelTwin: cancel the run's twin (lifecycle.TwinCancelled) before
	// carrying out the decision (rule 1 fires while a twin waits).
	CancelTwin bool `json:"cancel_twin,omitempty"`
}

// Decide applies the rules (see the package documentation) to one job. A
// nil snapshot means the agent's view is missing or stale.
func Decide(cfg Config, j Job, snap *report.Snapshot, now time.Time) Decision {
	return withIdealCPUs(decide(cfg, j, snap, now), &j)
}

// withIdealCPUs gives a move onto the plan's ideal partition the plan's
// CPUs per task there: a job that started on a whole CPU node would
// otherwise ask a GPU node for all of its CPUs (stranding its other GPUs)
// or for more than it has.
func withIdealCPUs(d Decision, j *Job) Decision {
	p := j.Plan
	moves := d.Kind == Requeue || d.Kind == MovePending || (d.Kind == Checkpoint && d.Then == Requeue)
	if moves && p != nil && p.IdealCPUs > 0 && d.Target == p.Ideal && !strings.EqualFold(d.Target, j.Partition) {
		d.CPUs = p.IdealCPUs
	}
	return d
}

func decide(cfg Config, j Job, snap *report.Snapshot, now time.Time) Decision {
	v := newView(cfg, j, snap, now)
	switch j.Phase {
	case lifecycle.AwaitingCheckpoint:
		return v.awaiting()
	case lifecycle.HandingOver:
		return v.handingOver()
	case lifecycle.TwinPending:
		if j.Plan != nil {
			return v.twinPending()
		}
	}
	switch j.State {
	case StateRunning:
		if d, ok, s1 := v.timeLimit(); ok {
			return d
		} else if d, ok, s2 := v.migrate(); ok {
			return d
		} else if d, ok, s6 := v.trimLimit(); ok {
			return d
		} else {
			return Decision{Kind: None, Reason: "time limit: " + s1 + "; migration: " + s2 + "; trim limit: " + s6}
		}
	case StatePending:
		d, ok, s := v.devChunk()
		if ok {
			return d
		}
		return Decision{Kind: None, Reason: "dev chunk: " + s}
	}
	return Decision{Kind: None, Reason: fmt.Sprintf("job is %s: nothing to decide", orUnknown(j.State))}
}
