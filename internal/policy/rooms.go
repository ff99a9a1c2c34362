package policy

import (
	"iter"
	"strings"

	"github.com/isched/isched/internal/report"
)

// GPUsPerNode is a partition's GPUs per node in snap (its GPUs over its
// nodes: the lab's and most sites' GPU partitions hold one node type); 0:
// unknown.
func GPUsPerNode(snap *report.Snapshot, name string) int {
	for _, p := range snap.Partitions {
		if p.Name != name || p.NodesTotal == 0 {
			continue
		}
		total := 0
		for _, g := range p.GPUs {
			total += g.Total
		}
		return total / p.NodesTotal
	}
	return 0
}

// QueueRooms are the GPU partitions' room as rule 9 sees it, from the
// agent's snapshot, and the GPUs asked by the jobs pending on each that
// shrinks could start (anyone's job that waits for resources or priority,
// Servable: reclaim is, per partition, the most GPUs a node with elastic
// runs would have idle with them at their base; nil: none known). The
// coordinator (Resize) and isched submit (StartSize) read the same.
func QueueRooms(snap *report.Snapshot, jobs iter.Seq[report.Job], reclaim map[string]int) map[string]QueueRoom {
	rooms := map[string]QueueRoom{}
	for _, p := range snap.Partitions {
		q := QueueRoom{FreeNodes: p.NodesIdle, Nodes: p.NodesTotal}
		for _, g := range p.GPUs {
			q.Idle += g.Idle
			q.GPUs += g.Total
		}
		if p.NodesIdle > 0 {
			q.MostFree = GPUsPerNode(snap, p.Name)
		}
		for _, m := range p.Mixed {
			q.MostFree = max(q.MostFree, m.GPUs)
		}
		rooms[p.Name] = q
	}
	for j := range jobs {
		n := GPUs(j.Gres)
		if j.State != "PENDING" || n == 0 || !Blocked(j.Reason) {
			continue
		}
		for _, part := range strings.Split(j.Partition, ",") {
			if q, ok := rooms[part]; ok && Servable(n, j.NodeCount, max(q.MostFree, reclaim[part])) {
				q.Demand += n
				rooms[part] = q
			}
		}
	}
	return rooms
}

// Blocked: Slurm's pending reason says the job waits for resources or
// for jobs ahead of it, not for something of its own (a hold, a
// dependency, a limit).
func Blocked(reason string) bool {
	return reason == "Resources" || reason == "Priority"
}
