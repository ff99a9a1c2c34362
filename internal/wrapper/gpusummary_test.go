package wrapper

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/isched/isched/internal/report"
)

func fp(v float64) *float64 { return &v }

// TestGPUTally: per-device and per-process peaks, utilisation, power and the
// energy used during the run; a device on which NVML never listed a process
// of the job (a container's PID namespace) is the device's memory, labelled
// "device"; once NVML listed one, samples without them (the job starting or
// ending, NVML still listing a process that left the tree) do not count.
func TestGPUTally(t *testing.T) {
	const mib = 1 << 20
	samples := []*report.GPUStat{
		{Devices: []report.GPUDevice{ // C: the job starting, its process not listed yet
			{Index: 0, UUID: "GPU-A", Name: "H100", UsedBytes: 3000 * mib, TotalBytes: 80000 * mib, UtilPercent: fp(50), PowerWatts: fp(100), EnergyJ: fp(1000)},
			{Index: 1, UUID: "GPU-B", UsedBytes: 700 * mib, TotalBytes: 80000 * mib},
			{Index: 2, UUID: "GPU-C", UsedBytes: 300 * mib, TotalBytes: 80000 * mib},
		}, Procs: []report.GPUProc{{PID: 10, Device: "GPU-A", UsedBytes: 1000 * mib}, {PID: 11, Device: "GPU-A", UsedBytes: 500 * mib}}},
		{Devices: []report.GPUDevice{
			{Index: 0, UUID: "GPU-A", Name: "H100", UsedBytes: 4000 * mib, TotalBytes: 80000 * mib, UtilPercent: fp(100), PowerWatts: fp(300), EnergyJ: fp(1300)},
			{Index: 1, UUID: "GPU-B", UsedBytes: 600 * mib, TotalBytes: 80000 * mib},
			{Index: 2, UUID: "GPU-C", UsedBytes: 900 * mib, TotalBytes: 80000 * mib},
		}, Procs: []report.GPUProc{{PID: 10, Device: "GPU-A", UsedBytes: 2000 * mib}, {PID: 12, Device: "GPU-C", UsedBytes: 800 * mib}}},
		{Devices: []report.GPUDevice{ // C: the job ending, the device not yet freed
			{Index: 0, UUID: "GPU-A", Name: "H100", UsedBytes: 4000 * mib, TotalBytes: 80000 * mib},
			{Index: 1, UUID: "GPU-B", UsedBytes: 650 * mib, TotalBytes: 80000 * mib},
			{Index: 2, UUID: "GPU-C", UsedBytes: 1400 * mib, TotalBytes: 80000 * mib},
		}, Procs: []report.GPUProc{{PID: 10, Device: "GPU-A", UsedBytes: 2000 * mib}}},
		nil,                          // no sampler
		{NoData: "nvml init: ERROR"}, // NVML gone: no devices, nothing counted
	}
	var tl gpuTally
	var peaks []map[string]int64
	for _, s := range samples {
		peaks = append(peaks, tl.observe(s))
	}
	for i, want := range []map[string]int64{
		{"GPU-A": 1500 * mib, "GPU-B": 700 * mib, "GPU-C": 300 * mib},
		{"GPU-A": 2000 * mib, "GPU-B": 700 * mib, "GPU-C": 800 * mib}, // C's device-level 300 gives way
		{"GPU-A": 2000 * mib, "GPU-B": 700 * mib, "GPU-C": 800 * mib}, // C's 1400 at the end does not count
	} {
		if !equalMap(peaks[i], want) {
			t.Errorf("peaks after sample %d: %v, want %v", i, peaks[i], want)
		}
	}
	sum := tl.summary()
	if sum == nil || sum.Samples != 3 || len(sum.Devices) != 3 {
		t.Fatalf("summary %+v", sum)
	}
	a, b, c := sum.Devices[0], sum.Devices[1], sum.Devices[2]
	if a.Source != GPUSourceProcess || a.PeakJobBytes != 2000*mib || a.PeakUsedBytes != 4000*mib || a.TotalBytes != 80000*mib || a.Name != "H100" {
		t.Errorf("GPU-A %+v", a)
	}
	if a.PeakUtilPercent == nil || *a.PeakUtilPercent != 100 || a.MeanUtilPercent == nil || *a.MeanUtilPercent != 75 ||
		a.PeakPowerWatts == nil || *a.PeakPowerWatts != 300 || a.EnergyJ == nil || *a.EnergyJ != 300 {
		t.Errorf("GPU-A readings util %v/%v power %v energy %v", a.PeakUtilPercent, a.MeanUtilPercent, a.PeakPowerWatts, a.EnergyJ)
	}
	if b.Source != GPUSourceDevice || b.PeakJobBytes != 700*mib || b.PeakUtilPercent != nil || b.EnergyJ != nil {
		t.Errorf("GPU-B (no process of the job listed) %+v", b)
	}
	if c.Source != GPUSourceProcess || c.PeakJobBytes != 800*mib || c.PeakUsedBytes != 1400*mib {
		t.Errorf("GPU-C (listed once) %+v", c)
	}
	wantProcs := []GPUProcSummary{{PID: 10, Device: "GPU-A", PeakBytes: 2000 * mib}, {PID: 11, Device: "GPU-A", PeakBytes: 500 * mib}, {PID: 12, Device: "GPU-C", PeakBytes: 800 * mib}}
	if len(sum.Procs) != len(wantProcs) {
		t.Fatalf("procs %+v", sum.Procs)
	}
	for i := range wantProcs {
		if sum.Procs[i] != wantProcs[i] {
			t.Errorf("proc %d = %+v, want %+v", i, sum.Procs[i], wantProcs[i])
		}
	}
	var none gpuTally
	none.observe(&report.GPUStat{NoData: "no nvml"})
	if none.summary() != nil {
		t.Error("a summary without any GPU sample")
	}
}

func equalMap(a, b map[string]int64) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if b[k] != v {
			return false
		}
	}
	return true
}

// TestSummaryLabelsDeviceFallback: through Run, --summary-json carries the
// gpu section, and the stderr summary says a figure is the device's.
func TestSummaryLabelsDeviceFallback(t *testing.T) {
	t.Setenv("CUDA_VISIBLE_DEVICES", "0")
	sumPath := filepath.Join(t.TempDir(), "summary.json")
	opts, err := ParseArgs([]string{"--no-report", "--summary-json", sumPath, "--", "/bin/sh", "-c", "sleep 0.3"}, func(string) string { return "" }, &bytes.Buffer{})
	if err != nil {
		t.Fatal(err)
	}
	gpu := fakeGPU{report.GPUStat{Devices: []report.GPUDevice{{Index: 0, UUID: "GPU-1", UsedBytes: 5 << 30, TotalBytes: 80 << 30}}}}
	var stderr bytes.Buffer
	if code := Run(context.Background(), opts, Deps{Getenv: func(string) string { return "" }, Stdout: &bytes.Buffer{}, Stderr: &stderr, GPU: gpu}); code != 0 {
		t.Fatalf("exit %d: %s", code, stderr.String())
	}
	b, err := os.ReadFile(sumPath)
	if err != nil {
		t.Fatal(err)
	}
	var sum Summary
	if err := json.Unmarshal(b, &sum); err != nil {
		t.Fatal(err)
	}
	if sum.GPU == nil || len(sum.GPU.Devices) != 1 || sum.GPU.Devices[0].Source != GPUSourceDevice || sum.PeakGPUBytes["GPU-1"] != 5<<30 {
		t.Errorf("summary gpu %+v peak %v\n%s", sum.GPU, sum.PeakGPUBytes, b)
	}
	if !strings.Contains(stderr.String(), "gpu[GPU-1]=5120.0 MiB(device-level)") {
		t.Errorf("stderr summary does not label the device fallback:\n%s", stderr.String())
	}
}

// TestGPUCheckFixtureIsASummary: the recorded summary scripts/gpu-check's
// self-test reads has the wrapper's --summary-json schema, field for field.
func TestGPUCheckFixtureIsASummary(t *testing.T) {
	// summary.json was written by hand; h200/ was captured on an H200
	for _, name := range []string{"summary.json", "h200/summary.json", "h200/container-summary.json"} {
		b, err := os.ReadFile(filepath.Join("..", "..", "scripts", "testdata", "gpu-check", name))
		if err != nil {
			t.Fatal(err)
		}
		dec := json.NewDecoder(bytes.NewReader(b))
		dec.DisallowUnknownFields()
		var sum Summary
		if err := dec.Decode(&sum); err != nil {
			t.Fatalf("scripts/testdata/gpu-check/%s is not a wrapper summary: %v", name, err)
		}
		if sum.GPU == nil || len(sum.GPU.Devices) != 1 || len(sum.GPU.Procs) != 1 || sum.GPU.Devices[0].Source != GPUSourceProcess {
			t.Errorf("%s: gpu section %+v", name, sum.GPU)
		}
	}
}
