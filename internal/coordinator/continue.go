package coordinator

import (
	"context"
	"strconv"
	"time"

	"github.com/isched/isched/internal/policy"
	"github.com/isched/isched/internal/report"
)

// endOrContinue settles an attempt that is over (its end report said so
// and Slurm's final state is known, or Slurm ended the job on its own):
// with steps left after a confirmed checkpoint the run is continued (rule
// 5, policy.AfterEnd: a requeue of the ended job), else the lineage ends
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
	d := policy.AfterEnd(c.cfg.Policy, j, e, c.snap, now)
	if d.Kind != policy.Requeue {
		exit := l.attemptExit()
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
