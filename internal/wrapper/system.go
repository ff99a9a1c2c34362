package wrapper

import (
	"context"
	"log/slog"
	"time"

	"github.com/isched/isched/internal/ckpt"
	"github.com/isched/isched/internal/gpu"
	"github.com/isched/isched/internal/report"
)

// AddSystemDeps fills in the parts that talk to the machine: NVML (absent
// here: "no GPU data", never an exit), the checkpoint directory watcher and
// the child's memory cgroup.
func AddSystemDeps(d *Deps) {
	log := d.Logger
	if log == nil {
		log = slog.Default()
	}
	if d.GPU == nil {
		d.GPU = NVMLSampler{C: gpu.NewSystem(log)}
	}
	if d.Attempts == nil {
		d.Attempts = SqueueAttempts{}
	}
	if d.MemCgroup == nil {
		d.MemCgroup = SystemMemCgroup
	}
	if d.NewCheckpointWatcher == nil {
		d.NewCheckpointWatcher = func(dir, glob string, debounce, quiesce time.Duration, log *slog.Logger) (CheckpointWatcher, error) {
			w, err := ckpt.New(ckpt.Config{Dir: dir, Glob: glob, Debounce: debounce, DirQuiesce: quiesce, Logger: log})
			if err != nil {
				return nil, err
			}
			return ckptWatcher{w: w}, nil
		}
	}
}

// NVMLSampler adapts the gpu collector to the report schema.
type NVMLSampler struct{ C *gpu.Collector }

// Sample implements GPUSampler.
func (s NVMLSampler) Sample(pids []int32) *report.GPUStat {
	st := s.C.Collect(pids)
	return gpuReport(st)
}

func gpuReport(st gpu.Stat) *report.GPUStat {
	out := &report.GPUStat{NoData: st.NoData, Devices: []report.GPUDevice{}, Procs: []report.GPUProc{}}
	for _, d := range st.Devices {
		out.Devices = append(out.Devices, report.GPUDevice{Index: d.Index, UUID: d.UUID, Name: d.Name,
			UsedBytes: max(d.UsedBytes, 0), TotalBytes: max(d.TotalBytes, 0),
			UtilPercent: d.UtilPercent, PowerWatts: d.PowerWatts, EnergyJ: d.EnergyJ})
	}
	for _, p := range st.Procs {
		if p.UsedBytes < 0 { // NVML could not tell this process's memory
			continue
		}
		out.Procs = append(out.Procs, report.GPUProc{PID: int(p.PID), Device: p.DeviceUUID, UsedBytes: p.UsedBytes})
	}
	return out
}

type ckptWatcher struct{ w *ckpt.Watcher }

// Pending implements pendingCounter.
func (c ckptWatcher) Pending() int { return c.w.Pending() }

func (c ckptWatcher) Run(ctx context.Context, emit func(CheckpointEvent)) error {
	done := make(chan error, 1)
	go func() { done <- c.w.Run(ctx) }()
	for ev := range c.w.Events() {
		emit(CheckpointEvent{Path: ev.Path, Dir: ev.Dir, Tree: ev.Tree, Size: ev.Size, MTime: ev.MTime, Step: ev.Step, Existing: ev.Existing})
	}
	return <-done
}
