package sim

import (
	"math"
	"slices"
)

// scheduleSlurm is slurmctld's quick scheduling pass on events under
// Sched.Backfill: pending jobs in priority order (default_queue_depth:
// Config.Depth), each started where it fits now; a job that cannot start
// blocks its partitions for every job after it (strict priority order
// within a partition), and a job its account's GrpTRES limit holds is
// passed over (it blocks nothing). What a blocked partition's lower jobs
// may do is the backfill pass's, every bf_interval.
func (s *sim) scheduleSlurm() {
	s.dirty = false
	s.accts.refresh(s.now, s.cfg.Sched)
	s.sortByPriority()
	blocked := make([]bool, len(s.cl.parts))
	for n, ji := range slices.Clone(s.pending) {
		if n >= s.cfg.Depth {
			break
		}
		js := &s.jobs[ji]
		if js.state != stPending || s.accts.held(js.acct, js.gpus*js.j.Nodes) {
			continue
		}
		if s.startFirstFit(ji, blocked) {
			continue
		}
		for _, pi := range js.parts {
			if blocked[pi] || !s.partUp(pi) || s.userLimited(js, pi) {
				continue
			}
			blocked[pi] = true
			if s.cl.parts[pi].tier > 0 && s.preempt > 0 && js.j.Nodes == 1 {
				if nd := s.preemptFor(js, pi); nd >= 0 {
					s.start(ji, pi, []int{nd})
					break
				}
			}
		}
	}
	if s.bfDirty && !s.bfQueued && len(s.pending) > 0 {
		iv := max(s.cfg.Sched.BfInterval, 1)
		s.bfQueued = true
		s.push((math.Floor(s.now/iv)+1)*iv, evBackfill, -1, 0)
	}
}

// startFirstFit starts job ji on the first of its partitions, not
// blocked, where it fits now; it reports whether it started.
func (s *sim) startFirstFit(ji int, blocked []bool) bool {
	js := &s.jobs[ji]
	for _, pi := range js.parts {
		if blocked[pi] || !s.partUp(pi) || s.userLimited(js, pi) {
			continue
		}
		if nodes := s.fitNow(js, pi); nodes != nil {
			s.start(ji, pi, nodes)
			return true
		}
	}
	return false
}

// fitNow is the first nodes of partition pi with room for the job now,
// or nil.
func (s *sim) fitNow(js *jobState, pi int) []int {
	k := js.j.Nodes
	if s.pc[pi].gpusIdle < js.gpus*k || s.pc[pi].cpusIdle < js.cpus*k {
		return nil
	}
	var got []int
	for _, ni := range s.cl.parts[pi].nodes {
		if n := &s.cl.nodes[ni]; n.freeCPU >= js.cpus && n.freeGPU >= js.gpus {
			if got = append(got, ni); len(got) == k {
				return got
			}
		}
	}
	return nil
}

// backfill is sched/backfill's pass: the pending jobs in priority order,
// up to bf_max_job_test of them (those their account's limit holds are
// passed over), each at the earliest time it can start on any of its
// partitions if running jobs end at their time limits and no earlier
// job's reservation is delayed. A job that can start now starts; one that
// can start inside bf_window gets a reservation of its nodes from then
// for its time limit, which every later job must leave alone.
func (s *sim) backfill() {
	s.bfDirty = false
	s.accts.refresh(s.now, s.cfg.Sched)
	s.sortByPriority()
	horizon := s.now + s.cfg.Sched.BfWindow
	pr := s.profiles(horizon)
	tested := 0
	for _, ji := range slices.Clone(s.pending) {
		if tested >= s.cfg.Sched.BfMaxJobTest {
			break
		}
		js := &s.jobs[ji]
		if js.state != stPending {
			continue
		}
		tested++
		if s.accts.held(js.acct, js.gpus*js.j.Nodes) {
			continue
		}
		best, bestPi, nodes := math.Inf(1), -1, []int(nil)
		for _, pi := range js.parts {
			if !s.partUp(pi) || s.userLimited(js, pi) {
				continue
			}
			t, got := pr.earliest(s.cl.parts[pi].nodes, need{js.j.Nodes, js.cpus, js.gpus}, s.limitOf(js, pi), s.now, horizon)
			if t < best {
				best, bestPi, nodes = t, pi, got
			}
		}
		if bestPi < 0 {
			continue
		}
		end := best + s.limitOf(js, bestPi)
		for _, ni := range nodes {
			pr.book(ni, best, end, js.cpus, js.gpus)
		}
		if best <= s.now {
			s.start(ji, bestPi, nodes)
		}
	}
}

// seg is a node's free room from t until the next segment's t.
type seg struct {
	t          float64
	cpus, gpus int
}

// profile is every node's free room over time until the horizon, if
// running jobs end at their time limits, less the reservations booked.
type profile struct{ nodes [][]seg }

// profiles is the nodes' free room from now: what is free, and what each
// running job frees at its time limit (before the horizon; after it,
// nothing is booked).
func (s *sim) profiles(horizon float64) *profile {
	p := &profile{nodes: make([][]seg, len(s.cl.nodes))}
	type rel struct {
		t          float64
		cpus, gpus int
	}
	var rels []rel
	for ni := range s.cl.nodes {
		n := &s.cl.nodes[ni]
		rels = rels[:0]
		for _, rj := range n.jobs {
			if r := &s.jobs[rj]; r.limitEnd < horizon {
				rels = append(rels, rel{max(r.limitEnd, s.now), r.cpus, r.gpus})
			}
		}
		slices.SortFunc(rels, func(a, b rel) int { return cmpFloat(a.t, b.t) })
		segs := []seg{{s.now, n.freeCPU, n.freeGPU}}
		for _, r := range rels {
			last := segs[len(segs)-1]
			if r.t == last.t {
				segs[len(segs)-1].cpus += r.cpus
				segs[len(segs)-1].gpus += r.gpus
				continue
			}
			segs = append(segs, seg{r.t, last.cpus + r.cpus, last.gpus + r.gpus})
		}
		p.nodes[ni] = segs
	}
	return p
}

func cmpFloat(a, b float64) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// fits reports whether node ni has room for one node's share of nd over
// [t, t+d).
func (p *profile) fits(ni int, nd need, t, d float64) bool {
	segs := p.nodes[ni]
	for k := range segs {
		end := math.Inf(1)
		if k+1 < len(segs) {
			end = segs[k+1].t
		}
		if end <= t {
			continue
		}
		if segs[k].t >= t+d {
			break
		}
		if segs[k].cpus < nd.cpus || segs[k].gpus < nd.gpus {
			return false
		}
	}
	return true
}

// nodeEarliest is the earliest t in [now, horizon) at which node ni has
// room for one node's share of nd for d seconds (+Inf: none).
func (p *profile) nodeEarliest(ni int, nd need, d, horizon float64) float64 {
	segs := p.nodes[ni]
	run := math.Inf(1) // start of the current run of segments with room
	for k := range segs {
		if segs[k].t >= horizon && math.IsInf(run, 1) {
			break
		}
		if segs[k].cpus < nd.cpus || segs[k].gpus < nd.gpus {
			run = math.Inf(1)
			continue
		}
		if math.IsInf(run, 1) {
			run = segs[k].t
		}
		end := math.Inf(1)
		if k+1 < len(segs) {
			end = segs[k+1].t
		}
		if end-run >= d {
			return run
		}
	}
	return math.Inf(1)
}

// earliest is the earliest time in [now, horizon) at which nd.nodes of
// nodes have room for nd for d seconds, and the nodes (the first ones in
// order); +Inf and nil when there is none.
func (p *profile) earliest(nodes []int, nd need, d, now, horizon float64) (float64, []int) {
	if nd.nodes == 1 {
		best, at := math.Inf(1), -1
		for _, ni := range nodes {
			if t := p.nodeEarliest(ni, nd, d, horizon); t < best {
				best, at = t, ni
				if t <= now {
					break
				}
			}
		}
		if at < 0 {
			return best, nil
		}
		return best, []int{at}
	}
	var cands []float64
	for _, ni := range nodes {
		for _, sg := range p.nodes[ni] {
			if sg.t < horizon {
				cands = append(cands, sg.t)
			}
		}
	}
	slices.Sort(cands)
	cands = slices.Compact(cands)
	for _, c := range cands {
		var got []int
		for _, ni := range nodes {
			if p.fits(ni, nd, c, d) {
				if got = append(got, ni); len(got) == nd.nodes {
					return c, got
				}
			}
		}
	}
	return math.Inf(1), nil
}

// book takes cpus and gpus off node ni over [a, b).
func (p *profile) book(ni int, a, b float64, cpus, gpus int) {
	segs := p.split(p.split(p.nodes[ni], a), b)
	for k := range segs {
		if segs[k].t >= a && segs[k].t < b {
			segs[k].cpus -= cpus
			segs[k].gpus -= gpus
		}
	}
	p.nodes[ni] = segs
}

// split makes t a segment boundary.
func (p *profile) split(segs []seg, t float64) []seg {
	if math.IsInf(t, 1) || t <= segs[0].t {
		return segs
	}
	k, found := slices.BinarySearchFunc(segs, t, func(sg seg, t float64) int { return cmpFloat(sg.t, t) })
	if found {
		return segs
	}
	return slices.Insert(segs, k, seg{t, segs[k-1].cpus, segs[k-1].gpus})
}
