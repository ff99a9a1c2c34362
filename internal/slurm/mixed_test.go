package slurm

import (
	"reflect"
	"testing"

	"github.com/isched/isched/internal/report"
)

// TestMixedRooms: what partly allocated nodes have free, largest first;
// idle, full, drained and completing nodes have none to offer.
func TestMixedRooms(t *testing.T) {
	t.Parallel()
	nodes := []Node{
		{Name: "gpu1", State: "MIXED", CPUs: 4, AllocCPUs: 2, Gres: "gpu:2", GresUsed: "gpu:1(IDX:0)",
			TRES: "cpu=4,mem=8000M,billing=4,gres/gpu=2", TRESUsed: "cpu=2,mem=1000M,gres/gpu=1"},
		{Name: "gpu2", State: "MIXED", CPUs: 4, AllocCPUs: 2, Gres: "gpu:2", GresUsed: "gpu:1(IDX:1)",
			TRES: "cpu=4,mem=8000M,gres/gpu=2", TRESUsed: "cpu=2,mem=1000M,gres/gpu=1"},
		{Name: "a100", State: "MIXED", CPUs: 64, AllocCPUs: 8, Gres: "gpu:a100:8(S:0-1)", GresUsed: "gpu:a100:1(IDX:0)",
			TRES: "cpu=64,mem=500G,gres/gpu=8", TRESUsed: "cpu=8,mem=64G,gres/gpu=1"},
		{Name: "cpu1", State: "MIXED", CPUs: 4, AllocCPUs: 3, TRES: "cpu=4,mem=8000M", TRESUsed: "cpu=3,mem=1500M"},
		{Name: "full", State: "ALLOCATED", CPUs: 4, AllocCPUs: 4, Gres: "gpu:2", GresUsed: "gpu:1(IDX:0)"},
		{Name: "idle", State: "IDLE", CPUs: 4, Gres: "gpu:2"},
		{Name: "drained", State: "MIXED", Flags: []string{"DRAIN"}, CPUs: 4, AllocCPUs: 1},
		{Name: "completing", State: "MIXED", Flags: []string{"COMPLETING"}, CPUs: 4, AllocCPUs: 1},
		{Name: "nomem", State: "MIXED", CPUs: 8, AllocCPUs: 4},
	}
	got := mixedRooms(nodes)
	want := []report.Room{
		{GPUType: "a100", GPUs: 7, CPUs: 56, MemMiB: 436 * 1024, Nodes: 1},
		{GPUs: 1, CPUs: 2, MemMiB: 7000, Nodes: 2},
		{CPUs: 56, MemMiB: 436 * 1024, Nodes: 1},
		{CPUs: 4, Nodes: 1},
		{CPUs: 2, MemMiB: 7000, Nodes: 2},
		{CPUs: 1, MemMiB: 6500, Nodes: 1},
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("rooms\n got %+v\nwant %+v", got, want)
	}
	if r := mixedRooms([]Node{{Name: "idle", State: "IDLE", CPUs: 4}}); r != nil {
		t.Errorf("idle nodes only: %+v, want none", r)
	}
	var many []Node
	for i := range 2 * report.MaxMixed {
		many = append(many, Node{Name: "n", State: "MIXED", CPUs: 200, AllocCPUs: i})
	}
	if r := mixedRooms(many); len(r) != report.MaxMixed || r[0].CPUs != 200 {
		t.Errorf("%d rooms, the first %+v; want %d, the largest first", len(r), r[0], report.MaxMixed)
	}
}

func TestTRESMemMiB(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		in   string
		want int64
		ok   bool
	}{
		{"cpu=4,mem=8000M,billing=4", 8000, true},
		{"mem=1.5G", 1536, true},
		{"cpu=2,mem=2T", 2 << 20, true},
		{"mem=2048K", 2, true},
		{"mem=100", 100, true},
		{"cpu=4", 0, false},
		{"mem=lots", 0, false},
		{"", 0, false},
	} {
		got, ok := tresMemMiB(tc.in)
		if got != tc.want || ok != tc.ok {
			t.Errorf("%q: %d %v, want %d %v", tc.in, got, ok, tc.want, tc.ok)
		}
	}
}
