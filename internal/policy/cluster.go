package policy

import (
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/isched/isched/internal/report"
)

// partition finds a partition in the snapshot.
func partition(snap *report.Snapshot, name string) *report.Partition {
	if snap == nil {
		return nil
	}
	for i := range snap.Partitions {
		if snap.Partitions[i].Name == name {
			return &snap.Partitions[i]
		}
	}
	return nil
}

// maxTime is a partition's MaxTime; ok is false for UNLIMITED or an
// unknown partition.
func maxTime(p *report.Partition) (time.Duration, bool) {
	if p == nil || p.MaxTimeMin == nil {
		return 0, false
	}
	return time.Duration(*p.MaxTimeMin) * time.Minute, true
}

// gpuRequest reads the GPUs a GRES string asks for: "gpu", "gpu:2",
// "gpu:a100:2", "gres:gpu:1", "gres/gpu=2", "gres/gpu:a100=1", lists of
// those. typ is the first GPU type named, "" for untyped requests.
func gpuRequest(gres string) (typ string, n int) {
	for _, item := range strings.Split(gres, ",") {
		if i := strings.IndexByte(item, '('); i >= 0 {
			item = item[:i]
		}
		item = strings.TrimPrefix(strings.TrimPrefix(strings.TrimSpace(item), "gres:"), "gres/")
		count := 1
		if k, v, ok := strings.Cut(item, "="); ok {
			c, err := strconv.Atoi(v)
			if err != nil || c < 0 {
				continue
			}
			item, count = k, c
		}
		parts := strings.Split(item, ":")
		if parts[0] != "gpu" {
			continue
		}
		t := ""
		switch len(parts) {
		case 1:
		case 2:
			if c, err := strconv.Atoi(parts[1]); err == nil {
				count = c
			} else {
				t = parts[1]
			}
		default:
			c, err := strconv.Atoi(parts[len(parts)-1])
			if err != nil {
				continue
			}
			t, count = strings.Join(parts[1:len(parts)-1], ":"), c
		}
		if typ == "" {
			typ = t
		}
		n += max(count, 0)
	}
	return typ, n
}

// gpus counts a partition's GPUs of a type ("" counts every type).
func gpus(p *report.Partition, typ string) (idle, total int) {
	for _, g := range p.GPUs {
		if typ == "" || g.Type == typ {
			idle += g.Idle
			total += g.Total
		}
	}
	return idle, total
}

// ask is what a one-node job asks of a node: GPUs (gres), CPUs (0:
// unknown, at least one) and memory (bytes; 0: unknown).
type ask struct {
	gres string
	cpus int
	mem  int64
}

// room reports whether p could start a single-node job asking a right
// now: the partition is up and has an idle node with enough idle GPUs, or
// a partly allocated node with the GPUs, CPUs and memory free
// (report.Partition.Mixed). The answer is for the reason text either way.
func room(p *report.Partition, a ask) (bool, string) {
	if p == nil {
		return false, "not in the snapshot"
	}
	if !strings.EqualFold(p.State, "UP") {
		return false, fmt.Sprintf("partition %s is %s", p.Name, orUnknown(p.State))
	}
	typ, n := gpuRequest(a.gres)
	idle, total := gpus(p, typ)
	what := "GPUs"
	if typ != "" {
		what = typ + " GPUs"
	}
	var why string
	switch {
	case p.NodesIdle < 1:
		why = fmt.Sprintf("%s has no idle node (%d of %d allocated)", p.Name, p.NodesAlloc, p.NodesTotal)
	case n == 0:
		return true, fmt.Sprintf("%s has %d idle node(s)", p.Name, p.NodesIdle)
	case idle < n:
		why = fmt.Sprintf("%s has %d of %d %s idle, the job needs %d", p.Name, idle, total, what, n)
	default:
		return true, fmt.Sprintf("%s has %d idle node(s) and %d of %d %s idle", p.Name, p.NodesIdle, idle, total, what)
	}
	if r, ok := mixedFit(p, typ, n, a); ok {
		return true, fmt.Sprintf("%s has no idle node for it, but %d partly used node(s) with %s free", p.Name, r.Nodes, roomText(r))
	}
	return false, why
}

// mixedFit is the first room on p's partly allocated nodes that holds a
// (n GPUs of type typ).
func mixedFit(p *report.Partition, typ string, n int, a ask) (report.Room, bool) {
	for _, r := range p.Mixed {
		gpuOK := n == 0 || r.GPUs >= n && (typ == "" || r.GPUType == typ)
		memOK := a.mem <= 0 || r.MemMiB == 0 || r.MemMiB<<20 >= a.mem
		if gpuOK && r.CPUs >= max(a.cpus, 1) && memOK {
			return r, true
		}
	}
	return report.Room{}, false
}

func roomText(r report.Room) string {
	var parts []string
	if r.GPUs > 0 {
		g := "GPU"
		if r.GPUType != "" {
			g = r.GPUType + " GPU"
		}
		if r.GPUs > 1 {
			g += "s"
		}
		parts = append(parts, fmt.Sprintf("%d %s", r.GPUs, g))
	}
	parts = append(parts, fmt.Sprintf("%d CPUs", r.CPUs))
	if r.MemMiB > 0 {
		parts = append(parts, fmt.Sprintf("%.1f GiB", float64(r.MemMiB)/1024))
	}
	return strings.Join(parts, ", ")
}

func orUnknown(s string) string {
	if s == "" {
		return "in an unknown state"
	}
	return s
}

// hasGPUs reports whether a partition has any GPU.
func hasGPUs(p *report.Partition) bool {
	_, total := gpus(p, "")
	return total > 0
}

// ownerHeld says which of the owner's per-user limits (the snapshot's, from
// Slurm's accounting) would hold job j pending once moved to partition
// part with gres, "" when none would: Slurm keeps a requeued or moved job
// pending while its owner is at a QOS or association limit, however idle
// the target. A running job's own CPUs and GPUs are already counted in the
// limit's use; only what the move adds counts against it.
func ownerHeld(snap *report.Snapshot, j *Job, part, gres string) string {
	if snap == nil || j.User == "" {
		return ""
	}
	_, gpusAfter := gpuRequest(gres)
	_, gpusNow := gpuRequest(j.Gres)
	running := int64(0)
	if j.State == StateRunning {
		running = 1
	}
	for i := range snap.Limits {
		l := &snap.Limits[i]
		if l.User != j.User || !l.Binds(j.QOS, j.Account, part) {
			continue
		}
		var add int64
		switch l.Resource {
		case report.LimitCPU:
			add = int64(j.CPUs) * (1 - running) // a requeue keeps the job's CPUs
		case report.LimitGPU:
			add = int64(gpusAfter) - int64(gpusNow)*running
		default:
			add = 1 - running
		}
		if add > 0 && l.Used+add > l.Max {
			return fmt.Sprintf("%s's %s limit of %d %s (%s, %d in use) would hold it pending there", j.User, limitScope(l), l.Max, l.Resource, l.Reason, l.Used)
		}
	}
	return ""
}

func limitScope(l *report.UserLimit) string {
	if l.QOS == "" {
		return "association"
	}
	return "QOS " + l.QOS
}
