package wrapper

import (
	"strings"
	"testing"

	"github.com/isched/isched/internal/procstat"
	"github.com/isched/isched/internal/report"
)

func TestSlurmRequest(t *testing.T) {
	t.Parallel()
	tests := []struct {
		env   map[string]string
		mem   int64
		from  string
		cores int
	}{
		{map[string]string{"SLURM_MEM_PER_NODE": "32768", "SLURM_CPUS_ON_NODE": "8"}, 32 << 30, "--mem", 8},
		{map[string]string{"SLURM_MEM_PER_CPU": "2000", "SLURM_CPUS_ON_NODE": "4"}, 4 * 2000 << 20, "--mem-per-cpu", 4},
		{map[string]string{"SLURM_MEM_PER_CPU": "2000"}, 0, "", 0},                                               // cores unknown
		{map[string]string{"SLURM_MEM_PER_NODE": "0", "SLURM_CPUS_ON_NODE": "2"}, 0, "", 2},                      // "all the node's memory"
		{map[string]string{"SLURM_MEM_PER_NODE": "1G", "SLURM_CPUS_ON_NODE": "x"}, 0, "", 0},                     // not Slurm's format
		{map[string]string{"SLURM_MEM_PER_NODE": "4096,8192", "SLURM_CPUS_ON_NODE": "4,2"}, 4 << 30, "--mem", 4}, // heterogeneous job
		{map[string]string{}, 0, "", 0},
	}
	for _, tt := range tests {
		mem, from, cores := slurmRequest(func(k string) string { return tt.env[k] })
		if mem != tt.mem || from != tt.from || cores != tt.cores {
			t.Errorf("%v: %d %q %d, want %d %q %d", tt.env, mem, from, cores, tt.mem, tt.from, tt.cores)
		}
	}
}

// TestMemSplitAndEfficiency: samples with a memory cgroup carry its split
// into the sample report and the peaks; the OOM risk is what could not be
// reclaimed; the verdict judges the process peak against the request.
func TestMemSplitAndEfficiency(t *testing.T) {
	t.Parallel()
	var m memSplit
	if m.oomRisk(100*mib) != 0 {
		t.Error("an OOM risk without memory.stat")
	}
	cpu := &report.CPUStat{}
	m.observe(procstat.Stat{Procs: 2, CgroupMem: procstat.CgroupMemStat{Known: true, AnonBytes: 600 * mib, FileBytes: 380 * mib, ShmemBytes: 4 * mib}}, cpu)
	m.observe(procstat.Stat{Procs: 2, CgroupMem: procstat.CgroupMemStat{Known: true, AnonBytes: 500 * mib, FileBytes: 200 * mib}}, &report.CPUStat{})
	m.observe(procstat.Stat{Procs: 0, CgroupMem: procstat.CgroupMemStat{Known: true, AnonBytes: 900 * mib}}, nil) // the child gone
	if m.unreclaimPeak != 604*mib || m.cachePeak != 380*mib {
		t.Errorf("peaks %d, %d MiB", m.unreclaimPeak/mib, m.cachePeak/mib)
	}
	if cpu.CgroupUnreclaimBytes != 604*mib || cpu.CgroupFileBytes != 380*mib {
		t.Errorf("sample report %+v", *cpu)
	}
	if r := m.oomRisk(643 * mib); r != 643*mib {
		t.Errorf("OOM risk %d MiB, want the process peak 643", r/mib)
	}
	env := map[string]string{"SLURM_MEM_PER_NODE": "4096", "SLURM_CPUS_ON_NODE": "4"}
	sum := Summary{WallSeconds: 100, PeakRSSBytes: 643 * mib, PageCachePeak: 380 * mib, Iterations: 500, Checkpoints: []string{"a", "b"}}
	e := efficiency(func(k string) string { return env[k] }, sum, 100, 0)
	if e.MemRequestBytes != 4<<30 || e.MemRequestFrom != "--mem" || e.CPUEfficiency != 0.25 || e.AskMemBytes != 1<<30 ||
		!strings.Contains(e.Recommendation, "asked 4.0 GiB, used 643 MiB peak: ask --mem=1G next time") {
		t.Errorf("efficiency %+v", *e)
	}
	// outside Slurm, the cgroup limit stands in for the request
	e = efficiency(func(string) string { return "" }, Summary{PeakRSSBytes: 643 * mib, CgroupLimit: 1 << 30}, 0, 0)
	if e.MemRequestFrom != "cgroup limit" || e.MemRequestBytes != 1<<30 {
		t.Errorf("without Slurm: %+v", *e)
	}
}
