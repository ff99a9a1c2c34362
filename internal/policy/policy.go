package policy

import (
	"fmt"
	"github.com/isched/isched/internal/lifecycle"
	"math"
	"strings"
	"time"

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
	// Resubmit: submit the ended job's batch script again, as its owner,
	// onto Target with Gres and TimeLimit (a new job id, the same
	// lineage): rule 5's continuation of a job slurmctld no longer holds.
	Resubmit Kind = "resubmit"
)

// Rules, as Decision.Rule.
const (
	RuleTimeLimit = "time-limit" // 1: allocation left vs progress left
	RuleMigrate   = "migrate"    // 2 and 4: to the ideal partition
	RuleDevChunk  = "dev-chunk"  // 3: idle dev nodes for pending jobs
	RuleTrimLimit = "trim-limit" // 6: a time limit from the prediction
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
	// QOS and CPUs are the job's from the job table: with the snapshot's
	// per-user limits they say whether a move would leave the job held by
	// its owner's limit (QOSMaxGRESPerUser, ...).
	QOS  string
	CPUs int
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
	if j.Phase == lifecycle.AwaitingCheckpoint {
		return v.awaiting()
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

// AfterCheckpoint is called when the checkpoint asked for by pending (a
// Checkpoint decision) has landed. It confirms the requeue, re-checking
// what may have changed meanwhile, or gives it up with a reason. Either
// way the awaiting-checkpoint phase is over.
func AfterCheckpoint(cfg Config, j Job, snap *report.Snapshot, now time.Time, pending Decision) Decision {
	return withIdealCPUs(afterCheckpoint(cfg, j, snap, now, pending), &j)
}

func afterCheckpoint(cfg Config, j Job, snap *report.Snapshot, now time.Time, pending Decision) Decision {
	v := newView(cfg, j, snap, now)
	abandon := func(format string, a ...any) Decision {
		return Decision{Kind: None, Rule: pending.Rule, Reason: fmt.Sprintf(format, a...), Abandoned: true}
	}
	switch {
	case pending.Kind != Checkpoint:
		return abandon("no checkpoint was pending (%s)", pending.Kind)
	case j.State != StateRunning:
		return abandon("checkpoint saved; the job is %s now, nothing to requeue", orUnknown(j.State))
	case pending.Then != Requeue:
		return Decision{Kind: None, Rule: pending.Rule, Reason: "checkpoint saved; nothing follows: " + pending.Reason}
	}
	// The requeued job resumes from the checkpoint that landed, not from
	// the last step reported (iterations arrive in batches, a checkpoint
	// at once; a periodic checkpoint may be older): the rest of the run,
	// its time limit and the reason count from there.
	resume := j
	if !j.LastCkptAt.IsZero() && j.LastCkptStep > 0 {
		resume.Step = j.LastCkptStep
	}
	rv := newView(cfg, resume, snap, now)
	if rv.total > 0 && resume.Step >= rv.total {
		// the loop's last step was saved (its final save can answer the
		// request): the run is done, a requeue would only start an
		// attempt with nothing left to do
		return abandon("checkpoint at step %d saved, the run's last of %d: the run is done, not requeued", resume.Step, rv.total)
	}
	switch pending.Rule {
	case RuleTimeLimit:
		if j.TimeLimit > 0 && !j.StartedAt.IsZero() && v.known {
			limitAt := j.StartedAt.Add(j.TimeLimit)
			eta := estimate.PredictEnd(now, j.Step, v.total, j.Iter, 0)
			if !eta.High.After(limitAt.Add(-v.cfg.Margin)) {
				return abandon("checkpoint saved; the job now ends by %s (at worst), before its time limit %s: not requeued",
					v.at(eta.High), v.at(limitAt))
			}
		}
		target, gres, tl, why := pending.Target, pending.Gres, pending.TimeLimit, "as decided at the checkpoint request"
		if snap != nil {
			var ok bool
			if target, gres, tl, why, ok = rv.continuation(); !ok {
				return abandon("checkpoint saved; %s", why)
			}
		}
		return Decision{Kind: Requeue, Rule: RuleTimeLimit, Target: target, Gres: gres, TimeLimit: tl,
			Reason: fmt.Sprintf("time limit: checkpoint at step %d saved; requeueing onto %s", resume.Step, why)}
	case RuleMigrate:
		if snap == nil {
			return abandon("checkpoint saved; no fresh cluster snapshot to confirm room on %s: staying on %s", pending.Target, j.Partition)
		}
		ok, r := room(partition(snap, pending.Target), ask{pending.Gres, cpusOr(pending.CPUs, j.CPUs), j.Mem})
		if !ok {
			return abandon("checkpoint saved; %s has no room any more (%s): staying on %s", pending.Target, r, j.Partition)
		}
		if held := ownerHeld(snap, &j, pending.Target, pending.Gres); held != "" {
			return abandon("checkpoint saved; on %s %s: staying on %s", pending.Target, held, j.Partition)
		}
		tl, tlWhy := rv.limitFor(j.Partition, pending.Target)
		return Decision{Kind: Requeue, Rule: RuleMigrate, Target: pending.Target, Gres: pending.Gres, TimeLimit: tl,
			Reason: fmt.Sprintf("migrate: checkpoint at step %d saved and %s still; requeueing onto %s%s, %s",
				resume.Step, r, pending.Target, gresText(pending.Gres), tlWhy)}
	}
	return abandon("checkpoint saved; unknown rule %q: nothing follows", pending.Rule)
}

// view is a job with what every rule derives from it.
type view struct {
	cfg  Config
	j    Job
	snap *report.Snapshot
	now  time.Time
	ckpt time.Duration
	// known: the remaining work is known (a total and an iteration
	// estimate); rem steps at per ms each on average, high at worst.
	known     bool
	total     int64
	rem       int64
	per, high float64
}

func newView(cfg Config, j Job, snap *report.Snapshot, now time.Time) *view {
	v := &view{cfg: cfg.normalized(), j: j, snap: snap, now: now, ckpt: j.CkptDur, total: j.Total}
	if v.ckpt <= 0 {
		v.ckpt = v.cfg.DefaultCkpt
	}
	if v.total <= 0 && j.Plan != nil {
		v.total = j.Plan.Total
	}
	if v.total > 0 && j.HaveIter && j.Iter.MS > 0 {
		v.known = true
		v.rem = max(v.total-max(j.Step, 0), 0)
		v.per = j.Iter.PerIterMS()
		v.high = max(j.Iter.HighMS, j.Iter.MS) + max(j.Iter.OverheadMSPerIter, 0)
	}
	return v
}

func (v *view) unknownWhy() string {
	if v.total <= 0 {
		return estimate.ReasonNoTotal
	}
	return estimate.ReasonNoEstimate
}

func (v *view) holdsGPUs() bool {
	_, n := gpuRequest(v.j.Gres)
	return n > 0
}

// awaiting handles a job whose checkpoint was requested and has not landed.
func (v *view) awaiting() Decision {
	timeout := max(time.Duration(v.cfg.CkptTimeoutFactor*float64(v.ckpt)), v.cfg.MinCkptTimeout)
	waited := v.now.Sub(v.j.PhaseSince)
	if v.j.State != StateRunning {
		return Decision{Kind: None, Abandoned: true,
			Reason: fmt.Sprintf("checkpoint requested %s ago, but the job is %s now: move abandoned", dur(waited), orUnknown(v.j.State))}
	}
	if waited > timeout {
		return Decision{Kind: None, Abandoned: true, Reason: fmt.Sprintf(
			"checkpoint did not arrive within %s of the request at %s (%g × the expected %s, at least %s): move abandoned, the job stays on %s",
			dur(waited), v.at(v.j.PhaseSince), v.cfg.CkptTimeoutFactor, dur(v.ckpt), dur(v.cfg.MinCkptTimeout), v.j.Partition)}
	}
	return Decision{Kind: None, Reason: fmt.Sprintf("awaiting the checkpoint requested %s ago (given up after %s)", dur(waited), dur(timeout))}
}

// timeLimit is rule 1. ok is false when it does not act; status says why.
func (v *view) timeLimit() (d Decision, ok bool, status string) {
	j := v.j
	if j.TimeLimit <= 0 || j.StartedAt.IsZero() {
		return d, false, "time limit unknown"
	}
	limitAt := j.StartedAt.Add(j.TimeLimit)
	if !v.now.Before(limitAt) {
		return d, false, fmt.Sprintf("past its time limit %s", v.at(limitAt))
	}
	deadline := limitAt.Add(-v.ckpt - v.cfg.Margin)
	var pred string
	if v.known {
		eta := estimate.PredictEnd(v.now, j.Step, v.total, j.Iter, 0)
		pred = fmt.Sprintf("predicted end %s (at worst %s; %d of %d iterations left at %s each)",
			v.at(eta.End), v.at(eta.High), eta.Remaining, v.total, ms(v.per))
		if !eta.High.After(limitAt.Add(-v.cfg.Margin)) {
			return d, false, fmt.Sprintf("%s is before the time limit %s less the margin %s", pred, v.at(limitAt), dur(v.cfg.Margin))
		}
		if ext, ok := v.extend(limitAt, deadline, eta); ok {
			return ext, true, ""
		}
	} else {
		pred = "end unknown (" + v.unknownWhy() + ")"
	}
	if v.now.Before(deadline) {
		return d, false, fmt.Sprintf("%s, time limit %s: will checkpoint at %s (limit − checkpoint %s − margin %s)",
			pred, v.at(limitAt), v.at(deadline), dur(v.ckpt), dur(v.cfg.Margin))
	}
	if half := j.StartedAt.Add(j.TimeLimit / 2); j.NoStepYet && v.now.Before(half) {
		// A short allocation is past its deadline from the start. A request
		// now finds nothing new to save, and a script still importing has
		// not installed its handler: the signal's default action ends it.
		return d, false, fmt.Sprintf("%s, time limit %s: this attempt has reported no step yet; no checkpoint request before its first step (or %s, half its time limit)",
			pred, v.at(limitAt), v.at(half))
	}
	var b strings.Builder
	fmt.Fprintf(&b, "time limit: %s; the time limit is %s (%s from %s); a checkpoint takes ~%s and the margin is %s, so checkpointing now",
		pred, v.at(limitAt), dur(j.TimeLimit), v.at(j.StartedAt), dur(v.ckpt), dur(v.cfg.Margin))
	if !v.known {
		b.WriteString(" as insurance (Slurm ends a job at its limit without requeueing it)")
	}
	if v.now.Add(v.ckpt).After(limitAt) {
		fmt.Fprintf(&b, " (late: %s before the limit, it may not land in time)", dur(limitAt.Sub(v.now)))
	}
	d = Decision{Kind: Checkpoint, Rule: RuleTimeLimit, Then: None}
	target, gres, tl, why, ok := v.continuation()
	if ok {
		d.Then, d.Target, d.Gres, d.TimeLimit = Requeue, target, gres, tl
		fmt.Fprintf(&b, ", then requeue onto %s", why)
	} else {
		fmt.Fprintf(&b, "; then nothing: %s", why)
	}
	d.Reason = b.String()
	return d, true, ""
}

// extend is rule 1's alternative when AllowExtend: raise the limit before
// the deadline to cover the pessimistic end plus 10% and the margin,
// capped at the partition's MaxTime.
func (v *view) extend(limitAt, deadline time.Time, eta estimate.ETA) (Decision, bool) {
	j := v.j
	if !v.cfg.AllowExtend || j.NoExtend || v.snap == nil || j.Iter.Provisional || !v.now.Before(deadline) {
		return Decision{}, false
	}
	p := partition(v.snap, j.Partition)
	if p == nil {
		return Decision{}, false
	}
	need := v.now.Sub(j.StartedAt) + eta.High.Sub(v.now)*11/10 + v.cfg.Margin
	tl := ceilMinute(need)
	capNote := ""
	if mt, ok := maxTime(p); ok && tl > mt {
		tl, capNote = mt, fmt.Sprintf(" (the partition's maximum; the run needs %s, a checkpoint will follow before the new limit)", dur(ceilMinute(need)))
	}
	if tl < j.TimeLimit+time.Minute {
		return Decision{}, false
	}
	return Decision{Kind: Extend, Rule: RuleTimeLimit, TimeLimit: tl, Reason: fmt.Sprintf(
		"time limit: predicted end %s (at worst %s) is past the time limit %s; extending the limit from %s to %s%s",
		v.at(eta.End), v.at(eta.High), v.at(limitAt), dur(j.TimeLimit), dur(tl), capNote)}, true
}

// continuation chooses where rule 1 requeues a job: its ideal partition
// when it was on a dev chunk or the ideal one has room now (and the plan
// allows migration), else the same partition. ok is false when the job
// must not be requeued at all.
func (v *view) continuation() (target, gres string, tl time.Duration, why string, ok bool) {
	j, p := v.j, v.j.Plan
	if p == nil {
		return "", "", 0, "no isched plan, so the job may not resume from a checkpoint: not requeued", false
	}
	if v.cfg.NoContinuations {
		return "", "", 0, "continuations are off (max_continuations 0): not requeued", false
	}
	if v.cfg.MaxContinuations > 0 && j.Continuations >= v.cfg.MaxContinuations {
		return "", "", 0, fmt.Sprintf("already continued %d times (max %d): not requeued again (does the script resume from ISCHED_RESUME_FROM?)",
			j.Continuations, v.cfg.MaxContinuations), false
	}
	if why := resumeBroken(&j); why != "" {
		return "", "", 0, why + ": not requeued", false
	}
	target, where := j.Partition, "the same partition "+j.Partition
	if p.Migrate && p.Ideal != "" && p.Ideal != j.Partition {
		ideal := partition(v.snap, p.Ideal)
		compatible := ideal == nil || !v.holdsGPUs() || hasGPUs(ideal)
		switch {
		case !compatible:
		case v.cfg.isDev(j.Partition):
			target, where = p.Ideal, fmt.Sprintf("its ideal partition %s (end of a dev chunk)", p.Ideal)
		case ideal != nil:
			if ok, r := room(ideal, v.idealAsk()); ok && ownerHeld(v.snap, &j, p.Ideal, p.IdealGres) == "" {
				target, where = p.Ideal, fmt.Sprintf("its ideal partition %s (%s)", p.Ideal, r)
			}
		}
	}
	if target != j.Partition {
		gres = p.IdealGres
	}
	tl, tlWhy := v.limitFor(j.Partition, target)
	return target, gres, tl, where + gresText(gres) + ", " + tlWhy, true
}

// limitFor is the time limit for the rest of the run on target, converting
// the iteration time measured on from by the partitions' speeds.
func (v *view) limitFor(from, target string) (time.Duration, string) {
	mt, capped := maxTime(partition(v.snap, target))
	if v.known {
		restMS := float64(v.rem) * v.high * v.speed(from) / v.speed(target)
		tl := ceilMinute(msDur(restMS) + v.cfg.MoveCost + v.ckpt + v.cfg.Margin)
		if capped && tl > mt {
			return mt, fmt.Sprintf("time limit %s (the partition's maximum; the rest needs %s)", dur(mt), dur(tl))
		}
		return tl, fmt.Sprintf("time limit %s (%d iterations at worst %s each there, plus restart %s, checkpoint %s and margin %s)",
			dur(tl), v.rem, ms(v.high*v.speed(from)/v.speed(target)), dur(v.cfg.MoveCost), dur(v.ckpt), dur(v.cfg.Margin))
	}
	if p := v.j.Plan; p != nil && target == p.Ideal && p.IdealTime > 0 {
		tl := time.Duration(p.IdealTime) * time.Minute
		if capped && tl > mt {
			tl = mt
		}
		return tl, fmt.Sprintf("the plan's time limit %s", dur(tl))
	}
	return 0, "time limit unchanged (remaining work unknown)"
}

// migrate is rule 2 (and 4): to the ideal partition when it has room and
// the move pays.
func (v *view) migrate() (d Decision, ok bool, status string) {
	j, p := v.j, v.j.Plan
	switch {
	case p == nil:
		return d, false, "no isched plan"
	case j.Partition == p.Ideal:
		return d, false, "on its ideal partition " + p.Ideal
	case !p.Migrate:
		return d, false, "the plan does not allow migration"
	case v.snap == nil:
		return d, false, "no fresh cluster snapshot"
	case v.cfg.MaxMoves > 0 && j.Moves >= v.cfg.MaxMoves:
		return d, false, fmt.Sprintf("already migrated %d times (max %d)", j.Moves, v.cfg.MaxMoves)
	case resumeBroken(&j) != "":
		return d, false, resumeBroken(&j) + ": a move would lose the work"
	case !j.LastMoveAt.IsZero() && v.now.Sub(j.LastMoveAt) < v.cfg.MinInterval:
		return d, false, fmt.Sprintf("moved %s ago, no migration within %s of a move", dur(v.now.Sub(j.LastMoveAt)), dur(v.cfg.MinInterval))
	}
	ideal := partition(v.snap, p.Ideal)
	if ideal == nil {
		return d, false, fmt.Sprintf("ideal partition %s is not in the cluster snapshot", p.Ideal)
	}
	if v.holdsGPUs() && !hasGPUs(ideal) {
		return d, false, fmt.Sprintf("the job holds GPUs (%s) and %s has none; a GPU request cannot be dropped", j.Gres, p.Ideal)
	}
	hasRoom, roomWhy := room(ideal, v.idealAsk())
	if !hasRoom {
		return d, false, "no room on the ideal partition: " + roomWhy
	}
	if held := ownerHeld(v.snap, &j, p.Ideal, p.IdealGres); held != "" {
		return d, false, fmt.Sprintf("%s has room, but %s", p.Ideal, held)
	}
	sHere, sIdeal := v.speed(j.Partition), v.speed(p.Ideal)
	if sIdeal <= sHere {
		return d, false, fmt.Sprintf("%s; but %s (%s) is not faster than %s (%s)", roomWhy, p.Ideal, v.speedText(p.Ideal), j.Partition, v.speedText(j.Partition))
	}
	var remMS float64
	var basis string
	switch {
	case v.known && !j.Iter.Provisional:
		remMS = float64(v.rem) * v.per
		basis = fmt.Sprintf("%d iterations left take ~%s here", v.rem, dur(msDur(remMS)))
	case !j.StartedAt.IsZero() && v.now.After(j.StartedAt):
		remMS = toMS(v.now.Sub(j.StartedAt))
		why := v.unknownWhy()
		if v.known {
			why = "iteration time still provisional"
		}
		basis = fmt.Sprintf("remaining time unknown (%s), taken to be as long as it has run so far, %s", why, dur(msDur(remMS)))
	default:
		return d, false, "remaining time unknown and the start time too"
	}
	savedMS := remMS * (1 - sHere/sIdeal)
	ckptMS := toMS(v.ckpt)
	lostMS, lostWhy := math.Inf(1), "no checkpoint yet"
	if !j.LastCkptAt.IsZero() {
		if v.per > 0 && j.Step >= j.LastCkptStep {
			lostMS = float64(j.Step-j.LastCkptStep) * v.per
			lostWhy = fmt.Sprintf("%d iterations since the last checkpoint, %s", j.Step-j.LastCkptStep, dur(msDur(lostMS)))
		} else {
			lostMS = toMS(v.now.Sub(j.LastCkptAt))
			lostWhy = fmt.Sprintf("last checkpoint %s ago", dur(msDur(lostMS)))
		}
	}
	direct := lostMS < ckptMS
	costMS := toMS(v.cfg.MoveCost) + min(ckptMS, lostMS)
	costText := fmt.Sprintf("%s (restart %s + checkpoint %s)", dur(msDur(costMS)), dur(v.cfg.MoveCost), dur(v.ckpt))
	if direct {
		costText = fmt.Sprintf("%s (restart %s + redoing %s)", dur(msDur(costMS)), dur(v.cfg.MoveCost), lostWhy)
	}
	gain := fmt.Sprintf("%s; on %s (%s) vs %s (%s) %s, saving %s",
		roomWhy, j.Partition, v.speedText(j.Partition), p.Ideal, v.speedText(p.Ideal), basis, dur(msDur(savedMS)))
	if savedMS <= v.cfg.MinGain*costMS {
		return d, false, fmt.Sprintf("%s, not more than %g × the cost %s", gain, v.cfg.MinGain, costText)
	}
	tl, tlWhy := v.limitFor(j.Partition, p.Ideal)
	d = Decision{Rule: RuleMigrate, Target: p.Ideal, Gres: p.IdealGres, TimeLimit: tl}
	head := fmt.Sprintf("migrate: %s > %g × the cost %s", gain, v.cfg.MinGain, costText)
	if direct {
		d.Kind = Requeue
		d.Reason = fmt.Sprintf("%s; the last checkpoint is recent (%s), so requeueing now onto %s%s, %s",
			head, lostWhy, p.Ideal, gresText(p.IdealGres), tlWhy)
	} else {
		d.Kind, d.Then = Checkpoint, Requeue
		d.Reason = fmt.Sprintf("%s; checkpointing, then requeue onto %s%s, %s", head, p.Ideal, gresText(p.IdealGres), tlWhy)
	}
	return d, true, ""
}

// pendingForResources lists the pending reasons rule 3 acts on: the job
// waits for nodes or its turn. Held, dependent, limited or begin-time jobs
// would not start on dev either.
var pendingForResources = map[string]bool{"": true, "None": true, "Resources": true, "Priority": true}

// devChunk is rule 3.
func (v *view) devChunk() (d Decision, ok bool, status string) {
	if why := v.devChunkBlocked(); why != "" {
		return d, false, why
	}
	devs, windowEnd, why := v.devTargets()
	if why != "" {
		return d, false, why
	}
	var tried []string
	for _, name := range devs {
		d, why := v.chunkOn(name, windowEnd)
		if why != "" {
			tried = append(tried, why)
			continue
		}
		return d, true, ""
	}
	return d, false, strings.Join(tried, "; ")
}

// devChunkBlocked says why rule 3 leaves the job alone whatever the dev
// MaxResumeFailures is how many attempts may restart behind the checkpoint
// they were given before a run is no longer continued or moved.
const MaxResumeFailures = 2

// resumeBroken says why a run must not be requeued onto its checkpoint
// again: its attempts restarted behind it MaxResumeFailures times; "" when
// they did not.
func resumeBroken(j *Job) string {
	if j.ResumeFailures < MaxResumeFailures {
		return ""
	}
	return fmt.Sprintf("%d attempts restarted behind the checkpoint they were given (does the script read ISCHED_RESUME_FROM, "+
		"and can it read that file?)", j.ResumeFailures)
}

// partitions hold ("" when nothing does).
func (v *view) devChunkBlocked() string {
	j, p := v.j, v.j.Plan
	switch {
	case p == nil:
		return "no isched plan"
	case !p.Migrate:
		return "the plan does not allow migration (a dev chunk ends with a checkpoint and a requeue)"
	case v.cfg.NoContinuations:
		return "continuations are off (max_continuations 0)"
	case v.cfg.MaxContinuations > 0 && j.Continuations >= v.cfg.MaxContinuations:
		return fmt.Sprintf("already continued %d times (max %d)", j.Continuations, v.cfg.MaxContinuations)
	case resumeBroken(&j) != "":
		return resumeBroken(&j)
	case !pendingForResources[j.PendingReason]:
		return fmt.Sprintf("pending for %s, not for resources", j.PendingReason)
	case j.PendingSince.IsZero() || v.now.Sub(j.PendingSince) < v.cfg.MinPending:
		return fmt.Sprintf("pending for less than %s", dur(v.cfg.MinPending))
	case v.snap == nil:
		return "no fresh cluster snapshot"
	}
	for _, q := range strings.Split(j.Partition, ",") {
		if v.cfg.isDev(q) {
			return "already queued on the dev partition " + q
		}
	}
	if ok, r := room(partition(v.snap, p.Ideal), v.idealAsk()); ok && strings.Contains(","+j.Partition+",", ","+p.Ideal+",") {
		return fmt.Sprintf("%s: it should start there", r)
	}
	return ""
}

// devTargets are the plan's dev fallbacks, when a dev window is open, and
// the end of that window (zero: none).
func (v *view) devTargets() (devs []string, windowEnd time.Time, why string) {
	for _, f := range v.j.Plan.Fallbacks {
		if v.cfg.isDev(f) {
			devs = append(devs, f)
		}
	}
	if len(devs) == 0 {
		return nil, windowEnd, "no dev partition among the plan's fallbacks"
	}
	open, windowEnd := v.cfg.devOpen(v.now)
	if !open {
		ws := make([]string, len(v.cfg.DevWindows))
		for i, w := range v.cfg.DevWindows {
			ws[i] = w.String()
		}
		return nil, windowEnd, fmt.Sprintf("outside the dev windows (%s)", strings.Join(ws, ", "))
	}
	return devs, windowEnd, ""
}

// chunkOn is a dev chunk on partition name, or why not.
func (v *view) chunkOn(name string, windowEnd time.Time) (d Decision, why string) {
	j, p := v.j, v.j.Plan
	dp := partition(v.snap, name)
	if dp == nil {
		return d, name + " is not in the cluster snapshot"
	}
	req, gres := j.Gres, ""
	if v.holdsGPUs() {
		if !hasGPUs(dp) {
			return d, fmt.Sprintf("the job holds GPUs (%s) and %s has none", j.Gres, name)
		}
	} else if _, n := gpuRequest(p.IdealGres); n > 0 && hasGPUs(dp) {
		req, gres = p.IdealGres, p.IdealGres // a GPU plan gets its GPUs on a GPU dev partition
	}
	cpus := devCPUs(dp, j.CPUs, req)
	ok, r := room(dp, ask{req, cpusOr(cpus, j.CPUs), j.Mem})
	if !ok {
		return d, r
	}
	if held := ownerHeld(v.snap, &j, name, gres); held != "" {
		return d, fmt.Sprintf("%s has room, but %s", name, held)
	}
	tl, fits, limitWhy, why := v.chunkLimit(dp, name, windowEnd)
	if why != "" {
		return d, why
	}
	then := "a checkpoint and a requeue back onto " + p.Ideal + " will follow before the limit"
	if fits {
		then = "the run should finish there"
	}
	tlText := limitWhy
	if tl > 0 {
		tlText = fmt.Sprintf("time limit %s (%s)", dur(tl), limitWhy)
	}
	if cpus > 0 {
		tlText = fmt.Sprintf("%d CPUs per task (a %s node's share; it asked %d) and %s", cpus, name, j.CPUs, tlText)
	}
	return Decision{Kind: MovePending, Rule: RuleDevChunk, Target: name, Gres: gres, TimeLimit: tl, CPUs: cpus, Reason: fmt.Sprintf(
		"dev chunk: pending on %s for %s (%s); %s: moving it to %s%s with %s; %s",
		j.Partition, dur(v.now.Sub(j.PendingSince)), orUnknown(j.PendingReason), r, name, gresText(gres), tlText, then)}, ""
}

// idealAsk is what the job asks of a node of its ideal partition: the
// plan's CPUs there (else its own) and its memory.
func (v *view) idealAsk() ask {
	return ask{v.j.Plan.IdealGres, cpusOr(v.j.Plan.IdealCPUs, v.j.CPUs), v.j.Mem}
}

// cpusOr is n, or else the job's CPUs.
func cpusOr(n, job int) int {
	if n > 0 {
		return n
	}
	return job
}

// devCPUs is the CPUs per task a dev chunk on dp asks for when the job's
// own (jobCPUs) are more than a dev node's share for its GPUs (all of a
// CPU node's): a job planned for a bigger node would never start there.
// 0: the job's own fit (or are unknown); leave them.
func devCPUs(dp *report.Partition, jobCPUs int, gres string) int {
	if jobCPUs <= 0 || dp.NodesTotal <= 0 || dp.CPUsTotal <= 0 {
		return 0
	}
	share := dp.CPUsTotal / dp.NodesTotal
	if _, n := gpuRequest(gres); n > 0 {
		if _, total := gpus(dp, ""); total > 0 {
			share = max(1, dp.CPUsTotal*n/total)
		}
	}
	if jobCPUs <= share {
		return 0
	}
	return share
}

// chunkLimit is a dev chunk's time limit on dp (0: unchanged), whether the
// rest of the run fits in it, and why that limit; why is set when a chunk
// there is not worth its checkpoint and restart.
func (v *view) chunkLimit(dp *report.Partition, name string, windowEnd time.Time) (tl time.Duration, fits bool, limitWhy, why string) {
	tl, has := maxTime(dp)
	limitWhy = "the partition's maximum"
	if !windowEnd.IsZero() {
		if wl := windowEnd.Sub(v.now).Truncate(time.Minute); !has || wl < tl {
			tl, has, limitWhy = wl, true, "until the dev window closes at "+v.at(windowEnd)
		}
	}
	if v.known {
		need := ceilMinute(msDur(float64(v.rem)*v.high) + v.cfg.MoveCost + v.ckpt + v.cfg.Margin)
		if !has || need <= tl {
			tl, has, fits, limitWhy = need, true, true, fmt.Sprintf("enough for the remaining %d iterations", v.rem)
		}
	}
	if has && !fits {
		// A chunk must do more than pay for its own checkpoint and restart.
		ideal := v.j.Plan.Ideal
		useful := tl - v.ckpt - v.cfg.Margin - v.cfg.MoveCost
		gainMS := toMS(useful) * v.speed(name) / v.speed(ideal)
		costMS := toMS(v.cfg.MoveCost + v.ckpt)
		if gainMS <= v.cfg.MinGain*costMS {
			return 0, false, "", fmt.Sprintf("a %s chunk on %s is worth %s of %s time, not more than %g × its cost %s",
				dur(tl), name, dur(msDur(gainMS)), ideal, v.cfg.MinGain, dur(msDur(costMS)))
		}
	}
	if !has {
		tl, limitWhy = 0, "time limit unchanged (no maximum, remaining work unknown)"
	}
	return tl, fits, limitWhy, ""
}

// Formatting for reasons.

func (v *view) at(t time.Time) string {
	loc := v.now.Location()
	if v.cfg.Location != nil {
		loc = v.cfg.Location
	}
	t, now := t.In(loc), v.now.In(loc)
	if y, m, d := t.Date(); y == now.Year() && m == now.Month() && d == now.Day() {
		return t.Format("15:04:05")
	}
	return t.Format("Jan 2 15:04:05")
}

// dur formats a duration for people: seconds at most, no trailing zero units.
func dur(d time.Duration) string {
	switch {
	case d < 0:
		return "-" + dur(-d)
	case d == 0:
		return "0s"
	case d < time.Second:
		return d.Round(time.Millisecond).String()
	}
	s := d.Round(time.Second).String()
	if strings.HasSuffix(s, "m0s") {
		s = strings.TrimSuffix(s, "0s")
	}
	if strings.HasSuffix(s, "h0m") {
		s = strings.TrimSuffix(s, "0m")
	}
	return s
}

func ms(f float64) string {
	if f < 1000 {
		return fmt.Sprintf("%.1f ms", f)
	}
	return dur(msDur(f))
}

func gresText(gres string) string {
	if gres == "" {
		return ""
	}
	return " with gres " + gres
}

func toMS(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

// maxDur bounds durations computed from estimates (time.Duration overflows
// at 292 years).
const maxDur = 100 * 365 * 24 * time.Hour

func msDur(f float64) time.Duration {
	switch {
	case !(f > 0):
		return 0
	case f >= toMS(maxDur):
		return maxDur
	}
	return time.Duration(f * float64(time.Millisecond))
}

// ceilMinute rounds up to whole minutes, at least one: Slurm time limits
// are minutes, and rounding down would cut the margin.
func ceilMinute(d time.Duration) time.Duration {
	m := (d + time.Minute - 1) / time.Minute
	return max(m, 1) * time.Minute
}
