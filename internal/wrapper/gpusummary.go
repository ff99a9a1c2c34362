package wrapper

import (
	"slices"
	"strconv"

	"github.com/isched/isched/internal/report"
)

// GPUSummary is what the wrapper saw of the job's GPUs over the run (the
// summary's "gpu"): per device and per process, so a run on a real GPU can be
// checked against nvidia-smi and PyTorch (scripts/gpu-check).
type GPUSummary struct {
	Samples int                `json:"samples"`
	Devices []GPUDeviceSummary `json:"devices"`
	Procs   []GPUProcSummary   `json:"procs"`
}

// GPU memory sources of GPUDeviceSummary.Source.
const (
	// GPUSourceProcess: the job's processes as NVML listed them. Once NVML
	// has listed one of them on a device, only such samples count there: a
	// sample without them is the job starting or ending (NVML still lists
	// a process whose memory the driver has not yet freed, after the
	// process left the tree), not the device's memory being the job's.
	GPUSourceProcess = "process"
	// GPUSourceDevice: NVML never listed a process of the job on the
	// device (a container's PID namespace where NVML reports the host's
	// PIDs, or no permission to see them); the device's used memory stands
	// in.
	GPUSourceDevice = "device"
)

// GPUDeviceSummary is one visible device over the run.
type GPUDeviceSummary struct {
	Index      int    `json:"index"`
	UUID       string `json:"uuid"`
	Name       string `json:"name,omitempty"`
	TotalBytes int64  `json:"total_bytes"`
	// PeakUsedBytes is the device's used memory (every process, and what
	// the driver reserves) at its highest sample.
	PeakUsedBytes int64 `json:"peak_used_bytes"`
	// PeakJobBytes is the job's memory on the device at its highest
	// sample: the sum of its processes, or the device's used memory where
	// Source says so. It is the peak_gpu_bytes entry of the device.
	PeakJobBytes    int64    `json:"peak_job_bytes"`
	Source          string   `json:"source"`
	PeakUtilPercent *float64 `json:"peak_util_percent,omitempty"`
	MeanUtilPercent *float64 `json:"mean_util_percent,omitempty"`
	PeakPowerWatts  *float64 `json:"peak_power_watts,omitempty"`
	// EnergyJ is the energy the device used during the run (the last
	// reading less the first: every process on it counts).
	EnergyJ *float64 `json:"energy_j,omitempty"`

	procSamples, devSamples int
	procPeak, devPeak       int64
	utilSum                 float64
	utilN                   int
	firstEnergy             *float64
}

// GPUProcSummary is one of the job's processes on one device.
type GPUProcSummary struct {
	PID       int    `json:"pid"`
	Device    string `json:"device"`
	PeakBytes int64  `json:"peak_bytes"`
}

// gpuTally accumulates a GPUSummary from the samples.
type gpuTally struct {
	sum   GPUSummary
	procs map[string]int // "pid|device" -> index in sum.Procs
}

// gpuKey is a device's key in peak_gpu_bytes: its UUID, else its index.
func gpuKey(dv report.GPUDevice) string {
	if dv.UUID != "" {
		return dv.UUID
	}
	return strconv.Itoa(dv.Index)
}

// observe adds one sample and returns the job's peak memory so far per
// device (by gpuKey): its processes' where NVML ever listed one there, else
// the device's used memory.
func (t *gpuTally) observe(gs *report.GPUStat) map[string]int64 {
	if gs == nil || len(gs.Devices) == 0 {
		return nil
	}
	if t.procs == nil {
		t.procs = map[string]int{}
	}
	t.sum.Samples++
	job := make(map[string]int64, len(gs.Devices))
	for _, dv := range gs.Devices {
		i := slices.IndexFunc(t.sum.Devices, func(d GPUDeviceSummary) bool { return d.UUID == dv.UUID && d.Index == dv.Index })
		if i < 0 {
			t.sum.Devices = append(t.sum.Devices, GPUDeviceSummary{Index: dv.Index, UUID: dv.UUID, Name: dv.Name})
			i = len(t.sum.Devices) - 1
		}
		d := &t.sum.Devices[i]
		d.TotalBytes = max(d.TotalBytes, dv.TotalBytes)
		d.PeakUsedBytes = max(d.PeakUsedBytes, dv.UsedBytes)
		t.observeProcs(gs.Procs, dv.UUID)
		if used, perProcess := gs.JobBytes(dv); perProcess {
			d.procSamples++
			d.procPeak = max(d.procPeak, used)
		} else {
			d.devSamples++
			d.devPeak = max(d.devPeak, used)
		}
		if d.procSamples > 0 {
			d.Source, d.PeakJobBytes = GPUSourceProcess, d.procPeak
		} else {
			d.Source, d.PeakJobBytes = GPUSourceDevice, d.devPeak
		}
		job[gpuKey(dv)] = d.PeakJobBytes
		if dv.UtilPercent != nil {
			d.PeakUtilPercent = maxPtr(d.PeakUtilPercent, *dv.UtilPercent)
			d.utilSum += *dv.UtilPercent
			d.utilN++
			m := d.utilSum / float64(d.utilN)
			d.MeanUtilPercent = &m
		}
		if dv.PowerWatts != nil {
			d.PeakPowerWatts = maxPtr(d.PeakPowerWatts, *dv.PowerWatts)
		}
		if dv.EnergyJ != nil {
			if d.firstEnergy == nil {
				e := *dv.EnergyJ
				d.firstEnergy = &e
			}
			e := max(*dv.EnergyJ-*d.firstEnergy, 0)
			d.EnergyJ = &e
		}
	}
	return job
}

// observeProcs adds the job's processes on one device to their peaks.
func (t *gpuTally) observeProcs(procs []report.GPUProc, device string) {
	for _, p := range procs {
		if p.Device != device {
			continue
		}
		key := strconv.Itoa(p.PID) + "|" + p.Device
		j, ok := t.procs[key]
		if !ok {
			t.sum.Procs = append(t.sum.Procs, GPUProcSummary{PID: p.PID, Device: p.Device})
			j = len(t.sum.Procs) - 1
			t.procs[key] = j
		}
		t.sum.Procs[j].PeakBytes = max(t.sum.Procs[j].PeakBytes, p.UsedBytes)
	}
}

func maxPtr(p *float64, v float64) *float64 {
	if p != nil && *p >= v {
		return p
	}
	return &v
}

// summary is a copy for the end-of-job summary; nil without GPU samples.
func (t *gpuTally) summary() *GPUSummary {
	if t.sum.Samples == 0 {
		return nil
	}
	out := GPUSummary{Samples: t.sum.Samples, Devices: slices.Clone(t.sum.Devices), Procs: slices.Clone(t.sum.Procs)}
	if out.Procs == nil {
		out.Procs = []GPUProcSummary{}
	}
	return &out
}
