package sim

import (
	"github.com/isched/isched/internal/lifecycle"
	"github.com/isched/isched/internal/policy"
)

// Rule 10 in the replay (Variant.KeepPlace): a run of isched's running off
// its ideal partition keeps a twin pending there (policy.WantTwin). The
// twin is an entry of the queue like any job (its own slot of s.jobs, after
// the trace's jobs: twinOf names its run), with its run's owner, account and
// nice value and the plan's ideal request; its age counts from its
// submission. When the scheduler starts it, its nodes are allocated, the
// run checkpoints (CkptDur) and ends, and the run resumes on the twin's
// nodes from that checkpoint after the restart delay. The run's phase goes
// through lifecycle.Next (s.to) at every step.

// twinCheckEvery is how often the replay asks WantTwin again about a run it
// refused (the coordinator asks every round; the answer changes only when
// the hysteresis ends or the run left shrinks, and asking every 30 s would
// slow the replay for nothing).
const twinCheckEvery = 600

// twinJobID is added to a twin's run's index for the twin's job id (the
// trace's jobs' ids are far below it).
const twinJobID = 1 << 40

// addTwinSlots gives every managed job a slot for its twin after the
// trace's jobs (Variant.KeepPlace).
func (s *sim) addTwinSlots() {
	for i := range s.nJobs {
		if js := &s.jobs[i]; js.managed {
			s.jobs = append(s.jobs, jobState{j: js.j, twinOf: i + 1, acct: js.acct, lastCkptAt: -1, lastMove: -1, firstStart: -1, pi: -1})
			s.jobs[i].twin = len(s.jobs)
		}
	}
}

// twinLive says whether run js has a twin pending or holding nodes.
func (s *sim) twinLive(js *jobState) bool {
	if js.twin == 0 {
		return false
	}
	st := s.jobs[js.twin-1].state
	return st == stPending || st == stRunning
}

// keepPlaces asks policy.WantTwin about every run of isched's running off
// its ideal partition with nothing under way, and submits the twins it
// wants, as the coordinator's round does after Decide.
func (s *sim) keepPlaces() {
	if !s.pol.KeepPlace {
		return
	}
	for _, i := range s.active {
		js := &s.jobs[i]
		if js.state != stRunning || js.phase != lifecycle.Idle || js.plan == nil || !js.plan.Migrate || js.twin == 0 ||
			s.twinLive(js) || s.now < js.twinCheck {
			continue
		}
		if ideal, ok := s.cl.byName[js.plan.Ideal]; !ok || ideal == js.pi {
			continue
		}
		js.twinCheck = s.now + twinCheckEvery
		s.syncCkpt(js)
		if d, ok := policy.WantTwin(s.pol, s.policyJob(js, js.stepAt(s.now)), s.snapshot(), at(s.now)); ok {
			s.submitTwin(i, d)
		}
	}
}

// submitTwin queues run i's twin per d (policy.SubmitTwin), as the agent
// submits it: its age counts from now.
func (s *sim) submitTwin(i int, d policy.Decision) {
	js := &s.jobs[i]
	ti := js.twin - 1
	tw := &s.jobs[ti]
	tw.parts = []int{s.cl.byName[d.Target]}
	tw.gpus, tw.cpus, tw.limit, tw.nice, tw.acct = gresGPUs(d.Gres), js.cpus, d.TimeLimit.Seconds(), js.nice, js.acct
	if d.CPUs > 0 {
		tw.cpus = d.CPUs
	}
	s.to(js, lifecycle.TwinSubmitted)
	js.pendingDec, js.twins, js.touched = d, js.twins+1, true
	s.queue(ti, s.now)
}

// startTwin is the scheduler starting twin ti on nodes of pi: its nodes
// are the run's from now, and policy.TwinStarted says whether the run
// checkpoints and hands over, hands over at once, or the twin is dropped.
func (s *sim) startTwin(ti, pi int, nodes []int) {
	tw := &s.jobs[ti]
	i := tw.twinOf - 1
	js := &s.jobs[i]
	tw.state, tw.pi, tw.alloc, tw.start = stRunning, pi, nodes, s.now
	s.allocate(ti, pi, nodes)
	tw.limitEnd = s.now + s.limitOf(tw, pi)
	s.to(js, lifecycle.TwinStarted)
	s.syncCkpt(js)
	d := policy.TwinStarted(s.pol, s.policyJob(js, js.stepAt(s.now)), at(s.now))
	switch d.Kind {
	case policy.Checkpoint:
		js.pendingDec, js.lastMove = d, s.now
		js.ckptReqStep = js.stepAt(s.now)
		js.ckptT.Requested(at(s.now))
		s.push(s.now+s.cfg.CkptDur, evCkpt, i, js.gen)
	case policy.Handover:
		s.handOver(i, d)
	default:
		s.cancelTwin(i)
	}
}

// handOver ends run i's attempt (or its pending job) and starts it on its
// twin's nodes from its last checkpoint (policy.Handover): the twin's
// nodes idled from the twin's start until now.
func (s *sim) handOver(i int, d policy.Decision) {
	js := &s.jobs[i]
	ti := js.twin - 1
	tw := &s.jobs[ti]
	pi, nodes, limit := tw.pi, tw.alloc, tw.limit
	s.twinIdle += float64(tw.gpus*len(nodes)) * (s.now - tw.start)
	s.stop(ti)
	js.cost += tw.cost
	tw.cost = 0
	switch js.state {
	case stRunning:
		s.halt(i)
	case stPending:
		js.state = stWaiting // its pending job is cancelled
	}
	s.to(js, lifecycle.HandedOver)
	s.retarget(js, policy.Decision{Target: d.Target, Gres: d.Gres, CPUs: d.CPUs})
	js.limit = limit
	js.moves++
	js.handovers++
	js.touched, js.lastMove = true, s.now
	s.start(i, pi, nodes)
}

// cancelTwin cancels run i's twin (isched's DropTwin, or before rule 1 or
// rule 5 acts): the run goes on where it is.
func (s *sim) cancelTwin(i int) {
	s.freeTwin(i)
	s.to(&s.jobs[i], lifecycle.TwinCancelled)
}

// freeTwin takes run i's twin out of the queue, or off its nodes.
func (s *sim) freeTwin(i int) {
	js := &s.jobs[i]
	if !s.twinLive(js) {
		return
	}
	ti := js.twin - 1
	tw := &s.jobs[ti]
	if tw.state == stRunning {
		s.twinIdle += float64(tw.gpus*len(tw.alloc)) * (s.now - tw.start)
		s.stop(ti)
		js.cost += tw.cost
		tw.cost = 0
	}
	tw.state = stWaiting
	s.dirty, s.bfDirty = true, true
}

// twinGone settles a run whose attempt ended with its twin live (a time
// limit, a crash): the twin is cancelled before rule 5 continues the run.
func (s *sim) twinGone(i int) {
	if js := &s.jobs[i]; js.phase == lifecycle.TwinPending || js.phase == lifecycle.HandingOver {
		s.cancelTwin(i)
	}
}

// applyTwin carries out rule 10's decisions on a run whose twin has
// started or waits: Handover, DropTwin (a Decide while the handover is
// awaited may say nothing yet).
func (s *sim) applyTwin(i int, d policy.Decision) {
	switch d.Kind {
	case policy.Handover:
		s.handOver(i, d)
	case policy.DropTwin:
		s.cancelTwin(i)
	}
}

// twinReason is the pending reason squeue shows for run js's twin: its
// account's GrpTRES (the multifactor model's) or its owner's
// per-partition limit, else Priority.
func (s *sim) twinReason(js *jobState) string {
	if js.twin == 0 || s.jobs[js.twin-1].state != stPending {
		return ""
	}
	tw := &s.jobs[js.twin-1]
	switch {
	case s.cfg.Sched.Backfill && s.accts.held(tw.acct, tw.gpus*tw.j.Nodes): // the EASY model has no limits
		return "AssocGrpGRES"
	case len(tw.parts) > 0 && s.userLimited(tw, tw.parts[0]):
		return "AssocMaxGRESPerUser"
	}
	return "Priority"
}
