package plan

import (
	"fmt"
	"math"
	"slices"

	"github.com/isched/isched/internal/report"
)

// MinPoolUsers is how many distinct users' receipts must agree before
// pooled receipts may put an estimate below the static one, or more than
// MaxPooledRaise above it. One user can
// run a job under any plan comment and report what they like about it
// (within what Slurm saw: see report.Receipt.Confirmed); a tiny process
// under a ResNet's comment once turned another user's 485.6 MiB static
// estimate into 1.00 MiB "measured" and their --mem into 256M. With fewer
// users the pooled figures only ever raise an estimate, and by at most
// MaxPooledRaise.
const MinPoolUsers = 3

// SplitReceipts sorts receipts for uid's estimate: uid's own (used as
// they are), other users' that Slurm confirmed (pooled: see
// Request.Pooled), and how many of the rest are ignored (unconfirmed, or
// written before receipts recorded their owner).
func SplitReceipts(rs []report.Receipt, uid int) (own, pooled []report.Receipt, ignored int) {
	for _, r := range rs {
		switch {
		case r.UID != nil && *r.UID == uid:
			own = append(own, r)
		case r.UID != nil && r.Confirmed:
			pooled = append(pooled, r)
		default:
			ignored++
		}
	}
	return own, pooled, ignored
}

// Median is the middle value (the mean of the two middle ones for an even
// count); NaN for none.
func Median(v []float64) float64 {
	if len(v) == 0 {
		return math.NaN()
	}
	s := slices.Clone(v)
	slices.Sort(s)
	n := len(s)
	if n%2 == 1 {
		return s[n/2]
	}
	return (s[n/2-1] + s[n/2]) / 2
}

// poolKey groups pooled receipts: one node type, one batch size.
type poolKey struct {
	nt    string
	batch int
}

// calibratePooled is calibrate for other users' receipts, robust to any
// one user: per node type and batch size, each user's receipts count as
// their median, and the figure is the median over users; c.users is the
// fewest distinct users behind any of its batch sizes.
func (s *Site) calibratePooled(key string, receipts []report.Receipt) map[string]*calibration {
	p := s.poolReceipts(key, receipts)
	out := map[string]*calibration{}
	keys := make([]poolKey, 0, len(p.groups))
	for k := range p.groups {
		keys = append(keys, k)
	}
	slices.SortFunc(keys, func(a, b poolKey) int { return a.batch - b.batch })
	for _, k := range keys {
		g := p.groups[k]
		c := out[k.nt]
		if c == nil {
			c = &calibration{nt: p.nts[k.nt], pooled: true, users: math.MaxInt, n: p.counts[k.nt]}
			out[k.nt] = c
		}
		if m, n := medianOfUsers(g.mem); n > 0 {
			c.mem = append(c.mem, xy{float64(k.batch), m})
			c.users = min(c.users, n)
		}
		if m, n := medianOfUsers(g.iter); n > 0 {
			c.iter = append(c.iter, xy{float64(k.batch), m})
			c.users = min(c.users, n)
		}
		if !slices.Contains(c.batches, k.batch) {
			c.batches = append(c.batches, k.batch)
		}
	}
	for name, c := range out {
		if len(c.mem)+len(c.iter) == 0 {
			delete(out, name)
		}
	}
	return out
}

// pool is receipts grouped for calibratePooled: each group's figures by
// user, and per node type the node type and how many receipts count.
type pool struct {
	groups map[poolKey]*poolUsers
	nts    map[string]*NodeType
	counts map[string]int
}

// poolUsers are one group's memory and iteration figures by uid.
type poolUsers struct{ mem, iter map[int][]float64 }

// poolReceipts groups the receipts of model key that name a batch size,
// a user and a node type of the site.
func (s *Site) poolReceipts(key string, receipts []report.Receipt) pool {
	p := pool{groups: map[poolKey]*poolUsers{}, nts: map[string]*NodeType{}, counts: map[string]int{}}
	for i := range receipts {
		r := &receipts[i]
		if r.Model != key || r.Batch <= 0 || r.UID == nil {
			continue
		}
		nt := s.receiptNodeType(r)
		if nt == nil {
			continue
		}
		k := poolKey{nt.Name, r.Batch}
		g := p.groups[k]
		if g == nil {
			g = &poolUsers{mem: map[int][]float64{}, iter: map[int][]float64{}}
			p.groups[k] = g
		}
		if g.add(r, nt.DeviceMemory()) {
			p.nts[nt.Name] = nt
			p.counts[nt.Name]++
		}
	}
	return p
}

// add takes r's memory (device memory when device) and iteration time,
// where it has them; false when it has neither.
func (g *poolUsers) add(r *report.Receipt, device bool) bool {
	mem := r.PeakRSS
	if device {
		mem = r.PeakGPU
	}
	used := false
	if mem > 0 {
		g.mem[*r.UID] = append(g.mem[*r.UID], float64(mem))
		used = true
	}
	if r.IterMS > 0 && !math.IsInf(r.IterMS, 0) && !math.IsNaN(r.IterMS) {
		g.iter[*r.UID] = append(g.iter[*r.UID], r.IterMS)
		used = true
	}
	return used
}

// medianOfUsers is the median of the users' medians, and how many users.
func medianOfUsers(byUser map[int][]float64) (float64, int) {
	var meds []float64
	for _, v := range byUser {
		meds = append(meds, Median(v))
	}
	return Median(meds), len(meds)
}

// MaxPooledRaise bounds how far fewer than MinPoolUsers users' receipts
// may raise an estimate above the static one: memory and iteration time
// at most this factor of the static figures. One confirmed job of bob's
// allocating 2.5 GB under a ResNet-18's plan once took alice's estimate
// from 542.3 MiB (static) to 2.53 GiB and her hours from 0.01 to 0.08: her
// submissions asked about 5x the memory, and a figure above a node's
// memory would make the node type infeasible for her. The factor covers
// what the static model is known to miss (host memory up to 21 % under,
// GPU memory up to 30 % under: docs/evaluation.md, docs/gpu-check.md), so
// one honest user's receipts still correct it; beyond it, as below the
// static estimate, MinPoolUsers users must agree.
const MaxPooledRaise = 1.5

// boundPooled keeps a row that other users' receipts made within
// [static, MaxPooledRaise x static] unless MinPoolUsers of them agree.
func boundPooled(r *Row, c *calibration, staticMem int64, staticIter float64) {
	if c == nil || !c.pooled {
		return
	}
	note := fmt.Sprintf("pooled: receipts of %d other user(s), Slurm-confirmed, median per user and over users", c.users)
	if c.users >= MinPoolUsers {
		r.Basis = joinBasis(r.Basis, note)
		return
	}
	var raised, capped bool
	if r.Mem < staticMem {
		r.Mem, raised = staticMem, true
	}
	if top := int64(math.Ceil(float64(staticMem) * MaxPooledRaise)); staticMem > 0 && r.Mem > top {
		r.Mem, capped = top, true
	}
	if r.IterSeconds < staticIter {
		r.IterSeconds, raised = staticIter, true
	}
	if top := staticIter * MaxPooledRaise; staticIter > 0 && r.IterSeconds > top {
		r.IterSeconds, capped = top, true
	}
	if raised {
		note += fmt.Sprintf("; not below the static estimate until %d users agree", MinPoolUsers)
	}
	if capped {
		note += fmt.Sprintf("; not above %gx the static estimate until %d users agree", MaxPooledRaise, MinPoolUsers)
	}
	if r.Mem == staticMem && r.IterSeconds == staticIter {
		r.Source = Static
	}
	r.Basis = joinBasis(r.Basis, note)
}

func joinBasis(a, b string) string {
	if a == "" {
		return b
	}
	return a + "; " + b
}
