package policy

import (
	"fmt"
	"math"
)

// Rules 2 and 4: migrate a running job to its ideal partition.

// migrate is rule 2 (and 4): to the ideal partition when it has room and
// the move pays.
func (v *view) migrate() (d Decision, ok bool, status string) {
	j, p := v.j, v.j.Plan
	if why := v.migrateBlocked(); why != "" {
		return d, false, why
	}
	roomWhy, why := v.idealRoom()
	if why != "" {
		return d, false, why
	}
	savedMS, saving, slower, why := v.savingOnIdeal()
	switch {
	case slower:
		return d, false, roomWhy + "; but " + why
	case why != "":
		return d, false, why
	}
	c := v.moveCost()
	gain := roomWhy + "; " + saving
	if savedMS <= v.cfg.MinGain*c.ms {
		return d, false, fmt.Sprintf("%s, not more than %g × the cost %s", gain, v.cfg.MinGain, c.text)
	}
	tl, tlWhy := v.limitFor(j.Partition, p.Ideal)
	d = Decision{Rule: RuleMigrate, Target: p.Ideal, Gres: p.IdealGres, TimeLimit: tl}
	head := fmt.Sprintf("migrate: %s > %g × the cost %s", gain, v.cfg.MinGain, c.text)
	if c.direct {
		d.Kind = Requeue
		d.Reason = fmt.Sprintf("%s; the last checkpoint is recent (%s), so requeueing now onto %s%s, %s",
			head, c.lostWhy, p.Ideal, gresText(p.IdealGres), tlWhy)
	} else {
		d.Kind, d.Then = Checkpoint, Requeue
		d.Reason = fmt.Sprintf("%s; checkpointing, then requeue onto %s%s, %s", head, p.Ideal, gresText(p.IdealGres), tlWhy)
	}
	return d, true, ""
}

// savingOnIdeal is the run left here that the ideal partition's speed
// saves, remaining × (1 − speed here / speed ideal), and the figures
// behind it (saving); why says why there is none: the ideal is not faster
// (slower), or the run left is unknown.
func (v *view) savingOnIdeal() (savedMS float64, saving string, slower bool, why string) {
	j, p := v.j, v.j.Plan
	sHere, sIdeal := v.speed(j.Partition), v.speed(p.Ideal)
	if sIdeal <= sHere {
		return 0, "", true, fmt.Sprintf("%s (%s) is not faster than %s (%s)", p.Ideal, v.speedText(p.Ideal), j.Partition, v.speedText(j.Partition))
	}
	remMS, basis, known := v.remainingMS()
	if !known {
		return 0, "", false, basis
	}
	savedMS = remMS * (1 - sHere/sIdeal)
	return savedMS, fmt.Sprintf("on %s (%s) vs %s (%s) %s, saving %s",
		j.Partition, v.speedText(j.Partition), p.Ideal, v.speedText(p.Ideal), basis, dur(msDur(savedMS))), false, ""
}

// migrateBlocked says why rule 2 cannot move the job whatever the
// cluster holds ("" when it may).
func (v *view) migrateBlocked() string {
	j, p := v.j, v.j.Plan
	switch {
	case p == nil:
		return "no isched plan"
	case j.Partition == p.Ideal:
		return "on its ideal partition " + p.Ideal
	case !p.Migrate:
		return "the plan does not allow migration"
	case v.snap == nil:
		return "no fresh cluster snapshot"
	case v.cfg.MaxMoves > 0 && j.Moves >= v.cfg.MaxMoves:
		return fmt.Sprintf("already migrated %d times (max %d)", j.Moves, v.cfg.MaxMoves)
	case resumeBroken(&j) != "":
		return resumeBroken(&j) + ": a move would lose the work"
	case !j.LastMoveAt.IsZero() && v.now.Sub(j.LastMoveAt) < v.cfg.MinInterval:
		return fmt.Sprintf("moved %s ago, no migration within %s of a move", dur(v.now.Sub(j.LastMoveAt)), dur(v.cfg.MinInterval))
	}
	return ""
}

// idealRoom says what room the ideal partition has for the job, or why
// it has none for it (why).
func (v *view) idealRoom() (roomWhy, why string) {
	j, p := v.j, v.j.Plan
	ideal := partition(v.snap, p.Ideal)
	if ideal == nil {
		return "", fmt.Sprintf("ideal partition %s is not in the cluster snapshot", p.Ideal)
	}
	if v.holdsGPUs() && !hasGPUs(ideal) {
		return "", fmt.Sprintf("the job holds GPUs (%s) and %s has none; a GPU request cannot be dropped", j.Gres, p.Ideal)
	}
	hasRoom, roomWhy := room(ideal, v.idealAsk())
	if !hasRoom {
		return "", "no room on the ideal partition: " + roomWhy
	}
	if held := ownerHeld(v.snap, &j, p.Ideal, p.IdealGres); held != "" {
		return "", fmt.Sprintf("%s has room, but %s", p.Ideal, held)
	}
	return roomWhy, ""
}

// remainingMS is the run left here in milliseconds and how it was
// reckoned (basis); known is false when it cannot be (basis says why).
func (v *view) remainingMS() (remMS float64, basis string, known bool) {
	j := v.j
	switch {
	case v.known && !j.Iter.Provisional:
		remMS = float64(v.rem) * v.per
		return remMS, fmt.Sprintf("%d iterations left take ~%s here", v.rem, dur(msDur(remMS))), true
	case !j.StartedAt.IsZero() && v.now.After(j.StartedAt):
		remMS = toMS(v.now.Sub(j.StartedAt))
		why := v.unknownWhy()
		if v.known {
			why = "iteration time still provisional"
		}
		return remMS, fmt.Sprintf("remaining time unknown (%s), taken to be as long as it has run so far, %s", why, dur(msDur(remMS))), true
	}
	return 0, "remaining time unknown and the start time too", false
}

// cost is what a move costs: the restart and the cheaper of a fresh
// checkpoint and redoing the work since the last one (direct: redoing).
type cost struct {
	ms            float64
	text, lostWhy string
	direct        bool
}

func (v *view) moveCost() cost {
	j := v.j
	ckptMS := toMS(v.ckpt)
	lostMS, lostWhy := math.Inf(1), "no checkpoint yet"
	if !j.LastCkptAt.IsZero() {
		if v.per > 0 && j.Step >= j.LastCkptStep {
			lostMS = float64(j.Step-j.LastCkptStep) * v.per
			lostWhy = fmt.Sprintf("%d iterations since the last checkpoint, %s", j.Step-j.LastCkptStep, dur(msDur(lostMS)))
		} else {
			lostMS = toMS(v.now.Sub(j.LastCkptAt))
			lostWhy = fmt.Sprintf("last checkpoint %s ago", dur(msDur(lostMS)))
		}
	}
	c := cost{ms: toMS(v.cfg.MoveCost) + min(ckptMS, lostMS), lostWhy: lostWhy, direct: lostMS < ckptMS}
	c.text = fmt.Sprintf("%s (restart %s + checkpoint %s)", dur(msDur(c.ms)), dur(v.cfg.MoveCost), dur(v.ckpt))
	if c.direct {
		c.text = fmt.Sprintf("%s (restart %s + redoing %s)", dur(msDur(c.ms)), dur(v.cfg.MoveCost), lostWhy)
	}
	return c
}
