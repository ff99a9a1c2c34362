package coordinator

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"time"

	"github.com/isched/isched/internal/lifecycle"
	"github.com/isched/isched/internal/report"
)

// Reconciliation with the job table: the coordinator follows what Slurm
// says of each tracked lineage's job (adopting queued jobs, following
// state, partition and limit, settling an attempt's end) before any
// decision is taken on it (decide.go). Lifecycle events it raises:
// Adopted, CancelledBeforeRestart (internal/lifecycle).

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
	c.adoptQueuedJobs(ctx, now)
	for _, l := range c.lineages {
		c.followTwin(l, now)
	}
	for name, l := range c.lineages {
		if l.ended() || l.Status.JobID == 0 {
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
func (c *Coordinator) adoptQueuedJobs(ctx context.Context, now time.Time) {
	byJob := map[uint64]*lineage{}
	for _, l := range c.lineages {
		if l.Status.JobID != 0 {
			byJob[l.Status.JobID] = l
		}
		if l.Twin != 0 {
			byJob[l.Twin] = l // a twin is the run's, never a job of its own
		}
	}
	ids := slices.Sorted(maps.Keys(c.jobs))
	for _, id := range ids {
		j := c.jobs[id]
		p, ok, err := report.JobPlan(j)
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
		if !adoptable(l, j) {
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
		c.to(l, lifecycle.Adopted, now)
		if st.PlanTotal == 0 {
			st.PlanTotal = p.Total
		}
		l.setTotal()
		l.dirty = true
		byJob[j.JobID] = l
	}
}

// adoptable: queued job j, which names lineage l, may become its job: not
// the job of an ended run, nor, while l is in a twin phase, its twin
// (listed before the agent's result says which job it is).
func adoptable(l *lineage, j report.Job) bool {
	return !(l.ended() && l.Status.JobID == j.JobID) && !twinPhase(l.Phase)
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
		c.to(l, lifecycle.CancelledBeforeRestart, now)
		l.End = nil
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
	return j.State == "CANCELLED" && (l.Phase == lifecycle.RequeueIssued || l.Phase == lifecycle.Yielding) && l.Pending == nil
}

// endedUnreported: Slurm ended the job (not COMPLETED: settleCompleted
// waits for that one's late report) while the lineage is idle, live and
// has no end report of its attempt.
func endedUnreported(l *lineage, j report.Job) bool {
	return slurmEnded(j.State) && l.Phase == lifecycle.Idle && j.State != "COMPLETED" && l.End == nil
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
	if j.State != "COMPLETED" || l.Phase != lifecycle.Idle {
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
		if l.Phase == lifecycle.Idle && l.Pending == nil {
			l.event(now, "requeued", fmt.Sprintf("Slurm requeued the job after attempt %d ended (exit %d): the run goes on", e.Attempt, e.ExitCode))
			return false, c.selfRequeued(ctx, name, l, j, e, now)
		}
		return false, nil
	}
	if l.Phase != lifecycle.Idle {
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

// slurmEnded: the job is over and Slurm will not run it again by itself.
// Narrower than slurm.Ended on purpose: a PREEMPTED job is requeued by
// Slurm (PreemptMode=REQUEUE) after the state shows, so it is settled
// only after a grace (settleEnd), and SPECIAL_EXIT is Slurm's requeued
// hold, which the user or an operator releases.
func slurmEnded(state string) bool {
	switch state {
	case "COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "NODE_FAIL", "OUT_OF_MEMORY", "BOOT_FAIL", "DEADLINE":
		return true
	}
	return false
}
