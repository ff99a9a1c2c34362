package policy

import (
	"cmp"
	"fmt"
	"maps"
	"math"
	"slices"
	"time"

	"github.com/isched/isched/internal/report"
)

// ElasticRun is one of isched's running elastic runs (a plan with a GPU
// range, `isched submit --gpus 1-4`) as rule 9 (Resize) sees it. A size is
// GPUs, one rank each.
type ElasticRun struct {
	JobID    uint64
	Owner    string // its user: its HeldDemand is its owner's
	Queue    string // its partition
	Size     int    // GPUs it holds now
	Min, Max int    // its range
	// PerNode is the GPUs of one node of its partition: a size up to it
	// runs on one node, a larger one on whole nodes (0: one node only).
	PerNode int
	// FreeBeside is the idle GPUs on the node it runs on: a requeue frees
	// its own GPUs, so it may grow where it is.
	FreeBeside int
	// Remaining is its predicted run left at Size (0: unknown: never grown).
	Remaining time.Duration
	// Rates are its own measured steps per second at each size it ran at
	// (a constant global batch: a step is the same work at every size).
	Rates map[int]float64
	// LimitRoom is the GPUs its owner's limits (QOS, the account's
	// GrpTRES) let it add: a growth past them would leave it held
	// pending; negative: no limit.
	LimitRoom int
	// HeldDemand is the GPUs its account's or owner's other jobs wait for,
	// held by the same limit: the GPUs it holds above its base are theirs.
	HeldDemand int
	// Resizes is rule 9's resizes of the run so far.
	Resizes    int
	Attained   time.Duration // how long its current attempt has run
	LastMoveAt time.Time
	CkptDur    time.Duration // 0: the configured default
}

// QueueRoom is a partition's GPUs as rule 9 sees them.
type QueueRoom struct {
	Idle      int // idle GPUs
	MostFree  int // the most idle GPUs on one node
	FreeNodes int // nodes with every GPU idle
	GPUs      int // the partition's GPUs
	Nodes     int // its nodes (0: unknown)
	// Demand is the GPUs asked by the jobs that wait on the partition for
	// resources or priority (anyone's, isched's or not) and that shrinks
	// could start (Servable).
	Demand int
}

// Servable says whether a waiting job of gpus per node on nodes nodes is
// one that shrinking elastic runs could start: one node, and no more GPUs
// than the most one node of its partition would have idle with its
// elastic runs back at their base (reclaim). A job waiting for a whole
// node that no shrink frees, or for several nodes, neither blocks growth
// nor shrinks anyone: it waits for other jobs to end either way.
func Servable(gpus, nodes, reclaim int) bool {
	return gpus > 0 && max(nodes, 1) == 1 && gpus <= reclaim
}

// ResizeChoice is rule 9's choice: checkpoint JobID and requeue it at To
// GPUs on Nodes nodes (Gres per node).
type ResizeChoice struct {
	JobID    uint64
	Queue    string
	From, To int
	Nodes    int
	Gres     string
	Shrink   bool
	Reason   string
}

// Resize is rule 9 (issue 42, elastic runs, as Pollux and Gandiva grow
// and shrink jobs). When jobs wait on a partition for more GPUs than
// idle there, the elastic runs holding the most GPUs above their base
// shrink back to their base size (by checkpoint and requeue) until the
// GPUs they free cover the wait, except a run that ends within the cost
// of doing so; a run shrinks too when its owner's jobs wait under the
// same limit, and when fewer than half the partition's headroom
// (ElasticHeadroom) is idle. When nothing waits on its partition, a run
// grows onto the idle GPUs past the headroom to the size that gains most: its
// predicted run left at the new size, from its own measured steps per
// second at each size (ScalingEfficiency per doubling for a size it has
// not run at), must beat the run left now by more than MinGain × the
// cost of the resize and of the shrink that may follow (a checkpoint and
// a restart each). A run grows at most MaxResizes times, not within
// MinInterval of its start or last move, and one run per partition per
// round. The caller leaves out the runs with a resize under way and takes
// the GPUs their growths will hold off rooms (QueueRoom.Reserve). why
// says why nothing is due when the list is empty.
func Resize(cfg Config, runs []ElasticRun, rooms map[string]QueueRoom, now time.Time) ([]ResizeChoice, string) {
	if !cfg.Elastic {
		return nil, "off (elastic is false)"
	}
	if len(runs) == 0 {
		return nil, "no elastic run is running"
	}
	c := cfg.normalized()
	rs := slices.Clone(runs)
	slices.SortFunc(rs, func(a, b ElasticRun) int { return cmp.Compare(a.JobID, b.JobID) })
	left := maps.Clone(rooms)
	out, noShrink := shrinks(c, &rs, left)
	for {
		g, ok, why := growChoice(c, rs, left, now)
		if !ok {
			if len(out) == 0 && noShrink != "" {
				why = noShrink + "; " + why
			}
			return out, why
		}
		out = append(out, g)
		rs = slices.DeleteFunc(rs, func(r ElasticRun) bool { return r.Queue == g.Queue }) // one growth per partition
	}
}

// shrinks are the shrinks due, one after another, each run's freed GPUs
// counted as idle for the next (and as its owner's held jobs' due); the
// runs shrunk leave rs. why says why none is, when jobs wait.
func shrinks(c Config, rs *[]ElasticRun, rooms map[string]QueueRoom) ([]ResizeChoice, string) {
	var out []ResizeChoice
	for {
		r, ok, why := shrinkChoice(c, *rs, rooms)
		if !ok {
			return out, why
		}
		out = append(out, r)
		freed := r.From - r.To
		if q := rooms[r.Queue]; q.Demand > q.Idle || c.short(q) {
			q.Idle += freed // for the jobs waiting there; a held owner's are not idle GPUs
			rooms[r.Queue] = q
		}
		owner := ""
		*rs = slices.DeleteFunc(*rs, func(x ElasticRun) bool {
			if x.JobID == r.JobID {
				owner = x.Owner
			}
			return x.JobID == r.JobID
		})
		for i := range *rs {
			if x := &(*rs)[i]; owner != "" && x.Owner == owner {
				x.HeldDemand = max(x.HeldDemand-freed, 0)
			}
		}
	}
}

// Reserve takes add GPUs, a growth's that is under way, off the room.
func (q QueueRoom) Reserve(add int) QueueRoom {
	q.Idle, q.MostFree = max(q.Idle-add, 0), max(q.MostFree-add, 0)
	return q
}

// shrinkChoice: a run above its base on a partition where jobs wait for
// more GPUs than idle or less than half the headroom is idle, or whose
// owner's jobs wait under the same limit. why is set when jobs wait but
// no run shrinks.
func shrinkChoice(c Config, runs []ElasticRun, rooms map[string]QueueRoom) (ResizeChoice, bool, string) {
	var best *ElasticRun
	why := ""
	for i := range runs {
		r := &runs[i]
		q := rooms[r.Queue]
		if q.Demand <= q.Idle && r.HeldDemand == 0 && (!c.short(q) || r.Size <= r.Min) {
			continue
		}
		why = fmt.Sprintf("jobs wait on %s for %d GPUs, %d idle, and no run above its base can shrink", r.Queue, q.Demand, q.Idle)
		cost := c.resizeCost(r)
		switch {
		case r.Size <= r.Min:
		case r.Remaining > 0 && r.Remaining <= cost:
			why = fmt.Sprintf("job %d ends within %s, sooner than a shrink would free its GPUs", r.JobID, dur(r.Remaining))
		case best == nil || r.Size-r.Min > best.Size-best.Min:
			best = r
		}
	}
	if best == nil {
		return ResizeChoice{}, false, why
	}
	q := rooms[best.Queue]
	to, nodes, gres := placement(best, best.Min)
	var waits string
	switch {
	case q.Demand > q.Idle:
		waits = fmt.Sprintf("jobs wait on %s for %d GPUs with %d idle", best.Queue, q.Demand, q.Idle)
	case best.HeldDemand > 0:
		waits = fmt.Sprintf("its owner's other jobs wait for %d GPUs under the same limit", best.HeldDemand)
	default:
		waits = fmt.Sprintf("%d GPUs idle on %s, under half the %d kept for arrivals (elastic_headroom)", q.Idle, best.Queue, c.headroom(q))
	}
	return ResizeChoice{JobID: best.JobID, Queue: best.Queue, From: best.Size, To: to, Nodes: nodes, Gres: gres, Shrink: true,
		Reason: fmt.Sprintf("elastic: %s; job %d holds %d GPUs, %d above its base: "+
			"checkpointing it, then requeueing it at %d GPUs", waits, best.JobID, best.Size, best.Size-best.Min, to)}, true, ""
}

// growChoice: the run and size that gain most from the idle GPUs.
func growChoice(c Config, runs []ElasticRun, rooms map[string]QueueRoom, now time.Time) (ResizeChoice, bool, string) {
	var best ResizeChoice
	var bestGain time.Duration
	why := "no elastic run can grow"
	for i := range runs {
		r := &runs[i]
		if blocked := growBlocked(c, r, now); blocked != "" {
			why = blocked
			continue
		}
		to, gain, reason := bestSize(c, r, rooms[r.Queue])
		if to == 0 {
			why = reason
			continue
		}
		if gain > bestGain {
			n, nodes, gres := placement(r, to)
			best, bestGain = ResizeChoice{JobID: r.JobID, Queue: r.Queue, From: r.Size, To: n, Nodes: nodes, Gres: gres, Reason: reason}, gain
		}
	}
	return best, best.JobID != 0, why
}

// growBlocked says why r may not grow now ("": it may).
func growBlocked(c Config, r *ElasticRun, now time.Time) string {
	switch {
	case r.Size >= r.Max:
		return fmt.Sprintf("job %d runs at its largest size, %d GPUs", r.JobID, r.Max)
	case r.Resizes >= c.MaxResizes:
		return fmt.Sprintf("job %d was resized %d times already (max %d)", r.JobID, r.Resizes, c.MaxResizes)
	case r.Remaining <= 0:
		return fmt.Sprintf("job %d has no prediction of its run left yet", r.JobID)
	case r.HeldDemand > 0:
		return fmt.Sprintf("job %d: its owner's other jobs wait for %d GPUs under the same limit", r.JobID, r.HeldDemand)
	case r.LimitRoom == 0:
		return fmt.Sprintf("job %d: its owner's limits allow no more GPUs", r.JobID)
	case r.Attained < c.MinInterval || !r.LastMoveAt.IsZero() && now.Sub(r.LastMoveAt) < c.MinInterval:
		return fmt.Sprintf("job %d started or moved within %s (hysteresis)", r.JobID, dur(c.MinInterval))
	}
	return ""
}

// bestSize is the size r gains most at on q, and the gain net of the
// costs; 0 and why not when no size pays.
func bestSize(c Config, r *ElasticRun, q QueueRoom) (to int, gain time.Duration, why string) {
	if q.Demand > 0 {
		return 0, 0, fmt.Sprintf("jobs wait on %s for %d GPUs: job %d does not grow", r.Queue, q.Demand, r.JobID)
	}
	cost := 2 * c.resizeCost(r)
	why = fmt.Sprintf("job %d: %d idle GPUs on %s, %d kept for arrivals: no larger size fits", r.JobID, q.Idle, r.Queue, c.headroom(q))
	for s := r.Size + 1; s <= r.Max; s++ {
		if !fits(r, s, q, c.headroom(q)) {
			continue
		}
		rate, basis := r.rate(s, c.ScalingEfficiency)
		left := time.Duration(float64(r.Remaining) * r.rateNow(c.ScalingEfficiency) / rate)
		g := r.Remaining - left - cost
		if float64(r.Remaining-left) <= c.MinGain*float64(cost) {
			why = fmt.Sprintf("job %d at %d GPUs: %s left instead of %s (scaling efficiency %.2f, %s): the gain does not exceed %g × the cost %s",
				r.JobID, s, dur(left), dur(r.Remaining), r.efficiency(s, c.ScalingEfficiency), basis, c.MinGain, dur(cost))
			continue
		}
		if g > gain {
			to, gain = s, g
			why = fmt.Sprintf("elastic: %d GPUs idle on %s and no job waits there; job %d at %d GPUs would have %s left instead of %s "+
				"(scaling efficiency %.2f, %s), %s sooner net of the cost %s (this resize and a shrink later): "+
				"checkpointing it, then requeueing it at %d GPUs",
				q.Idle, r.Queue, r.JobID, s, dur(left), dur(r.Remaining), r.efficiency(s, c.ScalingEfficiency), basis, dur(g), dur(cost), s)
		}
	}
	return to, gain, why
}

// fits: the partition has room for r at s GPUs once r's own are free,
// keeping headroom idle GPUs.
func fits(r *ElasticRun, s int, q QueueRoom, headroom int) bool {
	if s-r.Size > q.Idle-headroom || r.LimitRoom >= 0 && s-r.Size > r.LimitRoom {
		return false
	}
	if r.PerNode <= 0 || s <= r.PerNode {
		return s <= max(q.MostFree, r.Size+r.FreeBeside) && (r.PerNode <= 0 || s <= r.PerNode)
	}
	if s%r.PerNode != 0 {
		return false
	}
	whole := q.FreeNodes
	if r.Size+r.FreeBeside == r.PerNode {
		whole++ // its own node, once it is requeued
	}
	return s/r.PerNode <= whole
}

// headroom is the idle GPUs rule 9 keeps on partition q for arrivals:
// ElasticHeadroom, or when unset the GPUs of DefaultElasticHeadroomShare
// of its nodes, rounded down to whole nodes (none under four nodes).
func (c Config) headroom(q QueueRoom) int {
	switch {
	case c.ElasticHeadroom > 0:
		return c.ElasticHeadroom
	case c.ElasticHeadroom < 0 || q.Nodes <= 0:
		return 0
	}
	return int(float64(q.Nodes)*DefaultElasticHeadroomShare) * (q.GPUs / q.Nodes)
}

// short: arrivals have left fewer than half the headroom idle on q, so
// the runs above their base shrink back to restore it.
func (c Config) short(q QueueRoom) bool {
	return q.Idle < c.headroom(q)/2
}

// placement is size s as tasks, nodes and GRES per node.
func placement(r *ElasticRun, s int) (tasks, nodes int, gres string) {
	if r.PerNode <= 0 || s <= r.PerNode {
		return s, 1, fmt.Sprintf("gpu:%d", s)
	}
	return s, s / r.PerNode, fmt.Sprintf("gpu:%d", r.PerNode)
}

// resizeCost is a checkpoint and a restart.
func (c Config) resizeCost(r *ElasticRun) time.Duration {
	ckpt := r.CkptDur
	if ckpt <= 0 {
		ckpt = c.DefaultCkpt
	}
	return ckpt + c.MoveCost
}

// rateNow is the run's steps per second at its size, measured or
// modelled from its base (1 when it measured none: only ratios matter).
func (r *ElasticRun) rateNow(eff float64) float64 {
	rate, _ := r.rate(r.Size, eff)
	return rate
}

// rate is the steps per second at size s: measured there, else scaled
// from the nearest size measured below it (or above, when none is below)
// by ScalingEfficiency per doubling; basis says which.
func (r *ElasticRun) rate(s int, eff float64) (float64, string) {
	if v := r.Rates[s]; v > 0 {
		return v, "measured"
	}
	from := 0
	for size, rt := range r.Rates {
		if rt > 0 && nearer(size, from, s) {
			from = size
		}
	}
	v := r.Rates[from]
	if from == 0 {
		from, v = r.Size, 1
	}
	ratio := float64(s) / float64(from)
	return v * ratio * math.Pow(eff, math.Log2(ratio)), fmt.Sprintf("modelled from %d GPUs", from)
}

// efficiency is the throughput at s per GPU over that at Min per GPU.
func (r *ElasticRun) efficiency(s int, eff float64) float64 {
	base, _ := r.rate(r.Min, eff)
	at, _ := r.rate(s, eff)
	return at / base / (float64(s) / float64(r.Min))
}

// nearer: measured size a is a better base than b for size s: below s
// before above it, and the closer the better (b == 0: none yet).
func nearer(a, b, s int) bool {
	switch {
	case b == 0:
		return true
	case (a < s) != (b < s):
		return a < s
	case a < s:
		return a > b
	}
	return a < b
}

// GPUs is the GPU count of a GRES request ("gpu:2", "gpu:v100:2",
// "gres/gpu=2"); 0 for none.
func GPUs(gres string) int {
	_, n := gpuRequest(gres)
	return n
}

// GPULimitRoom is the GPUs more that user's limits in the snapshot
// (report.UserLimit: QOS and association limits, with their use) let a
// job under qos in account on partition hold; -1: no GPU limit binds it.
func GPULimitRoom(snap *report.Snapshot, user, qos, account, partition string) int {
	room := -1
	if snap == nil {
		return room
	}
	for i := range snap.Limits {
		l := &snap.Limits[i]
		if l.User != user || l.Resource != report.LimitGPU || !l.Binds(qos, account, partition) {
			continue
		}
		if r := int(max(l.Max-l.Used, 0)); room < 0 || r < room {
			room = r
		}
	}
	return room
}
