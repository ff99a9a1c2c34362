package slurm

import (
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/isched/isched/internal/report"
)

// Node classes, as sinfo counts them in its A/I/O/T column (%F): a drained
// or draining node is "other" whatever it runs; allocated, mixed and
// completing nodes are "allocated"; idle is "idle"; anything else (down,
// future, unknown, ...) is "other".
const (
	classAlloc = iota
	classIdle
	classOther
)

func nodeClass(n Node) int {
	completing := false
	for _, f := range n.Flags {
		switch f {
		case "DRAIN", "DRAINED", "DRAINING":
			return classOther
		case "COMPLETING":
			completing = true
		}
	}
	switch n.State {
	case "DRAIN", "DRAINED", "DRAINING":
		return classOther
	case "ALLOCATED", "MIXED", "ALLOC", "MIX":
		return classAlloc
	case "IDLE":
		if completing {
			return classAlloc
		}
		return classIdle
	}
	if completing {
		return classAlloc
	}
	return classOther
}

// BuildSnapshot computes per-partition capacity from one `scontrol show
// partition -o` (limits), one `sinfo --json` (nodes) and one `squeue
// --json` (pending jobs). It is pure: the same inputs give the same
// snapshot.
//
//   - Nodes, CPUs and GPUs are counted per partition over the nodes that list
//     the partition, so a node in two partitions counts in both (as sinfo).
//   - CPUs and GPUs of "other" nodes (drained, down) are in the totals but
//     neither allocated-free nor idle: they cannot be used.
//   - GPUs come from each node's configured GRES (or its TRES when GRES is
//     empty) and its GRES in use, by type ("" for untyped GRES).
//   - Pending jobs are pending records as `squeue -t PD` lists them: the
//     not-yet-started rest of an array ("11_[2-3%2]") is one record
//     (report.Job has no field for its task range); a job pending on
//     "cpu,gpu" counts in both partitions, once in Snapshot.Pending.
func BuildSnapshot(cluster string, parts []PartitionInfo, nodes []Node, jobs []report.Job, now time.Time) report.Snapshot {
	byPart := make(map[string][]Node, len(parts))
	for _, n := range nodes {
		for _, p := range n.Partitions {
			byPart[p] = append(byPart[p], n)
		}
	}
	pendingByPart := map[string]int{}
	pending := 0
	for i := range jobs {
		j := &jobs[i]
		if j.State != StatePending {
			continue
		}
		pending++
		for _, p := range strings.Split(j.Partition, ",") {
			pendingByPart[p]++
		}
	}
	s := report.Snapshot{Cluster: cluster, TakenMS: now.UnixMilli(), Pending: pending, Partitions: make([]report.Partition, 0, len(parts))}
	for _, pi := range parts {
		p := report.Partition{
			Name:           pi.Name,
			State:          pi.State,
			Default:        pi.Default,
			PendingJobs:    pendingByPart[pi.Name],
			MaxTimeMin:     minutes(pi.MaxTime),
			DefaultTimeMin: minutes(pi.DefaultTime),
			MinNodes:       pi.MinNodes,
			MaxNodes:       pi.MaxNodes,
			PriorityTier:   pi.PriorityTier,
			PreemptMode:    pi.PreemptMode,
		}
		countNodes(&p, byPart[pi.Name])
		p.Mixed = mixedRooms(byPart[pi.Name])
		s.Partitions = append(s.Partitions, p)
	}
	return s
}

// countNodes adds up the nodes, CPUs and GPUs (by type, those with some)
// of a partition's nodes into p.
func countNodes(p *report.Partition, nodes []Node) {
	gpus := map[string]*report.GPUCount{}
	for _, n := range nodes {
		class := nodeClass(n)
		p.NodesTotal++
		p.CPUsTotal += n.CPUs
		switch class {
		case classAlloc:
			p.NodesAlloc++
		case classIdle:
			p.NodesIdle++
		default:
			p.NodesOther++
		}
		p.CPUsAlloc += n.AllocCPUs
		if class != classOther {
			p.CPUsIdle += max(n.CPUs-n.AllocCPUs, 0)
		}
		countGPUs(gpus, n, class != classOther)
	}
	types := make([]string, 0, len(gpus))
	for typ, g := range gpus {
		if g.Total > 0 {
			types = append(types, typ)
		}
	}
	sort.Strings(types)
	p.GPUs = []report.GPUCount{}
	for _, typ := range types {
		p.GPUs = append(p.GPUs, *gpus[typ])
	}
}

// countGPUs adds n's GPUs, by type, to gpus; the free ones count as idle
// only on a usable node.
func countGPUs(gpus map[string]*report.GPUCount, n Node, usable bool) {
	total := nodeGPUs(n.Gres, n.TRES)
	used := nodeGPUs(n.GresUsed, n.TRESUsed)
	for typ, t := range total {
		g := gpus[typ]
		if g == nil {
			g = &report.GPUCount{Type: typ}
			gpus[typ] = g
		}
		a := min(used[typ], t)
		g.Total += t
		g.Alloc += a
		if usable {
			g.Idle += t - a
		}
	}
}

// mixedRooms is what is free on the partly allocated nodes among nodes
// (allocated, not drained or completing, some CPU free): one entry per
// distinct room with its node count, the largest first (GPUs, then CPUs,
// then memory), at most report.MaxMixed. Memory is the TRES's minus the
// TRES in use (0 when either is missing).
func mixedRooms(nodes []Node) []report.Room {
	count := map[report.Room]int{}
	for _, n := range nodes {
		free := n.CPUs - n.AllocCPUs
		if nodeClass(n) != classAlloc || free <= 0 || slices.Contains(n.Flags, "COMPLETING") {
			continue
		}
		r := report.Room{CPUs: free}
		if total, ok := tresMemMiB(n.TRES); ok {
			if used, ok := tresMemMiB(n.TRESUsed); ok || n.TRESUsed == "" {
				r.MemMiB = max(total-used, 0)
			}
		}
		used := nodeGPUs(n.GresUsed, n.TRESUsed)
		for typ, t := range nodeGPUs(n.Gres, n.TRES) {
			if g := t - min(used[typ], t); g > 0 {
				gr := r
				gr.GPUType, gr.GPUs = typ, g
				count[gr]++
			}
		}
		count[r]++ // a GPU-less job fits too
	}
	return report.SortRooms(count)
}

// tresMemMiB reads mem=N[KMGT] from a TRES string, in MiB.
func tresMemMiB(tres string) (int64, bool) {
	for _, item := range strings.Split(tres, ",") {
		v, ok := strings.CutPrefix(item, "mem=")
		if !ok || v == "" {
			continue
		}
		mult := 1.0
		switch v[len(v)-1] {
		case 'K':
			mult, v = 1.0/1024, v[:len(v)-1]
		case 'M':
			v = v[:len(v)-1]
		case 'G':
			mult, v = 1024, v[:len(v)-1]
		case 'T':
			mult, v = 1024*1024, v[:len(v)-1]
		}
		f, err := strconv.ParseFloat(v, 64)
		if err != nil || f < 0 {
			return 0, false
		}
		return int64(f * mult), true
	}
	return 0, false
}

// nodeGPUs reads GPUs from a GRES string, falling back to the TRES string
// (set when AccountingStorageTRES tracks gres/gpu). Unparsable strings count
// as no GPUs: one odd node must not hide the whole snapshot.
func nodeGPUs(gres, tres string) map[string]int {
	if m, err := GPUs(gres); err == nil && len(m) > 0 && sum(m) > 0 {
		return m
	}
	if m, err := GPUs(tres); err == nil {
		return m
	}
	return map[string]int{}
}

func sum(m map[string]int) int {
	t := 0
	for _, v := range m {
		t += v
	}
	return t
}

func minutes(d *time.Duration) *int64 {
	if d == nil {
		return nil
	}
	m := int64(*d / time.Minute)
	return &m
}
