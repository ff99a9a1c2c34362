package coordinator

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/isched/isched/internal/policy"
	"github.com/isched/isched/internal/report"
)

// logForeignLineage says (rate-limited) that a job names a lineage another
// user owns, or one reserved for another job or user (why); it is not
// tracked.
func (c *Coordinator) logForeignLineage(j report.Job, lineage string, owner int, why string) {
	if !c.logDue("job:" + RejectForeignLineage) {
		return
	}
	if why != "" {
		c.log.Warn("job ignored: its plan names a lineage reserved for another job or user", "job", j.JobID, "user", j.User, "uid", j.UID,
			"lineage", lineage, "reserved", why)
		return
	}
	c.log.Warn("job ignored: its plan names a lineage another user owns", "job", j.JobID, "user", j.User, "uid", j.UID,
		"lineage", lineage, "owner_uid", owner)
}

// syncWithJobTable starts tracking planned jobs (pending ones have sent no
// report yet) and follows Slurm's state of tracked ones.
func (c *Coordinator) syncWithJobTable(ctx context.Context, now time.Time) error {
	if c.jobs == nil || now.Sub(c.jobsAt) > c.cfg.StaleAfter {
		return nil
	}
	c.adoptQueuedJobs(ctx)
	for name, l := range c.lineages {
		if l.Ended || l.Status.JobID == 0 {
			continue
		}
		if err := c.followJob(ctx, name, l, now); err != nil {
			return err
		}
	}
	return nil
}

// adoptQueuedJobs starts tracking the job table's jobs whose plan comment
// names a lineage of this cluster that no tracked lineage holds, oldest
// job first: a lineage id is public once its job is queued, so a later job
// of another user's naming it must not take it over.
func (c *Coordinator) adoptQueuedJobs(ctx context.Context) {
	byJob := map[uint64]*lineage{}
	for _, l := range c.lineages {
		if l.Status.JobID != 0 {
			byJob[l.Status.JobID] = l
		}
	}
	ids := slices.Sorted(maps.Keys(c.jobs))
	for _, id := range ids {
		j := c.jobs[id]
		p, ok, err := report.ParsePlanComment(j.Comment)
		if !ok || err != nil || p.Lineage == "" || (p.Cluster != "" && p.Cluster != c.keys.Cluster) {
			continue // not ours: another isched deployment's job on the same Slurm
		}
		if _, tracked := byJob[j.JobID]; tracked || slurmEnded(j.State) {
			continue
		}
		if foreign, why := reserved(c.keys.Cluster, p.Lineage, j); foreign {
			c.logForeignLineage(j, p.Lineage, 0, why)
			continue
		}
		l, err := c.getLineage(ctx, p.Lineage)
		if err != nil {
			continue
		}
		if l.Ended && l.Status.JobID == j.JobID {
			continue
		}
		if uid, known := l.owner(); !known {
			owner := j.UID
			l.OwnerUID = &owner
		} else if uid != j.UID {
			c.logForeignLineage(j, p.Lineage, uid, "")
			continue
		}
		st := &l.Status
		st.JobID, st.User, st.UID, st.Plan, st.Partition = j.JobID, j.User, j.UID, &p, j.Partition
		st.State = j.State
		l.Ended = false
		if st.PlanTotal == 0 {
			st.PlanTotal = p.Total
		}
		l.setTotal()
		l.dirty = true
		byJob[j.JobID] = l
	}
}

// followJob brings a live lineage up to date with its job in the table:
// state, partition and limit, a requeue by Slurm, an end without a report.
func (c *Coordinator) followJob(ctx context.Context, name string, l *lineage, now time.Time) error {
	st := &l.Status
	j, ok := c.jobs[st.JobID]
	if l.End != nil {
		if settled, err := c.settleEnd(ctx, name, l, j, ok, now); err != nil || settled {
			return err
		}
	}
	if !ok {
		return nil // MinJobAge passed or not yet listed: the end report tells
	}
	if cancelledBeforeRestart(l, j) {
		// the job we continued (requeued, or resubmitted: st.JobID is the
		// new one) was cancelled before its next attempt started (isched
		// stop, scancel): it never starts, and CANCELLED is never
		// continued. Without this the run waited RequeueWait for it.
		l.Phase, l.PhaseMS, l.End = policy.PhaseNone, now.UnixMilli(), nil
		l.event(now, "cancelled", fmt.Sprintf("job %d was cancelled before attempt %d started", j.JobID, st.Attempt+1))
		return c.endOrContinue(ctx, name, l, j.State, j.State, now.UnixMilli(), now)
	}
	l.followTable(j)
	if j.RestartCount > st.Attempt && j.State != "RUNNING" {
		slurmRequeued(l, j, now)
	}
	if endedUnreported(l, j) {
		// ended without the wrapper saying so (killed, node failure,
		// timeout): continued from its checkpoint, or over
		return c.endOrContinue(ctx, name, l, j.State, j.State, now.UnixMilli(), now)
	}
	return c.settleCompleted(ctx, name, l, j, now)
}

// cancelledBeforeRestart: the job a requeue or resubmission of ours
// continued was cancelled before its next attempt started.
func cancelledBeforeRestart(l *lineage, j report.Job) bool {
	return j.State == "CANCELLED" && l.Phase == policy.PhaseRequeueIssued && l.Pending == nil
}

// endedUnreported: Slurm ended the job (not COMPLETED: settleCompleted
// waits for that one's late report) while the lineage is idle, live and
// has no end report of its attempt.
func endedUnreported(l *lineage, j report.Job) bool {
	return slurmEnded(j.State) && l.Phase == policy.PhaseNone && !l.Ended && j.State != "COMPLETED" && l.End == nil
}

// followTable takes the job table's state, partition and, for a running
// job, its time limit's end.
func (l *lineage) followTable(j report.Job) {
	st := &l.Status
	if st.State != j.State || st.Partition != j.Partition {
		st.State, st.Partition = j.State, j.Partition
		l.dirty = true
	}
	if j.StartMS > 0 && j.TimeLimitMin != nil && *j.TimeLimitMin > 0 && j.State == "RUNNING" {
		if lim := j.StartMS + *j.TimeLimitMin*60_000; lim != st.LimitMS {
			st.LimitMS, l.dirty = lim, true
		}
	}
}

// slurmRequeued closes the span of an attempt Slurm requeued without its
// wrapper saying goodbye (node failure, the wrapper killed), at the last
// step the coordinator saw.
func slurmRequeued(l *lineage, j report.Job, now time.Time) {
	reason := "requeued by Slurm"
	if j.Reason != "" && j.Reason != "None" {
		reason += " (" + j.Reason + ")"
	}
	if sp := l.closeOpenSpan(now.UnixMilli(), ""); sp != nil {
		sp.Reason = reason
		l.SlurmClosed = &spanKey{sp.JobID, sp.Attempt}
		l.dirty = true
		l.event(now, "requeued", fmt.Sprintf("Slurm requeued job %d (restart %d) before any end report from attempt %d: %s",
			j.JobID, j.RestartCount, l.Status.Attempt, reason))
	}
}

// settleCompleted settles a lineage whose job Slurm reports COMPLETED
// while no end report settled it: a report is usually just late (the job
// table can be younger than the last reports), so only after EndGrace.
// Without it, a run whose wrapper never said goodbye (killed, or not the
// last step of the batch script) would show RUNNING for ever.
func (c *Coordinator) settleCompleted(ctx context.Context, name string, l *lineage, j report.Job, now time.Time) error {
	if j.State != "COMPLETED" || l.Phase != policy.PhaseNone {
		if l.CompletedMS != 0 {
			l.CompletedMS, l.dirty = 0, true
		}
		return nil
	}
	if l.CompletedMS == 0 {
		l.CompletedMS, l.dirty = now.UnixMilli(), true
		return nil
	}
	if now.UnixMilli()-l.CompletedMS < c.cfg.EndGrace.Milliseconds() {
		return nil
	}
	l.event(now, "completed", fmt.Sprintf("Slurm reports the job COMPLETED and no end report settled the run within %s", c.cfg.EndGrace))
	if c.lostDuring(l) {
		c.endReportsLost(l, now)
		return nil
	}
	return c.endOrContinue(ctx, name, l, "COMPLETED", "COMPLETED", now.UnixMilli(), now)
}

// lostDuring: reports were trimmed from the ingest stream unread since the
// lineage's current attempt started, so its missing end report, and steps
// after the last one seen, may be among them.
func (c *Coordinator) lostDuring(l *lineage) bool {
	if c.lossMS == 0 {
		return false
	}
	sp := l.span(l.Status.JobID, l.Status.Attempt)
	return sp == nil || c.lossMS >= sp.StartMS
}

// endReportsLost ends a run Slurm completed while its reports were lost:
// its last seen step may be stale (issue 26: a finished 100/100 run was
// seen at step 33, requeued and recorded as "ended at step 33 of 100").
// It is neither continued nor recorded as ending short; the decision says
// what is known and that the job's own output tells the rest.
func (c *Coordinator) endReportsLost(l *lineage, now time.Time) {
	st := &l.Status
	c.finish(l, "COMPLETED", now.UnixMilli(), nil)
	reason := fmt.Sprintf("Slurm reports job %d COMPLETED, and reports were trimmed from the ingest stream unread during its attempt "+
		"(isched_coordinator_ingest_trimmed_unread_total): its end report is missing and the last step seen (%d) may be stale. "+
		"Not continued: a finished run must not be requeued; the job's output says where it stopped", st.JobID, st.Step)
	l.decision(report.Decision{AtMS: now.UnixMilli(), Kind: "reports-lost", Reason: reason})
	c.metrics.decisions.WithLabelValues("reports-lost").Inc()
	l.event(now, "reports-lost", reason)
}

// settleEnd decides what an attempt's end report meant, from the job
// table (j, listed): nothing when Slurm started the job again (a
// preemption requeues it: the trainer saved on SIGTERM and exited 0, yet
// the run goes on; a script requeued itself after saving), else, once
// Slurm is done with the job, the run's continuation or its end
// (endOrContinue). It reports whether the attempt was settled.
func (c *Coordinator) settleEnd(ctx context.Context, name string, l *lineage, j report.Job, listed bool, now time.Time) (bool, error) {
	e := l.End
	// a table taken before the end report says nothing about it
	after := c.jobsAt.UnixMilli() >= e.AtMS
	if listed && j.JobID == e.JobID && requeuedSince(j, e, after) {
		l.End, l.dirty = nil, true
		if l.Phase == policy.PhaseNone && l.Pending == nil {
			l.event(now, "requeued", fmt.Sprintf("Slurm requeued the job after attempt %d ended (exit %d): the run goes on", e.Attempt, e.ExitCode))
			return false, c.selfRequeued(ctx, name, l, j, e, now)
		}
		return false, nil
	}
	if l.Phase != policy.PhaseNone {
		return false, nil // an action of ours is under way: its outcome tells
	}
	graceOver := now.UnixMilli()-e.AtMS >= c.cfg.EndGrace.Milliseconds()
	state, done := slurmDone(j, listed, after, graceOver)
	if !done {
		return false, nil
	}
	return true, c.endOrContinue(ctx, name, l, state, endStateOf(state, e, l.Status.TotalIters), e.AtMS, now)
}

// slurmDone says whether Slurm is done with the job of an attempt that
// sent its end report, and its final state ("" when the table no longer
// lists the job). listed: the table lists it (j); after: the table is
// younger than the end report; graceOver: EndGrace has passed since it.
func slurmDone(j report.Job, listed, after, graceOver bool) (state string, done bool) {
	switch {
	case listed && after && slurmEnded(j.State):
		return j.State, true
	case listed && after && graceOver && j.State == "PREEMPTED":
		return j.State, true // preempted and not requeued by Slurm (PreemptMode=CANCEL)
	case !listed && graceOver:
		// slurmctld forgot the job (MinJobAge) before a table showed its end
		return "", true
	}
	return "", false
}

// endStateOf is the state a lineage ends in after attempt e's end, Slurm
// having ended its job in state: the run's own end (exit 0 with no total
// to fall short of, or a failure of its own) is ENDED; an attempt's end
// short of the total keeps Slurm's word for how the job ended, if it is
// not continued.
func endStateOf(state string, e *attemptEnd, totalIters int64) string {
	if state == "" || e.ExitCode == 0 && totalIters == 0 || e.ExitCode != 0 && e.Signal == "" {
		return "ENDED"
	}
	return state
}

// requeuedSince: the job table shows the job started again (or queued
// again) after the attempt that ended; after: the table is younger than
// the end report.
func requeuedSince(j report.Job, e *attemptEnd, after bool) bool {
	if j.RestartCount > e.Attempt {
		return true
	}
	switch j.State {
	case "PENDING", "REQUEUED", "REQUEUE_HOLD", "REQUEUE_FED":
		return after // an older table may show the job before it first started
	}
	return false
}

func slurmEnded(state string) bool {
	switch state {
	case "COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "NODE_FAIL", "OUT_OF_MEMORY", "BOOT_FAIL", "DEADLINE":
		return true
	}
	return false
}

// readResults applies the agent's results to the actions they answer.
func (c *Coordinator) readResults(ctx context.Context, now time.Time) error {
	for {
		ents, err := c.store.ReadAfter(ctx, c.keys.Results(), c.resultsID, 512, 0)
		if err != nil {
			return err
		}
		if len(ents) == 0 {
			return nil
		}
		for _, e := range ents {
			c.resultsID = e.ID
			env, err := report.Decode(e.Payload)
			if err != nil || env.Kind != report.KindResult {
				continue
			}
			c.applyResult(env.Result, now)
		}
	}
}

// actionLineage reads the lineage out of an action id "<lineage>:<attempt>:<n>".
func actionLineage(id string) string {
	l, _, _ := strings.Cut(id, ":")
	return l
}

func (c *Coordinator) applyResult(r *report.Result, now time.Time) {
	name := actionLineage(r.ActionID)
	l, ok := c.lineages[name]
	if !ok || l.Pending == nil || l.Pending.ID != r.ActionID {
		return
	}
	c.touched[name] = l
	p := l.Pending
	l.Pending = nil
	l.dirty = true
	c.metrics.actions.WithLabelValues(p.Type, string(r.Status)).Inc()
	res := resultText(r)
	l.recordResult(r.ActionID, res)
	if r.Status != report.StatusOK {
		c.actionFailed(l, p, r, res, now)
		return
	}
	c.actionDone(l, p, r, now)
}

// resultText is how an action's result reads in its decision.
func resultText(r *report.Result) string {
	res := string(r.Status)
	if r.Message != "" {
		res += ": " + r.Message
	}
	return res
}

// recordResult writes an action's result into the decision that issued it.
func (l *lineage) recordResult(actionID, res string) {
	for i := len(l.Status.Decisions) - 1; i >= 0; i-- {
		if l.Status.Decisions[i].ActionID == actionID {
			l.Status.Decisions[i].Result = res
			break
		}
	}
}

// actionFailed takes an action the agent could not carry out.
func (c *Coordinator) actionFailed(l *lineage, p *pending, r *report.Result, res string, now time.Time) {
	if p.Decision.Kind == policy.Extend {
		l.NoExtend = true // do not ask again: checkpoint and requeue instead
	}
	if p.Decision.Rule == policy.RuleContinue && (p.Decision.Kind == policy.Requeue || p.Decision.Kind == policy.Resubmit) {
		c.continuationFailed(l, res, now)
		return
	}
	// reversible: the job stays where it was (the agent releases a
	// held job whose move failed); try again later
	c.log.Warn("action not done", "lineage", actionLineage(r.ActionID), "action", r.ActionID, "status", r.Status, "message", r.Message)
	l.Phase, l.PhaseMS = policy.PhaseNone, now.UnixMilli()
	l.LastMoveMS = now.UnixMilli() // hysteresis also after a failure
}

// actionDone takes an action the agent carried out.
func (c *Coordinator) actionDone(l *lineage, p *pending, r *report.Result, now time.Time) {
	switch report.ActionType(p.Type) {
	case report.ActionUpdate:
		l.Phase, l.PhaseMS = policy.PhaseNone, now.UnixMilli()
		if p.Decision.Rule == policy.RuleContinue {
			l.Conts++ // a self-requeued job's longer time limit
			l.Status.Continuations = l.Conts
		} else {
			l.Moves++
		}
		l.LastMoveMS = now.UnixMilli()
	case report.ActionRequeue:
		// stays requeue-issued until the new attempt's start report
	case report.ActionResubmit:
		// the new job's: stays requeue-issued until its start report
		if r.NewJobID != 0 {
			old := l.Status.JobID // the job table may show the new job already
			if env, err := report.Decode(p.Action); err == nil && env.Action != nil {
				old = env.Action.JobID
			}
			c.resubmitted(l, old, r.NewJobID, p.Decision.Target, now)
		}
	}
}

// policyJob is what policy needs of a lineage.
func (c *Coordinator) policyJob(l *lineage, now time.Time) policy.Job {
	st := &l.Status
	j := policy.Job{JobID: st.JobID, User: st.User, Lineage: st.Lineage, State: st.State, Partition: st.Partition, Plan: st.Plan,
		Step: max(st.Step, 0), Total: st.TotalIters, Moves: l.Moves, Continuations: l.Conts,
		NoExtend: l.NoExtend, Phase: l.Phase, ResumeFailures: st.ResumeFailures}
	if job, ok := c.jobs[st.JobID]; ok {
		j.Gres, j.PendingReason, j.QOS, j.CPUs, j.Mem = job.Gres, job.Reason, job.QOS, job.CPUs, job.MemPerNodeBytes
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
	if l.Phase == policy.PhaseRequeueIssued {
		// the job was requeued: nothing more until its next attempt starts
		if now.Sub(time.UnixMilli(l.PhaseMS)) > c.cfg.RequeueWait {
			l.Phase, l.PhaseMS = policy.PhaseNone, now.UnixMilli()
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
	ckptDone := l.Phase == policy.PhaseAwaitingCheckpoint && l.Ckpts > l.CkptAtReq
	var d policy.Decision
	if ckptDone {
		d = policy.AfterCheckpoint(c.policyConfig(), j, c.snap, now, l.pendingDecision())
	} else {
		d = policy.Decide(c.policyConfig(), j, c.snap, now)
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
	l.Phase, l.PhaseMS, l.LastMoveMS = policy.PhaseNone, now.UnixMilli(), now.UnixMilli()
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
	switch d.Kind {
	case policy.Checkpoint:
		a.Type, a.Signal, a.Steps = report.ActionSignal, "SIGUSR1", report.StepsAll
	case policy.Requeue:
		a.Type, a.Partition, a.Gres, a.CPUs = report.ActionRequeue, d.Target, d.Gres, d.CPUs
		a.TimeLimitMin = int64(d.TimeLimit / time.Minute)
		// a continuation follows an attempt that ended, or one whose script
		// may exit right after the checkpoint it was asked for (USR1 ->
		// save -> exit 0): the agent requeues the job from its final state
		a.Ended = d.Rule == policy.RuleContinue || d.Rule == policy.RuleTimeLimit
	case policy.MovePending:
		a.Type, a.Partition, a.Gres, a.CPUs = report.ActionUpdate, d.Target, d.Gres, d.CPUs
		a.TimeLimitMin = int64(d.TimeLimit / time.Minute)
	case policy.Extend:
		a.Type = report.ActionUpdate
		a.TimeLimitMin = int64(d.TimeLimit / time.Minute)
	case policy.Resubmit:
		a.Type, a.Partition, a.Gres = report.ActionResubmit, d.Target, d.Gres
		a.TimeLimitMin = int64(d.TimeLimit / time.Minute)
	default:
		return fmt.Errorf("coordinator: unknown decision kind %q", d.Kind)
	}
	env := report.NewEnvelope(report.KindAction, now)
	env.Action = &a
	b, err := report.Encode(env)
	if err != nil {
		// a decision we cannot express is dropped, visibly
		l.decision(report.Decision{AtMS: now.UnixMilli(), Kind: string(d.Kind), Reason: d.Reason, Result: "not issued: " + err.Error()})
		c.log.Error("action not encodable", "lineage", name, "err", err)
		return nil
	}
	l.Pending = &pending{ID: id, Type: string(a.Type), Decision: d, IssuedMS: now.UnixMilli(), Action: b}
	switch d.Kind {
	case policy.Checkpoint:
		l.Phase, l.PhaseMS, l.CkptAtReq = policy.PhaseAwaitingCheckpoint, now.UnixMilli(), l.Ckpts
		l.Ckpt.Requested(now)
		dd := d
		l.CkptDecision = &dd
	case policy.Requeue, policy.Resubmit:
		l.Phase, l.PhaseMS, l.RequeueRule = policy.PhaseRequeueIssued, now.UnixMilli(), d.Rule
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
