package policy

import (
	"cmp"
	"fmt"
	"slices"
	"time"
)

// Running is one of isched's running jobs as rule 8 (Preempt) sees it.
type Running struct {
	JobID uint64
	Queue string // its partition
	Gres  string // per node ("gpu:1"): what a waiting job could take in its place
	Nodes int    // nodes it holds (0: one)
	// Remaining is its predicted run left (0: unknown: never preempted).
	Remaining time.Duration
	// Attained is how long its current attempt has run.
	Attained time.Duration
	// Preemptions is how often rule 8 preempted its run so far.
	Preemptions int
	LastMoveAt  time.Time
	CkptDur     time.Duration // 0: the configured default
}

// Waiting is one of isched's pending jobs for rule 8.
type Waiting struct {
	Queued
	Gres  string // per node
	Nodes int    // nodes it asks (0: one)
	// Blocked: Slurm says it waits for resources or priority (not a
	// dependency, a hold or a limit of its own).
	Blocked bool
}

// Preemption is rule 8's choice: checkpoint and requeue Victim (held
// until For has started) so that For runs in its place.
type Preemption struct {
	Victim, For uint64
	Reason      string
}

// Preempt is rule 8 (issue 41, lever b: preemption by checkpoint, as
// Tiresias and Gandiva preempt): when one of isched's jobs waits behind
// one of isched's running jobs whose predicted run left is longer by more
// than MinGain × the preemption's cost (a checkpoint and a restart), the
// running one yields: it checkpoints, is requeued held, and is released
// once the waiting job has started. Of two jobs, running the shorter
// first lowers their summed completion time by the difference of their
// runs less the cost. The waiting job must have waited MinPending; the
// running one must have run MinInterval in its attempt, not have moved
// within MinInterval, and have been preempted fewer than MaxPreemptions
// times. The shortest waiting job is served first, by the running job
// with the longest run left. ok is false when nothing pays; why says so.
func Preempt(cfg Config, running []Running, waiting []Waiting, now time.Time) (p Preemption, ok bool, why string) {
	if !cfg.PreemptForShort {
		return p, false, "off (preempt_for_short is false)"
	}
	c := cfg.normalized()
	ws := slices.Clone(waiting)
	slices.SortStableFunc(ws, func(a, b Waiting) int {
		return cmp.Or(cmp.Compare(a.Remaining, b.Remaining), cmp.Compare(a.JobID, b.JobID))
	})
	why = "no isched job waits behind another's longer run"
	for _, w := range ws {
		if !w.Blocked || w.Remaining <= 0 || now.Sub(w.PendingSince) < c.MinPending {
			continue
		}
		if v, found, reason := victim(c, running, w, now); found {
			return Preemption{Victim: v.JobID, For: w.JobID, Reason: reason}, true, ""
		} else if reason != "" {
			why = reason
		}
	}
	return p, false, why
}

// victim is the running job that yields to w: on w's queue, holding at
// least w's nodes and GPUs on each, with the longest run left, where it
// pays.
func victim(c Config, running []Running, w Waiting, now time.Time) (Running, bool, string) {
	var best Running
	why := ""
	for _, r := range running {
		_, have := gpuRequest(r.Gres)
		if _, need := gpuRequest(w.Gres); r.Queue != w.Queue || have < need || max(r.Nodes, 1) < max(w.Nodes, 1) || r.Remaining <= 0 {
			continue
		}
		ckpt := r.CkptDur
		if ckpt <= 0 {
			ckpt = c.DefaultCkpt
		}
		cost := ckpt + c.MoveCost
		switch {
		case r.Preemptions >= c.MaxPreemptions:
			why = fmt.Sprintf("job %d was preempted %d times already (max %d)", r.JobID, r.Preemptions, c.MaxPreemptions)
		case r.Attained < c.MinInterval || !r.LastMoveAt.IsZero() && now.Sub(r.LastMoveAt) < c.MinInterval:
			why = fmt.Sprintf("job %d started or moved within %s (hysteresis)", r.JobID, dur(c.MinInterval))
		case float64(r.Remaining-w.Remaining) <= c.MinGain*float64(cost):
			why = fmt.Sprintf("job %d has %s left, job %d %s: the gain does not exceed %g × the cost %s",
				r.JobID, dur(r.Remaining), w.JobID, dur(w.Remaining), c.MinGain, dur(cost))
		case r.Remaining > best.Remaining:
			best = r
		}
	}
	if best.JobID == 0 {
		return best, false, why
	}
	ckpt := max(best.CkptDur, 0)
	if ckpt == 0 {
		ckpt = c.DefaultCkpt
	}
	return best, true, fmt.Sprintf("preempt: isched's job %d waits on %s with %s left, behind isched's job %d with %s left: "+
		"running the shorter first saves %s of completion time for the cost %s (checkpoint %s + restart %s); "+
		"checkpointing job %d, then requeueing it held until job %d has started",
		w.JobID, w.Queue, dur(w.Remaining), best.JobID, dur(best.Remaining), dur(best.Remaining-w.Remaining),
		dur(ckpt+c.MoveCost), dur(ckpt), dur(c.MoveCost), best.JobID, w.JobID)
}
