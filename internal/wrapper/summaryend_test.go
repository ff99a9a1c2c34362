package wrapper

import (
	"encoding/json"
	"reflect"
	"slices"
	"testing"
	"time"

	"github.com/isched/isched/internal/report"
)

// TestSummaryEndReport: the end report is derived from the summary field by
// field, as Summary's comment maps them.
func TestSummaryEndReport(t *testing.T) {
	t.Parallel()
	s := Summary{ExitStatus: 137, Signal: "SIGKILL", WallSeconds: 12.3456789, wall: 12345678900 * time.Nanosecond,
		PeakRSSBytes: 1 << 30, PeakGPUBytes: map[string]int64{"GPU-a": 2 << 30}, Iterations: 40, LastStep: 39,
		MedianIterMS: 10.5, P90IterMS: 12.25, Checkpoints: []string{"a.pt", "b.pt"}, Reason: report.EndOOM,
		CgroupPeak: 3 << 30, CgroupLimit: 4 << 30, UnreclaimPeak: 5 << 20, PageCachePeak: 6 << 20,
		Efficiency: &Efficiency{CPUSeconds: 7.5, Cores: 8, MemRequestBytes: 9 << 30,
			GPUUtilPercent: map[string]float64{"GPU-a": 55}, Recommendation: "x"}}
	want := &report.End{ExitCode: 137, Signal: "SIGKILL", WallMS: 12345, PeakRSSBytes: 1 << 30,
		PeakGPUBytes: map[string]int64{"GPU-a": 2 << 30}, Iters: 40, MedianIterMS: 10.5, P90IterMS: 12.25,
		Checkpoints: 2, Reason: report.EndOOM, CgroupPeakBytes: 3 << 30, MemLimitBytes: 4 << 30,
		UnreclaimPeakBytes: 5 << 20, PageCachePeakBytes: 6 << 20, CPUSeconds: 7.5, Cores: 8,
		MemRequestBytes: 9 << 30, GPUUtilPercent: map[string]float64{"GPU-a": 55}}
	if got := s.endReport(); !reflect.DeepEqual(got, want) {
		t.Errorf("endReport:\n got %+v\nwant %+v", got, want)
	}

	// No efficiency figures and no GPU: those stay zero, and nothing panics.
	got := (&Summary{ExitStatus: 0, Reason: report.EndExited}).endReport()
	if !reflect.DeepEqual(got, &report.End{Reason: report.EndExited}) {
		t.Errorf("empty summary: got %+v", got)
	}
}

// TestSummaryJSONNames pins the summary file's field names: scripts
// (scripts/gpu-check) and isched profile read them, so a rename is a break
// there, not a refactoring.
func TestSummaryJSONNames(t *testing.T) {
	t.Parallel()
	s := Summary{Signal: "SIGTERM", CgroupPeak: 1, CgroupLimit: 1, UnreclaimPeak: 1, PageCachePeak: 1,
		PeakGPUBytes: map[string]int64{"g": 1}, GPU: &GPUSummary{}, GPUNoData: "x", ResumedFrom: "r",
		Efficiency: &Efficiency{}, Profile: &ProfileSummary{}, wall: time.Second}
	b, err := json.Marshal(s)
	if err != nil {
		t.Fatal(err)
	}
	var m map[string]json.RawMessage
	if err := json.Unmarshal(b, &m); err != nil {
		t.Fatal(err)
	}
	var got []string
	for k := range m {
		got = append(got, k)
	}
	slices.Sort(got)
	want := []string{"cgroup_limit_bytes", "cgroup_peak_bytes", "checkpoints", "command", "efficiency",
		"exit_status", "gpu", "gpu_no_data", "iterations", "last_step", "median_iter_ms", "p90_iter_ms",
		"page_cache_peak_bytes", "peak_gpu_bytes", "peak_rss_bytes", "profile", "reason", "reports_delivered",
		"reports_undelivered", "resumed_from", "signal", "unreclaimable_peak_bytes", "wall_seconds"}
	if !slices.Equal(got, want) {
		t.Errorf("summary JSON names:\n got %q\nwant %q", got, want)
	}
}
