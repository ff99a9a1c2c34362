package coordinator

import (
	"context"
	"strings"
	"time"

	"github.com/isched/isched/internal/lifecycle"
	"github.com/isched/isched/internal/policy"
	"github.com/isched/isched/internal/report"
)

// Reconciliation with the agent: the results of the actions the
// coordinator issued (decide.go) change the lineage through the
// lifecycle events UpdateDone and ActionFailed (internal/lifecycle).

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
	c.to(l, lifecycle.ActionFailed, now)
	l.LastMoveMS = now.UnixMilli() // hysteresis also after a failure
}

// actionDone takes an action the agent carried out.
func (c *Coordinator) actionDone(l *lineage, p *pending, r *report.Result, now time.Time) {
	switch report.ActionType(p.Type) {
	case report.ActionUpdate:
		c.to(l, lifecycle.UpdateDone, now)
		switch {
		case p.Decision.Kind == policy.Reorder:
			return // a place in the queue: no move, and no hysteresis for one
		case p.Decision.Rule == policy.RuleContinue:
			l.Conts++ // a self-requeued job's longer time limit
			l.Status.Continuations = l.Conts
		case p.Decision.Kind == policy.Shorten:
			// a limit from the prediction: the job did not move
		default:
			l.Moves++
		}
		l.LastMoveMS = now.UnixMilli()
	case report.ActionRequeue:
		// stays requeue-issued until the new attempt's start report, or
		// yields (held) until the job it yields to has started
		if p.Decision.Hold && c.to(l, lifecycle.Yielded, now) {
			l.YieldTo, l.YieldSinceMS = p.Decision.YieldTo, now.UnixMilli()
		}
	case report.ActionRelease:
		if c.to(l, lifecycle.Released, now) {
			l.YieldTo, l.YieldSinceMS = 0, 0
		}
	case report.ActionTwin, report.ActionCancel, report.ActionHandover:
		c.twinDone(l, p, r, now)
	case report.ActionResubmit:
		// the new job's: stays requeue-issued until its start report
		if r.NewJobID != 0 {
			old := l.Status.JobID // the job table may show the new job already
			if a := p.action(); a.JobID != 0 {
				old = a.JobID
			}
			c.resubmitted(l, old, r.NewJobID, p.Decision.Target, now)
		}
	}
}
