package plan

import (
	"strings"
	"testing"
	"time"

	"github.com/isched/isched/internal/report"
)

var t0 = time.Date(2026, 5, 9, 12, 0, 0, 0, time.UTC)

func i64(v int64) *int64 { return &v }

// labSnapshot is the local cluster with the given idle CPUs on cpu and idle
// GPUs on gpu.
func labSnapshot(cpuIdle, gpuIdle int) *report.Snapshot {
	return &report.Snapshot{Cluster: "lab", TakenMS: t0.UnixMilli(), Partitions: []report.Partition{
		{Name: "cpu", State: "UP", NodesTotal: 2, NodesIdle: cpuIdle / 4, CPUsTotal: 8, CPUsIdle: cpuIdle, MaxTimeMin: i64(2880), DefaultTimeMin: i64(60)},
		{Name: "gpu", State: "UP", NodesTotal: 2, CPUsTotal: 8, CPUsIdle: 8, GPUs: []report.GPUCount{{Total: 4, Idle: gpuIdle, Alloc: 4 - gpuIdle}},
			MaxTimeMin: i64(2880), DefaultTimeMin: i64(60)},
		{Name: "dev", State: "DOWN", NodesTotal: 1, CPUsTotal: 2},
	}}
}

func running(id uint64, part, nodes string, cpus int, gres string, started time.Time, limitMin int64) report.Job {
	return report.Job{JobID: id, Partition: part, Nodes: nodes, NodeCount: 1, State: "RUNNING", CPUs: cpus, Gres: gres,
		StartMS: started.UnixMilli(), SubmitMS: started.UnixMilli(), TimeLimitMin: i64(limitMin)}
}

func TestEstimateWait(t *testing.T) {
	t.Parallel()
	site := mustSite(t, "../../examples/site-lab.json")
	cpuNeed := NeedOf(site.NodeType("lab-cpu"))
	gpuNeed := NeedOf(site.NodeType("lab-gpu"))
	// four single-GPU jobs fill gpu; they end at +30, +60, +90 min and never
	fourGPUJobs := []report.Job{
		running(1, "gpu", "gpu1", 2, "gpu:1", t0.Add(-30*time.Minute), 60),
		running(2, "gpu", "gpu1", 2, "gpu:1", t0.Add(-60*time.Minute), 120),
		running(3, "gpu", "gpu2", 2, "gpu:1", t0.Add(-30*time.Minute), 120),
		running(4, "gpu", "gpu2", 2, "gpu:1", t0, 24*60),
	}
	tests := []struct {
		name   string
		state  ClusterState
		part   string
		need   Need
		known  bool
		wait   time.Duration
		reason string
	}{
		{"no state", ClusterState{}, "cpu", cpuNeed, false, 0, "no cluster state"},
		{"idle now", ClusterState{Snapshot: labSnapshot(8, 4)}, "cpu", cpuNeed, true, 0, "idle now"},
		{"down", ClusterState{Snapshot: labSnapshot(8, 4)}, "dev", cpuNeed, false, 0, "partition is DOWN"},
		{"not in snapshot", ClusterState{Snapshot: labSnapshot(8, 4)}, "gpu-dev", gpuNeed, false, 0, "not in the cluster snapshot"},
		{"busy, no job table", ClusterState{Snapshot: labSnapshot(8, 0)}, "gpu", gpuNeed, false, 0, "no job table"},
		{"first time limit frees a GPU", ClusterState{Snapshot: labSnapshot(8, 0), Jobs: &report.JobTable{Jobs: fourGPUJobs}},
			"gpu", gpuNeed, true, 30 * time.Minute, "after 1 running job(s) end (0 by isched's prediction, 1 by time limit)"},
		{"the coordinator's prediction beats the limit", ClusterState{Snapshot: labSnapshot(8, 0), Jobs: &report.JobTable{Jobs: fourGPUJobs},
			PredictedEnd: map[uint64]time.Time{3: t0.Add(10 * time.Minute)}},
			"gpu", gpuNeed, true, 10 * time.Minute, "1 by isched's prediction"},
		{"pending jobs ahead take the first GPUs", ClusterState{Snapshot: labSnapshot(8, 0), Jobs: &report.JobTable{Jobs: append(fourGPUJobs[:4:4],
			report.Job{JobID: 9, Partition: "gpu,gpu-dev", State: "PENDING", Reason: "Resources", CPUs: 2, Gres: "gpu:1", NodeCount: 1,
				SubmitMS: t0.Add(-time.Minute).UnixMilli(), TimeLimitMin: i64(600), ExpectedStartMS: t0.Add(30 * time.Minute).UnixMilli()},
			report.Job{JobID: 10, Partition: "gpu", State: "PENDING", Reason: "JobHeldUser", CPUs: 2, Gres: "gpu:1", NodeCount: 1})}},
			"gpu", gpuNeed, true, 60 * time.Minute, "behind 1 pending"},
		{"a whole CPU node: idle CPUs spread over nodes do not count", ClusterState{Snapshot: labSnapshot(3, 4), Jobs: &report.JobTable{Jobs: []report.Job{
			running(5, "cpu", "cpu1", 3, "", t0.Add(-10*time.Minute), 20),
			running(6, "cpu", "cpu2", 2, "", t0.Add(-10*time.Minute), 50),
		}}}, "cpu", cpuNeed, true, 10 * time.Minute, "after 1 running"},
		{"a scavenger job on cpu1 holds cpu", ClusterState{Snapshot: labSnapshot(4, 4), Jobs: &report.JobTable{Jobs: []report.Job{
			running(7, "scavenger", "cpu1", 4, "", t0.Add(-10*time.Minute), 40),
			running(8, "cpu", "cpu2", 4, "", t0.Add(-10*time.Minute), 60),
		}}}, "cpu", Need{CPUs: 8}, true, 30 * time.Minute, "after 1 running"},
		{"unlimited jobs: unknown", ClusterState{Snapshot: func() *report.Snapshot {
			s := labSnapshot(8, 0)
			s.Partitions[1].MaxTimeMin = nil
			return s
		}(), Jobs: &report.JobTable{Jobs: []report.Job{{JobID: 1, Partition: "gpu", State: "RUNNING", CPUs: 8, Gres: "gpu:2", NodeCount: 2, StartMS: t0.UnixMilli()}}}},
			"gpu", gpuNeed, false, 0, "no time limit"},
		{"an exclusive job holds its nodes' GPUs without asking for any", ClusterState{Snapshot: labSnapshot(8, 0), Jobs: &report.JobTable{Jobs: []report.Job{func() report.Job {
			j := running(1, "gpu", "gpu[1-2]", 8, "", t0.Add(-10*time.Minute), 30)
			j.NodeCount, j.AllocGPUs = 2, 4
			return j
		}()}}}, "gpu", gpuNeed, true, 20 * time.Minute, "after 1 running job(s) end"},
		{"more than the partition has", ClusterState{Snapshot: labSnapshot(8, 4)}, "cpu", Need{CPUs: 16}, false, 0, "never"},
		{"overran its limit: ending now", ClusterState{Snapshot: labSnapshot(0, 4), Jobs: &report.JobTable{Jobs: []report.Job{
			running(1, "cpu", "cpu[1-2]", 8, "", t0.Add(-2*time.Hour), 60),
		}}}, "cpu", cpuNeed, true, time.Minute, "after 1 running"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			w := site.EstimateWait(tt.state, tt.part, tt.need, t0)
			if w.Known != tt.known || w.Wait != tt.wait || !strings.Contains(w.Reason, tt.reason) {
				t.Fatalf("wait known=%v %v %q; want known=%v %v reason containing %q", w.Known, w.Wait, w.Reason, tt.known, tt.wait, tt.reason)
			}
			if w.IdleNow != (tt.known && tt.wait == 0 && tt.reason == "idle now") {
				t.Errorf("IdleNow %v", w.IdleNow)
			}
		})
	}
}

func TestEstimateWaitSlurmFigure(t *testing.T) {
	t.Parallel()
	site := mustSite(t, "../../examples/site-lab.json")
	st := ClusterState{Snapshot: labSnapshot(8, 0), Jobs: &report.JobTable{Jobs: []report.Job{
		running(1, "gpu", "gpu[1-2]", 8, "gpu:2", t0, 60),
		{JobID: 2, Partition: "gpu", State: "PENDING", Reason: "Resources", CPUs: 2, Gres: "gpu:1", NodeCount: 1, SubmitMS: 1,
			TimeLimitMin: i64(30), ExpectedStartMS: t0.Add(61 * time.Minute).UnixMilli()},
	}}}
	w := site.EstimateWait(st, "gpu", NeedOf(site.NodeType("lab-gpu")), t0)
	if !w.SlurmStart.Equal(t0.Add(61*time.Minute)) || w.Ahead != 1 || w.Wait != time.Hour {
		t.Fatalf("slurm %v ahead %d wait %v", w.SlurmStart, w.Ahead, w.Wait)
	}
}

func TestGresGPUs(t *testing.T) {
	t.Parallel()
	for in, want := range map[string]int{"": 0, "gpu:1": 1, "gpu:2": 2, "gpu": 1, "gpu:a100:3": 3, "gres:gpu:2": 2,
		"gpu:1(IDX:0)": 1, "shard:4": 0, "gpu:v100": 1, "gpu:1,gpu:a100:2": 3} {
		if got := gresGPUs(in); got != want {
			t.Errorf("gresGPUs(%q) = %d, want %d", in, got, want)
		}
	}
}
