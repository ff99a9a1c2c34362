package plan

import (
	"fmt"
	"slices"
	"time"

	"github.com/isched/isched/internal/report"
)

// holdingLimit is the first of the user's per-user limits (the snapshot's,
// from Slurm's accounting) that a new job with need on partition part would
// exceed, so that Slurm would hold it pending (QOSMaxCpuPerUserLimit, ...)
// however idle the partition; nil when none does or the need names no user.
func holdingLimit(lims []report.UserLimit, need Need, part string) *report.UserLimit {
	if need.User == "" {
		return nil
	}
	for i := range lims {
		l := &lims[i]
		if l.User == need.User && l.Binds(need.QOS, need.Account, part) && l.Used+limitAdds(l.Resource, need) > l.Max {
			return l
		}
	}
	return nil
}

// limitAdds is what a job with need adds to a limit's count.
func limitAdds(resource string, need Need) int64 {
	switch resource {
	case report.LimitCPU:
		return int64(need.CPUs)
	case report.LimitGPU:
		return int64(need.GPUs)
	}
	return 1 // a running job
}

// limitFreed is when the user's own running jobs under limit l have ended
// enough of them for a job with need to fit it: at the coordinator's
// predicted end, else at their time limit; ok is false when some job
// needed has no known end.
func limitFreed(cs ClusterState, l *report.UserLimit, need Need, now time.Time) (time.Duration, bool) {
	if cs.Jobs == nil {
		return 0, false
	}
	type freed struct {
		at     time.Time
		amount int64
	}
	var ends []freed
	for i := range cs.Jobs.Jobs {
		j := &cs.Jobs.Jobs[i]
		if j.User != l.User || (j.State != "RUNNING" && j.State != "SUSPENDED") ||
			(l.QOS != "" && j.QOS != l.QOS) || (l.Partition != "" && j.Partition != l.Partition) {
			continue
		}
		end, ok := cs.PredictedEnd[j.JobID]
		if !ok && j.TimeLimitMin != nil && j.StartMS > 0 {
			end, ok = time.UnixMilli(j.StartMS).Add(time.Duration(*j.TimeLimitMin)*time.Minute), true
		}
		if !ok {
			end = time.Time{} // never, as far as we can tell
		}
		ends = append(ends, freed{end, limitAdds(l.Resource, Need{CPUs: j.CPUs, GPUs: gresGPUs(j.Gres) * max(1, j.NodeCount)})})
	}
	slices.SortStableFunc(ends, func(a, b freed) int {
		switch {
		case a.at.IsZero() != b.at.IsZero():
			return map[bool]int{true: 1, false: -1}[a.at.IsZero()]
		}
		return a.at.Compare(b.at)
	})
	over := l.Used + limitAdds(l.Resource, need) - l.Max
	for _, e := range ends {
		if e.at.IsZero() {
			return 0, false
		}
		if over -= e.amount; over <= 0 {
			return max(e.at.Sub(now), 0), true
		}
	}
	return 0, false
}

// heldByLimit turns a partition's wait into the wait of a job that limit l
// holds: never idle now, and no sooner than the user's own jobs free it.
func heldByLimit(cs ClusterState, w Wait, l *report.UserLimit, need Need, now time.Time) Wait {
	state := "busy"
	if w.IdleNow {
		state = "idle"
	}
	scope := "association's"
	if l.QOS != "" {
		scope = "QOS " + l.QOS
	}
	what := map[string]string{report.LimitCPU: "CPUs", report.LimitGPU: "GPUs", report.LimitJobs: "running jobs"}[l.Resource]
	held := fmt.Sprintf("%s, but you are at your %s limit of %d %s (%s, %d in use)", state, scope, l.Max, what, l.Reason, l.Used)
	w.IdleNow, w.HeldBy = false, l.Reason
	if add := limitAdds(l.Resource, need); add > l.Max {
		w.Known, w.Wait = false, 0
		w.Reason = fmt.Sprintf("never under your %s limit of %d %s (%s): the job needs %d", scope, l.Max, what, l.Reason, add)
		return w
	}
	freed, ok := limitFreed(cs, l, need, now)
	switch {
	case !ok:
		w.Known, w.Wait = false, 0
		w.Reason = held + ": when your jobs end is unknown"
	case w.Known:
		w.Wait = max(w.Wait, freed)
		w.Reason = fmt.Sprintf("%s: your jobs free enough in %s", held, FormatDuration(freed))
	default:
		w.Reason = fmt.Sprintf("%s: your jobs free enough in %s, but %s", held, FormatDuration(freed), w.Reason)
	}
	return w
}
