// Package gpu reads GPU memory, utilisation and power per device, and GPU
// memory per process, through NVML. It is the only package that uses go-nvml
// and the only one built with cgo.
//
// go-nvml loads libnvidia-ml.so.1 with dlopen when NVML is initialised, so the
// binaries build and run on machines without an NVIDIA driver. There, and
// whenever NVML fails, a Collector reports Stat.NoData with the reason,
// logs it once, and tries NVML again at most once a RetryInterval; it never
// panics and never exits. (A Go panic inside go-nvml is recovered and becomes
// NoData; a crash inside the C library itself cannot be caught by Go.)
//
// Only the devices the training process can see are reported, following
// CUDA_VISIBLE_DEVICES as CUDA reads it. Drivers differ on PID namespaces:
// some report processes by their PID in the root namespace, so a wrapper in
// a container with its own PID namespace finds none of its job's; others
// (580 on an H200, seen by scripts/gpu-check) translate them into the
// caller's namespace.
package gpu

import (
	"fmt"
	"log/slog"
	"os"
	"slices"
	"sync"
	"time"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
)

// Device is one visible GPU, or one MIG device.
type Device struct {
	// Index is NVML's index of the physical GPU (of the parent GPU for a MIG
	// device). NVML numbers GPUs in PCI bus order, as CUDA does when
	// CUDA_DEVICE_ORDER=PCI_BUS_ID.
	Index int
	// UUID is "GPU-..." or, for a MIG device, "MIG-...".
	UUID string
	// ParentUUID is the physical GPU of a MIG device; empty otherwise.
	ParentUUID string
	Name       string
	// UsedBytes and TotalBytes are the device's memory: every process's,
	// without what the driver reserves where NVML's v2 call answers
	// (nvidia-smi's memory.used), else with it (the v1 call).
	UsedBytes, TotalBytes int64
	// UtilPercent is the share of the last sample period in which a kernel
	// ran; nil when the device does not support it (MIG devices).
	UtilPercent *float64
	// PowerWatts is the current draw; nil when not supported.
	PowerWatts *float64
	// EnergyJ is the energy used since the driver was loaded (Volta and
	// later); nil when not supported.
	EnergyJ *float64
}

// Proc is the GPU memory one process of the tree uses on one device.
type Proc struct {
	PID int32
	// DeviceUUID is the Device's UUID; on a GPU in MIG mode, the UUID of the
	// MIG device the process runs on.
	DeviceUUID string
	// UsedBytes is the process's memory on the device, or UnknownBytes.
	UsedBytes int64
}

// UnknownBytes is Proc.UsedBytes when NVML cannot tell (it reports
// NVML_VALUE_NOT_AVAILABLE, for example without the permission to see other
// users' processes).
const UnknownBytes = -1

// Stat is one collection.
type Stat struct {
	// Devices visible to the training process, in CUDA_VISIBLE_DEVICES
	// order (NVML order when it is unset).
	Devices []Device
	// Procs are the tree's processes on the visible devices, by device then
	// PID. A process in both NVML's compute and graphics lists appears once.
	Procs []Proc
	// DeviceErrors counts the NVML device calls that failed in this
	// collection (NOT_SUPPORTED is not a failure). A device whose handle,
	// UUID or memory could not be read is left out of Devices; a failed
	// utilisation, power or energy read leaves that field nil; a failed
	// process list leaves that device's processes out.
	DeviceErrors int
	// NoData is why there is no GPU data at all (NVML missing or failing);
	// empty when Devices and Procs are what NVML reported. No visible device
	// (CUDA_VISIBLE_DEVICES empty) is not an error: NoData is empty and NVML
	// is not even loaded.
	NoData string
}

// DefaultRetryInterval is how long a Collector waits before trying NVML again
// after a failure.
const DefaultRetryInterval = time.Minute

// Collector collects GPU statistics. Its methods may be called from any
// goroutine.
type Collector struct {
	lib     nvml.Interface
	log     *slog.Logger
	visible visibility
	retry   time.Duration
	now     func() time.Time

	mu       sync.Mutex
	closed   bool
	ready    bool      // NVML initialised
	reason   string    // why not ready
	lastTry  time.Time // last initialisation attempt or failure
	reported string    // the last reason logged
}

// Option configures a Collector; the package's tests use it to set what
// the programs leave at its default (the environment, the retry interval).
type Option func(*Collector)

// New returns a Collector over lib. NVML is initialised on the first Collect,
// not here.
func New(lib nvml.Interface, logger *slog.Logger, opts ...Option) *Collector {
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	v, ok := os.LookupEnv("CUDA_VISIBLE_DEVICES")
	c := &Collector{
		lib:     lib,
		log:     logger,
		visible: parseVisible(v, ok),
		retry:   DefaultRetryInterval,
		now:     time.Now,
	}
	for _, o := range opts {
		o(c)
	}
	return c
}

// NewSystem returns a Collector over the machine's NVML library
// (libnvidia-ml.so.1, loaded on the first Collect).
func NewSystem(logger *slog.Logger, opts ...Option) *Collector {
	return New(nvml.New(), logger, opts...)
}

// Collect reads the visible devices and the GPU memory of the processes in
// pids (the training process tree). It never fails: problems are reported in
// Stat.NoData and Stat.DeviceErrors.
func (c *Collector) Collect(pids []int32) (st Stat) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.visible.none() {
		return Stat{}
	}
	if c.closed {
		return Stat{NoData: "gpu collector closed"}
	}
	if !c.ready && !c.init() {
		return Stat{NoData: c.reason}
	}
	defer func() {
		if p := recover(); p != nil {
			c.fail(fmt.Sprintf("nvml panicked: %v", p))
			st = Stat{NoData: c.reason}
		}
	}()
	return c.collect(pids)
}

// Close shuts NVML down if it was initialised. Collect reports NoData after
// Close.
func (c *Collector) Close() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.closed = true
	if !c.ready {
		return nil
	}
	c.ready = false
	ret, err := call(c.lib.Shutdown)
	if err != nil {
		return err
	}
	if ret != nvml.SUCCESS {
		return fmt.Errorf("nvml shutdown: %v", ret)
	}
	return nil
}

// init initialises NVML unless the last attempt was too recent.
func (c *Collector) init() bool {
	now := c.now()
	if !c.lastTry.IsZero() && now.Sub(c.lastTry) < c.retry {
		return false
	}
	c.lastTry = now
	// go-nvml returns ERROR_LIBRARY_NOT_FOUND when dlopen fails rather than
	// panicking, but a library that panics must not take the wrapper down.
	ret, err := call(c.lib.Init)
	switch {
	case err != nil:
		c.fail(err.Error())
		return false
	case ret != nvml.SUCCESS:
		// Never call Shutdown after a failed Init: with the library not
		// loaded, go-nvml would call through a nil C function pointer.
		c.fail(fmt.Sprintf("nvml init: %v", ret))
		return false
	}
	if c.reported != "" {
		c.log.Info("nvml available again")
		c.reported = ""
	}
	c.ready, c.reason = true, ""
	return true
}

// fail records why there is no data. It logs once per distinct reason, so a
// machine without NVML logs one line in its lifetime.
func (c *Collector) fail(reason string) {
	c.ready, c.reason, c.lastTry = false, reason, c.now()
	if reason != c.reported {
		c.log.Warn("no gpu data", "reason", reason, "retry_in", c.retry)
		c.reported = reason
	}
}

// call runs an NVML call that returns only a Return, turning a panic into an
// error.
func call(f func() nvml.Return) (ret nvml.Return, err error) {
	defer func() {
		if p := recover(); p != nil {
			err = fmt.Errorf("nvml panicked: %v", p)
		}
	}()
	return f(), nil
}

// target is a visible device and where its processes are listed.
type target struct {
	dev        nvml.Device
	index      int
	uuid       string
	parentUUID string
	// sources are the handles whose process lists belong to this device:
	// the device itself, or, for a GPU in MIG mode, its MIG devices (the
	// parent's lists do not give per-process memory in MIG mode).
	sources []source
}

type source struct {
	dev  nvml.Device
	uuid string
}

func (c *Collector) collect(pids []int32) Stat {
	var st Stat
	targets, errs, err := c.resolve()
	st.DeviceErrors += errs
	if err != nil {
		// NVML is loaded but unusable (driver unloaded, version mismatch):
		// release it and start over after the retry interval.
		call(c.lib.Shutdown)
		c.fail(err.Error())
		return Stat{NoData: c.reason}
	}
	inTree := make(map[uint32]bool, len(pids))
	for _, p := range pids {
		inTree[uint32(p)] = true
	}
	for _, t := range targets {
		used, total, ok := memoryInfo(t.dev)
		if !ok {
			st.DeviceErrors++
			continue
		}
		d := Device{
			Index:      t.index,
			UUID:       t.uuid,
			ParentUUID: t.parentUUID,
			UsedBytes:  used,
			TotalBytes: total,
		}
		if name, ret := t.dev.GetName(); ret == nvml.SUCCESS {
			d.Name = name
		} else {
			st.DeviceErrors += failed(ret)
		}
		if u, ret := t.dev.GetUtilizationRates(); ret == nvml.SUCCESS {
			d.UtilPercent = ptr(float64(u.Gpu))
		} else {
			st.DeviceErrors += failed(ret)
		}
		if mw, ret := t.dev.GetPowerUsage(); ret == nvml.SUCCESS {
			d.PowerWatts = ptr(float64(mw) / 1e3)
		} else {
			st.DeviceErrors += failed(ret)
		}
		if mj, ret := t.dev.GetTotalEnergyConsumption(); ret == nvml.SUCCESS {
			d.EnergyJ = ptr(float64(mj) / 1e3)
		} else {
			st.DeviceErrors += failed(ret)
		}
		st.Devices = append(st.Devices, d)

		for _, src := range t.sources {
			st.Procs, st.DeviceErrors = appendProcs(st.Procs, st.DeviceErrors, src, inTree)
		}
	}
	return st
}

// memoryInfo is a device's used and total memory. It asks NVML's v2 call
// first, whose used memory leaves out what the driver reserves, as nvidia-smi
// shows it (an idle H200 reads 0 MiB there, ~610 MiB through v1); drivers
// or devices without it (older than R510, some MIG devices) answer v1.
func memoryInfo(dev nvml.Device) (used, total int64, ok bool) {
	if m, ret := dev.GetMemoryInfo_v2(); ret == nvml.SUCCESS {
		return int64(m.Used), int64(m.Total), true
	}
	m, ret := dev.GetMemoryInfo()
	if ret != nvml.SUCCESS {
		return 0, 0, false
	}
	return int64(m.Used), int64(m.Total), true
}

// appendProcs appends the tree's processes on one device, by PID.
func appendProcs(procs []Proc, errs int, src source, inTree map[uint32]bool) ([]Proc, int) {
	first := len(procs)
	for _, list := range []func() ([]nvml.ProcessInfo, nvml.Return){
		src.dev.GetComputeRunningProcesses,
		src.dev.GetGraphicsRunningProcesses,
	} {
		infos, ret := list()
		if ret != nvml.SUCCESS {
			errs += failed(ret)
			continue
		}
		for _, pi := range infos {
			if !inTree[pi.Pid] {
				continue
			}
			used := int64(UnknownBytes)
			if pi.UsedGpuMemory != notAvailable {
				used = int64(pi.UsedGpuMemory)
			}
			// A process with both a compute and a graphics context is in
			// both lists, with the same memory.
			if i := slices.IndexFunc(procs[first:], func(p Proc) bool { return p.PID == int32(pi.Pid) }); i >= 0 {
				procs[first+i].UsedBytes = max(procs[first+i].UsedBytes, used)
				continue
			}
			procs = append(procs, Proc{PID: int32(pi.Pid), DeviceUUID: src.uuid, UsedBytes: used})
		}
	}
	slices.SortFunc(procs[first:], func(a, b Proc) int { return int(a.PID) - int(b.PID) })
	return procs, errs
}

// notAvailable is NVML_VALUE_NOT_AVAILABLE as an unsigned long long.
const notAvailable = ^uint64(0)

// failed counts a Return other than SUCCESS and NOT_SUPPORTED.
func failed(ret nvml.Return) int {
	if ret == nvml.SUCCESS || ret == nvml.ERROR_NOT_SUPPORTED {
		return 0
	}
	return 1
}

func ptr(v float64) *float64 { return &v }
