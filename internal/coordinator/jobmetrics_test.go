package coordinator

import (
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/isched/isched/internal/report"
)

// gatherJobs returns "name{lineage,user,partition} value" lines of the
// registry's isched_job_* and dropped series, sorted.
func gatherJobs(t *testing.T, r *prometheus.Registry) []string {
	t.Helper()
	mfs, err := r.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, mf := range mfs {
		name := mf.GetName()
		if !strings.HasPrefix(name, "isched_job_") && name != "isched_coordinator_job_series_dropped" {
			continue
		}
		for _, m := range mf.GetMetric() {
			var lv []string
			for _, l := range m.GetLabel() {
				lv = append(lv, l.GetName()+"="+l.GetValue())
			}
			out = append(out, name+"{"+strings.Join(lv, ",")+"} "+strconv.FormatFloat(m.GetGauge().GetValue(), 'f', -1, 64))
		}
	}
	sort.Strings(out)
	return out
}

func TestJobMetricsBoundedAndRemoved(t *testing.T) {
	t.Parallel()
	now := time.UnixMilli(1_800_000_000_000)
	m := newJobMetrics(2)
	r := prometheus.NewRegistry()
	r.MustRegister(m)
	st := func(lin, part string, step int64) *report.JobStatus {
		return &report.JobStatus{Lineage: lin, User: "alice", Partition: part, State: "RUNNING", Step: step, TotalIters: 200,
			ETAMS: now.UnixMilli() + 90_000, IterMS: 250, RSSBytes: 1 << 30, GPUBytes: map[string]int64{"GPU-a": 2 << 30, "GPU-b": 1 << 30}}
	}
	m.set("L1", jobRowOf(st("L1", "gpu", 50), now))
	m.set("L2", jobRowOf(&report.JobStatus{Lineage: "L2", User: "bob", Partition: "cpu", State: "RUNNING", Step: -1, RSSBytes: 5}, now))
	m.set("L3", jobRowOf(st("L3", "cpu", 1), now)) // past the cap of 2
	got := strings.Join(gatherJobs(t, r), "\n")
	for _, want := range []string{
		"isched_job_progress_ratio{lineage=L1,partition=gpu,user=alice} 0.25",
		"isched_job_eta_seconds{lineage=L1,partition=gpu,user=alice} 90",
		"isched_job_iteration_seconds{lineage=L1,partition=gpu,user=alice} 0.25",
		"isched_job_gpu_memory_bytes{lineage=L1,partition=gpu,user=alice} 3221225472",
		"isched_job_rss_bytes{lineage=L2,partition=cpu,user=bob} 5",
		"isched_coordinator_job_series_dropped{} 1",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("lacks %q:\n%s", want, got)
		}
	}
	if strings.Contains(got, "L3") || strings.Contains(got, "isched_job_progress_ratio{lineage=L2") {
		t.Errorf("a lineage past the cap, or an unknown progress, is exported:\n%s", got)
	}
	// L1 moves to cpu: one series per lineage, on its new partition
	m.set("L1", jobRowOf(st("L1", "cpu", 100), now))
	if got := strings.Join(gatherJobs(t, r), "\n"); strings.Contains(got, "partition=gpu") || !strings.Contains(got, "isched_job_progress_ratio{lineage=L1,partition=cpu,user=alice} 0.5") {
		t.Errorf("after the move:\n%s", got)
	}
	// ended: gone, and room for L3
	m.remove("L1")
	m.remove("L3")
	m.set("L3", jobRowOf(st("L3", "cpu", 1), now))
	got = strings.Join(gatherJobs(t, r), "\n")
	if strings.Contains(got, "L1") || !strings.Contains(got, "lineage=L3") || !strings.Contains(got, "isched_coordinator_job_series_dropped{} 0") {
		t.Errorf("after L1 ended:\n%s", got)
	}
	m.reset()
	if got := gatherJobs(t, r); len(got) != 1 {
		t.Errorf("after reset: %v", got)
	}
}
