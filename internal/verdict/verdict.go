// Package verdict is the end-of-job efficiency summary, seff-like: memory
// used against what was asked, CPU efficiency, GPU use per device,
// iterations, checkpoints and time lost to moves, with a one-line
// recommendation for the next submission. It is pure and stdlib-only: the
// wrapper, the coordinator and the CLI feed it what they measured.
package verdict

import (
	"fmt"
	"math"
	"sort"
	"strings"
)

// Input is what a run measured. Zero values mean unknown.
type Input struct {
	WallSeconds float64
	// CPUSeconds is the user+system CPU time of the training process tree.
	CPUSeconds float64
	// Cores is how many cores the job was given (SLURM_CPUS_ON_NODE).
	Cores int
	// BusyCores is how many cores the process tree kept busy at once in
	// nearly all of its samples (the wrapper's 95th percentile); 0 when
	// unknown.
	BusyCores float64
	// MemRequestBytes is what the job asked for (Slurm's --mem, or
	// --mem-per-cpu × cores); MemRequestFrom says which ("--mem",
	// "--mem-per-cpu", "cgroup limit").
	MemRequestBytes int64
	MemRequestFrom  string
	// PeakRSSBytes is the process tree's peak resident memory: what the job
	// needs, page cache excluded.
	PeakRSSBytes int64
	// PageCacheBytes is the peak page cache seen in the job's cgroup
	// (checkpoints it wrote): reclaimable, not a need.
	PageCacheBytes int64
	GPUs           []GPU
	Iterations     int64
	Checkpoints    int
	// MoveLostSeconds is the time lost to moves between partitions: the
	// gaps between attempts and the iterations redone after a restore.
	MoveLostSeconds float64
	Moves           int
	// OOM is true when the run was killed at its memory limit.
	OOM bool
}

// GPU is one device's use over the run.
type GPU struct {
	ID          string
	PeakBytes   int64
	TotalBytes  int64
	UtilPercent float64 // mean utilisation over the samples
	UtilKnown   bool
}

// Verdict is the summary.
type Verdict struct {
	// MemFraction is the peak over the request; 0 when either is unknown.
	MemFraction float64
	// CPUEfficiency is CPU time / (cores × wall), 0..1 (can exceed 1 when
	// the job used more cores than it was given, without a cgroup); 0
	// when unknown.
	CPUEfficiency float64
	// AskMemBytes is the --mem recommended for the next submission (0: no
	// advice); AskCores the --cpus-per-task (0: no advice).
	AskMemBytes int64
	AskCores    int
	// Recommendation is the one-line advice.
	Recommendation string
}

// Margins of the recommendation.
const (
	// MemMargin is added to the peak before rounding up.
	MemMargin = 0.20
	// overAsk: a request more than this much above the recommendation is
	// worth lowering.
	overAsk = 1.25
	// nearLimit: a peak above this fraction of the request is too close.
	nearLimit = 0.90
	// lowCPU: a CPU efficiency below this on more than one core is worth
	// fewer cores.
	lowCPU = 0.5
	// busyNoise: busy cores measured up to this much over a whole number
	// are that number (sampling jitter, the wrapper's own reads).
	busyNoise = 0.15
)

// Judge computes the verdict of a run.
func Judge(in Input) Verdict {
	var v Verdict
	if in.MemRequestBytes > 0 && in.PeakRSSBytes > 0 {
		v.MemFraction = float64(in.PeakRSSBytes) / float64(in.MemRequestBytes)
	}
	if in.Cores > 0 && in.WallSeconds > 0 && in.CPUSeconds > 0 {
		v.CPUEfficiency = in.CPUSeconds / (float64(in.Cores) * in.WallSeconds)
	}
	var parts []string
	mem, ask := memAdvice(in)
	v.AskMemBytes = ask
	if mem != "" {
		parts = append(parts, mem)
	}
	cpu, cores := cpuAdvice(in, v.CPUEfficiency)
	v.AskCores = cores
	if cpu != "" {
		parts = append(parts, cpu)
	}
	if len(parts) == 0 {
		v.Recommendation = "no advice: too little was measured"
	} else {
		v.Recommendation = strings.Join(parts, "; ")
	}
	return v
}

// memAdvice is the memory half of the recommendation.
func memAdvice(in Input) (string, int64) {
	peak, req := in.PeakRSSBytes, in.MemRequestBytes
	switch {
	case in.OOM && req > 0:
		ask := RoundMem(max(2*req, int64(float64(peak)*(1+MemMargin))))
		return fmt.Sprintf("killed at its memory limit of %s: ask --mem=%s next time (or use less memory)", Bytes(req), SlurmMem(ask)), ask
	case in.OOM:
		return "killed at its memory limit: ask for more memory next time", 0
	case peak <= 0:
		return "", 0
	}
	ask := RoundMem(int64(float64(peak) * (1 + MemMargin)))
	switch {
	case req <= 0:
		return fmt.Sprintf("used %s peak: --mem=%s would do", Bytes(peak), SlurmMem(ask)), ask
	case float64(req) > overAsk*float64(ask):
		return fmt.Sprintf("asked %s, used %s peak: ask --mem=%s next time", Bytes(req), Bytes(peak), SlurmMem(ask)), ask
	case float64(peak) > nearLimit*float64(req):
		return fmt.Sprintf("used %.0f%% of the %s asked: ask --mem=%s next time to stay clear of an OOM kill",
			100*float64(peak)/float64(req), Bytes(req), SlurmMem(ask)), ask
	}
	return fmt.Sprintf("memory request fits (%.0f%% of %s used)", 100*float64(peak)/float64(req), Bytes(req)), 0
}

// cpuAdvice is the CPU half of the recommendation.
func cpuAdvice(in Input, eff float64) (string, int) {
	if in.Cores <= 1 || eff <= 0 || eff >= lowCPU {
		return "", 0
	}
	if in.BusyCores > 0 {
		// measured parallelism: a loop that keeps one core busy needs one,
		// however its mean compares with the margin; a tenth of a core of
		// sampling noise is not a second one
		cores := max(1, int(math.Ceil(in.BusyCores-busyNoise)))
		if cores >= in.Cores {
			return "", 0
		}
		return fmt.Sprintf("CPU efficiency %.0f%% of %d cores, at most %.1f busy at once in 95%% of samples: --cpus-per-task=%d would do",
			100*eff, in.Cores, in.BusyCores, cores), cores
	}
	// the cores it kept busy on average, with the same margin as memory,
	// at least one
	used := in.CPUSeconds / in.WallSeconds
	cores := max(1, int(math.Ceil(used*(1+MemMargin))))
	if cores >= in.Cores {
		return "", 0
	}
	return fmt.Sprintf("CPU efficiency %.0f%% of %d cores: --cpus-per-task=%d would do", 100*eff, in.Cores, cores), cores
}

// RoundMem rounds a memory size up to what a user would type: whole GiB from
// 1 GiB, else a multiple of 256 MiB.
func RoundMem(b int64) int64 {
	const mib, gib = 1 << 20, 1 << 30
	if b <= 0 {
		return 0
	}
	if b >= gib {
		return (b + gib - 1) / gib * gib
	}
	return (b + 256*mib - 1) / (256 * mib) * (256 * mib)
}

// SlurmMem writes a size as sbatch's --mem takes it (G and M are GiB and MiB
// to Slurm).
func SlurmMem(b int64) string {
	const mib, gib = 1 << 20, 1 << 30
	if b%gib == 0 {
		return fmt.Sprintf("%dG", b/gib)
	}
	return fmt.Sprintf("%dM", (b+mib-1)/mib)
}

// Bytes writes a size for people: "6.1 GiB", "643 MiB".
func Bytes(b int64) string {
	const mib, gib = 1 << 20, 1 << 30
	switch {
	case b >= 10*gib:
		return fmt.Sprintf("%.0f GiB", float64(b)/gib)
	case b >= gib:
		return fmt.Sprintf("%.1f GiB", float64(b)/gib)
	default:
		return fmt.Sprintf("%.0f MiB", float64(b)/mib)
	}
}

// Lines writes the summary, one aspect a line, for a terminal.
func Lines(in Input, v Verdict) []string {
	var out []string
	mem := "memory:     " + "process peak " + orUnknown(in.PeakRSSBytes)
	if in.MemRequestBytes > 0 {
		from := in.MemRequestFrom
		if from == "" {
			from = "requested"
		}
		mem += fmt.Sprintf(" of %s asked (%s), %.0f%%", Bytes(in.MemRequestBytes), from, 100*v.MemFraction)
	}
	if in.PageCacheBytes > 0 {
		mem += fmt.Sprintf("; page cache peak %s (reclaimable, not counted)", Bytes(in.PageCacheBytes))
	}
	out = append(out, mem)
	switch {
	case v.CPUEfficiency > 0:
		out = append(out, fmt.Sprintf("CPU:        %.0f%% efficiency (%s CPU time over %d cores × %s wall)",
			100*v.CPUEfficiency, seconds(in.CPUSeconds), in.Cores, seconds(in.WallSeconds)))
	case in.CPUSeconds > 0:
		out = append(out, fmt.Sprintf("CPU:        %s CPU time over %s wall (cores unknown)", seconds(in.CPUSeconds), seconds(in.WallSeconds)))
	}
	gpus := append([]GPU(nil), in.GPUs...)
	sort.Slice(gpus, func(i, j int) bool { return gpus[i].ID < gpus[j].ID })
	for _, g := range gpus {
		line := fmt.Sprintf("GPU %s:  memory peak %s", g.ID, Bytes(g.PeakBytes))
		if g.TotalBytes > 0 {
			line += fmt.Sprintf(" of %s (%.0f%%)", Bytes(g.TotalBytes), 100*float64(g.PeakBytes)/float64(g.TotalBytes))
		}
		if g.UtilKnown {
			line += fmt.Sprintf(", utilisation %.0f%% mean", g.UtilPercent)
		} else {
			line += ", utilisation unknown"
		}
		out = append(out, line)
	}
	work := fmt.Sprintf("work:       %d iterations, %d checkpoints", in.Iterations, in.Checkpoints)
	if in.Moves > 0 || in.MoveLostSeconds > 0 {
		work += fmt.Sprintf(", %d moves costing %s", in.Moves, seconds(in.MoveLostSeconds))
	}
	out = append(out, work, "next time:  "+v.Recommendation)
	return out
}

func orUnknown(b int64) string {
	if b <= 0 {
		return "unknown"
	}
	return Bytes(b)
}

func seconds(s float64) string {
	switch {
	case s >= 3600:
		return fmt.Sprintf("%.1fh", s/3600)
	case s >= 60:
		return fmt.Sprintf("%.1fmin", s/60)
	default:
		return fmt.Sprintf("%.1fs", s)
	}
}
