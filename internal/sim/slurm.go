package sim

import (
	"cmp"
	"math"
	"slices"
)

// partCount is a partition's state as sinfo counts it: a node is idle
// when nothing runs on it.
type partCount struct {
	nodesIdle, gpusIdle, cpusIdle int
}

type userPart struct {
	user string
	part int
}

type usage struct{ cpus, gpus, jobs int }

// schedule is one pass of the scheduler: pending jobs in priority order
// (partition tier, then when they became eligible), each started where it
// fits now; the first job of each partition that does not fit gets a
// reservation (EASY backfill): later jobs may use the reserved nodes only
// if their time limit ends before it. A blocked job of a higher tier
// preempts (requeues) jobs of preemptible partitions on one node.
func (s *sim) schedule() {
	if s.cfg.Sched.Backfill {
		s.scheduleSlurm()
		return
	}
	s.dirty = false
	s.pending = slices.DeleteFunc(s.pending, func(i int) bool { return s.jobs[i].state != stPending })
	slices.SortFunc(s.pending, func(a, b int) int {
		ja, jb := &s.jobs[a], &s.jobs[b]
		if c := cmp.Compare(s.tierOf(jb), s.tierOf(ja)); c != 0 {
			return c
		}
		if c := cmp.Compare(ja.order, jb.order); c != 0 {
			return c
		}
		return cmp.Compare(a, b)
	})
	s.pending = slices.Compact(s.pending) // a job requeued twice between passes
	pass := schedPass{resv: map[int]float64{}, reserved: map[int]bool{}, failed: map[int][]need{}}
	queue := slices.Clone(s.pending)
	for n, ji := range queue {
		if n >= s.cfg.Depth {
			break
		}
		s.tryStart(ji, &pass)
	}
}

// schedPass is what one pass remembers: reservations (node → shadow
// time), partitions already reserved, and requests known not to fit.
type schedPass struct {
	resv     map[int]float64
	reserved map[int]bool
	failed   map[int][]need
}

type need struct{ nodes, cpus, gpus int }

func (n need) covers(m need) bool { return m.nodes >= n.nodes && m.cpus >= n.cpus && m.gpus >= n.gpus }

func (s *sim) tierOf(js *jobState) int {
	t := 0
	for _, pi := range js.parts {
		t = max(t, s.cl.parts[pi].tier)
	}
	return t
}

func (s *sim) tryStart(ji int, pass *schedPass) {
	js := &s.jobs[ji]
	if js.state != stPending {
		return // started or preempted earlier in this pass
	}
	nd := need{js.j.Nodes, js.cpus, js.gpus}
	for _, pi := range js.parts {
		if !s.partUp(pi) || s.userLimited(js, pi) {
			continue
		}
		if nodes := s.fit(js, pi, nd, pass); nodes != nil {
			s.start(ji, pi, nodes)
			return
		}
	}
	for _, pi := range js.parts {
		if !s.partUp(pi) || s.userLimited(js, pi) || pass.reserved[pi] {
			continue
		}
		pass.reserved[pi] = true
		if s.cl.parts[pi].tier > 0 && s.preempt > 0 && js.j.Nodes == 1 {
			if n := s.preemptFor(js, pi); n >= 0 {
				s.start(ji, pi, []int{n})
				return
			}
		}
		s.reserve(js, pi, pass)
	}
}

// limitOf is a job's time limit on partition pi, seconds (+Inf: none).
func (s *sim) limitOf(js *jobState, pi int) float64 {
	l := js.limit
	if mt := s.cl.parts[pi].maxTime; mt > 0 && (l <= 0 || l > mt) {
		l = mt
	}
	if l <= 0 {
		return math.Inf(1)
	}
	return l
}

// fit finds nodes for the job on partition pi that no reservation of
// this pass forbids, or nil.
func (s *sim) fit(js *jobState, pi int, nd need, pass *schedPass) []int {
	for _, f := range pass.failed[pi] {
		if f.covers(nd) {
			return nil
		}
	}
	p := &s.cl.parts[pi]
	if s.pc[pi].gpusIdle < nd.gpus*nd.nodes || s.pc[pi].cpusIdle < nd.cpus*nd.nodes {
		pass.failed[pi] = append(pass.failed[pi], nd)
		return nil
	}
	end := s.now + s.limitOf(js, pi)
	var got []int
	free := 0
	for _, ni := range p.nodes {
		n := &s.cl.nodes[ni]
		if n.freeCPU < nd.cpus || n.freeGPU < nd.gpus {
			continue
		}
		free++
		if t, ok := pass.resv[ni]; ok && end > t {
			continue
		}
		got = append(got, ni)
		if len(got) == nd.nodes {
			return got
		}
	}
	if free < nd.nodes {
		pass.failed[pi] = append(pass.failed[pi], nd)
	}
	return nil
}

// reserve books, for the job at the head of partition pi, the nodes where
// it starts earliest if running jobs end at their time limits (EASY). A
// node's earliest time does not depend on the others', so the job's is
// the k-th earliest of its nodes' (k: the nodes it needs). The answer is
// kept until an allocation on the partition changes.
func (s *sim) reserve(js *jobState, pi int, pass *schedPass) {
	nd := need{js.j.Nodes, js.cpus, js.gpus}
	key := resvKey{pi, nd}
	r, ok := s.resvCache[key]
	if !ok || r.ver != s.pver[pi] {
		r = s.computeReservation(pi, nd)
		s.resvCache[key] = r
	}
	shadow := max(r.shadow, s.now)
	for _, ni := range r.nodes {
		if t, had := pass.resv[ni]; !had || shadow < t {
			pass.resv[ni] = shadow
		}
	}
}

type resvKey struct {
	pi int
	nd need
}

type reservation struct {
	ver    uint64
	shadow float64
	nodes  []int
}

func (s *sim) computeReservation(pi int, nd need) reservation {
	r := reservation{ver: s.pver[pi]}
	type cand struct {
		t    float64
		node int
	}
	var cands []cand
	for _, ni := range s.cl.parts[pi].nodes {
		if t := s.nodeFreeAt(ni, nd); !math.IsInf(t, 1) {
			cands = append(cands, cand{t, ni})
		}
	}
	if len(cands) < nd.nodes {
		return r
	}
	slices.SortFunc(cands, func(a, b cand) int { return cmp.Or(cmp.Compare(a.t, b.t), cmp.Compare(a.node, b.node)) })
	r.shadow = cands[nd.nodes-1].t
	for _, c := range cands[:nd.nodes] {
		r.nodes = append(r.nodes, c.node)
	}
	return r
}

// nodeFreeAt is when node ni has room for one node's share of nd if its
// jobs end at their time limits (+Inf: never, or not known).
func (s *sim) nodeFreeAt(ni int, nd need) float64 {
	n := &s.cl.nodes[ni]
	if n.cpus < nd.cpus || n.gpus < nd.gpus {
		return math.Inf(1)
	}
	cpus, gpus := n.freeCPU, n.freeGPU
	if cpus >= nd.cpus && gpus >= nd.gpus {
		return s.now
	}
	type rel struct {
		t          float64
		cpus, gpus int
	}
	rels := make([]rel, 0, len(n.jobs))
	for _, rj := range n.jobs {
		r := &s.jobs[rj]
		rels = append(rels, rel{r.limitEnd, r.cpus, r.gpus})
	}
	slices.SortFunc(rels, func(a, b rel) int { return cmp.Compare(a.t, b.t) })
	for _, r := range rels {
		cpus, gpus = cpus+r.cpus, gpus+r.gpus
		if cpus >= nd.cpus && gpus >= nd.gpus {
			return r.t
		}
	}
	return math.Inf(1)
}

// preemptFor requeues the jobs of preemptible partitions on one node of
// pi where that makes room for js; it returns the node, or -1.
func (s *sim) preemptFor(js *jobState, pi int) int {
	for _, ni := range s.cl.parts[pi].nodes {
		n := &s.cl.nodes[ni]
		cpus, gpus := n.freeCPU, n.freeGPU
		var victims []int
		for _, rj := range n.jobs {
			if r := &s.jobs[rj]; s.cl.parts[r.pi].tier < s.cl.parts[pi].tier {
				cpus, gpus = cpus+r.cpus, gpus+r.gpus
				victims = append(victims, rj)
			}
		}
		if len(victims) == 0 || cpus < js.cpus || gpus < js.gpus {
			continue
		}
		for _, v := range victims {
			s.preempted(v)
		}
		return ni
	}
	return -1
}

// partUp: a dev partition takes jobs only inside the dev windows (in
// working hours its nodes are people's); the others always.
func (s *sim) partUp(pi int) bool {
	if !s.cl.parts[pi].dev || len(s.cfg.DevWindows) == 0 {
		return true
	}
	t := at(s.now)
	for _, w := range s.cfg.DevWindows {
		if w.Contains(t) {
			return true
		}
	}
	return false
}

// userLimited: the partition's per-user limit would hold the job.
func (s *sim) userLimited(js *jobState, pi int) bool {
	l := s.cl.parts[pi].spec.PerUser
	if l == nil {
		return false
	}
	u := s.use[userPart{js.j.User, pi}]
	n := js.j.Nodes
	return (l.MaxGPUs > 0 && u.gpus+js.gpus*n > l.MaxGPUs) || (l.MaxCPUs > 0 && u.cpus+js.cpus*n > l.MaxCPUs) ||
		(l.MaxNodes > 0 && u.jobs+n > l.MaxNodes)
}

// take and give move a job's share of a node, keeping the partitions'
// counts.
func (s *sim) take(ni, cpus, gpus int) {
	n := &s.cl.nodes[ni]
	wasIdle := n.freeCPU == n.cpus && n.freeGPU == n.gpus
	n.freeCPU -= cpus
	n.freeGPU -= gpus
	for _, pi := range n.parts {
		s.pver[pi]++
		c := &s.pc[pi]
		c.cpusIdle -= cpus
		c.gpusIdle -= gpus
		if wasIdle {
			c.nodesIdle--
		}
	}
}

func (s *sim) give(ni, cpus, gpus int) {
	n := &s.cl.nodes[ni]
	n.freeCPU += cpus
	n.freeGPU += gpus
	idle := n.freeCPU == n.cpus && n.freeGPU == n.gpus
	for _, pi := range n.parts {
		s.pver[pi]++
		c := &s.pc[pi]
		c.cpusIdle += cpus
		c.gpusIdle += gpus
		if idle {
			c.nodesIdle++
		}
	}
}
