package coordinator

import (
	"context"
	"fmt"
	"time"

	"github.com/isched/isched/internal/lifecycle"
	"github.com/isched/isched/internal/policy"
)

// preemptForShort is rule 8 (policy.Preempt): it releases the runs that
// yielded once the job they yielded to has started (or after
// RequeueWait: a run is never left held), and, one preemption at a time,
// asks a long run of isched's to yield to a much shorter one waiting
// behind it.
func (c *Coordinator) preemptForShort(ctx context.Context, now time.Time) error {
	if c.jobs == nil || now.Sub(c.jobsAt) > c.cfg.StaleAfter {
		return nil
	}
	busy, err := c.releaseYielded(ctx, now)
	if err != nil || busy {
		return err
	}
	pol := c.policyConfig()
	if !pol.PreemptForShort {
		return nil
	}
	running, waiting, names := c.preemptCandidates(now)
	p, ok, _ := policy.Preempt(pol, running, waiting, now)
	if !ok {
		return nil
	}
	name := names[p.Victim]
	l := c.lineages[name]
	j := c.jobs[p.Victim]
	d := policy.Decision{Kind: policy.Checkpoint, Then: policy.Requeue, Rule: policy.RulePreempt, Target: j.Partition, Gres: j.Gres,
		YieldTo: p.For, Reason: p.Reason}
	if w, ok := c.lineageOfJob(p.For); ok {
		w.event(now, "preempting", fmt.Sprintf("job %d checkpoints and yields its place to this run: %s", p.Victim, p.Reason))
	}
	return c.issue(ctx, name, l, d, now)
}

// releaseYielded releases each run that yields once the job it yields to
// is no longer pending (started, ended or gone) or RequeueWait has
// passed. busy: a preemption is under way (rule 8 starts one at a time).
func (c *Coordinator) releaseYielded(ctx context.Context, now time.Time) (busy bool, err error) {
	for name, l := range c.lineages {
		switch {
		case l.Phase == lifecycle.Yielding:
			busy = true
			if l.Pending != nil {
				continue
			}
			w, listed := c.jobs[l.YieldTo]
			waited := now.Sub(time.UnixMilli(l.YieldSinceMS))
			var why string
			switch {
			case !listed:
				why = fmt.Sprintf("job %d, which it yielded to, is no longer listed", l.YieldTo)
			case w.State != "PENDING":
				why = fmt.Sprintf("job %d, which it yielded to, is %s", l.YieldTo, w.State)
			case waited > c.cfg.RequeueWait:
				why = fmt.Sprintf("job %d, which it yielded to, is still pending after %s: not waited for longer", l.YieldTo, waited.Round(time.Second))
			default:
				continue
			}
			d := policy.Decision{Kind: policy.Release, Rule: policy.RulePreempt, Reason: "preempt: releasing the run: " + why}
			if err := c.issue(ctx, name, l, d, now); err != nil {
				return busy, err
			}
		case l.Phase == lifecycle.AwaitingCheckpoint && l.CkptDecision != nil && l.CkptDecision.Rule == policy.RulePreempt,
			l.Phase == lifecycle.RequeueIssued && l.RequeueRule == policy.RulePreempt:
			busy = true
		}
	}
	return busy, nil
}

// preemptCandidates are isched's running and waiting jobs as rule 8 sees
// them, and the lineage of each job.
func (c *Coordinator) preemptCandidates(now time.Time) ([]policy.Running, []policy.Waiting, map[uint64]string) {
	var running []policy.Running
	var waiting []policy.Waiting
	names := map[uint64]string{}
	for name, l := range c.lineages {
		j, ok := c.jobs[l.Status.JobID]
		if !ok || l.Phase != lifecycle.Idle || l.Pending != nil || l.Status.Plan == nil {
			continue
		}
		names[j.JobID] = name
		switch j.State {
		case "RUNNING":
			r := policy.Running{JobID: j.JobID, Queue: j.Partition, Gres: j.Gres, Nodes: j.NodeCount, Remaining: l.predictedRemaining(j), Preemptions: l.Preempts}
			if l.Status.Step <= 0 {
				r.Remaining = 0 // no step of its own yet: its remaining run is a guess
			}
			r.Attained, r.LastMoveAt, r.CkptDur = l.runTimes(j, now)
			running = append(running, r)
		case "PENDING":
			waiting = append(waiting, policy.Waiting{Queued: l.queued(j), Gres: j.Gres, Nodes: j.NodeCount, Blocked: policy.Blocked(j.Reason)})
		}
	}
	return running, waiting, names
}

// lineageOfJob is the tracked lineage whose current job is id.
func (c *Coordinator) lineageOfJob(id uint64) (*lineage, bool) {
	for _, l := range c.lineages {
		if l.Status.JobID == id {
			return l, true
		}
	}
	return nil, false
}
