package coordinator

import (
	"fmt"
	"time"

	"github.com/isched/isched/internal/lifecycle"
	"github.com/isched/isched/internal/policy"
	"github.com/isched/isched/internal/report"
)

// Rule 10 (keep the place in the ideal queue, issue 41's lever c) in the
// coordinator. A run running off its plan's ideal partition, whose move
// there pays (policy.WantTwin), gets a twin: the agent submits the job's
// saved batch script once more, pending on the ideal partition (action
// "twin"; lifecycle.TwinSubmitted). The twin's id is the lineage's Twin:
// it is never adopted as the run's job. The job table tells the rest
// (followTwin): while it waits, its pending reason (policy.Job.TwinReason);
// once Slurm starts it (lifecycle.TwinStarted) the running attempt
// checkpoints (policy.TwinStarted), and when the checkpoint has landed the
// agent ends it (action "handover", only while the twin runs) and the
// lineage follows the twin (lifecycle.HandedOver): the twin's wrapper
// waits for the old attempt to be gone, then resumes from the checkpoint,
// and its start report settles the move.
//
// No twin is left behind: whenever the lineage is in neither twin phase
// (a drop, a refused handover, the run's end, a restart of the
// coordinator after any of them) while its Twin is set, decide cancels it
// before anything else (dropTwin), and Twin is cleared only once the job
// table shows it gone.

// twinPhase: the lineage's twin is meant to exist.
func twinPhase(s lifecycle.State) bool {
	return s == lifecycle.TwinPending || s == lifecycle.HandingOver
}

// followTwin brings what the lineage knows of its twin up to date with the
// job table: gone (lifecycle.TwinCancelled), started, or its pending
// reason. A table older than the twin's submission says nothing of it.
func (c *Coordinator) followTwin(l *lineage, now time.Time) {
	if l.Twin == 0 || c.jobsAt.UnixMilli() < l.TwinSinceMS {
		return
	}
	j, listed := c.jobs[l.Twin]
	switch {
	case !listed || slurmEnded(j.State):
		c.twinGone(l, fmt.Sprintf("twin job %d is %s", l.Twin, orState(j.State)), now) // unlisted: j is zero
	case j.State == "RUNNING" && l.Phase == lifecycle.TwinPending:
		if c.to(l, lifecycle.TwinStarted, now) {
			l.TwinReason = ""
			l.eventEach(now, "twin-started", fmt.Sprintf("Slurm started twin job %d on %s: job %d checkpoints and hands over", l.Twin, j.Partition, l.Status.JobID))
			c.kick = true
		}
	case j.State == "PENDING" && j.Reason != l.TwinReason:
		l.TwinReason, l.dirty = j.Reason, true
	}
}

// twinGone forgets the lineage's twin (why: what became of it); a run in
// a twin phase goes on where it is (lifecycle.TwinCancelled).
func (c *Coordinator) twinGone(l *lineage, why string, now time.Time) {
	l.Twin, l.TwinSinceMS, l.TwinReason, l.dirty = 0, 0, "", true
	switch l.Phase {
	case lifecycle.TwinPending, lifecycle.HandingOver, lifecycle.Idle, lifecycle.Ended:
		c.to(l, lifecycle.TwinCancelled, now)
	}
	l.CkptDecision = nil
	l.LastMoveMS = now.UnixMilli() // hysteresis: no new twin at once
	l.eventEach(now, "twin-gone", why)
}

// dropTwin is the decision that cancels a twin left behind (why).
func dropTwin(why string) policy.Decision {
	return policy.Decision{Kind: policy.DropTwin, Rule: policy.RuleKeepPlace, Reason: "keep place: " + why + ": cancelling the twin"}
}

// strayTwin says why the lineage's twin must go though no rule 10 step
// asked for it, or "": the lineage left the twin phases (a drop or a
// handover refused, the run ended).
func strayTwin(l *lineage) string {
	if l.Twin == 0 || twinPhase(l.Phase) {
		return ""
	}
	if l.ended() {
		return fmt.Sprintf("the run ended (%s) with twin job %d still queued", l.Status.State, l.Twin)
	}
	return fmt.Sprintf("job %d of the run outlived its handover (the run is %s in job %d)", l.Twin, l.Phase, l.Status.JobID)
}

// decideTwin is decide for a lineage in a twin phase: rule 10's next step.
func (c *Coordinator) decideTwin(l *lineage, j policy.Job, now time.Time) policy.Decision {
	cfg := c.policyConfig()
	if l.Phase == lifecycle.TwinPending {
		if l.End != nil || slurmEnded(j.State) {
			return dropTwin(fmt.Sprintf("job %d's attempt ended (%s) before its twin started; the run is settled without it", j.JobID, orState(j.State)))
		}
		d := policy.Decide(cfg, j, c.snap, now)
		if d.CancelTwin {
			// the twin goes first; the next round decides again without it
			return dropTwin(d.Reason)
		}
		return d
	}
	asked := l.CkptDecision != nil && l.CkptDecision.Then == policy.Handover
	switch {
	case !asked:
		return policy.TwinStarted(cfg, j, now)
	case l.Ckpts > l.CkptAtReq:
		d := policy.AfterCheckpoint(cfg, j, c.snap, now, *l.CkptDecision)
		if d.Kind == policy.None || d.Abandoned {
			return dropTwin(d.Reason)
		}
		return d
	}
	return policy.Decide(cfg, j, c.snap, now) // the checkpoint awaited: given up after its timeout
}

// orState is a job's state, or what its absence from the table means.
func orState(s string) string {
	if s == "" {
		return "no longer listed"
	}
	return s
}

// wantTwin is rule 10 asked after Decide found nothing to do for an idle
// running lineage: a twin decision, or d as it was.
func (c *Coordinator) wantTwin(l *lineage, j policy.Job, d policy.Decision, now time.Time) policy.Decision {
	if d.Kind != policy.None || d.Abandoned || l.Phase != lifecycle.Idle || l.Twin != 0 || !c.cfg.Policy.KeepPlace {
		return d
	}
	if t, ok := policy.WantTwin(c.policyConfig(), j, c.snap, now); ok {
		return t
	}
	return d
}

// twinSubmitted takes the agent's twin: the lineage keeps its id apart
// from its job's.
func (c *Coordinator) twinSubmitted(l *lineage, twin uint64, partition string, now time.Time) {
	l.Twin, l.TwinSinceMS, l.TwinReason = twin, now.UnixMilli(), ""
	l.eventEach(now, "twin-submitted", fmt.Sprintf("twin job %d waits on %s, keeping the run's place in its queue while job %d runs on %s",
		twin, partition, l.Status.JobID, l.Status.Partition))
}

// handedOver follows the lineage onto its twin, which now runs the run
// from the handover's checkpoint: the old attempt has ended (the agent
// cancelled it) and the twin's start report settles the move.
func (c *Coordinator) handedOver(l *lineage, twin uint64, partition string, now time.Time) {
	st := &l.Status
	old := st.JobID
	if !c.to(l, lifecycle.HandedOver, now) {
		return
	}
	l.End, l.CkptDecision = nil, nil
	st.JobID, st.Attempt, st.State, st.EndedMS = twin, 0, "RUNNING", 0
	if partition != "" {
		st.Partition = partition
	}
	l.RequeueRule = policy.RuleKeepPlace
	l.Twin, l.TwinSinceMS, l.TwinReason = 0, 0, ""
	l.eventEach(now, "handed-over", fmt.Sprintf("job %d checkpointed and ended; twin job %d on %s resumes the run from that checkpoint", old, twin, partition))
}

// twinDone takes the agent's result of a rule 10 step it carried out: the
// twin's submission, its cancel, the handover.
func (c *Coordinator) twinDone(l *lineage, p *pending, r *report.Result, now time.Time) {
	switch report.ActionType(p.Type) {
	case report.ActionTwin:
		if r.NewJobID != 0 {
			c.twinSubmitted(l, r.NewJobID, p.Decision.Target, now)
		}
	case report.ActionCancel:
		if p.Decision.Kind == policy.DropTwin && l.Twin != 0 {
			c.twinGone(l, fmt.Sprintf("isched cancelled twin job %d (%s)", l.Twin, p.Decision.Reason), now)
		}
	case report.ActionHandover:
		if twin := p.action().TwinJobID; twin != 0 && twin != l.Status.JobID {
			c.handedOver(l, twin, p.Decision.Target, now)
		}
	}
}

// twinRan takes a start report of the lineage's twin. During the handover
// (its wrapper saw the old attempt gone before the handover's result was
// read) the handover is done. Before it, the twin's command started beside
// the running attempt (its wrapper did not wait: --handover-wait 0, or
// Slurm could not be asked): the run follows the twin, which resumed from
// the last checkpoint on the ideal partition, and the old attempt becomes
// the job to cancel (strayTwin), so that two attempts do not go on
// writing one checkpoint directory.
func (c *Coordinator) twinRan(l *lineage, job *report.JobRef, now time.Time) {
	if job.JobID != l.Twin || l.Twin == 0 || !twinPhase(l.Phase) {
		return
	}
	if l.Phase == lifecycle.HandingOver && l.Pending != nil && l.Pending.Decision.Kind == policy.Handover {
		c.handedOver(l, job.JobID, job.Partition, now)
		return
	}
	old := l.Status.JobID
	if l.Phase == lifecycle.TwinPending && !c.to(l, lifecycle.TwinStarted, now) {
		return
	}
	c.handedOver(l, job.JobID, job.Partition, now)
	l.Twin, l.TwinSinceMS = old, now.UnixMilli()
	l.eventEach(now, "two-attempts", fmt.Sprintf("twin job %d started its command while job %d still ran (its wrapper did not wait for it): "+
		"the run goes on in job %d, job %d is cancelled", job.JobID, old, job.JobID, old))
}

// twinTarget fills in a twin step's action: the lineage's twin is the
// job a drop cancels and the one a handover hands over to.
func twinTarget(d policy.Decision, l *lineage, a *report.Action) {
	switch d.Kind {
	case policy.DropTwin:
		a.JobID = l.Twin
	case policy.Handover:
		a.TwinJobID = l.Twin
	}
}
