package coordinator

import (
	"context"
	"fmt"
	"strconv"
	"time"

	"github.com/isched/isched/internal/policy"
	"github.com/isched/isched/internal/report"
)

// endOrContinue settles an attempt that is over (its end report said so
// and Slurm's final state is known, or Slurm ended the job on its own):
// with steps left after a confirmed checkpoint the run is continued (rule
// 5, policy.AfterEnd: a requeue of the ended job, or a resubmission of its
// batch script when slurmctld forgot it), else the lineage ends
// and its decisions say why. state is Slurm's final state ("" when
// slurmctld no longer lists the job); endState is what finish records.
func (c *Coordinator) endOrContinue(ctx context.Context, name string, l *lineage, state, endState string, atMS int64, now time.Time) error {
	st := &l.Status
	e := policy.End{State: state, Exit: l.attemptExit(), NewCkpts: l.Ckpts - l.CkptsAtStart}
	if sp := l.span(st.JobID, st.Attempt); sp != nil {
		e.ResumeStep = sp.StartStep
	}
	if end := l.End; end != nil && end.JobID == st.JobID && end.Attempt == st.Attempt {
		e.Signal = end.Signal
	}
	j := c.policyJob(l, now)
	d := policy.AfterEnd(c.policyConfig(), j, e, c.snap, now)
	if d.Kind != policy.Requeue && d.Kind != policy.Resubmit {
		exit := l.attemptExit()
		if st.TotalIters > 0 && st.Step < st.TotalIters && j.LastCkptStep >= st.TotalIters {
			// the loop saved its last step; the reports of the steps
			// before that save died with the attempt
			st.Step, l.dirty = j.LastCkptStep, true
		}
		if exit != nil && *exit == 0 && st.TotalIters > 0 && st.Step >= st.TotalIters {
			// the run's own end: it exited 0 at its last step, and only
			// the report of that step came after its end report (ci53: a
			// one-iteration last attempt); Slurm's state merely settled it
			endState = "ENDED"
		}
		c.finish(l, endState, atMS, exit)
		if st.TotalIters > 0 && st.Step < st.TotalIters {
			// ended with work left: say why it is not continued
			l.decision(report.Decision{AtMS: now.UnixMilli(), Kind: "not-continued", Reason: d.Reason})
			c.metrics.decisions.WithLabelValues("not-continued").Inc()
		}
		l.event(now, "ended", d.Reason)
		return nil
	}
	// l.End stays until the next attempt starts: it still tells how this
	// one exited if the continuation fails (continuationFailed)
	l.CompletedMS = 0
	l.closeOpenSpan(atMS, "ended "+state)
	return c.issue(ctx, name, l, d, now)
}

// selfRequeued follows an attempt that ended with work left and whose job
// is pending again without an action of ours (the script requeued itself
// after saving, as Lightning's auto-requeue does): no second requeue, but
// when rule 5 would give the rest of the run a longer time limit than the
// job has, the pending job gets it (an update, not a restart). Without
// it a script that requeues itself on Slurm's early warning keeps a short
// allocation for ever.
func (c *Coordinator) selfRequeued(ctx context.Context, name string, l *lineage, j report.Job, e *attemptEnd, now time.Time) error {
	st := &l.Status
	if j.State != "PENDING" || j.TimeLimitMin == nil || e.JobID != st.JobID || e.Attempt != st.Attempt {
		return nil
	}
	end := policy.End{State: "REQUEUED", NewCkpts: l.Ckpts - l.CkptsAtStart, Signal: e.Signal}
	code := e.ExitCode
	end.Exit = &code
	if sp := l.span(st.JobID, st.Attempt); sp != nil {
		end.ResumeStep = sp.StartStep
	}
	d := policy.AfterEnd(c.policyConfig(), c.policyJob(l, now), end, c.snap, now)
	if d.Kind != policy.Requeue || d.TimeLimit <= time.Duration(*j.TimeLimitMin)*time.Minute || d.Target != j.Partition {
		return nil
	}
	d.Kind, d.Gres = policy.MovePending, ""
	d.Reason = fmt.Sprintf("the job requeued itself (restart %d): no second requeue; its time limit %d min is short for the rest: %s",
		j.RestartCount, *j.TimeLimitMin, d.Reason)
	return c.issue(ctx, name, l, d, now)
}

// continuationFailed ends a lineage whose continuation the agent could not
// carry out (slurmctld forgot the job, the user cancelled it meanwhile):
// trying again would loop.
func (c *Coordinator) continuationFailed(l *lineage, res string, now time.Time) {
	st := &l.Status
	state := "ENDED"
	if l.attemptExit() == nil {
		state = st.State
	}
	c.finish(l, state, now.UnixMilli(), l.attemptExit())
	l.event(now, "ended", "the continuation was not done ("+res+"): the run stops at step "+strconv.FormatInt(max(st.Step, 0), 10))
}

// resubmitted follows the lineage onto the job the agent submitted in
// place of one slurmctld forgot (a resubmit action's result): the run goes
// on there, from the lineage's last checkpoint, and the old attempt's end
// is settled.
func (c *Coordinator) resubmitted(l *lineage, oldJob, newJob uint64, partition string, now time.Time) {
	st := &l.Status
	l.End = nil
	st.JobID, st.Attempt, st.State, st.EndedMS = newJob, 0, "PENDING", 0
	if partition != "" {
		st.Partition = partition
	}
	l.event(now, "resubmitted", fmt.Sprintf("job %d, which slurmctld no longer held, was submitted again as job %d: the run goes on there", oldJob, newJob))
}
