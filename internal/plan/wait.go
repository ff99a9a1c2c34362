package plan

import (
	"cmp"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/isched/isched/internal/report"
)

// ClusterState is what the wait estimate reads: the agent's snapshot and
// job table (or the same built from Slurm directly), and the coordinator's
// predicted end of the isched jobs among them.
type ClusterState struct {
	Snapshot *report.Snapshot
	Jobs     *report.JobTable // nil: running and pending jobs unknown
	// PredictedEnd is the coordinator's predicted end by Slurm job id.
	PredictedEnd map[uint64]time.Time
}

// Need is what one job asks of a partition.
type Need struct {
	CPUs int
	GPUs int
	// WholeNode: the job takes all cores of a node, so idle CPUs spread
	// over several nodes do not count.
	WholeNode bool
	// User, QOS and Account say whose job it is, under which QOS and in
	// which account ("": the user's default): the per-user limits of the
	// snapshot that apply. An empty User applies none.
	User, QOS, Account string
}

// NeedOf is what a one-device job of node type nt asks.
func NeedOf(nt *NodeType) Need {
	n := Need{CPUs: nt.JobCPUs(), WholeNode: nt.Kind == KindCPU}
	if nt.Kind == KindGPU {
		n.GPUs = 1
	}
	return n
}

// Wait is the estimated wait of a new job on one partition.
type Wait struct {
	Partition string
	Known     bool
	Wait      time.Duration
	IdleNow   bool
	Reason    string // why that figure, or why unknown
	// SlurmStart is Slurm's own figure (squeue --start) for the last
	// pending job ahead on the partition, a lower bound for a new job's
	// start in Slurm's view; zero when nothing is pending or Slurm gave no
	// figure.
	SlurmStart time.Time
	Ahead      int // pending jobs ahead
	// HeldBy is the Slurm pending reason of the user's limit that would
	// hold the job (QOSMaxCpuPerUserLimit, ...); empty when none does.
	HeldBy string
}

type res struct{ cpus, gpus int }

func (a res) fits(b res) bool { return a.cpus <= b.cpus && a.gpus <= b.gpus }

// EstimateWait estimates when a new job with need could start on partition
// part. Idle capacity now means no wait. Otherwise the partition's running
// jobs end at the coordinator's predicted end (isched jobs) or at their time
// limit, and the pending jobs ahead start first, in submission order, each
// holding its resources for its time limit; the new job starts when it is
// at the head of that queue and fits.
//
// It is a model with known simplifications: it counts CPUs and GPUs per
// partition, not per node (fragmentation is ignored once something must
// end); priorities and backfill are ignored (FIFO, which is pessimistic for
// small jobs); a pending job on several partitions is assumed to start here.
//
// A per-user limit of the job's owner that the job would exceed (the
// snapshot's Limits) holds it whatever the partition's state: the wait is
// then no shorter than the time until the owner's own jobs free enough.
func (s *Site) EstimateWait(cs ClusterState, part string, need Need, now time.Time) Wait {
	w := s.partitionWait(cs, part, need, now)
	if cs.Snapshot != nil {
		if h, ok := holdingLimit(cs, need, part, now); ok {
			w = heldByLimit(w, h, need)
		}
	}
	return w
}

// partitionWait is EstimateWait without the owner's limits.
func (s *Site) partitionWait(cs ClusterState, part string, need Need, now time.Time) Wait {
	w := Wait{Partition: part}
	sp := checkPartition(cs, part, need, &w)
	if sp == nil {
		return w
	}
	releases := s.runningReleases(cs, sp, part, now)
	queue := pendingQueue(cs, sp, part, &w)
	w.Ahead = len(queue)
	queue = append(queue, queued{r: res{need.CPUs, need.GPUs}, us: true})
	return simulateWait(w, res{sp.CPUsIdle, gpuIdle(sp)}, queue, releases, now)
}

// release is what a running job (or a queued one, once started) gives back
// at its end.
type release struct {
	at        time.Time
	r         res
	predicted bool // the end is the coordinator's prediction, not a time limit
}

// queued is a pending job ahead of the new one, in start order, holding its
// resources for dur once started; us is the new job.
type queued struct {
	r   res
	dur time.Duration
	us  bool
}

// checkPartition answers what needs no queue model: the partition is
// unknown or not up, the job fits its idle capacity now, it never fits, or
// nothing says when the busy partition frees. It returns the partition
// when the queue model must answer, else nil with w decided.
func checkPartition(cs ClusterState, part string, need Need, w *Wait) *report.Partition {
	if cs.Snapshot == nil {
		w.Reason = "unknown: no cluster state"
		return nil
	}
	var sp *report.Partition
	for i := range cs.Snapshot.Partitions {
		if cs.Snapshot.Partitions[i].Name == part {
			sp = &cs.Snapshot.Partitions[i]
		}
	}
	if sp == nil {
		w.Reason = "unknown: partition not in the cluster snapshot"
		return nil
	}
	if sp.State != "" && sp.State != "UP" {
		w.Reason = "unknown: partition is " + sp.State
		return nil
	}
	free := res{sp.CPUsIdle, gpuIdle(sp)}
	want := res{need.CPUs, need.GPUs}
	if want.fits(free) && (!need.WholeNode || sp.NodesIdle > 0) {
		w.Known, w.IdleNow = true, true
		w.Reason = "idle now"
		return nil
	}
	if want.cpus > sp.CPUsTotal || want.gpus > gpuTotal(sp) {
		w.Reason = fmt.Sprintf("never: the partition has %d CPUs and %d GPUs, the job needs %d and %d", sp.CPUsTotal, gpuTotal(sp), want.cpus, want.gpus)
		return nil
	}
	if cs.Jobs == nil {
		w.Reason = "unknown: busy, and no job table to say when it frees"
		return nil
	}
	return sp
}

// runningReleases is what the jobs running on partition part (or on its
// nodes, from an overlapping partition) give back, soonest first: at the
// coordinator's predicted end, else at their time limit, else at the
// partition's; a job past its end ends in a minute.
func (s *Site) runningReleases(cs ClusterState, sp *report.Partition, part string, now time.Time) []release {
	inPart := s.membership(part)
	maxTime := minutesDur(sp.MaxTimeMin)
	var releases []release
	for i := range cs.Jobs.Jobs {
		j := &cs.Jobs.Jobs[i]
		if j.State != "RUNNING" && j.State != "COMPLETING" && j.State != "SUSPENDED" {
			continue
		}
		k := inPart(j)
		if k == 0 {
			continue
		}
		end, predicted := time.Time{}, false
		if p, ok := cs.PredictedEnd[j.JobID]; ok && !p.IsZero() {
			end, predicted = p, true
		} else if j.TimeLimitMin != nil && j.StartMS > 0 {
			end = time.UnixMilli(j.StartMS).Add(time.Duration(*j.TimeLimitMin) * time.Minute)
		} else if maxTime > 0 && j.StartMS > 0 {
			end = time.UnixMilli(j.StartMS).Add(maxTime)
		}
		if end.IsZero() {
			continue // never ends as far as we can tell
		}
		if !end.After(now) {
			end = now.Add(time.Minute) // past its end: ending now
		}
		releases = append(releases, release{end, share(j, k), predicted})
	}
	slices.SortStableFunc(releases, func(a, b release) int { return a.at.Compare(b.at) })
	return releases
}

// pendingQueue is the jobs pending on partition part ahead of a new one, in
// submission order, each for its time limit (else the partition's default),
// leaving out those blocked for reasons other than resources and those
// that can never start there. It sets w.SlurmStart.
func pendingQueue(cs ClusterState, sp *report.Partition, part string, w *Wait) []queued {
	defTime := minutesDur(sp.DefaultTimeMin)
	if defTime == 0 {
		defTime = minutesDur(sp.MaxTimeMin)
	}
	var pending []*report.Job
	for i := range cs.Jobs.Jobs {
		j := &cs.Jobs.Jobs[i]
		if j.State != "PENDING" || !slices.Contains(strings.Split(j.Partition, ","), part) || blocked(j.Reason) {
			continue
		}
		pending = append(pending, j)
	}
	slices.SortStableFunc(pending, func(a, b *report.Job) int { return cmp.Compare(a.SubmitMS, b.SubmitMS) })
	var queue []queued
	for _, j := range pending {
		d := defTime
		if j.TimeLimitMin != nil {
			d = time.Duration(*j.TimeLimitMin) * time.Minute
		}
		r := share(j, max(j.NodeCount, 1))
		if !r.fits(res{sp.CPUsTotal, gpuTotal(sp)}) {
			continue // it cannot start here at all, so it takes nobody's turn here
		}
		queue = append(queue, queued{r: r, dur: d})
		if j.ExpectedStartMS > 0 {
			if t := time.UnixMilli(j.ExpectedStartMS); t.After(w.SlurmStart) {
				w.SlurmStart = t
			}
		}
	}
	return queue
}

// simulateWait plays the partition forward from now: the queue starts in
// order as soon as its head fits what is free, each started job releasing
// its resources after its duration, until the new job (the queue's last)
// starts or nothing is left to end.
func simulateWait(w Wait, free res, queue []queued, releases []release, now time.Time) Wait {
	t := now
	ended, byPrediction := 0, 0
	for {
		for len(queue) > 0 && queue[0].r.fits(free) {
			q := queue[0]
			queue = queue[1:]
			if q.us {
				w.Known, w.Wait = true, t.Sub(now)
				w.Reason = fmt.Sprintf("after %d running job(s) end (%d by isched's prediction, %d by time limit)",
					ended, byPrediction, ended-byPrediction)
				if w.Ahead > 0 {
					w.Reason += fmt.Sprintf(", behind %d pending", w.Ahead)
				}
				return w
			}
			free.cpus -= q.r.cpus
			free.gpus -= q.r.gpus
			if q.dur > 0 {
				i, _ := slices.BinarySearchFunc(releases, t.Add(q.dur), func(r release, at time.Time) int { return r.at.Compare(at) })
				releases = slices.Insert(releases, i, release{at: t.Add(q.dur), r: q.r})
			}
		}
		if len(releases) == 0 {
			w.Reason = "unknown: the jobs holding the partition have no time limit"
			if w.Ahead > 0 {
				w.Reason += fmt.Sprintf(" (%d pending ahead)", w.Ahead)
			}
			return w
		}
		r := releases[0]
		releases = releases[1:]
		if r.at.After(t) {
			t = r.at
		}
		free.cpus += r.r.cpus
		free.gpus += r.r.gpus
		ended++
		if r.predicted {
			byPrediction++
		}
	}
}

// blocked reports whether a pending job cannot start for a reason other
// than resources, so it does not take the new job's turn.
func blocked(reason string) bool {
	return heldOther(reason) || strings.Contains(reason, "QOS") || strings.Contains(reason, "Assoc")
}

// heldOther reports whether a pending job cannot start for a reason other
// than resources and limits (QOS..., Assoc...): it takes no limit's room
// before a new job.
func heldOther(reason string) bool {
	for _, r := range []string{"Held", "Dependency", "BeginTime", "Reservation", "PartitionDown", "PartitionInactive", "launch failed"} {
		if strings.Contains(reason, r) {
			return true
		}
	}
	return false
}

// membership returns how many of a job's nodes are in partition part: all
// of them when the job runs there, those listed in the catalogue's host
// list of part when the job runs in an overlapping partition.
func (s *Site) membership(part string) func(*report.Job) int {
	var hosts map[string]bool
	if ps := s.Partition(part); ps != nil && ps.Nodes != "" {
		if h, err := ExpandHostlist(ps.Nodes); err == nil {
			hosts = map[string]bool{}
			for _, n := range h {
				hosts[n] = true
			}
		}
	}
	return func(j *report.Job) int {
		if j.Partition == part {
			return max(j.NodeCount, 1)
		}
		if hosts == nil || j.Nodes == "" {
			return 0
		}
		nodes, err := ExpandHostlist(j.Nodes)
		if err != nil {
			return 0
		}
		k := 0
		for _, n := range nodes {
			if hosts[n] {
				k++
			}
		}
		return k
	}
}

// share is what a job holds on k of its nodes.
func share(j *report.Job, k int) res {
	n := max(j.NodeCount, 1)
	return res{cpus: j.CPUs * min(k, n) / n, gpus: max(gresGPUs(j.Gres)*min(k, n), j.AllocGPUs*min(k, n)/n)}
}

// gresGPUs counts the GPUs of a per-node GRES request ("gpu:2",
// "gpu:a100:1,shard:0", "gpu").
func gresGPUs(g string) int {
	total := 0
	for _, item := range strings.Split(g, ",") {
		item = strings.TrimPrefix(strings.TrimPrefix(item, "gres:"), "gres/")
		if item != "gpu" && !strings.HasPrefix(item, "gpu:") {
			continue
		}
		f := strings.Split(item, ":")
		last := f[len(f)-1]
		if i := strings.IndexByte(last, '('); i >= 0 {
			last = last[:i] // "gpu:1(IDX:0)"
		}
		if n, err := strconv.Atoi(last); err == nil && len(f) > 1 {
			total += n
		} else {
			total++
		}
	}
	return total
}

func gpuIdle(p *report.Partition) int {
	n := 0
	for _, g := range p.GPUs {
		n += g.Idle
	}
	return n
}

func gpuTotal(p *report.Partition) int {
	n := 0
	for _, g := range p.GPUs {
		n += g.Total
	}
	return n
}

func minutesDur(m *int64) time.Duration {
	if m == nil {
		return 0
	}
	return time.Duration(*m) * time.Minute
}
