package policy

import (
	"fmt"
	"time"

	"github.com/isched/isched/internal/estimate"
)

// trimLimit is rule 6 (issue 41, lever d: time limits from predictions):
// a running job whose time limit lies far beyond its predicted end at
// worst gets a limit of that end plus a margin, so that Slurm's backfill
// can use the hole the user's guess held (EASY++: Tsafrir, Etsion and
// Feitelson, TPDS 2007). A miss is not the end of the run: rule 1 raises
// or checkpoints before the new limit, and rule 5 continues from the last
// checkpoint. So it acts only when both are possible: the estimate is
// steady, a checkpoint of the lineage is confirmed and continuations are
// on. ok is false when it does not act; status says why.
func (v *view) trimLimit() (d Decision, ok bool, status string) {
	j := v.j
	switch {
	case !v.cfg.TrimLimits:
		return d, false, "off (trim_time_limits is false)"
	case j.TimeLimit <= 0 || j.StartedAt.IsZero():
		return d, false, "time limit unknown"
	case !v.known:
		return d, false, "end unknown (" + v.unknownWhy() + ")"
	case j.Iter.Provisional:
		return d, false, "the iteration estimate is still provisional"
	case j.LastCkptAt.IsZero():
		return d, false, "no checkpoint confirmed yet: a miss would lose the whole attempt"
	case !j.LastMoveAt.IsZero() && v.now.Sub(j.LastMoveAt) < v.cfg.MinInterval:
		return d, false, fmt.Sprintf("the last action was %s ago (hysteresis %s)", dur(v.now.Sub(j.LastMoveAt)), dur(v.cfg.MinInterval))
	}
	if _, _, _, why, can := v.continuation(); !can {
		return d, false, "a miss could not be continued: " + why
	}
	eta := estimate.PredictEnd(v.now, j.Step, v.total, j.Iter, 0)
	worst := eta.High
	if j.ETAHigh.After(worst) {
		worst = j.ETAHigh // the coordinator's calibrated band, where it is wider
	}
	tl := trimmedLimit(v.now.Sub(j.StartedAt), worst.Sub(v.now), v.ckpt, v.cfg.Margin)
	freed := j.TimeLimit - tl
	if freed < v.cfg.TrimMin || tl > j.TimeLimit*4/5 {
		return d, false, fmt.Sprintf("the run needs %s at worst of its %s limit: less than %s or a fifth to free",
			dur(tl), dur(j.TimeLimit), dur(v.cfg.TrimMin))
	}
	d = Decision{Kind: Shorten, Rule: RuleTrimLimit, TimeLimit: tl, Reason: fmt.Sprintf(
		"trim limit: predicted end %s (at worst %s; %d of %d iterations left at %s each) is far before the time limit %s; "+
			"lowering the limit from %s to %s frees %s for backfill (a miss is continued from the checkpoint at step %d)",
		v.at(eta.End), v.at(worst), eta.Remaining, v.total, ms(v.per), v.at(j.StartedAt.Add(j.TimeLimit)),
		dur(j.TimeLimit), dur(tl), dur(freed), j.LastCkptStep)}
	return d, true, ""
}

// trimmedLimit is the time limit rule 6 asks for: what ran so far, the
// rest at worst with a tenth more, one checkpoint and the margin, in
// whole minutes (Slurm's unit).
func trimmedLimit(elapsed, rest, ckpt, margin time.Duration) time.Duration {
	return ceilMinute(elapsed + rest*11/10 + ckpt + margin)
}
