package sim

import (
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"time"

	"github.com/isched/isched/internal/lifecycle"
	"github.com/isched/isched/internal/plan"
	"github.com/isched/isched/internal/policy"
	"github.com/isched/isched/internal/report"
)

// initJob sets up job i: its asked partition and time limit, its steps,
// and whether it is one of isched's (drawn for every variant alike, so the
// same jobs are adopted, and untouched, in every variant). isched plans
// one-device training runs: one node, one GPU; jobs of other shapes stay
// with Slurm unless Config.AnyShape.
func (s *sim) initJob(i int, j *Job) error {
	js := &s.jobs[i]
	*js = jobState{j: j, lastCkptAt: -1, lastMove: -1, firstStart: -1, pi: -1}
	pi, err := s.askedPartition(j)
	if err != nil {
		return fmt.Errorf("sim: job %d: %w", j.ID, err)
	}
	step := s.cfg.StepSeconds
	js.iters, js.work = stepsOf(j.Run, step, s.cl.partSpeed(pi))
	js.ckptK = max(1, int64(s.cfg.CkptEvery/step))
	js.asked, js.parts, js.cpus, js.gpus = pi, s.partsOf(j, pi), j.CPUs, j.GPUs
	js.acct = s.accts.id[j.account()]
	js.limit = j.Limit
	if js.limit <= 0 {
		// a user listing several partitions asks for the time the run
		// takes on the slowest of them
		run := max(j.Run, step)
		for _, p := range js.parts[1:] {
			run = max(run, max(j.Run, step)*s.cl.partSpeed(pi)/s.cl.partSpeed(p))
		}
		js.limit = plan.TimeLimit(secDur(run), s.cl.parts[pi].spec).Seconds()
	}
	if mt := s.cl.parts[pi].maxTime; mt > 0 && js.limit > mt {
		js.limit = mt
	}
	adopt := s.rng.Float64() < s.cfg.Adoption
	js.predErr = 1
	if s.cfg.PredictErr > 0 { // drawn only then: exact replays keep their adoption draws
		js.predErr = math.Exp(s.cfg.PredictErr * s.rng.NormFloat64())
	}
	js.isched = adopt && (j.planned() || s.cfg.AnyShape)
	js.managed = s.cfg.Variant.Isched && js.isched
	if js.managed {
		s.managedN++
	}
	return nil
}

// askedPartition is the job's partition if the site has it and it fits,
// else the first non-preemptible, non-dev partition whose nodes fit it (a
// GPU partition for a GPU job, the default or a CPU one otherwise).
func (s *sim) askedPartition(j *Job) (int, error) {
	if pi, ok := s.cl.byName[j.Partition]; ok && s.nodeFits(pi, j) {
		return pi, nil
	}
	best := -1
	for pi := range s.cl.parts {
		p := &s.cl.parts[pi]
		if p.tier == 0 || p.dev || !s.nodeFits(pi, j) || (j.GPUs == 0) != (p.gpus == 0) {
			continue
		}
		if best < 0 || p.spec.Default {
			best = pi
		}
	}
	if best < 0 {
		return 0, fmt.Errorf("no partition fits %d node(s) of %d CPUs and %d GPUs", j.Nodes, j.CPUs, j.GPUs)
	}
	return best, nil
}

// partsOf is the partitions a job lists: the one asked, and under
// Variant.MultiPart every other regular partition of its kind (GPU or
// CPU) whose nodes fit it, in the catalogue's order.
func (s *sim) partsOf(j *Job, asked int) []int {
	parts := []int{asked}
	if !s.cfg.Variant.MultiPart {
		return parts
	}
	for pi := range s.cl.parts {
		p := &s.cl.parts[pi]
		if pi != asked && p.tier > 0 && !p.dev && s.nodeFits(pi, j) && (j.GPUs == 0) == (p.gpus == 0) {
			parts = append(parts, pi)
		}
	}
	return parts
}

func (s *sim) nodeFits(pi int, j *Job) bool {
	p := &s.cl.parts[pi]
	nt := s.cl.nodes[p.nodes[0]].nt
	return len(p.nodes) >= j.Nodes && nt.Cores >= j.CPUs && nt.GPUsPerNode >= j.GPUs
}

// arrive queues a job: its submission, or its user's resubmission after a
// time limit. isched's jobs are planned first, as `isched submit` does.
func (s *sim) arrive(i int) {
	js := &s.jobs[i]
	if js.managed {
		s.submitPlanned(i)
		if !js.active {
			js.active = true
			s.active = append(s.active, i)
		}
	} else if js.resubmits > 0 {
		js.parts = s.partsOf(js.j, js.asked)
	}
	s.queue(i, s.now)
}

func (s *sim) queue(i int, order float64) {
	js := &s.jobs[i]
	js.state, js.order, js.pendSin = stPending, order, s.now
	s.pending = append(s.pending, i)
	s.dirty, s.bfDirty = true, true
}

// start runs job i on nodes of partition pi (a twin's slot: the twin
// starts, and its run hands over).
func (s *sim) start(i, pi int, nodes []int) {
	js := &s.jobs[i]
	if js.twinOf > 0 {
		s.startTwin(i, pi, nodes)
		return
	}
	js.state, js.pi, js.alloc, js.start = stRunning, pi, nodes, s.now
	s.allocate(i, pi, nodes)
	js.startup = s.cfg.Start
	if js.attempts > 0 {
		js.startup = s.cfg.Restart // requeue, start-up and checkpoint loading
	}
	js.path = append(js.path, Hop{At: s.now, Partition: s.cl.parts[pi].name, GPUs: js.gpus * len(nodes)})
	nt := s.cl.nodes[nodes[0]].nt
	js.iterSec = js.work / s.cl.speed(nt) / s.speedup(js)
	js.step0, js.ckptsAt = js.lastCkpt, js.ckpts
	js.gen++
	js.attempts++
	if js.firstStart < 0 {
		js.firstStart = s.now
	}
	if pi != js.asked {
		js.onOther = true
	}
	if js.managed {
		if js.phase == lifecycle.AwaitingCheckpoint {
			// the checkpoint asked for died with the attempt before it
			// landed: the coordinator's policy gives the move up
			// (policy's awaiting: the job is not running)
			s.to(js, lifecycle.MoveAbandoned)
		}
		s.to(js, lifecycle.AttemptStarted)
		s.feedEstimator(js, nt)
	}
	s.push(js.timeOfStep(js.iters), evEnd, i, js.gen)
	js.limitEnd = s.now + s.limitOf(js, pi)
	if !math.IsInf(js.limitEnd, 1) {
		s.push(js.limitEnd, evLimit, i, js.gen)
	}
}

// allocate gives job i's request on nodes of pi to it.
func (s *sim) allocate(i, pi int, nodes []int) {
	js := &s.jobs[i]
	for _, ni := range nodes {
		s.take(ni, js.cpus, js.gpus)
		s.cl.nodes[ni].jobs = append(s.cl.nodes[ni].jobs, i)
	}
	s.userUse(js, pi, 1)
	s.accts.use(js.acct, js.gpus*len(nodes), 1, s.now, s.cfg.Sched.HalfLife)
	if s.cl.parts[pi].tier == 0 {
		s.preempt++
	}
}

// feedEstimator gives the coordinator's iteration estimator the steps a
// new attempt reports, as the wrapper would: a new node type starts the
// estimator afresh, the same type starts a new process. The times carry a
// ±5 % jitter from the job's own stream, so seeds differ.
func (s *sim) feedEstimator(js *jobState, nt *plan.NodeType) {
	if js.estOn != nt.Name || js.estSize != js.gpus*len(js.alloc) {
		js.est.Reset() // another node type, or another size (rule 9)
		if js.estOn != nt.Name {
			js.rates = nil // rule 9's rates are the node type's
		}
		js.estOn, js.estSize = nt.Name, js.gpus*len(js.alloc)
	} else {
		js.est.NewProcess()
	}
	r := rand.New(rand.NewPCG(s.cfg.Seed, uint64(js.j.ID)<<8|uint64(js.attempts&0xff)))
	ms := js.iterSec * 1000
	for k := int64(1); k <= 40; k++ {
		d := ms * (0.95 + 0.1*r.Float64())
		js.est.Add(report.Iter{Step: js.step0 + k, DurMS: d})
	}
	s.measureRate(js)
}

// stop ends the running attempt and accounts for its use of the nodes.
func (s *sim) stop(i int) {
	js := &s.jobs[i]
	d := s.now - js.start
	for _, ni := range js.alloc {
		n := &s.cl.nodes[ni]
		s.give(ni, js.cpus, js.gpus)
		n.jobs = slices.DeleteFunc(n.jobs, func(x int) bool { return x == i })
		s.acct.add(n, s.cl.parts[js.pi].spec, js.cpus, js.gpus, js.start, s.now)
		js.cost += s.acct.rate(n, s.cl.parts[js.pi].spec, js.cpus, js.gpus) * d / 3600
	}
	if js.isched {
		s.acct.ischedHours += d / 3600
		if js.pi != js.asked {
			s.acct.elsewhereHours += d / 3600
		}
	}
	s.userUse(js, js.pi, -1)
	s.accts.use(js.acct, js.gpus*len(js.alloc), -1, s.now, s.cfg.Sched.HalfLife)
	if s.cl.parts[js.pi].tier == 0 {
		s.preempt--
	}
	js.alloc = nil
	js.state = stWaiting
	s.dirty, s.bfDirty = true, true
}

func (s *sim) userUse(js *jobState, pi, sign int) {
	if s.cl.parts[pi].spec.PerUser == nil {
		return
	}
	k := userPart{js.j.User, pi}
	u := s.use[k]
	n := js.j.Nodes
	u.cpus += sign * js.cpus * n
	u.gpus += sign * js.gpus * n
	u.jobs += sign * n
	s.use[k] = u
}

// syncCkpt brings the last checkpoint up to the periodic ones written by
// now.
func (s *sim) syncCkpt(js *jobState) {
	if js.state != stRunning {
		return
	}
	ck := js.periodicCkpt(s.now)
	if ck > js.lastCkpt {
		js.ckpts += js.periodicBetween(js.lastCkpt, ck)
		js.lastCkpt, js.lastCkptAt = ck, js.timeOfStep(ck)
	}
}

// halt stops the running attempt at now: the steps since the last
// checkpoint are lost. It returns the step it reached.
func (s *sim) halt(i int) int64 {
	js := &s.jobs[i]
	s.syncCkpt(js)
	step := js.stepAt(s.now)
	js.lost += step - js.lastCkpt
	s.stop(i)
	return step
}

func (s *sim) finish(i int) {
	js := &s.jobs[i]
	s.stop(i)
	js.lastCkpt = js.iters
	js.state, js.end = stDone, s.now
	if js.managed {
		s.freeTwin(i) // the run ended elsewhere: its twin is cancelled
		s.to(js, lifecycle.Finished)
	}
	s.jobDone()
}

func (s *sim) jobDone() {
	s.done++
	if p := s.cfg.Progress; p != nil && (s.done%1000 == 0 || s.done == s.nJobs) {
		p(s.done, s.nJobs)
	}
}

// timeout is Slurm ending an attempt at its time limit.
func (s *sim) timeout(i int) {
	js := &s.jobs[i]
	resume := js.step0
	step := s.halt(i)
	s.attemptEnded(i, "TIMEOUT", step, resume)
}

// preempted is Slurm requeueing a job of a preemptible partition
// (PreemptMode=REQUEUE): it queues again where it was, from its last
// checkpoint; isched leaves a job Slurm requeued alone.
func (s *sim) preempted(i int) {
	js := &s.jobs[i]
	if js.twinOf > 0 { // a twin on a preemptible partition: given up
		s.cancelTwin(js.twinOf - 1)
		return
	}
	s.halt(i)
	s.queue(i, s.now)
	if js.managed && js.phase == lifecycle.HandingOver {
		// its handover's checkpoint died with the attempt: the policy
		// hands over from the last one (the run pends now)
		s.applyTwin(i, policy.Decide(s.pol, s.policyJob(js, js.lastCkpt), s.snapshot(), at(s.now)))
	}
}

// attemptEnded settles an attempt that ended with steps left: isched's
// rule 5 continues its own jobs; otherwise the user resubmits the run
// from its last checkpoint after UserDelay, unless the attempt saved
// nothing new (it would loop): then the run ends unfinished.
func (s *sim) attemptEnded(i int, state string, step, resume int64) {
	js := &s.jobs[i]
	if js.managed {
		s.twinGone(i)
		exit := 0
		e := policy.End{State: state, Exit: &exit, Signal: "SIGTERM", ResumeStep: resume, NewCkpts: int64(js.ckpts - js.ckptsAt)}
		d := policy.AfterEnd(s.pol, s.policyJob(js, step), e, s.snapshot(), at(s.now))
		if d.Kind == policy.Requeue {
			js.conts++
			s.moveQueued(i, d)
			return
		}
	}
	if js.lastCkpt <= resume {
		js.state, js.end = stDone, s.now
		if js.managed {
			s.to(js, lifecycle.Finished)
		}
		s.jobDone()
		return
	}
	js.resubmits++
	js.state = stWaiting
	s.push(s.now+s.cfg.UserDelay, evArrive, i, 0)
}

// moveQueued queues a stopped job again per decision d (target, GRES,
// time limit), from its last checkpoint.
func (s *sim) moveQueued(i int, d policy.Decision) {
	js := &s.jobs[i]
	s.retarget(js, d)
	js.touched = true
	if js.managed {
		s.to(js, lifecycle.RequeueSent)
	}
	js.lastMove = s.now
	s.queue(i, s.now)
}

// retarget applies a decision's partition, GRES, CPUs and time limit to a
// job's request, as the agent's move does: the CPUs change only when the
// decision says (a move onto the ideal partition, a dev chunk on smaller
// nodes); a partition without GPUs drops the GPUs.
func (s *sim) retarget(js *jobState, d policy.Decision) {
	old := js.gpus
	if pi, ok := s.cl.byName[d.Target]; ok {
		js.parts = []int{pi}
		if s.cl.parts[pi].gpus == 0 {
			js.gpus = 0
		}
	}
	if d.Gres != "" {
		js.gpus = gresGPUs(d.Gres)
	}
	if d.CPUs > 0 {
		js.cpus = d.CPUs
	}
	if d.Tasks > 0 && old > 0 && js.gpus > 0 {
		// rule 9: one task per GPU, each with its CPUs
		js.cpus = js.cpus / old * js.gpus
	}
	if d.TimeLimit > 0 {
		js.limit = d.TimeLimit.Seconds()
	}
}

func secDur(sec float64) time.Duration { return time.Duration(sec * float64(time.Second)) }
