package policy

import (
	"cmp"
	"fmt"
	"slices"
	"time"

	"github.com/isched/isched/internal/estimate"
)

// Queued is one of isched's pending jobs as rule 7 (Order) sees it: where
// it waits, its priority in Slurm's queue there and its nice value, and
// its predicted remaining run.
type Queued struct {
	JobID uint64
	// Queue is where the job competes: its partition (or its partitions'
	// list while it is pending on several).
	Queue    string
	Priority int64 // Slurm's, with Nice in it
	Nice     int64
	// Remaining is the predicted run left (0: unknown: the job keeps its
	// place and takes no part in the exchange).
	Remaining time.Duration
	// PendingSince is when the job became eligible (its submission, or its
	// last requeue).
	PendingSince time.Time
}

// Place is one job's new place: the nice value that gives it Priority.
type Place struct {
	JobID    uint64
	Nice     int64 // the value to set (scontrol update Nice=)
	Priority int64 // the priority it then has
	Reason   string
}

// MaxNice bounds the nice values Order asks for: Slurm takes
// -2147483645..2147483645 (NICE_OFFSET - 3).
const MaxNice = 2147483645

// Order is rule 7 (issue 41, lever a: shortest predicted remaining time
// first, as Helios's QSSF and Tiresias order jobs): within each queue it
// exchanges the priorities isched's pending jobs hold, so that the one
// with the least predicted run left holds the highest of them. The
// priorities held stay the same set, so every job outside isched keeps
// the number of isched's jobs ahead of it: none waits longer because of
// the exchange than Slurm alone would have made it wait behind isched's
// jobs. A job waiting longer than maxWait (the starvation guard) keeps
// its place, and so does a job whose remaining run is unknown. It returns
// the jobs whose nice value must change, in job order; none when cfg
// does not order (OrderByRemaining false).
func Order(cfg Config, q []Queued, now time.Time) []Place {
	if !cfg.OrderByRemaining {
		return nil
	}
	maxWait := cfg.normalized().OrderMaxWait
	byQueue := map[string][]Queued{}
	for _, j := range q {
		byQueue[j.Queue] = append(byQueue[j.Queue], j)
	}
	var out []Place
	for _, queue := range slicesSorted(byQueue) {
		out = append(out, orderQueue(byQueue[queue], now, maxWait)...)
	}
	slices.SortFunc(out, func(a, b Place) int { return cmp.Compare(a.JobID, b.JobID) })
	return out
}

// orderQueue exchanges priorities within one queue.
func orderQueue(jobs []Queued, now time.Time, maxWait time.Duration) []Place {
	var movable []Queued
	for _, j := range jobs {
		if j.Remaining > 0 && now.Sub(j.PendingSince) < maxWait {
			movable = append(movable, j)
		}
	}
	if len(movable) < 2 {
		return nil
	}
	// the places they hold, best first; ties keep Slurm's order (the older
	// job, then the lower id, ahead)
	slots := slices.Clone(movable)
	slices.SortStableFunc(slots, func(a, b Queued) int {
		return cmp.Or(cmp.Compare(b.Priority, a.Priority), a.PendingSince.Compare(b.PendingSince), cmp.Compare(a.JobID, b.JobID))
	})
	// who takes them: the least predicted run left first
	want := slices.Clone(movable)
	slices.SortStableFunc(want, func(a, b Queued) int {
		return cmp.Or(cmp.Compare(a.Remaining, b.Remaining), a.PendingSince.Compare(b.PendingSince), cmp.Compare(a.JobID, b.JobID))
	})
	var out []Place
	for i, j := range want {
		// a tie among the places is split by one per rank, so that the
		// new order holds where Slurm would break the tie by job id
		target := slots[i].Priority - int64(tiesAbove(slots, i))
		if target == j.Priority {
			continue
		}
		nice := j.Nice + (j.Priority - target)
		if nice > MaxNice || nice < -MaxNice {
			continue // out of Slurm's range: the job keeps its place
		}
		out = append(out, Place{JobID: j.JobID, Nice: nice, Priority: target, Reason: fmt.Sprintf(
			"order: shortest predicted remaining first among isched's %d pending jobs in %s: %s left, place %d of %d; priority %d → %d (nice %d → %d)",
			len(movable), j.Queue, dur(j.Remaining), i+1, len(movable), j.Priority, target, j.Nice, nice)})
	}
	return out
}

// tiesAbove is how many places before slot i hold the same priority.
func tiesAbove(slots []Queued, i int) int {
	n := 0
	for k := i - 1; k >= 0 && slots[k].Priority == slots[i].Priority; k-- {
		n++
	}
	return n
}

// slicesSorted returns m's keys in order.
func slicesSorted[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}

// PredictedRemaining is the run a pending job has left, as rules 7 and 8
// see it (the coordinator and the replay alike): left steps at the run's
// own measured iteration time where it has run before (haveEst), else its
// time limit, which isched's plan set from its estimate of the run; 0
// when neither is known.
func PredictedRemaining(left int64, est estimate.IterEstimate, haveEst bool, limit time.Duration) time.Duration {
	if haveEst {
		return time.Duration(float64(max(left, 0)) * est.MS * float64(time.Millisecond))
	}
	return max(limit, 0)
}
