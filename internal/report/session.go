package report

import (
	"maps"
	"slices"
	"strings"
)

// Start is sent once when the wrapper has started the training command.
type Start struct {
	Argv           []string `json:"argv"`
	Cwd            string   `json:"cwd"`             // absolute; empty if unknown
	Host           string   `json:"host"`            // short host name
	PID            int      `json:"pid"`             // of the training command
	WrapperVersion string   `json:"wrapper_version"` // isched-wrapper build version
	CheckpointDir  string   `json:"checkpoint_dir"`  // absolute; empty if not watched
	ProgressFile   string   `json:"progress_file"`   // absolute; empty if not used
	Device         string   `json:"device"`          // "cpu", "cuda", ...; empty if unknown
	GPUs           []string `json:"gpus"`            // visible device ids or uuids
	TotalIters     int64    `json:"total_iters,omitempty"`
	ItersPerEpoch  int64    `json:"iters_per_epoch,omitempty"`
	Epochs         int      `json:"epochs,omitempty"`
	ResumeFrom     string   `json:"resume_from,omitempty"` // checkpoint the run resumed from
	// Cred is a MUNGE credential binding the session to the job's uid. It is
	// opaque here (internal/auth checks it) but must be printable ASCII,
	// which MUNGE's base64 encoding always is.
	Cred string `json:"cred,omitempty"`
}

// Validate checks the start body.
func (s *Start) Validate() error {
	if s == nil {
		return fail("", "missing")
	}
	if len(s.Argv) == 0 {
		return fail("argv", "required (at least the command)")
	}
	for i, a := range s.Argv {
		if err := text(joinPath("argv", index(i)), a, MaxArg, i == 0); err != nil {
			return err
		}
	}
	for i, g := range s.GPUs {
		if err := printable(joinPath("gpus", index(i)), g, maxName, true); err != nil {
			return err
		}
	}
	if err := first(
		absPath("cwd", s.Cwd, false),
		printable("host", s.Host, 255, false),
		positiveInt("pid", s.PID),
		printable("wrapper_version", s.WrapperVersion, 64, false),
		absPath("checkpoint_dir", s.CheckpointDir, false),
		absPath("progress_file", s.ProgressFile, false),
		token("device", s.Device, 32, false, setDevice),
		nonNeg("total_iters", s.TotalIters),
		nonNeg("iters_per_epoch", s.ItersPerEpoch),
		nonNeg("epochs", s.Epochs),
		text("resume_from", s.ResumeFrom, maxPath, false),
	); err != nil {
		return err
	}
	if len(s.Cred) > maxCred {
		return fail("cred", "too long (%d bytes, max %d)", len(s.Cred), maxCred)
	}
	for i := 0; i < len(s.Cred); i++ {
		if c := s.Cred[i]; c <= ' ' || c > '~' {
			return fail("cred", "must be printable ASCII without spaces")
		}
	}
	return nil
}

func positiveInt(field string, v int) error {
	if v <= 0 {
		return fail(field, "must be positive (got %d)", v)
	}
	return nil
}

// Sample is a periodic report. Any part may be missing: sampling is best
// effort, and a failed sample is counted in Gaps rather than sent.
type Sample struct {
	CPU     *CPUStat `json:"cpu,omitempty"`
	GPU     *GPUStat `json:"gpu,omitempty"`
	Iters   []Iter   `json:"iters,omitempty"`   // iterations seen since the last sample
	Gaps    int      `json:"gaps,omitempty"`    // failed samples since the last report
	Dropped int      `json:"dropped,omitempty"` // samples dropped from the spool
}

// Validate checks the sample body.
func (s *Sample) Validate() error {
	if s == nil {
		return fail("", "missing")
	}
	if s.CPU != nil {
		if err := within("cpu", s.CPU.Validate()); err != nil {
			return err
		}
	}
	if s.GPU != nil {
		if err := within("gpu", s.GPU.Validate()); err != nil {
			return err
		}
	}
	for i := range s.Iters {
		if err := within(joinPath("iters", index(i)), s.Iters[i].Validate()); err != nil {
			return err
		}
	}
	return first(nonNeg("gaps", s.Gaps), nonNeg("dropped", s.Dropped))
}

// CPUStat covers the training command's whole process tree.
type CPUStat struct {
	RSSBytes     int64   `json:"rss_bytes"`
	PeakRSSBytes int64   `json:"peak_rss_bytes"`
	PSSBytes     int64   `json:"pss_bytes,omitempty"`
	CPUPercent   float64 `json:"cpu_percent"` // 100 per busy core
	Procs        int     `json:"procs"`
	// CgroupUnreclaimBytes and CgroupFileBytes split the charge of the
	// process's memory cgroup (memory.stat): what the kernel cannot
	// reclaim (anonymous memory, shmem, unreclaimable kernel memory) and
	// page cache (files the job wrote or read, checkpoints included). 0
	// when unknown.
	CgroupUnreclaimBytes int64 `json:"cgroup_unreclaimable_bytes,omitempty"`
	CgroupFileBytes      int64 `json:"cgroup_page_cache_bytes,omitempty"`
}

// Validate checks the CPU statistics.
func (c *CPUStat) Validate() error {
	if c == nil {
		return fail("", "missing")
	}
	return first(
		nonNeg("rss_bytes", c.RSSBytes),
		nonNeg("peak_rss_bytes", c.PeakRSSBytes),
		nonNeg("pss_bytes", c.PSSBytes),
		finiteNonNeg("cpu_percent", c.CPUPercent),
		nonNeg("procs", c.Procs),
		nonNeg("cgroup_unreclaimable_bytes", c.CgroupUnreclaimBytes),
		nonNeg("cgroup_page_cache_bytes", c.CgroupFileBytes),
	)
}

// GPUStat is what NVML reported. When NVML is unavailable both lists are
// empty and NoData says why.
type GPUStat struct {
	Devices []GPUDevice `json:"devices"`
	Procs   []GPUProc   `json:"procs"` // the job's processes only
	NoData  string      `json:"no_data,omitempty"`
}

// Validate checks the GPU statistics.
func (g *GPUStat) Validate() error {
	if g == nil {
		return fail("", "missing")
	}
	for i := range g.Devices {
		if err := within(joinPath("devices", index(i)), g.Devices[i].Validate()); err != nil {
			return err
		}
	}
	for i := range g.Procs {
		if err := within(joinPath("procs", index(i)), g.Procs[i].Validate()); err != nil {
			return err
		}
	}
	return text("no_data", g.NoData, MaxText, false)
}

// GPUDevice is one visible device. Optional readings are pointers because
// not every device reports them and 0 is a real value.
type GPUDevice struct {
	Index       int      `json:"index"`
	UUID        string   `json:"uuid"`
	Name        string   `json:"name"`
	UsedBytes   int64    `json:"used_bytes"`
	TotalBytes  int64    `json:"total_bytes"`
	UtilPercent *float64 `json:"util_percent,omitempty"`
	PowerWatts  *float64 `json:"power_watts,omitempty"`
	EnergyJ     *float64 `json:"energy_j,omitempty"` // since driver load
}

// Validate checks one device.
func (d *GPUDevice) Validate() error {
	return first(
		nonNeg("index", d.Index),
		printable("uuid", d.UUID, maxName, false),
		printable("name", d.Name, maxName, false),
		nonNeg("used_bytes", d.UsedBytes),
		nonNeg("total_bytes", d.TotalBytes),
		finiteRange("util_percent", d.UtilPercent, 0, 100),
		finiteRange("power_watts", d.PowerWatts, 0, inf),
		finiteRange("energy_j", d.EnergyJ, 0, inf),
	)
}

// GPUProc is GPU memory used by one of the job's processes.
type GPUProc struct {
	PID       int    `json:"pid"`
	Device    string `json:"device"` // uuid of the device
	UsedBytes int64  `json:"used_bytes"`
}

// JobBytes is the job's memory on device d in this sample: the sum of the
// job's processes NVML listed there, or, where it listed none (a container
// whose PIDs NVML does not translate, no permission, the job not yet or no
// longer on the device), the device's used memory. perProcess says which.
func (s *GPUStat) JobBytes(d GPUDevice) (bytes int64, perProcess bool) {
	for _, p := range s.Procs {
		if p.Device == d.UUID && p.UsedBytes > 0 {
			bytes += p.UsedBytes
		}
	}
	if bytes > 0 {
		return bytes, true
	}
	return d.UsedBytes, false
}

// Validate checks one process entry.
func (p *GPUProc) Validate() error {
	return first(
		positiveInt("pid", p.PID),
		printable("device", p.Device, maxName, false),
		nonNeg("used_bytes", p.UsedBytes),
	)
}

// Iteration sources.
const (
	SourceFile    = "file"    // the progress file written by the training loop
	SourcePattern = "pattern" // a pattern matched on the command's stdout
	SourceHelper  = "helper"  // the isched Python helper
)

// Iter is one training iteration as the wrapper observed it.
type Iter struct {
	Step    int64    `json:"step"`
	Epoch   int      `json:"epoch"`
	Samples int64    `json:"samples,omitempty"` // samples processed in this step
	Loss    *float64 `json:"loss,omitempty"`
	// LossNonFinite records a NaN or infinite loss, which JSON cannot carry;
	// Loss is then nil. A diverging run is worth knowing about.
	LossNonFinite bool    `json:"loss_nonfinite,omitempty"`
	AtMS          int64   `json:"at_ms"`                 // when the wrapper saw it, Unix ms
	DurMS         float64 `json:"dur_ms"`                // wrapper-measured time since the previous step
	LoopDurMS     float64 `json:"loop_dur_ms,omitempty"` // the training loop's own measurement
	Source        string  `json:"source"`                // SourceFile, SourcePattern or SourceHelper
	// Total is the loop's own total of steps as it printed it with this
	// step (a pattern's total group, tqdm's n/total, the helper's total=);
	// 0 when the loop does not say. It wins over a total computed from the
	// plan: the loop knows its own length.
	Total int64 `json:"total,omitempty"`
}

// Validate checks one iteration.
func (it *Iter) Validate() error {
	if err := first(
		nonNeg("step", it.Step),
		nonNeg("epoch", it.Epoch),
		nonNeg("samples", it.Samples),
		nonNeg("total", it.Total),
	); err != nil {
		return err
	}
	if it.Total > 0 && it.Step > it.Total {
		return fail("total", "step %d is past the loop's total %d", it.Step, it.Total)
	}
	if it.Loss != nil {
		if err := finite("loss", *it.Loss); err != nil {
			return err
		}
		if it.LossNonFinite {
			return fail("loss_nonfinite", "must not be set together with loss")
		}
	}
	return first(
		unixMS("at_ms", it.AtMS, true),
		finiteNonNeg("dur_ms", it.DurMS),
		finiteNonNeg("loop_dur_ms", it.LoopDurMS),
		oneOf("source", it.Source, SourceFile, SourcePattern, SourceHelper),
	)
}

// Checkpoint reports a checkpoint file the wrapper saw settle.
type Checkpoint struct {
	Path     string `json:"path"` // clean absolute path
	Size     int64  `json:"size"`
	Step     *int64 `json:"step,omitempty"` // parsed from the name or the progress file
	MTimeMS  int64  `json:"mtime_ms"`
	Complete bool   `json:"complete"` // written and renamed into place, not still growing
	SHA256   string `json:"sha256,omitempty"`
}

// Validate checks the checkpoint body.
func (c *Checkpoint) Validate() error {
	if c == nil {
		return fail("", "missing")
	}
	if err := first(
		absPath("path", c.Path, true),
		nonNeg("size", c.Size),
		nonNegPtr("step", c.Step),
		unixMS("mtime_ms", c.MTimeMS, true),
	); err != nil {
		return err
	}
	if c.SHA256 != "" {
		return lowerHex("sha256", c.SHA256, 64, 64)
	}
	return nil
}

// SignalEvent reports a signal the wrapper received.
type SignalEvent struct {
	Signal string `json:"signal"` // e.g. "SIGUSR1"
	// Forwarded is what the training command got: a signal name, or
	// "file:<path>" when the wrapper asked for a checkpoint by touching a
	// file; empty when nothing was delivered.
	Forwarded string `json:"forwarded"`
	From      string `json:"from,omitempty"` // who sent it, when known ("slurm", a pid)
}

// Validate checks the signal body.
func (s *SignalEvent) Validate() error {
	if s == nil {
		return fail("", "missing")
	}
	if err := signalName("signal", s.Signal, true); err != nil {
		return err
	}
	if p, ok := strings.CutPrefix(s.Forwarded, "file:"); ok {
		if err := absPath("forwarded", p, true); err != nil {
			return err
		}
	} else if err := signalName("forwarded", s.Forwarded, false); err != nil {
		return fail("forwarded", "must be a signal name or file:<absolute path> (got %s)", quote(s.Forwarded))
	}
	return printable("from", s.From, maxName, false)
}

// End reasons.
const (
	EndExited      = "exited"
	EndSignaled    = "signaled"
	EndOOM         = "oom"
	EndStartFailed = "start-failed"
)

// End is sent once when the training command has ended.
type End struct {
	ExitCode     int              `json:"exit_code"` // as the wrapper exits: 128+n when killed by signal n
	Signal       string           `json:"signal,omitempty"`
	WallMS       int64            `json:"wall_ms"`
	PeakRSSBytes int64            `json:"peak_rss_bytes"`
	PeakGPUBytes map[string]int64 `json:"peak_gpu_bytes,omitempty"` // by device uuid
	Iters        int64            `json:"iters"`
	MedianIterMS float64          `json:"median_iter_ms"`
	P90IterMS    float64          `json:"p90_iter_ms"`
	Checkpoints  int              `json:"checkpoints"`
	Reason       string           `json:"reason,omitempty"` // EndExited, EndSignaled, EndOOM, EndStartFailed
	// CgroupPeakBytes is the kernel's peak memory use of the command's
	// memory cgroup, read after it ended (cgroup v2 memory.peak, v1
	// memory.max_usage_in_bytes): unlike PeakRSSBytes, which comes from
	// periodic samples, it includes an allocation made between two samples,
	// but it also counts page cache (the checkpoints the job wrote), so it
	// is not the job's memory need. 0 when unknown (no memory cgroup, or a
	// kernel without the file).
	CgroupPeakBytes int64 `json:"cgroup_peak_bytes,omitempty"`
	// UnreclaimPeakBytes is the largest sampled part of the cgroup's charge
	// that the kernel cannot reclaim (memory.stat: anonymous memory, shmem,
	// unreclaimable kernel memory); PageCachePeakBytes the largest sampled
	// page cache. 0 when unknown.
	UnreclaimPeakBytes int64 `json:"unreclaimable_peak_bytes,omitempty"`
	PageCachePeakBytes int64 `json:"page_cache_peak_bytes,omitempty"`
	// CPUSeconds is the user+system CPU time of the command and the
	// descendants it waited for; Cores the cores Slurm gave the job on the
	// node (SLURM_CPUS_ON_NODE); MemRequestBytes what it asked for (--mem,
	// --mem-per-cpu × cores). 0 when unknown.
	CPUSeconds      float64 `json:"cpu_seconds,omitempty"`
	Cores           int     `json:"cores,omitempty"`
	MemRequestBytes int64   `json:"mem_request_bytes,omitempty"`
	// GPUUtilPercent is each device's mean utilisation over the samples,
	// by device uuid.
	GPUUtilPercent map[string]float64 `json:"gpu_util_percent,omitempty"`
	// MemLimitBytes is the tightest memory limit on that cgroup or its
	// ancestors (Slurm's --mem, enforced by task/cgroup). 0 when unlimited
	// or unknown.
	MemLimitBytes int64 `json:"mem_limit_bytes,omitempty"`
}

// Validate checks the end body.
func (e *End) Validate() error {
	if e == nil {
		return fail("", "missing")
	}
	if e.ExitCode < 0 || e.ExitCode > 255 {
		return fail("exit_code", "must be within [0, 255] (got %d)", e.ExitCode)
	}
	if err := first(
		signalName("signal", e.Signal, e.Reason == EndSignaled),
		nonNeg("wall_ms", e.WallMS),
		nonNeg("peak_rss_bytes", e.PeakRSSBytes),
	); err != nil {
		return err
	}
	// Sorted so that the error for a map with several bad entries is stable.
	for _, k := range slices.Sorted(maps.Keys(e.PeakGPUBytes)) {
		f := joinPath("peak_gpu_bytes", index(k))
		if err := first(printable(f, k, maxName, true), nonNeg(f, e.PeakGPUBytes[k])); err != nil {
			return err
		}
	}
	if err := first(
		nonNeg("iters", e.Iters),
		finiteNonNeg("median_iter_ms", e.MedianIterMS),
		finiteNonNeg("p90_iter_ms", e.P90IterMS),
		nonNeg("checkpoints", e.Checkpoints),
		nonNeg("cgroup_peak_bytes", e.CgroupPeakBytes),
		nonNeg("mem_limit_bytes", e.MemLimitBytes),
		nonNeg("unreclaimable_peak_bytes", e.UnreclaimPeakBytes),
		nonNeg("page_cache_peak_bytes", e.PageCachePeakBytes),
		finiteNonNeg("cpu_seconds", e.CPUSeconds),
		nonNeg("cores", e.Cores),
		nonNeg("mem_request_bytes", e.MemRequestBytes),
	); err != nil {
		return err
	}
	for _, k := range slices.Sorted(maps.Keys(e.GPUUtilPercent)) {
		f := joinPath("gpu_util_percent", index(k))
		v := e.GPUUtilPercent[k]
		if err := first(printable(f, k, maxName, true), finiteRange(f, &v, 0, 100)); err != nil {
			return err
		}
	}
	if e.Reason != "" {
		return oneOf("reason", e.Reason, EndExited, EndSignaled, EndOOM, EndStartFailed)
	}
	return nil
}
