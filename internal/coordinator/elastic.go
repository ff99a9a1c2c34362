package coordinator

import (
	"context"
	"maps"
	"strings"
	"time"

	"github.com/isched/isched/internal/lifecycle"
	"github.com/isched/isched/internal/plan"
	"github.com/isched/isched/internal/policy"
	"github.com/isched/isched/internal/report"
)

// resizeElastic is rule 9 (policy.Resize): the running elastic runs with
// no resize under way are grown onto idle GPUs or shrunk back to their
// base size when jobs wait, each by a checkpoint and a requeue at the new
// size.
func (c *Coordinator) resizeElastic(ctx context.Context, now time.Time) error {
	if c.jobs == nil || now.Sub(c.jobsAt) > c.cfg.StaleAfter || c.snap == nil {
		return nil
	}
	pol := c.policyConfig()
	if !pol.Elastic {
		return nil
	}
	waiting, names := c.waitingRuns(now)
	for _, r := range policy.ShrinkWaiting(pol, waiting) {
		d := policy.Decision{Kind: policy.MovePending, Rule: policy.RuleElastic, // its partitions kept
			Gres: r.Gres, Tasks: r.To, Nodes: r.Nodes, Reason: r.Reason}
		if err := c.issue(ctx, names[r.JobID], c.lineages[names[r.JobID]], d, now); err != nil {
			return err
		}
	}
	counts := countGPUs(c.jobs)
	rooms := policy.QueueRooms(c.snap, maps.Values(c.jobs), c.reclaimable(counts))
	runs, names := c.elasticRuns(rooms, counts, now)
	if len(runs) == 0 {
		return nil
	}
	all, _ := policy.Resize(pol, runs, rooms, now)
	for _, r := range all {
		name := names[r.JobID]
		j := c.jobs[r.JobID]
		d := policy.Decision{Kind: policy.Checkpoint, Then: policy.Requeue, Rule: policy.RuleElastic, Target: j.Partition,
			Gres: r.Gres, Tasks: r.To, Nodes: r.Nodes, Reason: r.Reason}
		if err := c.issue(ctx, name, c.lineages[name], d, now); err != nil {
			return err
		}
	}
	return nil
}

// elasticRuns are the running elastic runs with no resize under way as
// rule 9 sees them, and the lineage of each job; a growth under way
// reserves its GPUs in rooms (its checkpoint has not landed: they are not
// taken yet).
func (c *Coordinator) elasticRuns(rooms map[string]policy.QueueRoom, counts gpuCounts, now time.Time) ([]policy.ElasticRun, map[uint64]string) {
	var runs []policy.ElasticRun
	names := map[uint64]string{}
	for name, l := range c.lineages {
		p := l.Status.Plan
		j, ok := c.jobs[l.Status.JobID]
		if p == nil || p.Elastic == nil || !ok || j.State != "RUNNING" {
			continue
		}
		if d := l.CkptDecision; l.Phase == lifecycle.AwaitingCheckpoint && d != nil && d.Rule == policy.RuleElastic && d.Tasks > jobGPUs(j) {
			rooms[j.Partition] = rooms[j.Partition].Reserve(d.Tasks - jobGPUs(j))
		}
		if l.Phase != lifecycle.Idle || l.Pending != nil || l.Status.Step <= 0 {
			continue
		}
		names[j.JobID] = name
		r := l.elasticRun(j, c.snap, now)
		r.HeldDemand = counts.held[j.User]
		r.FreeBeside = counts.freeBeside(j, r.PerNode)
		runs = append(runs, r)
	}
	return runs, names
}

// waitingRuns are the elastic runs queued above their base with nothing
// of isched's under way, and the lineage of each job.
func (c *Coordinator) waitingRuns(now time.Time) ([]policy.WaitingRun, map[uint64]string) {
	var runs []policy.WaitingRun
	names := map[uint64]string{}
	for name, l := range c.lineages {
		p := l.Status.Plan
		j, ok := c.jobs[l.Status.JobID]
		if p == nil || p.Elastic == nil || !ok || j.State != "PENDING" || l.Phase != lifecycle.Idle || l.Pending != nil {
			continue
		}
		size := jobGPUs(j)
		if size <= p.Elastic.Min {
			continue
		}
		queued := time.UnixMilli(max(j.SubmitMS, l.LastMoveMS)) // a requeue at this size, or the submission
		names[j.JobID] = name
		runs = append(runs, policy.WaitingRun{JobID: j.JobID, Queue: j.Partition, Size: size, Min: p.Elastic.Min,
			PerNode: policy.GPUsPerNode(c.snap, j.Partition), Waited: now.Sub(queued), Blocked: policy.Blocked(j.Reason)})
	}
	return runs, names
}

// elasticRun is running job j of the lineage as rule 9 sees it.
func (l *lineage) elasticRun(j report.Job, snap *report.Snapshot, now time.Time) policy.ElasticRun {
	size := jobGPUs(j)
	r := policy.ElasticRun{JobID: j.JobID, Owner: j.User, Queue: j.Partition, Size: size, Min: l.Status.Plan.Elastic.Min,
		Max: l.Status.Plan.Elastic.Max, PerNode: policy.GPUsPerNode(snap, j.Partition), Remaining: l.predictedRemaining(j),
		Rates: l.rates(size), Resizes: l.Resizes, LimitRoom: policy.GPULimitRoom(snap, j.User, j.QOS, j.Account, j.Partition)}
	r.Attained, r.LastMoveAt, r.CkptDur = l.runTimes(j, now)
	return r
}

// runTimes are what rules 8 and 9 weigh a running job's move by: how long
// its attempt has run, its last move, and its measured checkpoint time
// (0: none measured).
func (l *lineage) runTimes(j report.Job, now time.Time) (attained time.Duration, lastMove time.Time, ckpt time.Duration) {
	if j.StartMS > 0 {
		attained = now.Sub(time.UnixMilli(j.StartMS))
	}
	if l.LastMoveMS > 0 {
		lastMove = time.UnixMilli(l.LastMoveMS)
	}
	if l.Ckpt.N > 0 {
		ckpt = l.Ckpt.Estimate()
	}
	return attained, lastMove, ckpt
}

// rates are the run's learned steps per second per size, with the
// current attempt's at size (its iterations so far) over any older one.
func (l *lineage) rates(size int) map[int]float64 {
	out := make(map[int]float64, len(l.Rates)+1)
	for k, v := range l.Rates {
		out[k] = v
	}
	if rate, ok := l.measuredRate(); ok {
		out[size] = rate
	}
	return out
}

// measuredRate is the steps per second of the iterations since the
// estimator last started afresh; ok is false before a settled estimate.
func (l *lineage) measuredRate() (float64, bool) {
	est, ok := l.Iter.Estimate()
	if !ok || est.Provisional || est.MS <= 0 {
		return 0, false
	}
	return 1000 / est.PerIterMS(), true
}

// leftSize notes that an attempt starts at another size (ranks; one GPU
// each in an elastic run) than the iterations so far ran at: their rate is kept for rule 9 and the
// estimator starts afresh, as after a move. It says whether there was one.
func (l *lineage) leftSize(from, to int) bool {
	from, to = max(from, 1), max(to, 1) // an attempt that counted no ranks ran one
	if from == to {
		return false
	}
	if rate, ok := l.measuredRate(); ok {
		if l.Rates == nil {
			l.Rates = map[int]float64{}
		}
		l.Rates[from] = rate
	}
	l.Iter.Reset()
	return true
}

// jobGPUs is the GPUs job j holds: its GRES per node times its nodes.
func jobGPUs(j report.Job) int {
	return policy.GPUs(j.Gres) * max(j.NodeCount, 1)
}

// gpuCounts are the job table's GPUs as rule 9 reads them, counted once
// a round: per user, those its pending jobs wait for that a GPU limit
// holds (Slurm's reasons AssocGrpGRES, QOSMaxGRESPerUser, ...: an elastic
// run of the user's holds them above its base); per node, those of the
// running jobs on it. readable is false when a running job's host list
// could not be read (then no node claims idle GPUs).
type gpuCounts struct {
	held     map[string]int
	onNode   map[string]int
	readable bool
}

func countGPUs(jobs map[uint64]report.Job) gpuCounts {
	g := gpuCounts{held: map[string]int{}, onNode: map[string]int{}, readable: true}
	for _, j := range jobs {
		switch j.State {
		case "PENDING":
			if strings.Contains(j.Reason, "GRES") {
				g.held[j.User] += jobGPUs(j)
			}
		case "RUNNING":
			hosts, err := plan.ExpandHostlist(j.Nodes)
			if err != nil {
				g.readable = false
				continue
			}
			for _, h := range hosts {
				g.onNode[h] += policy.GPUs(j.Gres)
			}
		}
	}
	return g
}

// freeBeside is the GPUs idle on the node a one-node job runs on: the
// node's GPUs (perNode) less those of the running jobs on it; 0 for a job
// on several nodes or an unknown node size.
func (g gpuCounts) freeBeside(run report.Job, perNode int) int {
	if perNode <= 0 || run.NodeCount > 1 || run.Nodes == "" || !g.readable {
		return 0
	}
	return max(perNode-g.onNode[run.Nodes], 0)
}

// reclaimable is, per partition, the most GPUs one node holding elastic
// runs would have idle with them back at their base: its idle GPUs (from
// the job table) and theirs above base.
func (c *Coordinator) reclaimable(counts gpuCounts) map[string]int {
	surplus := map[string]int{}       // node: elastic GPUs above base
	onNode := map[string]report.Job{} // node: a one-node elastic run on it
	for _, l := range c.lineages {
		p := l.Status.Plan
		j, ok := c.jobs[l.Status.JobID]
		if p == nil || p.Elastic == nil || !ok || j.State != "RUNNING" || j.NodeCount > 1 || j.Nodes == "" {
			continue
		}
		surplus[j.Nodes] += max(jobGPUs(j)-p.Elastic.Min, 0)
		onNode[j.Nodes] = j
	}
	out := map[string]int{}
	for node, k := range surplus {
		j := onNode[node]
		free := counts.freeBeside(j, policy.GPUsPerNode(c.snap, j.Partition))
		out[j.Partition] = max(out[j.Partition], free+k)
	}
	return out
}
