package sim

import (
	"math"
	"slices"
	"strconv"
	"time"

	"github.com/isched/isched/internal/estimate"
	"github.com/isched/isched/internal/lifecycle"
	"github.com/isched/isched/internal/plan"
	"github.com/isched/isched/internal/policy"
	"github.com/isched/isched/internal/report"
)

// submitPlanned plans job i's submission as `isched submit` does
// (PlanSubmission). A job the planner cannot place goes where its user
// asked.
func (s *sim) submitPlanned(i int) {
	js := &s.jobs[i]
	if !js.j.planned() { // Config.AnyShape: the user's own request
		s.submitRequest(js)
		return
	}
	r := RunSpec{User: js.j.User, Total: js.iters, Left: js.iters - js.lastCkpt, Work: js.work * js.predErr, MemMiB: js.j.MemMiB}
	sub, err := PlanSubmission(s.planSite, s.clusterState(), r, s.cfg.Variant.Policy, at(s.now))
	if err != nil {
		return
	}
	sub.Plan.Lineage, sub.Plan.Model = "job-"+strconv.Itoa(js.j.ID), "trace"
	js.plan = &sub.Plan
	js.parts = js.parts[:0]
	for _, name := range sub.Partitions {
		js.parts = append(js.parts, s.cl.byName[name])
	}
	js.cpus, js.gpus, js.limit = sub.CPUs, gresGPUs(sub.Gres), sub.Limit.Seconds()
	if pi, ok := s.cl.byName[sub.Plan.Ideal]; ok && len(s.cl.parts[pi].nodes) > 0 {
		js.elastic = s.elasticPlan(js.plan, js.gpus, s.cl.nodes[s.cl.parts[pi].nodes[0]].gpus)
		s.elasticStart(js, sub.Run)
	}
}

// submitRequest submits a job that isched follows but does not plan, as
// `isched submit job.sbatch` does: its user's partition, shape and time
// limit, the partition as its ideal one, never moved.
func (s *sim) submitRequest(js *jobState) {
	if js.plan == nil {
		js.plan = &report.Plan{Lineage: "job-" + strconv.Itoa(js.j.ID), Model: "trace", Ideal: s.cl.parts[js.asked].name,
			IdealGres: gresOf(js.j.GPUs), Total: js.iters}
	}
}

// RunSpec is a training run as isched plans it: steps whose cost is
// known (a replayed run's is).
type RunSpec struct {
	User        string
	Total, Left int64   // the run's steps, and those left to do
	Work        float64 // seconds per step on a device of throughput 1 (Site.Throughput's units)
	MemMiB      int64   // host memory per node; 0: unknown (taken to fit)
}

// Submission is what `isched submit` sends for a run: the plan comment,
// the partitions, and the resources of the node type it starts on.
type Submission struct {
	Plan       report.Plan
	Partitions []string
	CPUs       int
	Gres       string // "" on a CPU node type
	Limit      time.Duration
	Run        time.Duration // the run left, predicted, on the first start option
}

// PlanSubmission plans run r as `isched submit --policy kind` does
// (internal/cli decideFromEstimate): rows of the run on every node type
// of site, waits from the cluster's state cs, the planner's plans and
// choice. kind "" is --policy immediate. The lab replay
// (internal/e2e TestLabReplay) submits through it too, so the simulation
// and the lab plan alike.
func PlanSubmission(site *plan.Site, cs plan.ClusterState, r RunSpec, kind string, now time.Time) (Submission, error) {
	rows := knownRows(site, r)
	wait := func(ps *plan.PartitionSpec, nt *plan.NodeType) plan.Wait {
		n := plan.NeedOf(nt)
		n.User = r.User
		return site.EstimateWait(cs, ps.Name, n, now)
	}
	opts := plan.Options(rows, wait, plan.DefaultMigrationOverhead)
	ps := plan.MakePlans(1, opts, plan.DefaultMigrationOverhead)
	if kind == "" {
		kind = plan.PolicyImmediate
	}
	ch, err := ps.Choose(plan.Policy{Kind: kind}, now)
	if err != nil {
		return Submission{}, err
	}
	sub := Submission{Plan: report.Plan{Ideal: ch.Ideal.Partition.Name, IdealGres: ch.Ideal.Row.NodeType.GresOne(),
		IdealTime: int64(plan.TimeLimit(ch.Ideal.Row.Run(), ch.Ideal.Partition) / time.Minute),
		IdealCPUs: ch.Ideal.Row.NodeType.JobCPUs(), Fallbacks: ch.FallbackList(nil), Total: r.Total, Migrate: ch.Migrate}}
	for _, o := range ch.Start {
		sub.Partitions = append(sub.Partitions, o.Partition.Name)
	}
	start := ch.Start[0]
	sub.CPUs, sub.Gres = start.Row.NodeType.JobCPUs(), start.Row.NodeType.GresOne()
	sub.Run = time.Duration(float64(r.Left) * start.Row.IterSeconds * float64(time.Second))
	sub.Limit = plan.TimeLimit(sub.Run, start.Partition)
	return sub, nil
}

// knownRows are the rest of run r on every node type of site: its steps
// at the type's speed.
func knownRows(site *plan.Site, r RunSpec) []plan.Row {
	rows := make([]plan.Row, 0, len(site.NodeTypes))
	for k := range site.NodeTypes {
		nt := &site.NodeTypes[k]
		var mem int64 // a GPU's memory need is unknown: taken to fit
		if nt.Kind == plan.KindCPU {
			mem = r.MemMiB << 20
		}
		rows = append(rows, site.KnownRow(nt, 1, r.Left, r.Work/speedOf(site, nt), mem))
	}
	return rows
}

// tick is the coordinator's decision round: policy.Decide for every
// isched job it could act on. Jobs the policy would certainly leave alone
// are skipped for speed (see candidate); the decision is the policy's.
func (s *sim) tick() {
	var snap *report.Snapshot
	s.active = slices.DeleteFunc(s.active, func(i int) bool { return s.jobs[i].state == stDone })
	s.orderQueued()
	s.preemptForShort()
	s.resizeElastic()
	for _, i := range s.active {
		js := &s.jobs[i]
		if js.plan == nil || (js.state != stRunning && js.state != stPending) ||
			js.phase != lifecycle.Idle && (js.phase != lifecycle.TwinPending || js.state != stRunning) {
			continue
		}
		if !s.candidate(js) {
			continue
		}
		if snap == nil {
			snap = s.snapshot()
		}
		s.syncCkpt(js)
		d := policy.Decide(s.pol, s.policyJob(js, js.stepAt(s.now)), snap, at(s.now))
		if d.Kind != policy.None {
			s.apply(i, d)
			snap = nil // the cluster changed
		}
	}
	s.keepPlaces()
}

// candidate is a cheap necessary condition for a decision: a running job
// near its time limit (rule 1) or off its ideal partition while that has
// an idle node (rule 2), or a pending job with a dev partition open
// (rule 3). It keeps the replay fast; it decides nothing.
func (s *sim) candidate(js *jobState) bool {
	switch js.state {
	case stRunning:
		lead := secs(js.ckptT.Estimate()) + secs(orDefault(s.pol.Margin, policy.DefaultMargin)) + 2*s.cfg.Tick
		if l := s.limitOf(js, js.pi); s.now >= js.start+l-lead {
			return true
		}
		if s.pol.TrimLimits && s.trimDue(js, lead) {
			return true
		}
		if ideal, ok := s.cl.byName[js.plan.Ideal]; ok && js.plan.Migrate && ideal != js.pi {
			c := &s.pc[ideal] // an idle node, or free GPUs and CPUs somewhere
			return c.nodesIdle > 0 || c.gpusIdle >= gresGPUs(js.plan.IdealGres) && c.cpusIdle >= max(1, js.plan.IdealCPUs)
		}
	case stPending:
		if !s.cfg.Variant.Dev || s.now-js.pendSin < secs(orDefault(s.pol.MinPending, policy.DefaultMinPending)) {
			return false
		}
		for _, name := range s.cfg.DevPartitions {
			if pi, ok := s.cl.byName[name]; ok && s.pc[pi].nodesIdle > 0 && s.partUp(pi) {
				return true
			}
		}
	}
	return false
}

// apply carries out a decision as the agent would.
func (s *sim) apply(i int, d policy.Decision) {
	js := &s.jobs[i]
	if d.CancelTwin {
		s.cancelTwin(i)
	}
	switch d.Kind {
	case policy.DropTwin, policy.Handover:
		s.applyTwin(i, d)
	case policy.Checkpoint:
		s.to(js, lifecycle.CheckpointAsked)
		js.pendingDec = d
		if d.Rule == policy.RuleMigrate {
			js.lastMove = s.now
		}
		js.ckptReqStep = js.stepAt(s.now)
		js.ckptT.Requested(at(s.now))
		js.touched = true
		s.push(s.now+s.cfg.CkptDur, evCkpt, i, js.gen)
	case policy.Requeue:
		s.halt(i)
		s.countMove(js, d)
		if d.Hold {
			s.retarget(js, d)
			js.touched, js.lastMove = true, s.now
			s.to(js, lifecycle.RequeueSent)
			s.yield(i, d)
			return
		}
		s.moveQueued(i, d)
	case policy.MovePending:
		s.retarget(js, d)
		s.countMove(js, d)
		js.touched, js.lastMove = true, s.now
		s.dirty = true
	case policy.Extend, policy.Shorten:
		js.limit = d.TimeLimit.Seconds()
		js.limitEnd = js.start + s.limitOf(js, js.pi)
		s.push(js.limitEnd, evLimit, i, js.gen)
		s.limitChanged(js)
		js.lastMove = s.now // the coordinator's hysteresis counts every action
	}
}

func (s *sim) countMove(js *jobState, d policy.Decision) {
	switch d.Rule {
	case policy.RuleMigrate, policy.RuleDevChunk:
		js.moves++
	case policy.RulePreempt: // counted as it yields
	case policy.RuleElastic:
		js.resizes++
	default:
		js.conts++
	}
}

// ckptLanded: the requested checkpoint is written; what follows is
// policy.AfterCheckpoint's, as the coordinator's next round asks it.
func (s *sim) ckptLanded(i int) {
	js := &s.jobs[i]
	s.syncCkpt(js)
	if js.ckptReqStep > js.lastCkpt {
		js.lastCkpt, js.lastCkptAt = js.ckptReqStep, s.now
	}
	js.ckpts++
	js.ckptT.Completed(at(s.now))
	if js.pendingDec.Rule == policy.RuleKeepPlace && js.phase != lifecycle.HandingOver {
		return // the handover was given up meanwhile: a checkpoint more
	}
	d := policy.AfterCheckpoint(s.pol, s.policyJob(js, js.stepAt(s.now)), s.snapshot(), at(s.now), js.pendingDec)
	if d.Kind == policy.None || d.Abandoned {
		s.freeTwin(i) // a handover given up: its twin is cancelled
		s.to(js, lifecycle.MoveAbandoned)
		js.lastMove = s.now
		return
	}
	s.apply(i, d)
}

// policyJob is what the coordinator knows of job js (its policyJob).
func (s *sim) policyJob(js *jobState, step int64) policy.Job {
	j := policy.Job{JobID: uint64(js.j.ID) + 1, User: js.j.User, Lineage: "job-" + strconv.Itoa(js.j.ID), Plan: js.plan,
		Step: step, Total: js.iters, Moves: js.moves, Continuations: js.conts, Phase: js.phase,
		Gres: gresOf(js.gpus), CPUs: js.cpus, Mem: js.j.MemMiB << 20, TimeLimit: secDur(js.limit), Nodes: max(len(js.alloc), 1)}
	switch js.state {
	case stRunning:
		j.State, j.Partition, j.StartedAt = policy.StateRunning, s.cl.parts[js.pi].name, at(js.start)
		j.TimeLimit = secDur(s.limitOf(js, js.pi))
		j.NoStepYet = step <= js.step0
	case stPending:
		j.State, j.Partition, j.PendingSince, j.PendingReason = policy.StatePending, s.partList(js), at(js.pendSin), "Resources"
	}
	if js.ckptT.N > 0 {
		j.CkptDur = js.ckptT.Estimate()
	}
	j.Iter, j.HaveIter = js.est.Estimate()
	if js.lastCkptAt >= 0 {
		j.LastCkptAt, j.LastCkptStep = at(js.lastCkptAt), js.lastCkpt
	}
	if js.lastMove >= 0 {
		j.LastMoveAt = at(js.lastMove)
	}
	if js.phase != lifecycle.Idle {
		j.PhaseSince = at(js.phaseSince)
	}
	if js.phase == lifecycle.TwinPending {
		j.TwinReason = s.twinReason(js)
	}
	return j
}

// orDefault is d unless it is unset (a policy.Config's zero means the
// default).
func orDefault(d, def time.Duration) time.Duration {
	if d <= 0 {
		return def
	}
	return d
}

func (s *sim) partList(js *jobState) string {
	out := ""
	for k, pi := range js.parts {
		if k > 0 {
			out += ","
		}
		out += s.cl.parts[pi].name
	}
	return out
}

func gresOf(gpus int) string {
	if gpus == 0 {
		return ""
	}
	return "gpu:" + strconv.Itoa(gpus)
}

// gresGPUs reads "gpu:1", "gpu:v100:2": the count, 0 for "".
func gresGPUs(g string) int {
	if g == "" {
		return 0
	}
	for k := len(g) - 1; k >= 0; k-- {
		if g[k] == ':' {
			n, err := strconv.Atoi(g[k+1:])
			if err != nil {
				return 1
			}
			return n
		}
	}
	return 1
}

// predictedEnd is the coordinator's predicted end of a running isched job.
func (s *sim) predictedEnd(js *jobState) (time.Time, bool) {
	e, ok := js.est.Estimate()
	if !ok {
		return time.Time{}, false
	}
	return estimate.PredictEnd(at(s.now), js.stepAt(s.now), js.iters, e, 0).End, true
}

// trimDue says whether rule 6 (policy's trimLimit) may lower a running
// job's time limit: a loose test, a superset of the policy's (the job's
// true step time stands for the estimate's end at worst), so that the
// policy is asked only about jobs whose limit lies far beyond their end.
func (s *sim) trimDue(js *jobState, lead float64) bool {
	l := s.limitOf(js, js.pi)
	s.syncCkpt(js) // the periodic checkpoints since the last round
	if math.IsInf(l, 1) || js.lastCkptAt < 0 {
		return false
	}
	need := s.now - js.start + float64(js.iters-js.stepAt(s.now))*js.iterSec + lead
	return l-need >= secs(orDefault(s.pol.TrimMin, policy.DefaultTrimMin))/2 && need <= 0.9*l
}

// limitChanged: a running job's time limit moved, so its partitions'
// reservations are stale and the scheduler looks again (a shorter limit
// opens a hole that backfill may use at once).
func (s *sim) limitChanged(js *jobState) {
	for _, ni := range js.alloc {
		for _, pi := range s.cl.nodes[ni].parts {
			s.pver[pi]++
		}
	}
	s.dirty = true
}
