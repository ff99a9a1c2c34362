package coordinator

import (
	"context"
	"fmt"
	"strconv"
	"time"

	"github.com/isched/isched/internal/lifecycle"
	"github.com/isched/isched/internal/policy"
	"github.com/isched/isched/internal/report"
)

// policyJob is what policy needs of a lineage.
func (c *Coordinator) policyJob(l *lineage, now time.Time) policy.Job {
	st := &l.Status
	j := policy.Job{JobID: st.JobID, User: st.User, Lineage: st.Lineage, State: st.State, Partition: st.Partition, Plan: st.Plan,
		Step: max(st.Step, 0), Total: st.TotalIters, Moves: l.Moves, Continuations: l.Conts,
		NoExtend: l.NoExtend, Phase: l.Phase, ResumeFailures: st.ResumeFailures, TwinReason: l.TwinReason}
	if job, ok := c.jobs[st.JobID]; ok {
		j.Gres, j.PendingReason, j.QOS, j.Account, j.CPUs, j.Mem = job.Gres, job.Reason, job.QOS, job.Account, job.CPUs, job.MemPerNodeBytes
		j.Nodes = job.NodeCount
		if job.StartMS > 0 {
			j.StartedAt = time.UnixMilli(job.StartMS)
		}
		if job.TimeLimitMin != nil {
			j.TimeLimit = time.Duration(*job.TimeLimitMin) * time.Minute
		}
		if job.State == "PENDING" && job.SubmitMS > 0 {
			j.PendingSince = time.UnixMilli(job.SubmitMS)
		}
	}
	if l.Ckpt.N > 0 {
		j.CkptDur = l.Ckpt.Estimate() // else 0: the policy's configured default
	}
	if sp := l.span(st.JobID, st.Attempt); sp != nil && sp.EndMS == 0 {
		j.NoStepYet = st.Step <= sp.StartStep
	}
	j.Iter, j.HaveIter = l.Iter.Estimate()
	if cp := st.LastCheckpoint; cp != nil {
		j.LastCkptAt = time.UnixMilli(cp.MTimeMS)
		if cp.Step != nil {
			j.LastCkptStep = *cp.Step
		}
	}
	if l.LastMoveMS > 0 {
		j.LastMoveAt = time.UnixMilli(l.LastMoveMS)
	}
	if l.PhaseMS > 0 {
		j.PhaseSince = time.UnixMilli(l.PhaseMS)
	}
	if st.ETAHighMS > 0 {
		j.ETAHigh = time.UnixMilli(st.ETAHighMS)
	}
	return j
}

// decide takes at most one decision for a lineage and issues its action.
func (c *Coordinator) decide(ctx context.Context, name string, l *lineage, fresh bool, now time.Time) error {
	if p := l.Pending; p != nil {
		// no result yet: after a while, send the same action again (the
		// agent executes an id at most once, so this is safe after a crash)
		if now.Sub(time.UnixMilli(p.IssuedMS)) > 30*time.Second {
			if err := c.sendAction(ctx, p.Action); err != nil {
				return err
			}
			p.IssuedMS = now.UnixMilli()
			l.dirty = true
		}
		return nil
	}
	if why := strayTwin(l); why != "" {
		return c.issue(ctx, name, l, dropTwin(why), now)
	}
	if l.Phase == lifecycle.Yielding {
		return nil // held until the job it yields to starts (preempt.go)
	}
	if l.Phase == lifecycle.RequeueIssued {
		// the job was requeued: nothing more until its next attempt starts
		if now.Sub(time.UnixMilli(l.PhaseMS)) > c.cfg.RequeueWait {
			c.to(l, lifecycle.RequeueSlow, now)
			l.event(now, "requeue-slow", "the requeued job has not started again after "+c.cfg.RequeueWait.String())
		}
		return nil
	}
	if !fresh {
		return nil // no decision on stale data
	}
	if c.beforeLastAction(l, now) {
		return nil
	}
	if l.Status.Plan == nil && l.Status.State == "PENDING" {
		return nil
	}
	j := c.policyJob(l, now)
	// the checkpoint a move waited for is there: the move is decided again
	ckptDone := l.Phase == lifecycle.AwaitingCheckpoint && l.Ckpts > l.CkptAtReq
	var d policy.Decision
	switch {
	case twinPhase(l.Phase):
		d = c.decideTwin(l, j, now)
	case ckptDone:
		d = policy.AfterCheckpoint(c.policyConfig(), j, c.snap, now, l.pendingDecision())
	default:
		d = c.wantTwin(l, j, policy.Decide(c.policyConfig(), j, c.snap, now), now)
	}
	switch outcome(ckptDone, d) {
	case abandonMove:
		c.abandon(l, d.Reason, now)
	case issueAction:
		return c.issue(ctx, name, l, d, now)
	}
	return nil
}

// beforeLastAction says whether the job table predates the lineage's last
// action (a raised time limit, a move): deciding on it would see the job
// as it was and take the same decision again (two "extend to 2 min" of
// one job, seen under CI load, the table 1-2 s older than the update).
// The wait is bounded by StaleAfter: the table's time is the agent's
// clock, the action's the coordinator's.
func (c *Coordinator) beforeLastAction(l *lineage, now time.Time) bool {
	last := time.UnixMilli(l.LastMoveMS)
	return l.LastMoveMS > 0 && c.jobsAt.Before(last) && now.Sub(last) < c.cfg.StaleAfter
}

// decisionOutcome is what decide does with a policy decision.
type decisionOutcome int

const (
	noAction    decisionOutcome = iota // nothing to do
	issueAction                        // send the decision's action
	abandonMove                        // give up the move under way
)

// outcome says what a decision comes to. After the awaited checkpoint
// (ckptDone) a move is carried out or given up, never left waiting; else
// the policy may give up waiting for the checkpoint (Abandoned, with no
// action).
func outcome(ckptDone bool, d policy.Decision) decisionOutcome {
	switch {
	case ckptDone && (d.Kind == policy.None || d.Abandoned):
		return abandonMove
	case d.Kind != policy.None:
		return issueAction
	case d.Abandoned:
		return abandonMove
	}
	return noAction
}

// abandon gives up the move under way, as a decision of its own: the
// lineage goes back to no phase, and hysteresis counts from now.
func (c *Coordinator) abandon(l *lineage, reason string, now time.Time) {
	c.to(l, lifecycle.MoveAbandoned, now)
	l.LastMoveMS = now.UnixMilli()
	l.decision(report.Decision{AtMS: now.UnixMilli(), Kind: "abandon", Reason: reason})
	c.metrics.decisions.WithLabelValues("abandon").Inc()
}

func (l *lineage) pendingDecision() policy.Decision {
	if l.CkptDecision != nil {
		return *l.CkptDecision
	}
	return policy.Decision{}
}

// issue records a decision and sends its action. State is saved before the
// action is appended: after a crash in between, the pending action is sent
// again with the same id (executed once by the agent).
func (c *Coordinator) issue(ctx context.Context, name string, l *lineage, d policy.Decision, now time.Time) error {
	st := &l.Status
	l.Actions++
	id := name + ":" + strconv.Itoa(st.Attempt) + ":" + strconv.Itoa(l.Actions)
	a := report.Action{ID: id, Cluster: c.keys.Cluster, JobID: st.JobID, Lineage: name, User: st.User,
		Reason: report.TruncateText(d.Reason, report.MaxText), IssuedMS: now.UnixMilli()}
	if err := actionFor(d, &a); err != nil {
		return err
	}
	twinTarget(d, l, &a)
	env := report.NewEnvelope(report.KindAction, now)
	env.Action = &a
	b, err := report.Encode(env)
	if err != nil {
		// a decision we cannot express is dropped, visibly
		l.decision(report.Decision{AtMS: now.UnixMilli(), Kind: string(d.Kind), Reason: d.Reason, Result: "not issued: " + err.Error()})
		c.log.Error("action not encodable", "lineage", name, "err", err)
		return nil
	}
	if ev := issueEvent(d.Kind); ev != "" && !c.to(l, ev, now) {
		// the protocol has no such step from here: a bug, refused visibly
		l.decision(report.Decision{AtMS: now.UnixMilli(), Kind: string(d.Kind), Reason: d.Reason,
			Result: "not issued: the run is " + l.Phase.String() + ", which has no " + string(ev) + " step"})
		return nil
	}
	l.Pending = &pending{ID: id, Type: string(a.Type), Decision: d, IssuedMS: now.UnixMilli(), Action: b}
	switch d.Kind {
	case policy.Checkpoint:
		l.CkptAtReq = l.Ckpts
		l.Ckpt.Requested(now)
		dd := d
		l.CkptDecision = &dd
	case policy.Requeue, policy.Resubmit:
		l.RequeueRule = d.Rule
	}
	l.decision(report.Decision{AtMS: now.UnixMilli(), Kind: string(d.Kind), Reason: d.Reason, ActionID: id})
	c.metrics.decisions.WithLabelValues(string(d.Kind)).Inc()
	c.log.Info("decision", "lineage", name, "job", st.JobID, "kind", d.Kind, "target", d.Target, "reason", d.Reason, "action", id)
	if err := c.save(ctx, name, l); err != nil {
		return err
	}
	return c.sendAction(ctx, b)
}

// sendAction appends an encoded action to the agent's action stream.
func (c *Coordinator) sendAction(ctx context.Context, b []byte) error {
	_, err := c.store.Append(ctx, c.keys.Actions(), b, "", 100000)
	return err
}

// issueEvent is the lifecycle event of issuing a decision of kind k (""
// for an in-place update, which changes no state until its result, and
// for a twin's drop and a handover, which change it by their results).
func issueEvent(k policy.Kind) lifecycle.Event {
	switch k {
	case policy.Checkpoint:
		return lifecycle.CheckpointAsked
	case policy.Requeue, policy.Resubmit:
		return lifecycle.RequeueSent
	case policy.SubmitTwin:
		return lifecycle.TwinSubmitted
	}
	return ""
}

// actionFor fills in the action that carries out decision d.
func actionFor(d policy.Decision, a *report.Action) error {
	switch d.Kind {
	case policy.Checkpoint:
		a.Type, a.Signal, a.Steps = report.ActionSignal, "SIGUSR1", report.StepsAll
	case policy.Requeue:
		a.Type, a.Partition, a.Gres, a.CPUs, a.Hold = report.ActionRequeue, d.Target, d.Gres, d.CPUs, d.Hold
		a.Tasks, a.Nodes = d.Tasks, d.Nodes
		a.TimeLimitMin = int64(d.TimeLimit / time.Minute)
		// a continuation follows an attempt that ended, or one whose script
		// may exit right after the checkpoint it was asked for (USR1 ->
		// save -> exit 0): the agent requeues the job from its final state
		a.Ended = d.Rule == policy.RuleContinue || d.Rule == policy.RuleTimeLimit
	case policy.MovePending:
		a.Type, a.Partition, a.Gres, a.CPUs = report.ActionUpdate, d.Target, d.Gres, d.CPUs
		a.Tasks, a.Nodes = d.Tasks, d.Nodes
		a.TimeLimitMin = int64(d.TimeLimit / time.Minute)
	case policy.Reorder:
		a.Type, a.Nice = report.ActionUpdate, d.Nice
	case policy.Release:
		a.Type = report.ActionRelease
	case policy.Extend, policy.Shorten:
		a.Type = report.ActionUpdate
		a.TimeLimitMin = int64(d.TimeLimit / time.Minute)
	case policy.Resubmit:
		a.Type, a.Partition, a.Gres = report.ActionResubmit, d.Target, d.Gres
		a.TimeLimitMin = int64(d.TimeLimit / time.Minute)
	case policy.SubmitTwin:
		a.Type, a.Partition, a.Gres, a.CPUs = report.ActionTwin, d.Target, d.Gres, d.CPUs
		a.TimeLimitMin = int64(d.TimeLimit / time.Minute)
	case policy.DropTwin:
		a.Type = report.ActionCancel // of the twin (twinTarget)
	case policy.Handover:
		a.Type = report.ActionHandover // to the twin (twinTarget)
	default:
		return fmt.Errorf("coordinator: unknown decision kind %q", d.Kind)
	}
	return nil
}
