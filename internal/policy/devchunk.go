package policy

import (
	"fmt"
	"strings"
	"time"

	"github.com/isched/isched/internal/report"
)

// Rule 3: dev chunks for pending jobs.

// pendingForResources lists the pending reasons rule 3 acts on: the job
// waits for nodes or its turn. Held, dependent, limited or begin-time jobs
// would not start on dev either.
var pendingForResources = map[string]bool{"": true, "None": true, "Resources": true, "Priority": true}

// devChunk is rule 3.
func (v *view) devChunk() (d Decision, ok bool, status string) {
	if why := v.devChunkBlocked(); why != "" {
		return d, false, why
	}
	devs, windowEnd, why := v.devTargets()
	if why != "" {
		return d, false, why
	}
	var tried []string
	for _, name := range devs {
		d, why := v.chunkOn(name, windowEnd)
		if why != "" {
			tried = append(tried, why)
			continue
		}
		return d, true, ""
	}
	return d, false, strings.Join(tried, "; ")
}

// devChunkBlocked says why rule 3 leaves the job alone whatever the dev
// partitions hold ("" when nothing does).
func (v *view) devChunkBlocked() string {
	j, p := v.j, v.j.Plan
	switch {
	case p == nil:
		return "no isched plan"
	case !p.Migrate:
		return "the plan does not allow migration (a dev chunk ends with a checkpoint and a requeue)"
	case v.cfg.NoContinuations:
		return "continuations are off (max_continuations 0)"
	case v.cfg.MaxContinuations > 0 && j.Continuations >= v.cfg.MaxContinuations:
		return fmt.Sprintf("already continued %d times (max %d)", j.Continuations, v.cfg.MaxContinuations)
	case resumeBroken(&j) != "":
		return resumeBroken(&j)
	case !pendingForResources[j.PendingReason]:
		return fmt.Sprintf("pending for %s, not for resources", j.PendingReason)
	case j.PendingSince.IsZero() || v.now.Sub(j.PendingSince) < v.cfg.MinPending:
		return fmt.Sprintf("pending for less than %s", dur(v.cfg.MinPending))
	case v.snap == nil:
		return "no fresh cluster snapshot"
	}
	for _, q := range strings.Split(j.Partition, ",") {
		if v.cfg.isDev(q) {
			return "already queued on the dev partition " + q
		}
	}
	if ok, r := room(partition(v.snap, p.Ideal), v.idealAsk()); ok && strings.Contains(","+j.Partition+",", ","+p.Ideal+",") {
		return fmt.Sprintf("%s: it should start there", r)
	}
	return ""
}

// devTargets are the plan's dev fallbacks, when a dev window is open, and
// the end of that window (zero: none).
func (v *view) devTargets() (devs []string, windowEnd time.Time, why string) {
	for _, f := range v.j.Plan.Fallbacks {
		if v.cfg.isDev(f) {
			devs = append(devs, f)
		}
	}
	if len(devs) == 0 {
		return nil, windowEnd, "no dev partition among the plan's fallbacks"
	}
	open, windowEnd := v.cfg.devOpen(v.now)
	if !open {
		ws := make([]string, len(v.cfg.DevWindows))
		for i, w := range v.cfg.DevWindows {
			ws[i] = w.String()
		}
		return nil, windowEnd, fmt.Sprintf("outside the dev windows (%s)", strings.Join(ws, ", "))
	}
	return devs, windowEnd, ""
}

// chunkOn is a dev chunk on partition name, or why not.
func (v *view) chunkOn(name string, windowEnd time.Time) (d Decision, why string) {
	j, p := v.j, v.j.Plan
	dp := partition(v.snap, name)
	if dp == nil {
		return d, name + " is not in the cluster snapshot"
	}
	req, gres := j.Gres, ""
	if v.holdsGPUs() {
		if !hasGPUs(dp) {
			return d, fmt.Sprintf("the job holds GPUs (%s) and %s has none", j.Gres, name)
		}
	} else if _, n := gpuRequest(p.IdealGres); n > 0 && hasGPUs(dp) {
		req, gres = p.IdealGres, p.IdealGres // a GPU plan gets its GPUs on a GPU dev partition
	}
	cpus := devCPUs(dp, j.CPUs, req)
	ok, r := room(dp, ask{req, cpusOr(cpus, j.CPUs), j.Mem})
	if !ok {
		return d, r
	}
	if held := ownerHeld(v.snap, &j, name, gres); held != "" {
		return d, fmt.Sprintf("%s has room, but %s", name, held)
	}
	tl, fits, limitWhy, why := v.chunkLimit(dp, name, windowEnd)
	if why != "" {
		return d, why
	}
	then := "a checkpoint and a requeue back onto " + p.Ideal + " will follow before the limit"
	if fits {
		then = "the run should finish there"
	}
	tlText := limitWhy
	if tl > 0 {
		tlText = fmt.Sprintf("time limit %s (%s)", dur(tl), limitWhy)
	}
	if cpus > 0 {
		tlText = fmt.Sprintf("%d CPUs per task (a %s node's share; it asked %d) and %s", cpus, name, j.CPUs, tlText)
	}
	return Decision{Kind: MovePending, Rule: RuleDevChunk, Target: name, Gres: gres, TimeLimit: tl, CPUs: cpus, Reason: fmt.Sprintf(
		"dev chunk: pending on %s for %s (%s); %s: moving it to %s%s with %s; %s",
		j.Partition, dur(v.now.Sub(j.PendingSince)), orUnknown(j.PendingReason), r, name, gresText(gres), tlText, then)}, ""
}

// idealAsk is what the job asks of a node of its ideal partition: the
// plan's CPUs there (else its own) and its memory.
func (v *view) idealAsk() ask {
	return ask{v.j.Plan.IdealGres, cpusOr(v.j.Plan.IdealCPUs, v.j.CPUs), v.j.Mem}
}

// cpusOr is n, or else the job's CPUs.
func cpusOr(n, job int) int {
	if n > 0 {
		return n
	}
	return job
}

// devCPUs is the CPUs per task a dev chunk on dp asks for when the job's
// own (jobCPUs) are more than a dev node's share for its GPUs (all of a
// CPU node's): a job planned for a bigger node would never start there.
// 0: the job's own fit (or are unknown); leave them.
func devCPUs(dp *report.Partition, jobCPUs int, gres string) int {
	if jobCPUs <= 0 || dp.NodesTotal <= 0 || dp.CPUsTotal <= 0 {
		return 0
	}
	share := dp.CPUsTotal / dp.NodesTotal
	if _, n := gpuRequest(gres); n > 0 {
		if _, total := gpus(dp, ""); total > 0 {
			share = max(1, dp.CPUsTotal*n/total)
		}
	}
	if jobCPUs <= share {
		return 0
	}
	return share
}

// chunkLimit is a dev chunk's time limit on dp (0: unchanged), whether the
// rest of the run fits in it, and why that limit; why is set when a chunk
// there is not worth its checkpoint and restart.
func (v *view) chunkLimit(dp *report.Partition, name string, windowEnd time.Time) (tl time.Duration, fits bool, limitWhy, why string) {
	tl, has := maxTime(dp)
	limitWhy = "the partition's maximum"
	if !windowEnd.IsZero() {
		if wl := windowEnd.Sub(v.now).Truncate(time.Minute); !has || wl < tl {
			tl, has, limitWhy = wl, true, "until the dev window closes at "+v.at(windowEnd)
		}
	}
	if v.known {
		need := ceilMinute(msDur(float64(v.rem)*v.high) + v.cfg.MoveCost + v.ckpt + v.cfg.Margin)
		if !has || need <= tl {
			tl, has, fits, limitWhy = need, true, true, fmt.Sprintf("enough for the remaining %d iterations", v.rem)
		}
	}
	if has && !fits {
		// A chunk must do more than pay for its own checkpoint and restart.
		ideal := v.j.Plan.Ideal
		useful := tl - v.ckpt - v.cfg.Margin - v.cfg.MoveCost
		gainMS := toMS(useful) * v.speed(name) / v.speed(ideal)
		costMS := toMS(v.cfg.MoveCost + v.ckpt)
		if gainMS <= v.cfg.MinGain*costMS {
			return 0, false, "", fmt.Sprintf("a %s chunk on %s is worth %s of %s time, not more than %g × its cost %s",
				dur(tl), name, dur(msDur(gainMS)), ideal, v.cfg.MinGain, dur(msDur(costMS)))
		}
	}
	if !has {
		tl, limitWhy = 0, "time limit unchanged (no maximum, remaining work unknown)"
	}
	return tl, fits, limitWhy, ""
}
