package policy

import (
	"fmt"
	"time"

	"github.com/isched/isched/internal/estimate"
	"github.com/isched/isched/internal/report"
)

// A requested checkpoint: what follows once it lands (AfterCheckpoint, for
// rules 1 and 2), and waiting for it until it is given up (awaiting).

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
	case pending.Then == Handover:
		// rule 10: the twin resumes from the checkpoint (below)
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
	a := afterCkpt{v: v, rv: rv, j: j, snap: snap, now: now, pending: pending, resume: resume, abandon: abandon}
	switch pending.Rule {
	case RulePreempt:
		return a.preempt()
	case RuleElastic:
		return a.elastic()
	case RuleTimeLimit:
		return a.timeLimit()
	case RuleMigrate:
		return a.migrate()
	case RuleKeepPlace:
		return a.handover()
	}
	return abandon("checkpoint saved; unknown rule %q: nothing follows", pending.Rule)
}

// afterCkpt is what AfterCheckpoint knows when the checkpoint of a move
// landed: the views of the job as it is (v) and as it resumes (rv, from
// the checkpoint), and how the move is given up.
type afterCkpt struct {
	v, rv   *view
	j       Job
	snap    *report.Snapshot
	now     time.Time
	pending Decision
	resume  Job
	abandon func(format string, a ...any) Decision
}

// preempt: rule 8's requeue, held until the job it yields to starts.
func (a afterCkpt) preempt() Decision {
	j, pending := a.j, a.pending
	if pending.YieldTo == 0 {
		return a.abandon("checkpoint saved; no job to yield to: staying on %s", j.Partition)
	}
	tl, tlWhy := a.rv.limitFor(j.Partition, j.Partition)
	return Decision{Kind: Requeue, Rule: RulePreempt, Target: j.Partition, Gres: pending.Gres, TimeLimit: tl, Hold: true, YieldTo: pending.YieldTo,
		Reason: fmt.Sprintf("preempt: checkpoint at step %d saved; requeueing onto %s, held until job %d has started, %s",
			a.resume.Step, j.Partition, pending.YieldTo, tlWhy)}
}

// elastic: rule 9's requeue at the new size. A growth is given up when
// the partition no longer has the GPUs it adds idle (a job arrived since
// the checkpoint was asked for); a shrink always goes on.
func (a afterCkpt) elastic() Decision {
	j, pending := a.j, a.pending
	_, want := gpuRequest(pending.Gres)
	_, have := gpuRequest(j.Gres)
	if add := want*max(pending.Nodes, 1) - have*max(j.Nodes, 1); add > 0 && a.snap != nil {
		if held := ownerHeld(a.snap, &j, j.Partition, pending.Gres); held != "" {
			return a.abandon("checkpoint saved; %s: staying at %d GPUs", held, have*max(j.Nodes, 1))
		}
		if p := partition(a.snap, j.Partition); p != nil {
			if idle, _ := gpus(p, ""); idle < add {
				return a.abandon("checkpoint saved; %s has %d GPUs idle, fewer than the %d the run would add: staying at %d GPUs",
					j.Partition, idle, add, have*max(j.Nodes, 1))
			}
		}
	}
	// the time limit stays: it was set for the run at its base size
	return Decision{Kind: Requeue, Rule: RuleElastic, Target: j.Partition, Gres: pending.Gres, Tasks: pending.Tasks, Nodes: pending.Nodes,
		Reason: fmt.Sprintf("elastic: checkpoint at step %d saved; requeueing onto %s at %d tasks (%s per node, %d nodes), its time limit unchanged",
			a.resume.Step, j.Partition, pending.Tasks, pending.Gres, max(pending.Nodes, 1))}
}

// timeLimit: rule 1's requeue, unless the run now ends in time.
func (a afterCkpt) timeLimit() Decision {
	j, v, pending := a.j, a.v, a.pending
	if j.TimeLimit > 0 && !j.StartedAt.IsZero() && v.known {
		limitAt := j.StartedAt.Add(j.TimeLimit)
		eta := estimate.PredictEnd(a.now, j.Step, v.total, j.Iter, 0)
		if !eta.High.After(limitAt.Add(-v.cfg.Margin)) {
			return a.abandon("checkpoint saved; the job now ends by %s (at worst), before its time limit %s: not requeued",
				v.at(eta.High), v.at(limitAt))
		}
	}
	target, gres, tl, why := pending.Target, pending.Gres, pending.TimeLimit, "as decided at the checkpoint request"
	if a.snap != nil {
		var ok bool
		if target, gres, tl, why, ok = a.rv.continuation(); !ok {
			return a.abandon("checkpoint saved; %s", why)
		}
	}
	return Decision{Kind: Requeue, Rule: RuleTimeLimit, Target: target, Gres: gres, TimeLimit: tl,
		Reason: fmt.Sprintf("time limit: checkpoint at step %d saved; requeueing onto %s", a.resume.Step, why)}
}

// migrate: rule 2's requeue, if the target still has room.
func (a afterCkpt) migrate() Decision {
	j, pending, snap := a.j, a.pending, a.snap
	if snap == nil {
		return a.abandon("checkpoint saved; no fresh cluster snapshot to confirm room on %s: staying on %s", pending.Target, j.Partition)
	}
	ok, r := room(partition(snap, pending.Target), ask{pending.Gres, cpusOr(pending.CPUs, j.CPUs), j.Mem})
	if !ok {
		return a.abandon("checkpoint saved; %s has no room any more (%s): staying on %s", pending.Target, r, j.Partition)
	}
	if held := ownerHeld(snap, &j, pending.Target, pending.Gres); held != "" {
		return a.abandon("checkpoint saved; on %s %s: staying on %s", pending.Target, held, j.Partition)
	}
	tl, tlWhy := a.rv.limitFor(j.Partition, pending.Target)
	return Decision{Kind: Requeue, Rule: RuleMigrate, Target: pending.Target, Gres: pending.Gres, TimeLimit: tl,
		Reason: fmt.Sprintf("migrate: checkpoint at step %d saved and %s still; requeueing onto %s%s, %s",
			a.resume.Step, r, pending.Target, gresText(pending.Gres), tlWhy)}
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
