package gpu

import (
	"bytes"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock"
)

// fakeGPU describes a GPU (or MIG device) for go-nvml's mock. Zero Returns
// are SUCCESS.
type fakeGPU struct {
	uuid, name          string
	mem                 nvml.Memory
	memRet              nvml.Return
	mem2                *nvml.Memory_v2 // nil: the v2 call is missing (a driver before R510)
	mem2Ret             nvml.Return
	utilGPU             uint32
	utilRet             nvml.Return
	powerMW             uint32
	powerRet            nvml.Return
	energyMJ            uint64
	energyRet           nvml.Return
	compute, graphics   []nvml.ProcessInfo
	computeRet          nvml.Return
	graphicsRet         nvml.Return
	uuidRet             nvml.Return
	migCapable, migMode bool
	migs                []*fakeGPU // MIG devices, by slot (nil: empty slot)
	gi, ci              int        // a MIG device's instance ids
	parent              *fakeGPU

	once sync.Once
	dev  *mock.Device
}

func (g *fakeGPU) device() *mock.Device {
	g.once.Do(func() {
		g.dev = &mock.Device{
			GetUUIDFunc: func() (string, nvml.Return) { return g.uuid, g.uuidRet },
			GetNameFunc: func() (string, nvml.Return) { return g.name, nvml.SUCCESS },
			GetMemoryInfoFunc: func() (nvml.Memory, nvml.Return) {
				return g.mem, g.memRet
			},
			GetMemoryInfo_v2Func: func() (nvml.Memory_v2, nvml.Return) {
				if g.mem2 == nil {
					return nvml.Memory_v2{}, nvml.ERROR_FUNCTION_NOT_FOUND
				}
				return *g.mem2, g.mem2Ret
			},
			GetUtilizationRatesFunc: func() (nvml.Utilization, nvml.Return) {
				return nvml.Utilization{Gpu: g.utilGPU, Memory: 1}, g.utilRet
			},
			GetPowerUsageFunc:              func() (uint32, nvml.Return) { return g.powerMW, g.powerRet },
			GetTotalEnergyConsumptionFunc:  func() (uint64, nvml.Return) { return g.energyMJ, g.energyRet },
			GetComputeRunningProcessesFunc: func() ([]nvml.ProcessInfo, nvml.Return) { return g.compute, g.computeRet },
			GetGraphicsRunningProcessesFunc: func() ([]nvml.ProcessInfo, nvml.Return) {
				return g.graphics, g.graphicsRet
			},
			GetMigModeFunc: func() (int, int, nvml.Return) {
				switch {
				case !g.migCapable:
					return 0, 0, nvml.ERROR_NOT_SUPPORTED
				case g.migMode:
					return nvml.DEVICE_MIG_ENABLE, nvml.DEVICE_MIG_ENABLE, nvml.SUCCESS
				}
				return nvml.DEVICE_MIG_DISABLE, nvml.DEVICE_MIG_DISABLE, nvml.SUCCESS
			},
			GetMaxMigDeviceCountFunc: func() (int, nvml.Return) {
				if !g.migCapable {
					return 0, nvml.ERROR_NOT_SUPPORTED
				}
				return 7, nvml.SUCCESS
			},
			GetMigDeviceHandleByIndexFunc: func(i int) (nvml.Device, nvml.Return) {
				if i >= len(g.migs) || g.migs[i] == nil {
					return nil, nvml.ERROR_NOT_FOUND
				}
				return g.migs[i].device(), nvml.SUCCESS
			},
			GetDeviceHandleFromMigDeviceHandleFunc: func() (nvml.Device, nvml.Return) {
				if g.parent == nil {
					return nil, nvml.ERROR_INVALID_ARGUMENT
				}
				return g.parent.device(), nvml.SUCCESS
			},
			GetGpuInstanceIdFunc:     func() (int, nvml.Return) { return g.gi, nvml.SUCCESS },
			GetComputeInstanceIdFunc: func() (int, nvml.Return) { return g.ci, nvml.SUCCESS },
		}
	})
	return g.dev
}

// newFakeNVML is an NVML with the given GPUs, in index order.
func newFakeNVML(gpus ...*fakeGPU) *mock.Interface {
	for _, g := range gpus {
		for _, m := range g.migs {
			if m != nil {
				m.parent = g
			}
		}
	}
	return &mock.Interface{
		InitFunc:           func() nvml.Return { return nvml.SUCCESS },
		ShutdownFunc:       func() nvml.Return { return nvml.SUCCESS },
		DeviceGetCountFunc: func() (int, nvml.Return) { return len(gpus), nvml.SUCCESS },
		DeviceGetHandleByIndexFunc: func(i int) (nvml.Device, nvml.Return) {
			if i < 0 || i >= len(gpus) {
				return nil, nvml.ERROR_INVALID_ARGUMENT
			}
			return gpus[i].device(), nvml.SUCCESS
		},
		DeviceGetHandleByUUIDFunc: func(u string) (nvml.Device, nvml.Return) {
			for _, g := range gpus {
				if g.uuid == u {
					return g.device(), nvml.SUCCESS
				}
				for _, m := range g.migs {
					if m != nil && m.uuid == u {
						return m.device(), nvml.SUCCESS
					}
				}
			}
			return nil, nvml.ERROR_NOT_FOUND
		},
	}
}

// env is the training process's CUDA_VISIBLE_DEVICES, instead of the
// test's own environment; nil means unset.
func env(v *string) Option {
	return func(c *Collector) {
		if v == nil {
			c.visible = parseVisible("", false)
		} else {
			c.visible = parseVisible(*v, true)
		}
	}
}

// retryEvery sets how long the Collector waits before trying NVML again.
func retryEvery(d time.Duration) Option { return func(c *Collector) { c.retry = d } }

func str(s string) *string { return &s }

const gib = 1 << 30

// twoGPUs is a node with two A100s. The tree is PIDs 100-102; 999 belongs to
// another job.
func twoGPUs() (*fakeGPU, *fakeGPU) {
	g0 := &fakeGPU{
		uuid: "GPU-aaaa0000-0000-0000-0000-000000000000", name: "A100",
		mem:     nvml.Memory{Total: 40 * gib, Used: 12 * gib},
		utilGPU: 87, powerMW: 250500, energyMJ: 3600000,
		compute: []nvml.ProcessInfo{
			{Pid: 999, UsedGpuMemory: 2 * gib},
			{Pid: 100, UsedGpuMemory: 10 * gib},
		},
		migCapable: true,
	}
	g1 := &fakeGPU{
		uuid: "GPU-bbbb0000-0000-0000-0000-000000000000", name: "A100",
		mem:     nvml.Memory{Total: 40 * gib, Used: 5 * gib},
		utilGPU: 40, powerMW: 100000, energyMJ: 1000,
		compute: []nvml.ProcessInfo{
			{Pid: 101, UsedGpuMemory: 3 * gib},
			{Pid: 102, UsedGpuMemory: ^uint64(0)}, // NVML_VALUE_NOT_AVAILABLE
		},
		// 101 also has a graphics context: listed twice, counted once.
		graphics: []nvml.ProcessInfo{{Pid: 101, UsedGpuMemory: 3 * gib}, {Pid: 100, UsedGpuMemory: gib}},
	}
	return g0, g1
}

func f(v float64) *float64 { return &v }

func TestCollectAttribution(t *testing.T) {
	t.Parallel()
	g0, g1 := twoGPUs()
	c := New(newFakeNVML(g0, g1), nil, env(nil))
	got := c.Collect([]int32{100, 101, 102, 103})
	want := Stat{
		Devices: []Device{
			{Index: 0, UUID: g0.uuid, Name: "A100", UsedBytes: 12 * gib, TotalBytes: 40 * gib,
				UtilPercent: f(87), PowerWatts: f(250.5), EnergyJ: f(3600)},
			{Index: 1, UUID: g1.uuid, Name: "A100", UsedBytes: 5 * gib, TotalBytes: 40 * gib,
				UtilPercent: f(40), PowerWatts: f(100), EnergyJ: f(1)},
		},
		Procs: []Proc{
			{PID: 100, DeviceUUID: g0.uuid, UsedBytes: 10 * gib},
			{PID: 100, DeviceUUID: g1.uuid, UsedBytes: gib},
			{PID: 101, DeviceUUID: g1.uuid, UsedBytes: 3 * gib},
			{PID: 102, DeviceUUID: g1.uuid, UsedBytes: UnknownBytes},
		},
	}
	assertStat(t, got, want)
}

// assertStat compares Stats with pointers shown by value.
func assertStat(t *testing.T, got, want Stat) {
	t.Helper()
	if g, w := render(got), render(want); g != w {
		t.Errorf("got:\n%s\nwant:\n%s", g, w)
	}
}

func render(s Stat) string {
	var b strings.Builder
	opt := func(p *float64) string {
		if p == nil {
			return "nil"
		}
		return fmt.Sprint(*p)
	}
	for _, d := range s.Devices {
		fmt.Fprintf(&b, "device %d %s parent=%q %q used=%d total=%d util=%s power=%s energy=%s\n",
			d.Index, d.UUID, d.ParentUUID, d.Name, d.UsedBytes, d.TotalBytes, opt(d.UtilPercent), opt(d.PowerWatts), opt(d.EnergyJ))
	}
	for _, p := range s.Procs {
		fmt.Fprintf(&b, "proc %d %s %d\n", p.PID, p.DeviceUUID, p.UsedBytes)
	}
	fmt.Fprintf(&b, "errors=%d nodata=%q\n", s.DeviceErrors, s.NoData)
	return b.String()
}

func TestVisibleDevices(t *testing.T) {
	t.Parallel()
	g0, g1 := twoGPUs()
	tests := []struct {
		name     string
		cvd      *string
		want     []string // device UUIDs
		wantInit bool
	}{
		{"unset: all", nil, []string{g0.uuid, g1.uuid}, true},
		{"empty: none", str(""), nil, false},
		{"index", str("1"), []string{g1.uuid}, true},
		{"indexes in CUDA order", str("1,0"), []string{g1.uuid, g0.uuid}, true},
		{"spaces", str(" 0 , 1 "), []string{g0.uuid, g1.uuid}, true},
		{"out of range stops", str("0,5,1"), []string{g0.uuid}, true},
		{"-1 stops", str("1,-1,0"), []string{g1.uuid}, true},
		{"NoDevFiles", str("NoDevFiles"), nil, false},
		{"duplicate", str("0,0"), []string{g0.uuid}, true},
		{"uuid", str(g1.uuid), []string{g1.uuid}, true},
		{"uuid prefix", str("GPU-bbbb,GPU-aaaa0000"), []string{g1.uuid, g0.uuid}, true},
		{"ambiguous prefix stops", str("1,GPU-,0"), []string{g1.uuid}, true},
		{"unknown uuid stops", str("GPU-cccc,0"), nil, true},
		{"unknown MIG stops", str("0,MIG-ffff,1"), []string{g0.uuid}, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			lib := newFakeNVML(g0, g1)
			st := New(lib, nil, env(tt.cvd)).Collect([]int32{100})
			var got []string
			for _, d := range st.Devices {
				got = append(got, d.UUID)
			}
			if strings.Join(got, " ") != strings.Join(tt.want, " ") || st.NoData != "" || st.DeviceErrors != 0 {
				t.Errorf("devices = %v, NoData = %q, errors = %d; want %v", got, st.NoData, st.DeviceErrors, tt.want)
			}
			if inited := len(lib.InitCalls()) > 0; inited != tt.wantInit {
				t.Errorf("NVML initialised = %v, want %v", inited, tt.wantInit)
			}
		})
	}
}

func TestParseVisible(t *testing.T) {
	t.Parallel()
	tests := []struct {
		in   string
		set  bool
		want visibility
	}{
		{"", false, visibility{all: true}},
		{"", true, visibility{}},
		{"0,1", true, visibility{entries: []string{"0", "1"}}},
		{"0,,1", true, visibility{entries: []string{"0"}}},
		{"GPU-1,MIG-2,x,3", true, visibility{entries: []string{"GPU-1", "MIG-2"}}},
		{"-1", true, visibility{}},
		{"NoDevFiles", true, visibility{}},
	}
	for _, tt := range tests {
		got := parseVisible(tt.in, tt.set)
		if fmt.Sprint(got) != fmt.Sprint(tt.want) {
			t.Errorf("parseVisible(%q, %v) = %+v, want %+v", tt.in, tt.set, got, tt.want)
		}
	}
}

// migGPU is an A100 in MIG mode with two MIG devices, in slots 0 and 2.
func migGPU() (*fakeGPU, *fakeGPU, *fakeGPU) {
	a := &fakeGPU{
		uuid: "MIG-11111111-0000-0000-0000-000000000000", name: "A100 MIG 3g.20gb",
		mem: nvml.Memory{Total: 20 * gib, Used: 6 * gib}, gi: 1, ci: 0,
		utilRet: nvml.ERROR_NOT_SUPPORTED, powerRet: nvml.ERROR_NOT_SUPPORTED, energyRet: nvml.ERROR_NOT_SUPPORTED,
		compute: []nvml.ProcessInfo{{Pid: 100, UsedGpuMemory: 5 * gib, GpuInstanceId: 1}},
	}
	b := &fakeGPU{
		uuid: "MIG-22222222-0000-0000-0000-000000000000", name: "A100 MIG 2g.10gb",
		mem: nvml.Memory{Total: 10 * gib, Used: 2 * gib}, gi: 2, ci: 0,
		utilRet: nvml.ERROR_NOT_SUPPORTED, powerRet: nvml.ERROR_NOT_SUPPORTED, energyRet: nvml.ERROR_NOT_SUPPORTED,
		compute: []nvml.ProcessInfo{{Pid: 200, UsedGpuMemory: gib}, {Pid: 101, UsedGpuMemory: gib / 2}},
	}
	parent := &fakeGPU{
		uuid: "GPU-cccc0000-0000-0000-0000-000000000000", name: "A100",
		mem: nvml.Memory{Total: 40 * gib, Used: 8 * gib}, utilRet: nvml.ERROR_NOT_SUPPORTED,
		powerMW: 90000, energyMJ: 5000,
		// The parent's lists have no per-process memory in MIG mode.
		compute:    []nvml.ProcessInfo{{Pid: 100, UsedGpuMemory: ^uint64(0)}},
		migCapable: true, migMode: true,
		migs: []*fakeGPU{a, nil, b},
	}
	return parent, a, b
}

func TestMIG(t *testing.T) {
	t.Parallel()
	plain := &fakeGPU{uuid: "GPU-dddd0000-0000-0000-0000-000000000000", name: "V100",
		mem: nvml.Memory{Total: 16 * gib}, compute: []nvml.ProcessInfo{{Pid: 100, UsedGpuMemory: gib}}}
	pids := []int32{100, 101}
	t.Run("MIG UUID", func(t *testing.T) {
		t.Parallel()
		parent, _, b := migGPU()
		st := New(newFakeNVML(plain, parent), nil, env(str(b.uuid))).Collect(pids)
		assertStat(t, st, Stat{
			Devices: []Device{{Index: 1, UUID: b.uuid, ParentUUID: parent.uuid, Name: b.name, UsedBytes: 2 * gib, TotalBytes: 10 * gib}},
			Procs:   []Proc{{PID: 101, DeviceUUID: b.uuid, UsedBytes: gib / 2}},
		})
	})
	t.Run("legacy MIG name", func(t *testing.T) {
		t.Parallel()
		parent, a, _ := migGPU()
		st := New(newFakeNVML(plain, parent), nil, env(str("MIG-"+parent.uuid+"/1/0"))).Collect(pids)
		assertStat(t, st, Stat{
			Devices: []Device{{Index: 1, UUID: a.uuid, ParentUUID: parent.uuid, Name: a.name, UsedBytes: 6 * gib, TotalBytes: 20 * gib}},
			Procs:   []Proc{{PID: 100, DeviceUUID: a.uuid, UsedBytes: 5 * gib}},
		})
	})
	t.Run("whole GPU in MIG mode", func(t *testing.T) {
		t.Parallel()
		parent, a, b := migGPU()
		st := New(newFakeNVML(plain, parent), nil, env(nil)).Collect(pids)
		assertStat(t, st, Stat{
			Devices: []Device{
				{Index: 0, UUID: plain.uuid, Name: "V100", TotalBytes: 16 * gib, UtilPercent: f(0), PowerWatts: f(0), EnergyJ: f(0)},
				{Index: 1, UUID: parent.uuid, Name: "A100", UsedBytes: 8 * gib, TotalBytes: 40 * gib, PowerWatts: f(90), EnergyJ: f(5)},
			},
			Procs: []Proc{
				{PID: 100, DeviceUUID: plain.uuid, UsedBytes: gib},
				{PID: 100, DeviceUUID: a.uuid, UsedBytes: 5 * gib},
				{PID: 101, DeviceUUID: b.uuid, UsedBytes: gib / 2},
			},
		})
	})
}

func TestNotSupported(t *testing.T) {
	t.Parallel()
	g := &fakeGPU{uuid: "GPU-eeee", name: "T4", mem: nvml.Memory{Total: 16 * gib, Used: gib},
		utilRet: nvml.ERROR_NOT_SUPPORTED, powerRet: nvml.ERROR_NOT_SUPPORTED, energyRet: nvml.ERROR_NOT_SUPPORTED,
		graphicsRet: nvml.ERROR_NOT_SUPPORTED,
		compute:     []nvml.ProcessInfo{{Pid: 100, UsedGpuMemory: gib}}}
	st := New(newFakeNVML(g), nil, env(nil)).Collect([]int32{100})
	assertStat(t, st, Stat{
		Devices: []Device{{Index: 0, UUID: "GPU-eeee", Name: "T4", UsedBytes: gib, TotalBytes: 16 * gib}},
		Procs:   []Proc{{PID: 100, DeviceUUID: "GPU-eeee", UsedBytes: gib}},
	})
}

// TestMemoryInfoV2: where NVML's v2 call answers, a device's used memory
// leaves out the driver's reserve (nvidia-smi's figure); where it fails, the
// v1 figure stands and no error is counted; where both fail, the device is
// left out and counted.
func TestMemoryInfoV2(t *testing.T) {
	t.Parallel()
	const mib = 1 << 20
	for _, tc := range []struct {
		name           string
		mem2           *nvml.Memory_v2
		mem2Ret        nvml.Return
		memRet         nvml.Return
		wantUsed       int64
		wantDevs, errs int
	}{
		{"v2", &nvml.Memory_v2{Total: 141 * gib, Reserved: 612 * mib, Used: 1420 * mib}, nvml.SUCCESS, nvml.SUCCESS, 1420 * mib, 1, 0},
		{"no v2 (old driver)", nil, nvml.SUCCESS, nvml.SUCCESS, 2032 * mib, 1, 0},
		{"v2 not supported (MIG)", &nvml.Memory_v2{}, nvml.ERROR_NOT_SUPPORTED, nvml.SUCCESS, 2032 * mib, 1, 0},
		{"both fail", nil, nvml.SUCCESS, nvml.ERROR_UNKNOWN, 0, 0, 1},
	} {
		g := &fakeGPU{uuid: "GPU-h200", name: "H200", mem: nvml.Memory{Total: 141 * gib, Used: 2032 * mib}, memRet: tc.memRet,
			mem2: tc.mem2, mem2Ret: tc.mem2Ret, compute: []nvml.ProcessInfo{{Pid: 100, UsedGpuMemory: 1420 * mib}}}
		st := New(newFakeNVML(g), nil, env(nil)).Collect([]int32{100})
		if len(st.Devices) != tc.wantDevs || st.DeviceErrors != tc.errs {
			t.Errorf("%s: got\n%s", tc.name, render(st))
			continue
		}
		if tc.wantDevs == 1 && (st.Devices[0].UsedBytes != tc.wantUsed || st.Devices[0].TotalBytes != 141*gib) {
			t.Errorf("%s: used %d total %d, want used %d", tc.name, st.Devices[0].UsedBytes, st.Devices[0].TotalBytes, tc.wantUsed)
		}
	}
}

func TestDeviceErrors(t *testing.T) {
	t.Parallel()
	g0, g1 := twoGPUs()
	g0.memRet = nvml.ERROR_GPU_IS_LOST  // g0 dropped
	g1.powerRet = nvml.ERROR_UNKNOWN    // g1 kept, without power
	g1.graphicsRet = nvml.ERROR_UNKNOWN // and without its graphics list
	st := New(newFakeNVML(g0, g1), nil, env(nil)).Collect([]int32{100, 101, 102})
	assertStat(t, st, Stat{
		Devices: []Device{
			{Index: 1, UUID: g1.uuid, Name: "A100", UsedBytes: 5 * gib, TotalBytes: 40 * gib, UtilPercent: f(40), EnergyJ: f(1)},
		},
		Procs: []Proc{
			{PID: 101, DeviceUUID: g1.uuid, UsedBytes: 3 * gib},
			{PID: 102, DeviceUUID: g1.uuid, UsedBytes: UnknownBytes},
		},
		DeviceErrors: 3,
	})

	// A device whose UUID cannot be read is left out, also when named by index.
	g0, g1 = twoGPUs()
	g1.uuidRet = nvml.ERROR_UNKNOWN
	st = New(newFakeNVML(g0, g1), nil, env(str("1,0"))).Collect(nil)
	if len(st.Devices) != 1 || st.Devices[0].UUID != g0.uuid || st.DeviceErrors != 1 {
		t.Errorf("UUID error: got\n%s", render(st))
	}
}

// clock is a settable clock for retry tests.
type clock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *clock) now() time.Time      { c.mu.Lock(); defer c.mu.Unlock(); return c.t }
func (c *clock) add(d time.Duration) { c.mu.Lock(); c.t = c.t.Add(d); c.mu.Unlock() }

func TestInitFailure(t *testing.T) {
	t.Parallel()
	g0, _ := twoGPUs()
	lib := newFakeNVML(g0)
	initRet := nvml.ERROR_LIBRARY_NOT_FOUND
	lib.InitFunc = func() nvml.Return { return initRet }
	var logs bytes.Buffer
	c := New(lib, slog.New(slog.NewTextHandler(&logs, nil)), env(nil), retryEvery(time.Minute))
	clk := &clock{t: time.Unix(1e9, 0)}
	c.now = clk.now

	for i := range 5 {
		st := c.Collect([]int32{100})
		if st.NoData != "nvml init: ERROR_LIBRARY_NOT_FOUND" || len(st.Devices) != 0 {
			t.Fatalf("collect %d: NoData = %q, devices = %d", i, st.NoData, len(st.Devices))
		}
		clk.add(10 * time.Second)
	}
	if n := len(lib.InitCalls()); n != 1 {
		t.Errorf("Init called %d times within the retry interval, want 1", n)
	}
	clk.add(20 * time.Second) // a minute after the first attempt
	c.Collect(nil)
	if n := len(lib.InitCalls()); n != 2 {
		t.Errorf("Init called %d times after the retry interval, want 2", n)
	}
	if n := strings.Count(logs.String(), "\n"); n != 1 {
		t.Errorf("logged %d lines, want 1:\n%s", n, logs.String())
	}
	if len(lib.ShutdownCalls()) != 0 {
		t.Error("Shutdown called after a failed Init")
	}

	// The driver comes back: data flows, and Close shuts NVML down.
	initRet = nvml.SUCCESS
	clk.add(time.Minute)
	if st := c.Collect([]int32{100}); st.NoData != "" || len(st.Devices) != 1 || len(st.Procs) != 1 {
		t.Errorf("after recovery: got\n%s", render(st))
	}
	if err := c.Close(); err != nil || len(lib.ShutdownCalls()) != 1 {
		t.Errorf("Close: %v, Shutdown calls %d", err, len(lib.ShutdownCalls()))
	}
	clk.add(time.Hour)
	if st := c.Collect([]int32{100}); st.NoData == "" || len(lib.InitCalls()) != 3 {
		t.Errorf("after Close: NoData = %q, Init calls %d; want no data and no new Init", st.NoData, len(lib.InitCalls()))
	}
}

func TestPanicsAreNoData(t *testing.T) {
	t.Parallel()
	t.Run("Init", func(t *testing.T) {
		t.Parallel()
		lib := newFakeNVML()
		lib.InitFunc = func() nvml.Return { panic("dlopen exploded") }
		st := New(lib, nil, env(nil)).Collect(nil)
		if !strings.Contains(st.NoData, "dlopen exploded") {
			t.Errorf("NoData = %q", st.NoData)
		}
	})
	t.Run("device call", func(t *testing.T) {
		t.Parallel()
		g0, _ := twoGPUs()
		g0.device().GetPowerUsageFunc = nil // go-nvml's mock panics on a nil func
		c := New(newFakeNVML(g0), nil, env(nil))
		st := c.Collect([]int32{100})
		if !strings.Contains(st.NoData, "panicked") {
			t.Errorf("NoData = %q", st.NoData)
		}
		// The next Collect within the retry interval does not touch NVML.
		if st := c.Collect([]int32{100}); st.NoData == "" {
			t.Errorf("second Collect has data after a panic")
		}
	})
}

func TestDeviceCountFailure(t *testing.T) {
	t.Parallel()
	lib := newFakeNVML()
	lib.DeviceGetCountFunc = func() (int, nvml.Return) { return 0, nvml.ERROR_DRIVER_NOT_LOADED }
	st := New(lib, nil, env(nil)).Collect(nil)
	if st.NoData != "nvml device count: ERROR_DRIVER_NOT_LOADED" {
		t.Errorf("NoData = %q", st.NoData)
	}
	if len(lib.ShutdownCalls()) != 1 {
		t.Errorf("Shutdown calls = %d, want 1: an unusable NVML is released", len(lib.ShutdownCalls()))
	}
}

// TestNewSystem runs against this machine's NVML. Where there is none (CI,
// CPU nodes), it must report NoData without panicking; the gpu build tag's
// tests cover a machine with a GPU.
func TestNewSystem(t *testing.T) {
	var logs bytes.Buffer
	c := NewSystem(slog.New(slog.NewTextHandler(&logs, nil)), env(nil))
	st := c.Collect([]int32{1})
	st2 := c.Collect([]int32{1})
	if st.NoData == "" {
		t.Skipf("NVML works on this machine (%d devices); nothing to check here", len(st.Devices))
	}
	if st2.NoData != st.NoData {
		t.Errorf("second NoData = %q, first %q", st2.NoData, st.NoData)
	}
	if n := strings.Count(logs.String(), "\n"); n != 1 {
		t.Errorf("logged %d lines, want 1:\n%s", n, logs.String())
	}
	if err := c.Close(); err != nil {
		t.Errorf("Close: %v", err)
	}
	t.Logf("NoData: %s", st.NoData)
}
