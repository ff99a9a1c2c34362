package sim

import (
	"math"
	"time"

	"github.com/isched/isched/internal/lifecycle"
	"github.com/isched/isched/internal/policy"
)

// preemptForShort is rule 8 in the replay, as the coordinator's
// preemptForShort runs it every round: the runs that yielded are released
// once the job they yielded to has started (or after policy.DefaultRequeueWait), and,
// one preemption at a time, policy.Preempt picks a long run of isched's
// to checkpoint and yield to a much shorter one waiting behind it.
func (s *sim) preemptForShort() {
	if s.releaseYielded() || !s.pol.PreemptForShort {
		return
	}
	running, waiting := s.preemptCandidates()
	if len(running) == 0 || len(waiting) == 0 {
		return
	}
	p, ok, _ := policy.Preempt(s.pol, running, waiting, at(s.now))
	if !ok {
		return
	}
	i := int(p.Victim) - 1
	js := &s.jobs[i]
	s.apply(i, policy.Decision{Kind: policy.Checkpoint, Then: policy.Requeue, Rule: policy.RulePreempt,
		Target: s.cl.parts[js.pi].name, Gres: gresOf(js.gpus), YieldTo: p.For, Reason: p.Reason})
}

// releaseYielded releases the runs whose wait is over, as the
// coordinator's releaseYielded does; busy: a preemption is under way.
func (s *sim) releaseYielded() (busy bool) {
	for _, i := range s.active {
		js := &s.jobs[i]
		switch {
		case js.phase == lifecycle.Yielding:
			busy = true
			if w := &s.jobs[js.yieldTo-1]; w.state == stPending && s.now-js.yieldSince <= secs(policy.DefaultRequeueWait) {
				continue
			}
			s.to(js, lifecycle.Released)
			s.yielding--
			s.queue(i, js.yieldSince)
		case js.phase != lifecycle.Idle && js.pendingDec.Rule == policy.RulePreempt:
			busy = true // its checkpoint or its requeue is out
		}
	}
	return busy
}

// yield is rule 8's requeue done (the agent's result): the run is
// requeued held, and waits until released.
func (s *sim) yield(i int, d policy.Decision) {
	js := &s.jobs[i]
	s.to(js, lifecycle.Yielded)
	js.preempts++
	js.yieldTo, js.yieldSince = int(d.YieldTo), s.now
	js.state = stWaiting // held: not in the queue until released
	s.yielding++
}

// preemptCandidates are isched's running and waiting jobs as the
// coordinator's preemptCandidates gives them to policy.Preempt, less those
// it would pass over anyway (a run it cannot preempt yet, a waiting job
// too young), which keeps the replay fast and changes no choice.
func (s *sim) preemptCandidates() ([]policy.Running, []policy.Waiting) {
	var running []policy.Running
	var waiting []policy.Waiting
	minInterval := secs(orDefault(s.pol.MinInterval, policy.DefaultMinInterval))
	minPending := secs(orDefault(s.pol.MinPending, policy.DefaultMinPending))
	maxPre := s.pol.MaxPreemptions
	if maxPre <= 0 {
		maxPre = policy.DefaultMaxPreemptions
	}
	for _, i := range s.active {
		js := &s.jobs[i]
		if js.plan == nil || js.phase != lifecycle.Idle {
			continue
		}
		switch {
		case js.state == stRunning && js.preempts < maxPre && s.now-js.start >= minInterval && js.stepAt(s.now) > 0:
			running = append(running, s.runningOf(i))
		case js.state == stPending && s.now-js.pendSin >= minPending:
			waiting = append(waiting, policy.Waiting{Queued: policy.Queued{JobID: uint64(i) + 1, Queue: s.partList(js),
				Remaining: s.remaining(js), PendingSince: at(js.pendSin)}, Gres: gresOf(js.gpus), Nodes: js.j.Nodes,
				// Slurm's reason is Resources or Priority, unless its
				// account's GrpTRES holds it (AssocGrpGRES)
				Blocked: !s.accts.held(js.acct, js.gpus*js.j.Nodes)})
		}
	}
	return running, waiting
}

// runningOf is a running job as rule 8 sees it.
func (s *sim) runningOf(i int) policy.Running {
	js := &s.jobs[i]
	e, ok := js.est.Estimate()
	var limit time.Duration // the coordinator's fallback: the job's time limit
	if l := s.limitOf(js, js.pi); !math.IsInf(l, 1) {
		limit = secDur(l)
	}
	r := policy.Running{JobID: uint64(i) + 1, Queue: s.cl.parts[js.pi].name, Gres: gresOf(js.gpus), Nodes: len(js.alloc),
		Remaining:   policy.PredictedRemaining(js.iters-js.stepAt(s.now), e, ok, limit),
		Attained:    secDur(s.now - js.start),
		Preemptions: js.preempts}
	if js.lastMove >= 0 {
		r.LastMoveAt = at(js.lastMove)
	}
	if js.ckptT.N > 0 {
		r.CkptDur = js.ckptT.Estimate()
	}
	return r
}
