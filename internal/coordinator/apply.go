package coordinator

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/isched/isched/internal/estimate"
	"github.com/isched/isched/internal/lifecycle"
	"github.com/isched/isched/internal/policy"
	"github.com/isched/isched/internal/report"
)

// apply folds an accepted report into its lineage.
func (c *Coordinator) apply(ctx context.Context, env *report.Envelope, s *session, jobs jobIndex, now time.Time) error {
	l, err := c.getLineage(ctx, s.Lineage)
	if err != nil {
		return err
	}
	l.dirty = true
	st := &l.Status
	at := env.Time()
	switch env.Kind {
	case report.KindStart:
		c.applyStart(l, env, jobs, now)
		l.trimHistory(c.cfg.Limits.History)
	case report.KindSample:
		c.applySample(l, env, s, now)
	case report.KindCheckpoint:
		cp := *env.Checkpoint
		if old := st.LastCheckpoint; cp.Complete && old != nil && sameFile(*old, cp) {
			// another rank's wrapper saw the same file: rank 0, whose
			// loop prints the steps, knows its step; the others may not
			if cp.Step == nil {
				cp.Step = old.Step
			}
			st.LastCheckpoint = &cp
		} else if cp.Complete {
			st.LastCheckpoint = &cp
			l.Ckpts++
			if l.Phase == lifecycle.AwaitingCheckpoint || l.Phase == lifecycle.HandingOver {
				c.kick = true // decide now: the move waits for this
				if _, measured := l.Ckpt.Completed(at); measured {
					st.CkptMS = float64(l.Ckpt.Estimate()) / float64(time.Millisecond)
				}
			}
		}
	case report.KindSignal:
		l.event(now, "signal", fmt.Sprintf("%s reached the job as %s", env.Signal.Signal, env.Signal.Forwarded))
	case report.KindEnd:
		c.applyEnd(l, env, now)
	}
	return nil
}

// sameFile: two reports of one version of a checkpoint file (its path,
// size and modification time).
func sameFile(a, b report.Checkpoint) bool {
	return a.Path == b.Path && a.Size == b.Size && a.MTimeMS == b.MTimeMS
}

// applySample takes a sample report: memory, GPU memory and (rank 0's)
// iterations into the lineage's status, series and estimators.
func (c *Coordinator) applySample(l *lineage, env *report.Envelope, s *session, now time.Time) {
	st, job, smp := &l.Status, env.Job, env.Sample
	// a late sample of an attempt the lineage has left behind (its
	// process is gone, a new one runs): it still tells how far that
	// attempt got and what it peaked at, not the current process's
	// memory, speed or trend
	stale := job.JobID == st.JobID && job.Attempt < st.Attempt
	c.applyCPU(l, job, smp.CPU, stale)
	gpuUsed := c.applyGPU(st, smp.GPU, stale)
	var pts [][]byte
	if job.Rank == 0 { // ranks step in lockstep: rank 0 speaks for the job's progress
		pts = applyIters(l, env, stale, gpuUsed)
	}
	c.batch.PushList(c.keys.JobSeries(s.Lineage), c.cfg.SeriesLen, pts...) // sent by flush
	c.refreshEstimates(l, now)
}

// applyCPU takes a sample's process-tree and cgroup memory.
func (c *Coordinator) applyCPU(l *lineage, job *report.JobRef, cpu *report.CPUStat, stale bool) {
	st := &l.Status
	switch {
	case cpu == nil:
	case stale:
		st.PeakRSSBytes = max(st.PeakRSSBytes, cpu.RSSBytes, cpu.PeakRSSBytes)
	default:
		if l.RankRSS == nil {
			l.RankRSS = map[string]int64{}
		}
		if rank := strconv.Itoa(job.Rank); capped(l.RankRSS, rank, c.cfg.Limits.Ranks) {
			l.RankRSS[rank] = cpu.RSSBytes
		}
		var sum int64
		for _, v := range l.RankRSS {
			sum += v
		}
		st.RSSBytes = sum
		// the job's peak: at least its largest summed RSS, and at
		// least any rank's own peak (the kernel's, between samples)
		st.PeakRSSBytes = max(st.PeakRSSBytes, sum, cpu.PeakRSSBytes)
		// the cgroup's charge apart: what cannot be reclaimed (the OOM
		// risk) and page cache (rank 0's cgroup speaks for the node)
		if job.Rank == 0 {
			st.UnreclaimBytes, st.PageCacheBytes = cpu.CgroupUnreclaimBytes, cpu.CgroupFileBytes
			st.PeakUnreclaimBytes = max(st.PeakUnreclaimBytes, st.UnreclaimBytes)
			st.PeakPageCacheBytes = max(st.PeakPageCacheBytes, st.PageCacheBytes)
		}
	}
}

// applyGPU takes a sample's GPU memory per device, the job's processes'
// where NVML listed them (report.GPUStat.JobBytes); it returns the memory
// used now, over the devices (0 for a stale sample).
func (c *Coordinator) applyGPU(st *report.JobStatus, gpu *report.GPUStat, stale bool) (used int64) {
	if gpu == nil || len(gpu.Devices) == 0 {
		return 0
	}
	if st.GPUBytes == nil {
		st.GPUBytes, st.PeakGPUBytes = map[string]int64{}, map[string]int64{}
	}
	for _, d := range gpu.Devices {
		if !capped(st.PeakGPUBytes, d.UUID, c.cfg.Limits.DeviceIDs) || !capped(st.GPUBytes, d.UUID, c.cfg.Limits.DeviceIDs) {
			continue // a lineage keeps DeviceIDs GPU ids: more is no real job's
		}
		job, _ := gpu.JobBytes(d)
		st.PeakGPUBytes[d.UUID] = max(st.PeakGPUBytes[d.UUID], job)
		if !stale {
			st.GPUBytes[d.UUID] = job
			used += job
		}
	}
	return used
}

// applyIters takes rank 0's iterations: progress, the loop's own total,
// the iteration and memory estimators; it returns the sample's series
// point, if any.
func applyIters(l *lineage, env *report.Envelope, stale bool, gpuUsed int64) (pts [][]byte) {
	st, job, smp := &l.Status, env.Job, env.Sample
	last := l.takeIters(smp.Iters, stale)
	// one point per sample report (the median iteration of its
	// batch), not per iteration: Redis memory per job stays bounded
	// by SeriesLen points whatever the iteration rate
	if (len(smp.Iters) > 0 || smp.CPU != nil) && !stale {
		pts = append(pts, seriesPoint(env.TimeMS, max(st.Step, 0), st.RSSBytes, gpuUsed, smp.Iters))
	}
	if len(smp.Iters) > 0 && !stale && job.Rank == 0 {
		l.checkResume(job, smp.Iters, env.TimeMS)
	}
	if sp := l.span(job.JobID, job.Attempt); sp != nil && sp.EndMS != 0 && last > sp.EndStep {
		// late iterations of an attempt whose span Slurm's requeue
		// closed already: it got that far
		sp.EndStep = last
	}
	if smp.CPU != nil && !stale {
		l.Mem.Add(max(st.Step, 0), st.RSSBytes, gpuUsed)
	}
	return pts
}

// takeIters takes a sample's iterations into the lineage's progress,
// total and (unless stale: an old process's steps would read as a
// restart) its iteration estimator; it returns the last step among them.
func (l *lineage) takeIters(iters []report.Iter, stale bool) (last int64) {
	st := &l.Status
	for _, it := range iters {
		if !stale {
			l.Iter.Add(it)
		}
		if it.Total > 0 && it.Total != st.LoopTotal {
			st.LoopTotal = it.Total
			l.setTotal()
		}
		st.Step = max(st.Step, it.Step)
		last = max(last, it.Step)
		l.LastIterMS = max(l.LastIterMS, it.AtMS)
		l.NonFinite = l.NonFinite || it.LossNonFinite
		if !stale && (it.Loss != nil || it.LossNonFinite) {
			if st.Loss == nil {
				st.Loss = &report.LossStatus{}
			}
			st.Loss.Add(it)
		}
	}
	return last
}

// seriesPoint encodes a sample's point of the job's series: at the
// sample's time, or its last iteration's with the median iteration time.
func seriesPoint(atMS, step, rss, gpu int64, iters []report.Iter) []byte {
	p := report.SeriesPoint{TMS: atMS, Step: step, RSS: rss, GPU: gpu}
	if n := len(iters); n > 0 {
		d := make([]float64, n)
		for i, it := range iters {
			d[i] = it.DurMS
		}
		slices.Sort(d)
		p.IterMS, p.TMS = d[n/2], iters[n-1].AtMS
	}
	for i := len(iters) - 1; i >= 0; i-- {
		if iters[i].Loss != nil {
			p.Loss = iters[i].Loss
			break
		}
	}
	b, _ := json.Marshal(p)
	return b
}

// newProcess: a new process of the job runs (a new attempt, another job
// step). Its start-up is warm-up again and its memory a level of its own;
// a resume from a checkpoint at the last step seen does not step back for
// the estimators to notice, and without this the first samples after
// every move read as a leak.
func (l *lineage) newProcess() {
	l.Iter.NewProcess()
	l.Mem.NewProcess()
}

// applyStart takes a start report: a new attempt (or a new process of
// one) runs, on the partition and node it names.
func (c *Coordinator) applyStart(l *lineage, env *report.Envelope, jobs jobIndex, now time.Time) {
	st := &l.Status
	job := env.Job
	if job.JobID == st.JobID && job.Attempt < st.Attempt {
		return // a late start of an attempt the lineage has left behind
	}
	c.twinRan(l, job, now)
	span := l.span(job.JobID, job.Attempt)
	if span != nil && job.Rank != 0 {
		return // another rank of a known attempt: nothing new about the job
	}
	l.End = nil // a new attempt: whatever the last one's end said, the run goes on
	st.JobID, st.User, st.UID, st.Attempt = job.JobID, job.User, job.UID, job.Attempt
	st.Node = job.Node
	// where the iterations so far ran: the last attempt's partition (the
	// job table may have shown the new one already)
	prevPartition := lastPartition(st)
	st.Partition = job.Partition
	if st.StartedMS == 0 {
		st.StartedMS = env.TimeMS
	}
	st.State, st.EndedMS, st.ExitStatus = "RUNNING", 0, nil
	if env.Start.TotalIters > 0 {
		st.PlanTotal = env.Start.TotalIters
	}
	if j, ok := jobs[job.JobID]; ok {
		l.startFromTable(j, env)
	}
	startStep := resumeStep(st.LastCheckpoint, env.Start.ResumeFrom)
	prevRanks := lastRanks(st)
	l.openAttempt(span, job, env.TimeMS, startStep)
	moved := l.leftPartition(prevPartition, job.Partition)
	if !moved && span == nil && job.Rank == 0 && len(st.History) > 1 {
		moved = l.leftSize(prevRanks, job.NRanks)
	}
	landed := l.Phase == lifecycle.RequeueIssued || l.Phase == lifecycle.Yielding
	if c.to(l, lifecycle.AttemptStarted, now) && landed {
		l.requeueLanded(now)
	}
	if env.Start.ResumeFrom != "" && job.Rank == 0 {
		l.Resuming = &resumeCheck{Attempt: spanKey{job.JobID, job.Attempt}, Step: startStep, Path: env.Start.ResumeFrom}
		l.eventEach(now, "resuming", "attempt "+strconv.Itoa(job.Attempt)+" on "+job.Partition+" was given "+env.Start.ResumeFrom+
			stepText(startStep)+"; its first step will tell whether it resumed there")
	}
	l.setTotal()
	if moved { // after setTotal: the ETA on the new partition
		c.refreshEstimates(l, now)
	}
}

// lastPartition is where a lineage's iterations so far ran: its last
// attempt's partition, else the status's.
func lastPartition(st *report.JobStatus) string {
	if n := len(st.History); n > 0 && st.History[n-1].Partition != "" {
		return st.History[n-1].Partition
	}
	return st.Partition
}

// startFromTable takes what the job table says of a starting job: Slurm's
// user name, the plan in its comment, its time limit and what it asked for.
func (l *lineage) startFromTable(j report.Job, env *report.Envelope) {
	st := &l.Status
	st.User = j.User // Slurm's word; the report's user name is only the wrapper's
	if p, ok, err := report.JobPlan(j); ok && err == nil {
		st.Plan = &p
		if env.Start.TotalIters == 0 && p.Total > 0 {
			st.PlanTotal = p.Total
		}
	}
	if j.TimeLimitMin != nil && *j.TimeLimitMin > 0 {
		st.LimitMS = env.TimeMS + *j.TimeLimitMin*60_000
	}
	l.Use.requested(j)
}

// resumeStep is the step an attempt starts at: the last checkpoint's,
// when the attempt was given that checkpoint to resume from, else 0.
func resumeStep(last *report.Checkpoint, resumeFrom string) int64 {
	if last != nil && last.Step != nil && resumeFrom == last.Path {
		return *last.Step
	}
	return 0
}

// openAttempt opens the history span of a starting attempt (span: its
// span if known), starting at startStep.
func (l *lineage) openAttempt(span *report.Span, job *report.JobRef, atMS, startStep int64) {
	switch {
	case span != nil && span.EndMS != 0:
		// another run of the wrapper in the same attempt (a second job
		// step): the attempt goes on, in a new process
		span.EndMS, span.Reason = 0, ""
		l.newProcess()
	case span != nil:
		// rank 0 of an attempt another rank opened: rank 0 speaks for
		// where the job resumed
		span.StartStep, span.EndStep, span.Node = startStep, max(span.EndStep, startStep), job.Node
		span.Ranks = max(span.Ranks, job.NRanks)
	default:
		// one span per attempt: close the previous one (no end report
		// came: the attempt was killed), open this one
		l.closeOpenSpan(atMS, "requeued")
		st := &l.Status
		st.History = append(st.History, report.Span{JobID: job.JobID, Attempt: job.Attempt, Partition: job.Partition, Node: job.Node,
			StartMS: atMS, StartStep: startStep, EndStep: startStep, Ranks: job.NRanks})
		l.CkptsAtStart = l.Ckpts
		l.newProcess()
	}
}

// leftPartition notes a move from the partition the iterations so far ran
// on (from) to another (to), and says whether there was one.
func (l *lineage) leftPartition(from, to string) bool {
	if from == "" || from == to {
		return false
	}
	// another node type: iteration times from the old one do not apply
	// (the ETA converts them by speed until the new ones come)
	l.Moved = nil
	if est, ok := l.Iter.Estimate(); ok && !est.Provisional {
		l.Moved = &movedEst{From: from, Est: est}
	}
	l.Iter.Reset()
	return true
}

// requeueLanded counts the requeue (or resubmission) that started this
// attempt: a move, or a continuation.
func (l *lineage) requeueLanded(now time.Time) {
	st := &l.Status
	switch l.RequeueRule {
	case policy.RuleMigrate:
		l.Moves++
	case policy.RulePreempt:
		l.Preempts++
	case policy.RuleElastic:
		l.Resizes++
	case policy.RuleKeepPlace:
		l.Moves++ // a handover is a move onto the ideal partition
	default:
		l.Conts++
		st.Continuations = l.Conts
	}
	l.RequeueRule = ""
	l.LastMoveMS = now.UnixMilli()
}

func (c *Coordinator) applyEnd(l *lineage, env *report.Envelope, now time.Time) {
	st := &l.Status
	end := env.End
	job := env.Job
	c.applyEndMemory(l, end, now)
	if job.Rank != 0 {
		return // rank 0 speaks for the job: its last iterations may still be on their way
	}
	if sp := l.span(job.JobID, job.Attempt); sp != nil {
		switch at := (spanKey{job.JobID, job.Attempt}); {
		case sp.EndMS == 0:
			sp.EndMS = env.TimeMS
			sp.EndStep = max(st.Step, sp.StartStep)
			sp.Reason = end.Reason
		case l.SlurmClosed != nil && *l.SlurmClosed == at:
			// the job table showed Slurm's requeue before this report: the
			// wrapper's end is the exact one (its late iterations already
			// moved EndStep)
			sp.EndMS, sp.Reason = env.TimeMS, end.Reason+", "+sp.Reason
			l.SlurmClosed = nil
		}
	}
	if job.JobID != st.JobID || job.Attempt != st.Attempt {
		return // a late end of an attempt the lineage has left behind
	}
	if l.ended() {
		// Slurm's final state came first (the report was delayed): it
		// still tells how the run exited
		if st.ExitStatus == nil {
			code := end.ExitCode
			st.ExitStatus = &code
		}
		return
	}
	// A requeue or a move ends an attempt with a signal; the lineage goes on.
	if l.Phase == lifecycle.RequeueIssued || end.Signal == "SIGTERM" && l.Phase != lifecycle.Idle {
		return
	}
	if end.ExitCode == 0 && st.TotalIters > 0 && st.Step >= st.TotalIters {
		// the run reached its total: over, whatever Slurm does next
		code := end.ExitCode
		c.finish(l, "ENDED", env.TimeMS, &code)
		c.annotate(l, env.TimeMS)
		return
	}
	if end.ExitCode == 0 && st.TotalIters == 0 {
		c.annotate(l, env.TimeMS) // a run of unknown length that ended of its own
	}
	// Not the end yet: Slurm may requeue the job (a preempted trainer
	// exits 0 after its SIGTERM checkpoint, a script requeues itself), or
	// rule 5 continues it. syncWithJobTable settles it from Slurm's state.
	l.End = &attemptEnd{JobID: job.JobID, Attempt: job.Attempt, AtMS: env.TimeMS, ExitCode: end.ExitCode, Signal: end.Signal}
}

// setTotal sets the lineage's total from what is known: the loop's own
// total when it printed one (it knows its length; a total computed from
// --samples/--epochs/--batch may count something else), else the plan's.
func (l *lineage) setTotal() {
	st := &l.Status
	t := st.PlanTotal
	if st.LoopTotal > 0 {
		t = st.LoopTotal
	}
	if t > 0 && t != st.TotalIters {
		st.TotalIters, l.dirty = t, true
	}
}

// closeOpenSpan ends the last history span if it is still open, at atMS
// and the last step the coordinator saw, with reason unless it has one. It
// returns the span it closed, or nil.
func (l *lineage) closeOpenSpan(atMS int64, reason string) *report.Span {
	st := &l.Status
	n := len(st.History)
	if n == 0 || st.History[n-1].EndMS != 0 {
		return nil
	}
	sp := &st.History[n-1]
	sp.EndMS, sp.EndStep = atMS, max(st.Step, sp.StartStep)
	if sp.Reason == "" {
		sp.Reason = reason
	}
	return sp
}

// attemptExit is the exit code the current attempt's end report gave, nil
// when it sent none.
func (l *lineage) attemptExit() *int {
	st := &l.Status
	if e := l.End; e != nil && e.JobID == st.JobID && e.Attempt == st.Attempt {
		code := e.ExitCode
		return &code
	}
	return nil
}

// span returns the history span of one attempt of a job, if any.
func (l *lineage) span(jobID uint64, attempt int) *report.Span {
	h := l.Status.History
	for i := len(h) - 1; i >= 0; i-- {
		if h[i].JobID == jobID && h[i].Attempt == attempt {
			return &h[i]
		}
	}
	return nil
}

// finish ends a lineage, once: the only place that does. state is "ENDED"
// after the run's own end, else Slurm's final state of a job that ended
// without a run's end (killed, timed out, node failure). exit is nil when
// no end report said it.
func (c *Coordinator) finish(l *lineage, state string, atMS int64, exit *int) {
	st := &l.Status
	l.closeOpenSpan(atMS, strings.ToLower(state))
	st.State, st.EndedMS, st.ExitStatus = state, atMS, exit
	c.to(l, lifecycle.Finished, time.UnixMilli(atMS))
	l.End, l.dirty = nil, true
	l.judge()
	c.metrics.jobs.remove(st.Lineage)
	if state != "ENDED" {
		return // no run's end: nothing for the estimate metric or the planner
	}
	if l.PeakETA > 0 {
		c.metrics.estimateError.Observe(float64(atMS-l.PeakETA) / 1000)
	}
	if est, ok := l.Iter.Estimate(); ok && st.Plan != nil {
		rss, gpu := l.Mem.Peak()
		r := report.Receipt{Model: st.Plan.Model, Batch: st.Plan.Batch, Partition: st.Partition, IterMS: est.MS,
			PeakRSS: max(rss, st.PeakRSSBytes), PeakGPU: gpu, Iters: st.Step, User: st.User,
			WallS: float64(atMS-st.StartedMS) / 1000, EndedMS: atMS, ETARatios: l.driftRatios(atMS)}
		if uid, known := l.owner(); known {
			r.UID = &uid
		}
		h := heldReceipt{r: r, lineage: st.Lineage, jobID: st.JobID, run: ranFor{StartedMS: st.StartedMS, EndedMS: atMS}}
		if sp := l.span(st.JobID, st.Attempt); sp != nil {
			h.run.AttemptStartMS = sp.StartMS
		}
		c.settleReceipt(h, c.now(), false)
	}
}

// refreshEstimates recomputes the ETA and health of a lineage.
func (c *Coordinator) refreshEstimates(l *lineage, now time.Time) {
	st := &l.Status
	est, ok := l.Iter.Estimate()
	etaEst, etaOK := est, ok
	src, priorN := estimate.PriorSource(""), 0
	switch {
	case ok:
		l.Moved = nil
		st.IterMS, st.IterLowMS, st.IterHighMS = est.MS, est.LowMS, est.HighMS
		if st.State == "RUNNING" {
			l.markDrift(now, est)
		}
	case l.Moved != nil:
		etaEst, etaOK = c.carried(l.Moved, st), true
	default:
		// before the run's own first iterations: earlier runs'
		etaEst, src, priorN, etaOK = c.speeds.prior(st)
	}
	if st.ETASource != string(src) || st.ETAPriorRuns != priorN {
		st.ETASource, st.ETAPriorRuns, l.dirty = string(src), priorN, true
	}
	if etaOK {
		drift := c.speeds.pastDrift(st)
		eta := estimate.PredictEnd(now, max(st.Step, 0), st.TotalIters, etaEst, 0).
			WithPast(now, etaEst, 0, c.speeds.pastRuns(st)).
			WithDrift(now, etaEst, 0, drift).
			Calibrated(now, etaEst, 0, drift)
		if eta.Known {
			st.ETAMS, st.ETALowMS, st.ETAHighMS = eta.End.UnixMilli(), eta.Low.UnixMilli(), eta.High.UnixMilli()
			st.ETABandCoverage, st.ETABandSource, st.ETABandRuns = eta.Coverage, string(eta.BandSource), eta.BandRuns
			if l.PeakETA == 0 && st.Step > 0 {
				l.PeakETA = st.ETAMS
			}
		}
	}
	rss, _ := l.Mem.Peak()
	slope, _ := l.Mem.Slope()
	st.RSSSlope = slope
	predRSS, _ := l.Mem.PredictPeak(st.TotalIters)
	// the OOM risk is what cannot be reclaimed: the processes' memory and
	// the cgroup's unreclaimable part, never its page cache
	h := estimate.Health{Est: est, HaveEst: ok, LossNonFinite: l.NonFinite, RSS: max(rss, st.RSSBytes, st.UnreclaimBytes), RSSLimit: st.MemLimitBytes,
		Growing: l.Mem.Growing(), PredictedPeakRSS: predRSS}
	if l.LastIterMS > 0 {
		h.LastIterAt = time.UnixMilli(l.LastIterMS)
	}
	if st.State == "RUNNING" {
		for _, ev := range estimate.Check(now, h, c.cfg.StallFactor) {
			l.event(now, ev.Kind, ev.Message)
		}
	}
	c.exportJob(l, now)
}

// lastRanks is the world size the lineage's last attempt ran at (0: none
// known).
func lastRanks(st *report.JobStatus) int {
	if n := len(st.History); n > 0 {
		return st.History[n-1].Ranks
	}
	return 0
}
