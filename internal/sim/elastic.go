package sim

import (
	"math"
	"slices"
	"strconv"
	"time"

	"github.com/isched/isched/internal/lifecycle"
	"github.com/isched/isched/internal/policy"
	"github.com/isched/isched/internal/report"
)

// resizeElastic is rule 9 in the replay, as the coordinator's
// resizeElastic runs it every round: policy.Resize over the running
// elastic runs with no resize under way (the GPUs their growths will hold
// reserved), each resize carried out as a checkpoint and a requeue at the
// new size.
func (s *sim) resizeElastic() {
	if !s.pol.Elastic {
		return
	}
	for _, r := range policy.ShrinkWaiting(s.pol, s.waitingRuns()) {
		s.apply(int(r.JobID)-1, policy.Decision{Kind: policy.MovePending, Rule: policy.RuleElastic, Gres: r.Gres, Tasks: r.To, Nodes: r.Nodes, Reason: r.Reason})
	}
	rooms := s.queueRooms()
	runs := s.elasticRuns(rooms)
	if runs == nil {
		return
	}
	all, _ := policy.Resize(s.pol, runs, rooms, at(s.now))
	for _, r := range all {
		i := int(r.JobID) - 1
		js := &s.jobs[i]
		s.apply(i, policy.Decision{Kind: policy.Checkpoint, Then: policy.Requeue, Rule: policy.RuleElastic,
			Target: s.cl.parts[js.pi].name, Gres: r.Gres, Tasks: r.To, Nodes: r.Nodes, Reason: r.Reason})
	}
}

// elasticRuns are isched's running elastic runs as the coordinator's
// elasticRuns gives them to policy.Resize; a growth under way reserves
// its GPUs in rooms (its checkpoint has not landed: they are not taken
// yet).
func (s *sim) elasticRuns(rooms map[string]policy.QueueRoom) []policy.ElasticRun {
	var runs []policy.ElasticRun
	var held map[int]int // once a run is found
	for _, i := range s.active {
		js := &s.jobs[i]
		if js.plan == nil || js.plan.Elastic == nil || js.state != stRunning || js.gpus == 0 {
			continue
		}
		if js.phase != lifecycle.Idle {
			if d := js.pendingDec; d.Rule == policy.RuleElastic && js.phase == lifecycle.AwaitingCheckpoint && d.Tasks > js.gpus*len(js.alloc) {
				q := s.cl.parts[js.pi].name
				rooms[q] = rooms[q].Reserve(d.Tasks - js.gpus*len(js.alloc))
			}
			continue
		}
		if js.stepAt(s.now) <= js.step0 {
			continue
		}
		if held == nil {
			held = s.heldDemand()
		}
		runs = append(runs, s.elasticRun(i, held))
	}
	return runs
}

// waitingRuns are the elastic runs queued above their base, as the
// coordinator's waitingRuns gives them to policy.ShrinkWaiting.
func (s *sim) waitingRuns() []policy.WaitingRun {
	var runs []policy.WaitingRun
	for _, i := range s.pending {
		js := &s.jobs[i]
		if js.plan == nil || js.plan.Elastic == nil || js.state != stPending || js.phase != lifecycle.Idle || js.gpus*js.j.Nodes <= js.plan.Elastic.Min {
			continue
		}
		runs = append(runs, policy.WaitingRun{JobID: uint64(i) + 1, Queue: s.cl.parts[js.parts[0]].name, Size: js.gpus * js.j.Nodes,
			Min: js.plan.Elastic.Min, PerNode: s.cl.nodes[s.cl.parts[js.parts[0]].nodes[0]].gpus,
			Waited: secDur(s.now - max(js.pendSin, js.lastMove)), Blocked: !s.accts.held(js.acct, js.gpus*js.j.Nodes)})
	}
	return runs
}

// elasticRun is running job i as rule 9 sees it: its run left, attempt,
// last move and checkpoint time as rule 8 weighs them (runningOf), with
// its size, range and room.
func (s *sim) elasticRun(i int, held map[int]int) policy.ElasticRun {
	js := &s.jobs[i]
	n := &s.cl.nodes[js.alloc[0]]
	pr := s.runningOf(i)
	return policy.ElasticRun{JobID: pr.JobID, Owner: strconv.Itoa(js.acct), Queue: pr.Queue, Size: js.gpus * len(js.alloc),
		Min: js.plan.Elastic.Min, Max: js.plan.Elastic.Max, PerNode: n.gpus, FreeBeside: n.freeGPU, Remaining: pr.Remaining,
		Rates: js.rates, Resizes: js.resizes, Attained: pr.Attained, LastMoveAt: pr.LastMoveAt, CkptDur: pr.CkptDur,
		LimitRoom: s.limitRoom(js), HeldDemand: held[js.acct]}
}

// queueRooms are the GPUs of each GPU partition as rule 9 sees them: idle,
// on one node at most, on whole idle nodes, and asked by the jobs pending
// there.
func (s *sim) queueRooms() map[string]policy.QueueRoom {
	rooms := map[string]policy.QueueRoom{}
	reclaim := make([]int, len(s.cl.parts))
	for pi := range s.cl.parts {
		if s.cl.parts[pi].gpus > 0 {
			rooms[s.cl.parts[pi].name], reclaim[pi] = s.nodeRoom(pi)
		}
	}
	for _, i := range s.pending {
		js := &s.jobs[i]
		if !s.demands(js) {
			continue
		}
		for _, pi := range js.parts {
			if q, ok := rooms[s.cl.parts[pi].name]; ok && policy.Servable(js.gpus, js.j.Nodes, reclaim[pi]) {
				q.Demand += js.gpus
				rooms[s.cl.parts[pi].name] = q
			}
		}
	}
	return rooms
}

// queueRoom is queueRooms' figure for partition pi alone.
func (s *sim) queueRoom(pi int) policy.QueueRoom {
	q, reclaim := s.nodeRoom(pi)
	for _, i := range s.pending {
		if js := &s.jobs[i]; s.demands(js) && slices.Contains(js.parts, pi) && policy.Servable(js.gpus, js.j.Nodes, reclaim) {
			q.Demand += js.gpus
		}
	}
	return q
}

// nodeRoom is partition pi's idle GPUs, and the most one of its nodes
// would have idle with its elastic runs back at their base.
func (s *sim) nodeRoom(pi int) (policy.QueueRoom, int) {
	q := policy.QueueRoom{Idle: s.pc[pi].gpusIdle, GPUs: s.cl.parts[pi].gpus, Nodes: len(s.cl.parts[pi].nodes)}
	reclaim := 0
	for _, ni := range s.cl.parts[pi].nodes {
		n := &s.cl.nodes[ni]
		q.MostFree = max(q.MostFree, n.freeGPU)
		if n.gpus > 0 && n.freeGPU == n.gpus {
			q.FreeNodes++
		}
		reclaim = max(reclaim, n.freeGPU+s.surplus(n))
	}
	return q, reclaim
}

// demands: pending job js asks GPUs that it could start on (its
// account's limit does not hold it).
func (s *sim) demands(js *jobState) bool {
	return js.state == stPending && js.gpus > 0 && !s.accts.held(js.acct, js.gpus*js.j.Nodes)
}

// elasticStart sizes a new elastic run as isched submit --gpus MIN-MAX
// does (policy.StartSize): larger than its base when its one partition
// has the GPUs idle now and no job waits there.
func (s *sim) elasticStart(js *jobState, run time.Duration) {
	if js.plan.Elastic == nil || len(js.parts) != 1 || js.gpus <= 0 {
		return
	}
	pi := js.parts[0]
	room := policy.StartRoom{Queue: s.queueRoom(pi), PerNode: s.cl.nodes[s.cl.parts[pi].nodes[0]].gpus,
		LimitRoom: s.limitRoomOn(js, pi), Run: run}
	if size, _ := policy.StartSize(s.pol, *js.plan.Elastic, room); size > js.gpus {
		js.cpus, js.gpus = js.cpus/js.gpus*size, size
	}
}

// speedup is an elastic run's throughput at its current size over that at
// its base size: Config.Scaling per doubling at a constant global batch.
func (s *sim) speedup(js *jobState) float64 {
	if js.plan == nil || js.plan.Elastic == nil || js.gpus <= 0 {
		return 1
	}
	ratio := float64(js.gpus*max(len(js.alloc), 1)) / float64(js.plan.Elastic.Min)
	eff := s.cfg.Scaling
	if eff <= 0 {
		eff = policy.DefaultScalingEfficiency
	}
	return ratio * math.Pow(eff, math.Log2(ratio))
}

// measureRate records the attempt's steps per second at its size from the
// estimator, as the coordinator learns it from the attempt's iterations.
func (s *sim) measureRate(js *jobState) {
	if js.plan == nil || js.plan.Elastic == nil {
		return
	}
	if e, ok := js.est.Estimate(); ok && e.MS > 0 {
		if js.rates == nil {
			js.rates = map[int]float64{}
		}
		js.rates[js.gpus*len(js.alloc)] = 1000 / e.PerIterMS()
	}
}

// elasticPlan makes a planned one-GPU run elastic, as isched submit
// --gpus 1-Config.ElasticMax does, within one node of its partition. It
// says whether the run is one rule 9 makes elastic, in every variant: the
// same runs at fixed size are what the elastic ones are compared with.
func (s *sim) elasticPlan(p *report.Plan, gpus, perNode int) bool {
	if gpus != 1 || perNode < 2 {
		return false
	}
	if !s.cfg.Variant.Elastic {
		return true
	}
	most := s.cfg.ElasticMax
	if most <= 0 {
		most = DefaultElasticMax
	}
	p.Elastic = &report.Elastic{Min: 1, Max: min(most, perNode)}
	return true
}

// limitRoom is the GPUs the limits of js's owner let it add, as the
// agent's snapshot gives them to the coordinator (report.UserLimit): its
// account's GrpTRES and its partition's per-user limit; -1: none.
func (s *sim) limitRoom(js *jobState) int { return s.limitRoomOn(js, js.pi) }

// limitRoomOn is limitRoom on partition pi.
func (s *sim) limitRoomOn(js *jobState, pi int) int {
	room := -1
	if q := s.accts.quota[js.acct]; q > 0 {
		room = max(q-s.accts.running[js.acct], 0)
	}
	if l := s.cl.parts[pi].spec.PerUser; l != nil && l.MaxGPUs > 0 {
		u := s.use[userPart{js.j.User, pi}]
		if r := max(l.MaxGPUs-u.gpus, 0); room < 0 || r < room {
			room = r
		}
	}
	return room
}

// heldDemand is, per account with a GrpTRES limit, the GPUs asked by its
// pending jobs that the limit holds (Slurm's AssocGrpGRES): the GPUs its
// elastic runs hold above their base are theirs.
func (s *sim) heldDemand() map[int]int {
	held := map[int]int{}
	for _, i := range s.pending {
		p := &s.jobs[i]
		if p.state == stPending && p.gpus > 0 && s.accts.quota[p.acct] > 0 && s.accts.held(p.acct, p.gpus*p.j.Nodes) {
			held[p.acct] += p.gpus * p.j.Nodes
		}
	}
	return held
}

// surplus is the GPUs the elastic runs on node n hold above their base.
func (s *sim) surplus(n *node) int {
	k := 0
	for _, i := range n.jobs {
		if js := &s.jobs[i]; js.plan != nil && js.plan.Elastic != nil {
			k += max(js.gpus-js.plan.Elastic.Min, 0)
		}
	}
	return k
}
