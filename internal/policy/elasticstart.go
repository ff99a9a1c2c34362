package policy

import (
	"fmt"
	"time"

	"github.com/isched/isched/internal/report"
)

// StartRoom is what StartSize weighs for a new elastic run: its
// partition's GPUs (QueueRoom), a node's GPUs there, its owner's room
// under their limits (GPULimitRoom: -1 none) and the run's predicted
// length at its base size (0: unknown).
type StartRoom struct {
	Queue     QueueRoom
	PerNode   int
	LimitRoom int
	Run       time.Duration
}

// StartSize is rule 9 at submission: the size an elastic run of range e
// asks Slurm for. Growing a running run costs a checkpoint and a restart;
// starting larger costs nothing, so a run that arrives while GPUs sit
// idle starts on them: at the largest size up to e.Max that one node's
// idle GPUs hold, when no job waits on the partition, its owner's limits
// allow it, the headroom (ElasticHeadroom) stays idle, and the time it saves
// (its predicted run at its base less that at the size, ScalingEfficiency
// per doubling) beats MinGain × the shrink that may follow. Otherwise it
// starts at e.Min. why says which.
func StartSize(cfg Config, e report.Elastic, r StartRoom) (int, string) {
	if !cfg.Elastic {
		return e.Min, "elastic is off: the run starts at its base"
	}
	c := cfg.normalized()
	q := r.Queue
	switch {
	case q.Demand > 0:
		return e.Min, fmt.Sprintf("jobs wait for %d GPUs: the run starts at its base, %d", q.Demand, e.Min)
	case r.Run <= 0:
		return e.Min, fmt.Sprintf("its run time is not predicted: it starts at its base, %d", e.Min)
	}
	most := min(e.Max, q.MostFree, q.Idle-c.headroom(q))
	if r.PerNode > 0 {
		most = min(most, r.PerNode)
	}
	if r.LimitRoom >= 0 {
		most = min(most, r.LimitRoom)
	}
	if most <= e.Min {
		limits := ""
		if r.LimitRoom >= 0 {
			limits = fmt.Sprintf(", %d under its owner's limits", r.LimitRoom)
		}
		return e.Min, fmt.Sprintf("%d GPUs idle (%d on one node), %d kept for arrivals%s: it starts at its base, %d",
			q.Idle, q.MostFree, c.headroom(q), limits, e.Min)
	}
	shrink := c.DefaultCkpt + c.MoveCost
	run := ElasticRun{Size: e.Min, Min: e.Min}
	for s := most; s > e.Min; s-- {
		rate, _ := run.rate(s, c.ScalingEfficiency)
		saved := r.Run - time.Duration(float64(r.Run)/rate)
		if float64(saved) > c.MinGain*float64(shrink) {
			return s, fmt.Sprintf("elastic: %d GPUs idle on one node and no job waits: it starts at %d GPUs, "+
				"%s sooner than at %d (scaling efficiency %.2f per doubling)", q.MostFree, s, dur(saved), e.Min, c.ScalingEfficiency)
		}
	}
	return e.Min, fmt.Sprintf("its predicted run, %s, is too short for more GPUs to beat %g × a shrink's cost %s: it starts at its base, %d",
		dur(r.Run), c.MinGain, dur(shrink), e.Min)
}

// WaitingRun is an elastic run in Slurm's queue.
type WaitingRun struct {
	JobID     uint64
	Queue     string
	Size, Min int
	PerNode   int           // a node's GPUs on Queue (0: unknown)
	Waited    time.Duration // since it was queued: submitted, or requeued at Size
	Blocked   bool          // it waits for resources or priority (Slurm's reason), not a hold or a limit
}

// ShrinkWaiting is rule 9 for the runs that wait: an elastic run queued
// above its base (sized at submission, or requeued to grow, onto GPUs
// that others took meanwhile) that has waited MinPending for resources or
// priority goes back to its base by an update of the pending job, so that
// it starts on what there is instead of waiting for GPUs that were idle
// when its size was chosen.
func ShrinkWaiting(cfg Config, runs []WaitingRun) []ResizeChoice {
	if !cfg.Elastic {
		return nil
	}
	c := cfg.normalized()
	var out []ResizeChoice
	for i := range runs {
		w := &runs[i]
		if w.Size <= w.Min || !w.Blocked || w.Waited < c.MinPending {
			continue
		}
		r := ElasticRun{JobID: w.JobID, Queue: w.Queue, Size: w.Size, Min: w.Min, PerNode: w.PerNode}
		to, nodes, gres := placement(&r, w.Min)
		out = append(out, ResizeChoice{JobID: w.JobID, Queue: w.Queue, From: w.Size, To: to, Nodes: nodes, Gres: gres, Shrink: true,
			Reason: fmt.Sprintf("elastic: job %d has waited %s at %d GPUs for GPUs that were idle when its size was chosen: "+
				"setting it back to its base, %d GPUs, to start on what there is", w.JobID, dur(w.Waited), w.Size, to)})
	}
	return out
}
