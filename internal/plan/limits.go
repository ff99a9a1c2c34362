package plan

import (
	"cmp"
	"fmt"
	"slices"
	"time"

	"github.com/isched/isched/internal/report"
)

// hold is a limit of the job's owner that holds it, and when enough of
// what counts against it frees (known false: never, as far as we can
// tell); account: the limit is the account's, counting its other users'
// jobs too.
type hold struct {
	l              *report.UserLimit
	freed          time.Duration
	known, account bool
}

// holdingLimit is, of the owner's limits (the snapshot's, from Slurm's
// accounting) that a new job with need on partition part would exceed, so
// that Slurm would hold it pending (QOSMaxCpuPerUserLimit, AssocGrpGRES,
// ...) however idle the partition, the one that frees last: the job
// starts when all have room. ok is false when none holds it or the need
// names no user.
func holdingLimit(cs ClusterState, need Need, part string, now time.Time) (h hold, ok bool) {
	if need.User == "" {
		return hold{}, false
	}
	lims := cs.Snapshot.Limits
	for i := range lims {
		l := &lims[i]
		if l.User != need.User || !l.Binds(need.QOS, need.Account, part) || l.Used+limitAdds(l.Resource, need) <= l.Max {
			continue
		}
		next := limitFreed(cs, l, need, now)
		if !ok || h.known && (!next.known || next.freed > h.freed) {
			h, ok = next, true
		}
	}
	return h, ok
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

// limitFreed is when limit l has room for a job with need: the jobs
// counted against it (limitJobs) end at the coordinator's predicted end,
// else at their time limit, and those pending ahead of the new one take
// the room first, in submission order, each for its time limit. It is
// not known when the room never comes as far as we can tell (a job
// needed has no known end) or no job table says.
func limitFreed(cs ClusterState, l *report.UserLimit, need Need, now time.Time) hold {
	if cs.Jobs == nil {
		return hold{l: l}
	}
	releases, queue, account := limitJobs(cs, l)
	// simulateWait's two counts: the limit's in gpus, cpus unused
	queue = append(queue, queued{r: res{gpus: int(limitAdds(l.Resource, need))}, us: true})
	w := simulateWait(Wait{}, res{gpus: int(l.Max - l.Used)}, queue, releases, now)
	return hold{l: l, freed: w.Wait, known: w.Known, account: account}
}

// limitJobs are what counts against limit l in the job table: the running
// jobs that free it at their ends, soonest first, and the pending ones
// that take its room before a new job, in submission order. They are the
// user's jobs under the limit's QOS, in its account and on its partition
// when it names them; an association's limit that the user's own running
// jobs do not fill (its Used is more than theirs) is the account's, Slurm's
// GrpTRES on the account, and counts its other users' jobs too (account).
func limitJobs(cs ClusterState, l *report.UserLimit) (_ []release, _ []queued, account bool) {
	// a QOS's per-user limit counts the user's jobs under it in every
	// account (the agent lists it once per association, with its account);
	// an association's, those in its account
	inAccount := func(j *report.Job) bool {
		return l.QOS != "" || l.Account == "" || j.Account == "" || j.Account == l.Account
	}
	under := func(j *report.Job, anyUser bool) bool {
		return (j.User == l.User || anyUser && j.Account == l.Account) &&
			(l.QOS == "" || j.QOS == l.QOS) && inAccount(j) && (l.Partition == "" || j.Partition == l.Partition)
	}
	releases, queue, own := limitJobsOf(cs, l, func(j *report.Job) bool { return under(j, false) })
	if l.QOS == "" && l.Account != "" && own < l.Used {
		releases, queue, _ = limitJobsOf(cs, l, func(j *report.Job) bool { return under(j, true) })
		account = true
	}
	return releases, queue, account
}

// limitJobsOf is limitJobs of the jobs that in accepts, with what the
// running ones hold against l.
func limitJobsOf(cs ClusterState, l *report.UserLimit, in func(*report.Job) bool) (releases []release, queue []queued, held int64) {
	type waiting struct {
		submitMS int64
		q        queued
	}
	var pending []waiting
	for i := range cs.Jobs.Jobs {
		j := &cs.Jobs.Jobs[i]
		if !in(j) {
			continue
		}
		amount := limitAdds(l.Resource, Need{CPUs: j.CPUs, GPUs: gresGPUs(j.Gres) * max(1, j.NodeCount)})
		switch {
		case j.State == "RUNNING" || j.State == "SUSPENDED":
			held += amount
			if end, ok := jobEnd(cs, j); ok {
				releases = append(releases, release{at: end, r: res{gpus: int(amount)}})
			}
		case j.State == "PENDING" && !heldOther(j.Reason) && amount <= l.Max:
			q := queued{r: res{gpus: int(amount)}}
			if j.TimeLimitMin != nil {
				q.dur = time.Duration(*j.TimeLimitMin) * time.Minute
			}
			pending = append(pending, waiting{j.SubmitMS, q}) // no time limit: it holds its room for good
		}
	}
	slices.SortStableFunc(releases, func(a, b release) int { return a.at.Compare(b.at) })
	slices.SortStableFunc(pending, func(a, b waiting) int { return cmp.Compare(a.submitMS, b.submitMS) })
	for _, p := range pending {
		queue = append(queue, p.q)
	}
	return releases, queue, held
}

// jobEnd is when running job j ends: at the coordinator's prediction,
// else at its time limit; ok is false when neither is known.
func jobEnd(cs ClusterState, j *report.Job) (time.Time, bool) {
	if end, ok := cs.PredictedEnd[j.JobID]; ok && !end.IsZero() {
		return end, true
	}
	if j.TimeLimitMin != nil && j.StartMS > 0 {
		return time.UnixMilli(j.StartMS).Add(time.Duration(*j.TimeLimitMin) * time.Minute), true
	}
	return time.Time{}, false
}

// heldByLimit turns a partition's wait into the wait of a job that
// limit h.l holds: never idle now, and no sooner than the jobs counted
// against it free it (h.freed).
func heldByLimit(w Wait, h hold, need Need) Wait {
	l := h.l
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
	whose := "your"
	if h.account {
		whose = "your account's"
	}
	switch {
	case !h.known:
		w.Known, w.Wait = false, 0
		w.Reason = fmt.Sprintf("%s: when %s jobs end is unknown", held, whose)
	case w.Known:
		w.Wait = max(w.Wait, h.freed)
		w.Reason = fmt.Sprintf("%s: %s jobs free enough in %s", held, whose, FormatDuration(h.freed))
	default:
		w.Reason = fmt.Sprintf("%s: %s jobs free enough in %s, but %s", held, whose, FormatDuration(h.freed), w.Reason)
	}
	return w
}
