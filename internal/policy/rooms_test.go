package policy

import (
	"slices"
	"testing"

	"github.com/isched/isched/internal/report"
)

// TestQueueRoomsHeadroom: the snapshot's partition gives rule 9 its GPUs
// and nodes, and so the default headroom, a quarter of its nodes' GPUs.
func TestQueueRoomsHeadroom(t *testing.T) {
	t.Parallel()
	snap := &report.Snapshot{Partitions: []report.Partition{
		{Name: "gpu", NodesIdle: 1, NodesTotal: 8, GPUs: []report.GPUCount{{Alloc: 51, Idle: 13, Total: 64}},
			Mixed: []report.Room{{GPUs: 5, Nodes: 1}}},
		{Name: "small", NodesTotal: 2, GPUs: []report.GPUCount{{Idle: 4, Total: 4}}},
	}}
	jobs := []report.Job{{Partition: "gpu", State: "PENDING", Reason: "Resources", NodeCount: 1, Gres: "gpu:8"}}
	rooms := QueueRooms(snap, slices.Values(jobs), nil)
	for _, c := range []struct {
		part     string
		want     QueueRoom
		headroom int
	}{
		{"gpu", QueueRoom{Idle: 13, MostFree: 8, FreeNodes: 1, GPUs: 64, Nodes: 8, Demand: 8}, 16},
		{"small", QueueRoom{Idle: 4, GPUs: 4, Nodes: 2}, 0},
	} {
		if got := rooms[c.part]; got != c.want {
			t.Errorf("%s: room %+v, want %+v", c.part, got, c.want)
		}
		if got := (Config{}).headroom(rooms[c.part]); got != c.headroom {
			t.Errorf("%s: headroom %d, want %d", c.part, got, c.headroom)
		}
	}
}
