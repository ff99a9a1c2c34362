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
		q = append(q, l.queued(j))
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

// queued is the lineage's pending job j as rules 7 and 8 see it.
func (l *lineage) queued(j report.Job) policy.Queued {
	return policy.Queued{JobID: j.JobID, Queue: j.Partition, Priority: j.Priority, Nice: j.Nice,
		Remaining: l.predictedRemaining(j), PendingSince: time.UnixMilli(j.SubmitMS)}
}

// predictedRemaining is policy.PredictedRemaining of the lineage's job j:
// its steps left at its measured iteration time (a requeued or continued
// run), else j's time limit.
func (l *lineage) predictedRemaining(j report.Job) time.Duration {
	st := &l.Status
	est, ok := l.Iter.Estimate()
	var limit time.Duration
	if j.TimeLimitMin != nil {
		limit = time.Duration(*j.TimeLimitMin) * time.Minute
	}
	return policy.PredictedRemaining(st.TotalIters-max(st.Step, 0), est, ok && st.TotalIters > 0, limit)
}
