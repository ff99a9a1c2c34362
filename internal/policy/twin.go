package policy

import (
	"fmt"
	"strings"
	"time"

	"github.com/isched/isched/internal/lifecycle"
	"github.com/isched/isched/internal/report"
)

// Rule 10: keep the place in the ideal queue (issue 41, lever c).
//
// A run that started off its ideal partition (isched submit --policy
// immediate) moves there by rule 2 only when the ideal has room now; under
// the multifactor priority that room goes to the jobs queued there, and a
// requeue onto the ideal partition starts with a fresh age. Rule 10 keeps a
// twin job pending on the ideal partition while the run runs elsewhere, so
// that it ages in that queue; when Slurm starts the twin, the running
// attempt checkpoints and ends and the twin resumes from that checkpoint.

// WantTwin says whether the coordinator should submit a twin for a run
// (the phase lifecycle.Idle, running off its plan's ideal partition): a
// Decision of kind SubmitTwin with the twin's partition (Target), Gres,
// CPUs and TimeLimit, ok true; else ok false and the reason says why not.
// The coordinator asks it after Decide found nothing to do, so that rule 2
// moves the run at once where the ideal partition has room now.
func WantTwin(cfg Config, j Job, snap *report.Snapshot, now time.Time) (Decision, bool) {
	not := func(why string) (Decision, bool) {
		return Decision{Kind: None, Rule: RuleKeepPlace, Reason: "keep place: " + why}, false
	}
	if !cfg.KeepPlace {
		return not("off (keep_place is false)")
	}
	v := newView(cfg, j, snap, now)
	switch {
	case j.State != StateRunning:
		return not(fmt.Sprintf("the job is %s, not running", orUnknown(j.State)))
	case j.Phase != lifecycle.Idle:
		return not(fmt.Sprintf("isched has %s under way", j.Phase))
	}
	if why := v.migrateBlocked(); why != "" {
		return not(why)
	}
	p := j.Plan
	ideal := partition(snap, p.Ideal)
	switch {
	case ideal == nil:
		return not(fmt.Sprintf("ideal partition %s is not in the cluster snapshot", p.Ideal))
	case v.holdsGPUs() && !hasGPUs(ideal):
		return not(fmt.Sprintf("the job holds GPUs (%s) and %s has none", j.Gres, p.Ideal))
	}
	gain, why, ok := v.twinPays()
	if !ok {
		return not(why)
	}
	tl, tlWhy := v.limitFor(j.Partition, p.Ideal)
	return Decision{Kind: SubmitTwin, Rule: RuleKeepPlace, Target: p.Ideal, Gres: p.IdealGres, CPUs: p.IdealCPUs, TimeLimit: tl,
		Reason: fmt.Sprintf("keep place: %s; submitting a twin pending on %s%s, %s, to keep the run's place in that queue",
			gain, p.Ideal, gresText(p.IdealGres), tlWhy)}, true
}

// twinPays says whether moving the run onto its ideal partition pays:
// the time saved, remaining × (1 − speed here / speed ideal), must exceed
// MinGain × (restart + checkpoint), the handover's cost (it always takes
// a fresh checkpoint). gain says so with the numbers; why says why not.
func (v *view) twinPays() (gain, why string, ok bool) {
	savedMS, gain, _, why := v.savingOnIdeal()
	if why != "" {
		return "", why, false
	}
	costMS := toMS(v.cfg.MoveCost + v.ckpt)
	cost := fmt.Sprintf("%g × the cost %s (restart %s + checkpoint %s)", v.cfg.MinGain, dur(msDur(costMS)), dur(v.cfg.MoveCost), dur(v.ckpt))
	if savedMS <= v.cfg.MinGain*costMS {
		return "", gain + ", not more than " + cost, false
	}
	return gain + " > " + cost, "", true
}

// TwinStarted is what the coordinator does when Slurm has started a run's
// twin (the event lifecycle.TwinStarted; the phase is HandingOver): a
// Checkpoint whose Then is Handover (the running attempt checkpoints; once
// it has landed, AfterCheckpoint confirms the handover), a Handover at once
// when the run is not running but pending (Slurm requeued it elsewhere: its
// pending job is cancelled and the twin resumes from the last checkpoint),
// or DropTwin when the move no longer pays (the run is nearly done) or
// cannot be made: the twin is cancelled and the run stays.
func TwinStarted(cfg Config, j Job, now time.Time) Decision {
	v := newView(cfg, j, nil, now)
	drop := func(format string, a ...any) Decision {
		return Decision{Kind: DropTwin, Rule: RuleKeepPlace, Reason: "keep place: the twin started, but " + fmt.Sprintf(format, a...) + ": cancelling the twin, the run stays"}
	}
	p := j.Plan
	switch {
	case p == nil:
		return drop("no isched plan")
	case resumeBroken(&j) != "":
		return drop("%s", resumeBroken(&j))
	case j.State == StatePending:
		return Decision{Kind: Handover, Rule: RuleKeepPlace, Target: p.Ideal, Gres: p.IdealGres, CPUs: p.IdealCPUs,
			Reason: fmt.Sprintf("keep place: the twin started on %s while the run pends on %s: cancelling the pending job, "+
				"the twin resumes from the last checkpoint at step %d", p.Ideal, j.Partition, j.LastCkptStep)}
	case j.State != StateRunning:
		return drop("the run is %s", orUnknown(j.State))
	case j.Partition == p.Ideal:
		return drop("the run already runs on %s", p.Ideal)
	}
	gain, why, ok := v.twinPays()
	if !ok {
		return drop("%s", why)
	}
	return Decision{Kind: Checkpoint, Then: Handover, Rule: RuleKeepPlace, Target: p.Ideal, Gres: p.IdealGres, CPUs: p.IdealCPUs,
		Reason: fmt.Sprintf("keep place: the twin started on %s; %s; checkpointing, then the attempt on %s ends and the twin resumes from the checkpoint",
			p.Ideal, gain, j.Partition)}
}

// handover: the handover's checkpoint landed (AfterCheckpoint):
// the attempt ends and the twin resumes, unless the run is done.
func (a afterCkpt) handover() Decision {
	j, p := a.j, a.pending
	if p.Then != Handover {
		return a.abandon("checkpoint saved; nothing follows: %s", p.Reason)
	}
	return Decision{Kind: Handover, Rule: RuleKeepPlace, Target: p.Target, Gres: p.Gres, CPUs: p.CPUs,
		Reason: fmt.Sprintf("keep place: checkpoint at step %d saved; the attempt on %s ends and the twin on %s resumes from it",
			a.resume.Step, j.Partition, p.Target)}
}

// twinPending is Decide for a run whose twin waits (lifecycle.TwinPending):
// rule 1 still guards the running attempt's time limit (the twin is
// cancelled first: Decision.CancelTwin); rule 2 does not move the run while
// the ideal partition is full (the twin starts when it frees in its turn),
// but does, cancelling the twin first, when the ideal has room and a limit
// holds the twin (Job.TwinReason): the twin adds to its owner's and
// account's use while the run still holds its own, so an account at its
// GrpTRES quota cannot start it, and a requeue can.
// The twin is dropped when the move stops paying; rule 6 may trim the
// limit.
func (v *view) twinPending() Decision {
	const noMigrate = "migration: not while a twin keeps the run's place"
	if v.j.State != StateRunning {
		return Decision{Kind: None, Rule: RuleKeepPlace, Reason: fmt.Sprintf("keep place: the twin waits on %s; the run is %s",
			v.j.Plan.Ideal, orUnknown(v.j.State))}
	}
	d, ok, s1 := v.timeLimit()
	if ok {
		d.CancelTwin = true
		d.Reason += "; cancelling the twin first"
		return d
	}
	if limitHeld(v.j.TwinReason) {
		if d, ok, _ := v.migrate(); ok {
			d.CancelTwin = true
			d.Reason += fmt.Sprintf("; a limit holds the twin (%s) though %s has room: cancelling the twin first",
				v.j.TwinReason, v.j.Plan.Ideal)
			return d
		}
	}
	if _, why, pays := v.twinPays(); !pays {
		return Decision{Kind: DropTwin, Rule: RuleKeepPlace, Reason: "keep place: a move no longer pays (" + why + "): cancelling the twin"}
	}
	if d, ok, s6 := v.trimLimit(); ok {
		return d
	} else {
		return Decision{Kind: None, Reason: fmt.Sprintf("keep place: the twin waits on %s; time limit: %s; %s; trim limit: %s",
			v.j.Plan.Ideal, s1, noMigrate, s6)}
	}
}

// handingOver is Decide while the handover's checkpoint is awaited: given
// up, with the twin cancelled, as rule 2's move is (awaiting); but a run
// Slurm requeued meanwhile (it pends) hands over at once from its last
// checkpoint, as TwinStarted does.
func (v *view) handingOver() Decision {
	if v.j.State == StatePending && v.j.Plan != nil {
		return TwinStarted(v.cfg, v.j, v.now)
	}
	d := v.awaiting()
	d.Rule = RuleKeepPlace
	if d.Abandoned {
		d.Kind, d.Reason = DropTwin, "keep place: "+d.Reason+"; the twin is cancelled"
	}
	return d
}

// limitHeld says whether a pending reason of Slurm's is one of its
// association or QOS limits (AssocGrpGRES, QOSMaxGRESPerUser, ...), not
// a wait for resources or priority.
func limitHeld(reason string) bool {
	return strings.HasPrefix(reason, "Assoc") || strings.HasPrefix(reason, "QOS")
}
