package wrapper

import (
	"fmt"
	"io"
	"strconv"
	"strings"
	"syscall"

	"github.com/isched/isched/internal/procstat"
	"github.com/isched/isched/internal/report"
	"github.com/isched/isched/internal/verdict"
)

// memSplit is what the samples saw of the child's memory cgroup, split by
// memory.stat into what the kernel cannot reclaim (anonymous memory, shmem,
// unreclaimable kernel memory) and page cache (the checkpoints the job
// wrote). The cgroup's own peak counts both; only the first is a need and an
// OOM risk.
type memSplit struct {
	unreclaimPeak int64 // bytes, the largest sampled; 0 unknown
	cachePeak     int64 // bytes, the largest sampled page cache
}

// observe folds one sample in; the caller holds state.mu. cpu is the sample
// report's CPU stat (nil when the child had no live process).
func (m *memSplit) observe(stat procstat.Stat, cpu *report.CPUStat) {
	if c := stat.CgroupMem; c.Known && stat.Procs > 0 {
		m.unreclaimPeak = max(m.unreclaimPeak, c.UnreclaimableBytes())
		m.cachePeak = max(m.cachePeak, c.FileBytes)
		if cpu != nil {
			cpu.CgroupUnreclaimBytes, cpu.CgroupFileBytes = c.UnreclaimableBytes(), c.FileBytes
		}
	}
}

// oomRisk is what judges a kill at the limit where the kernel keeps no
// OOM-kill counter: the memory that could not be reclaimed (the sampled
// cgroup's, and the process tree's own peak, which VmHWM keeps between
// samples), not the cgroup's peak, which counts page cache. 0 when only the
// cgroup's peak is known.
func (m *memSplit) oomRisk(processPeak int64) int64 {
	if m.unreclaimPeak == 0 {
		return 0
	}
	return max(m.unreclaimPeak, processPeak)
}

// Efficiency is the verdict in the summary JSON.
type Efficiency struct {
	MemRequestBytes int64              `json:"mem_request_bytes,omitempty"`
	MemRequestFrom  string             `json:"mem_request_from,omitempty"`
	MemFraction     float64            `json:"mem_fraction,omitempty"`
	CPUSeconds      float64            `json:"cpu_seconds,omitempty"`
	Cores           int                `json:"cores,omitempty"`
	CPUEfficiency   float64            `json:"cpu_efficiency,omitempty"`
	GPUUtilPercent  map[string]float64 `json:"gpu_util_percent,omitempty"`
	AskMemBytes     int64              `json:"ask_mem_bytes,omitempty"`
	AskCores        int                `json:"ask_cores,omitempty"`
	Recommendation  string             `json:"recommendation"`
	Lines           []string           `json:"lines"`
}

// slurmRequest reads what the job asked for from Slurm's environment: the
// cores on this node and the memory (--mem sets SLURM_MEM_PER_NODE,
// --mem-per-cpu SLURM_MEM_PER_CPU, both in MiB).
func slurmRequest(getenv func(string) string) (mem int64, from string, cores int) {
	if n, err := strconv.Atoi(firstField(getenv("SLURM_CPUS_ON_NODE"))); err == nil && n > 0 {
		cores = n
	}
	if v, ok := mebibytes(getenv("SLURM_MEM_PER_NODE")); ok {
		return v, "--mem", cores
	}
	if v, ok := mebibytes(getenv("SLURM_MEM_PER_CPU")); ok && cores > 0 {
		return v * int64(cores), "--mem-per-cpu", cores
	}
	return 0, "", cores
}

// firstField is the first of a heterogeneous job's comma-separated values.
func firstField(s string) string {
	s, _, _ = strings.Cut(s, ",")
	return strings.TrimSpace(s)
}

// mebibytes parses a Slurm MiB count; 0 ("all the node's memory") is not a
// request the verdict can judge.
func mebibytes(s string) (int64, bool) {
	n, err := strconv.ParseInt(firstField(s), 10, 64)
	if err != nil || n <= 0 || n > 1<<40 {
		return 0, false
	}
	return n << 20, true
}

// childCPUSeconds is the user+system time of the wrapper's reaped
// descendants: the child and whatever it waited for (DataLoader workers).
func childCPUSeconds() float64 {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_CHILDREN, &ru); err != nil {
		return 0
	}
	return float64(ru.Utime.Sec+ru.Stime.Sec) + float64(ru.Utime.Usec+ru.Stime.Usec)/1e6
}

// The CPU advice counts the cores the run kept busy at once in 95 % of its
// samples (a burst while importing does not need a core for the whole run),
// once there are enough samples to say.
const (
	busyQuantile   = 0.95
	minBusySamples = 10
)

// efficiency builds the verdict of the run from its summary; busyCores is
// the busyQuantile of the cores busy at once (0: unknown).
func efficiency(getenv func(string) string, sum Summary, cpuSeconds, busyCores float64) *Efficiency {
	in := verdict.Input{WallSeconds: sum.WallSeconds, CPUSeconds: cpuSeconds, BusyCores: busyCores, PeakRSSBytes: sum.PeakRSSBytes,
		PageCacheBytes: sum.PageCachePeak, Iterations: sum.Iterations, Checkpoints: len(sum.Checkpoints), OOM: sum.Reason == report.EndOOM}
	in.MemRequestBytes, in.MemRequestFrom, in.Cores = slurmRequest(getenv)
	if in.MemRequestBytes == 0 && sum.CgroupLimit > 0 {
		in.MemRequestBytes, in.MemRequestFrom = sum.CgroupLimit, "cgroup limit"
	}
	out := &Efficiency{}
	if sum.GPU != nil {
		for _, d := range sum.GPU.Devices {
			id := d.UUID
			if id == "" {
				id = strconv.Itoa(d.Index)
			}
			g := verdict.GPU{ID: id, PeakBytes: d.PeakJobBytes, TotalBytes: d.TotalBytes}
			if d.MeanUtilPercent != nil {
				g.UtilPercent, g.UtilKnown = *d.MeanUtilPercent, true
				if out.GPUUtilPercent == nil {
					out.GPUUtilPercent = map[string]float64{}
				}
				out.GPUUtilPercent[id] = g.UtilPercent
			}
			in.GPUs = append(in.GPUs, g)
		}
	}
	v := verdict.Judge(in)
	out.MemRequestBytes, out.MemRequestFrom, out.MemFraction = in.MemRequestBytes, in.MemRequestFrom, v.MemFraction
	out.CPUSeconds, out.Cores, out.CPUEfficiency = cpuSeconds, in.Cores, v.CPUEfficiency
	out.AskMemBytes, out.AskCores, out.Recommendation = v.AskMemBytes, v.AskCores, v.Recommendation
	out.Lines = verdict.Lines(in, v)
	return out
}

// writeEfficiency writes the verdict under the summary line.
func writeEfficiency(w io.Writer, e *Efficiency) {
	if e == nil {
		return
	}
	for _, l := range e.Lines {
		fmt.Fprintf(w, "isched-wrapper: %s\n", l)
	}
}
