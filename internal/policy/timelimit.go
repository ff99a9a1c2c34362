package policy

import (
	"fmt"
	"strings"
	"time"

	"github.com/isched/isched/internal/estimate"
)

// Rule 1, the time limit: checkpoint at the last safe moment and requeue
// with a limit covering the rest (or extend), and the continuation target
// rules 1 and 5 share.

// timeLimit is rule 1. ok is false when it does not act; status says why.
func (v *view) timeLimit() (d Decision, ok bool, status string) {
	j := v.j
	if j.TimeLimit <= 0 || j.StartedAt.IsZero() {
		return d, false, "time limit unknown"
	}
	limitAt := j.StartedAt.Add(j.TimeLimit)
	if !v.now.Before(limitAt) {
		return d, false, fmt.Sprintf("past its time limit %s", v.at(limitAt))
	}
	deadline := limitAt.Add(-v.ckpt - v.cfg.Margin)
	var pred string
	if v.known {
		eta := estimate.PredictEnd(v.now, j.Step, v.total, j.Iter, 0)
		pred = fmt.Sprintf("predicted end %s (at worst %s; %d of %d iterations left at %s each)",
			v.at(eta.End), v.at(eta.High), eta.Remaining, v.total, ms(v.per))
		if !eta.High.After(limitAt.Add(-v.cfg.Margin)) {
			return d, false, fmt.Sprintf("%s is before the time limit %s less the margin %s", pred, v.at(limitAt), dur(v.cfg.Margin))
		}
		if ext, ok := v.extend(limitAt, deadline, eta); ok {
			return ext, true, ""
		}
	} else {
		pred = "end unknown (" + v.unknownWhy() + ")"
	}
	if v.now.Before(deadline) {
		return d, false, fmt.Sprintf("%s, time limit %s: will checkpoint at %s (limit − checkpoint %s − margin %s)",
			pred, v.at(limitAt), v.at(deadline), dur(v.ckpt), dur(v.cfg.Margin))
	}
	if half := j.StartedAt.Add(j.TimeLimit / 2); j.NoStepYet && v.now.Before(half) {
		// A short allocation is past its deadline from the start. A request
		// now finds nothing new to save, and a script still importing has
		// not installed its handler: the signal's default action ends it.
		return d, false, fmt.Sprintf("%s, time limit %s: this attempt has reported no step yet; no checkpoint request before its first step (or %s, half its time limit)",
			pred, v.at(limitAt), v.at(half))
	}
	var b strings.Builder
	fmt.Fprintf(&b, "time limit: %s; the time limit is %s (%s from %s); a checkpoint takes ~%s and the margin is %s, so checkpointing now",
		pred, v.at(limitAt), dur(j.TimeLimit), v.at(j.StartedAt), dur(v.ckpt), dur(v.cfg.Margin))
	if !v.known {
		b.WriteString(" as insurance (Slurm ends a job at its limit without requeueing it)")
	}
	if v.now.Add(v.ckpt).After(limitAt) {
		fmt.Fprintf(&b, " (late: %s before the limit, it may not land in time)", dur(limitAt.Sub(v.now)))
	}
	d = Decision{Kind: Checkpoint, Rule: RuleTimeLimit, Then: None}
	target, gres, tl, why, ok := v.continuation()
	if ok {
		d.Then, d.Target, d.Gres, d.TimeLimit = Requeue, target, gres, tl
		fmt.Fprintf(&b, ", then requeue onto %s", why)
	} else {
		fmt.Fprintf(&b, "; then nothing: %s", why)
	}
	d.Reason = b.String()
	return d, true, ""
}

// extend is rule 1's alternative when AllowExtend: raise the limit before
// the deadline to cover the pessimistic end plus 10% and the margin,
// capped at the partition's MaxTime.
func (v *view) extend(limitAt, deadline time.Time, eta estimate.ETA) (Decision, bool) {
	j := v.j
	if !v.cfg.AllowExtend || j.NoExtend || v.snap == nil || j.Iter.Provisional || !v.now.Before(deadline) {
		return Decision{}, false
	}
	p := partition(v.snap, j.Partition)
	if p == nil {
		return Decision{}, false
	}
	need := v.now.Sub(j.StartedAt) + eta.High.Sub(v.now)*11/10 + v.cfg.Margin
	tl := ceilMinute(need)
	capNote := ""
	if mt, ok := maxTime(p); ok && tl > mt {
		tl, capNote = mt, fmt.Sprintf(" (the partition's maximum; the run needs %s, a checkpoint will follow before the new limit)", dur(ceilMinute(need)))
	}
	if tl < j.TimeLimit+time.Minute {
		return Decision{}, false
	}
	return Decision{Kind: Extend, Rule: RuleTimeLimit, TimeLimit: tl, Reason: fmt.Sprintf(
		"time limit: predicted end %s (at worst %s) is past the time limit %s; extending the limit from %s to %s%s",
		v.at(eta.End), v.at(eta.High), v.at(limitAt), dur(j.TimeLimit), dur(tl), capNote)}, true
}

// continuation chooses where rule 1 requeues a job: its ideal partition
// when it was on a dev chunk or the ideal one has room now (and the plan
// allows migration), else the same partition. ok is false when the job
// must not be requeued at all.
func (v *view) continuation() (target, gres string, tl time.Duration, why string, ok bool) {
	j, p := v.j, v.j.Plan
	if p == nil {
		return "", "", 0, "no isched plan, so the job may not resume from a checkpoint: not requeued", false
	}
	if v.cfg.NoContinuations {
		return "", "", 0, "continuations are off (max_continuations 0): not requeued", false
	}
	if v.cfg.MaxContinuations > 0 && j.Continuations >= v.cfg.MaxContinuations {
		return "", "", 0, fmt.Sprintf("already continued %d times (max %d): not requeued again (does the script resume from ISCHED_RESUME_FROM?)",
			j.Continuations, v.cfg.MaxContinuations), false
	}
	if why := resumeBroken(&j); why != "" {
		return "", "", 0, why + ": not requeued", false
	}
	target, where := j.Partition, "the same partition "+j.Partition
	if p.Migrate && p.Ideal != "" && p.Ideal != j.Partition {
		ideal := partition(v.snap, p.Ideal)
		compatible := ideal == nil || !v.holdsGPUs() || hasGPUs(ideal)
		switch {
		case !compatible:
		case v.cfg.isDev(j.Partition):
			target, where = p.Ideal, fmt.Sprintf("its ideal partition %s (end of a dev chunk)", p.Ideal)
		case ideal != nil:
			if ok, r := room(ideal, v.idealAsk()); ok && ownerHeld(v.snap, &j, p.Ideal, p.IdealGres) == "" {
				target, where = p.Ideal, fmt.Sprintf("its ideal partition %s (%s)", p.Ideal, r)
			}
		}
	}
	if target != j.Partition {
		gres = p.IdealGres
	}
	tl, tlWhy := v.limitFor(j.Partition, target)
	return target, gres, tl, where + gresText(gres) + ", " + tlWhy, true
}

// limitFor is the time limit for the rest of the run on target, converting
// the iteration time measured on from by the partitions' speeds.
func (v *view) limitFor(from, target string) (time.Duration, string) {
	mt, capped := maxTime(partition(v.snap, target))
	if v.known {
		restMS := float64(v.rem) * v.high * v.speed(from) / v.speed(target)
		tl := ceilMinute(msDur(restMS) + v.cfg.MoveCost + v.ckpt + v.cfg.Margin)
		if capped && tl > mt {
			return mt, fmt.Sprintf("time limit %s (the partition's maximum; the rest needs %s)", dur(mt), dur(tl))
		}
		return tl, fmt.Sprintf("time limit %s (%d iterations at worst %s each there, plus restart %s, checkpoint %s and margin %s)",
			dur(tl), v.rem, ms(v.high*v.speed(from)/v.speed(target)), dur(v.cfg.MoveCost), dur(v.ckpt), dur(v.cfg.Margin))
	}
	if p := v.j.Plan; p != nil && target == p.Ideal && p.IdealTime > 0 {
		tl := time.Duration(p.IdealTime) * time.Minute
		if capped && tl > mt {
			tl = mt
		}
		return tl, fmt.Sprintf("the plan's time limit %s", dur(tl))
	}
	return 0, "time limit unchanged (remaining work unknown)"
}
