package coordinator

import (
	"context"
	"time"

	"github.com/isched/isched/internal/lifecycle"
	"github.com/isched/isched/internal/policy"
	"github.com/isched/isched/internal/report"
)

// orderQueued is rule 7 (policy.Order): the priorities isched's pending
// jobs hold in Slurm's queue are exchanged so that the least predicted
// run left goes first, through each job's nice value (an update action).
// It waits for a job table younger than its last exchange: an older one
// shows the priorities before it, and the exchange would be taken twice.
func (c *Coordinator) orderQueued(ctx context.Context, now time.Time) error {
	pol := c.policyConfig()
	if !pol.OrderByRemaining || c.jobs == nil || now.Sub(c.jobsAt) > c.cfg.StaleAfter {
		return nil
	}
	var q []policy.Queued
	byJob := map[uint64]string{}
	for name, l := range c.lineages {
		j, ok := c.jobs[l.Status.JobID]
		if !ok || l.Phase != lifecycle.Idle || l.Pending != nil || j.State != "PENDING" || l.Status.Plan == nil {
			continue
		}
		if l.LastOrderMS >= c.jobsAt.UnixMilli() {
			return nil // the table predates our last exchange
		}
		q = append(q, policy.Queued{JobID: j.JobID, Queue: j.Partition, Priority: j.Priority, Nice: j.Nice,
			Remaining: l.predictedRemaining(j), PendingSince: time.UnixMilli(j.SubmitMS)})
		byJob[j.JobID] = name
	}
	for _, p := range policy.Order(pol, q, now) { // in job order: deterministic
		name := byJob[p.JobID]
		l := c.lineages[name]
		nice := p.Nice
		l.LastOrderMS = now.UnixMilli()
		d := policy.Decision{Kind: policy.Reorder, Rule: policy.RuleOrder, Nice: &nice, Reason: p.Reason}
		if err := c.issue(ctx, name, l, d, now); err != nil {
			return err
		}
	}
	return nil
}

// predictedRemaining is the run a pending job has left, for rule 7: the
// run's own iterations where it has run before (a requeued or continued
// run), else its time limit, which isched's plan set from its estimate
// of the run (plus its margins); 0 when neither is known.
func (l *lineage) predictedRemaining(j report.Job) time.Duration {
	st := &l.Status
	if est, ok := l.Iter.Estimate(); ok && st.TotalIters > 0 {
		left := max(st.TotalIters-max(st.Step, 0), 0)
		return time.Duration(float64(left) * est.MS * float64(time.Millisecond))
	}
	if j.TimeLimitMin != nil && *j.TimeLimitMin > 0 {
		return time.Duration(*j.TimeLimitMin) * time.Minute
	}
	return 0
}
