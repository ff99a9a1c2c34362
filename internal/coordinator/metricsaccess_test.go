package coordinator

import (
	"io"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/isched/isched/internal/coordconfig"
	"github.com/isched/isched/internal/report"
)

// TestMetricsJobSeriesOnlyToAllowedClients: /metrics shows alice's per-job
// series to loopback and to an address of job_metrics_from, and to anyone
// else (bob on a login host) the aggregate metrics alone.
func TestMetricsJobSeriesOnlyToAllowedClients(t *testing.T) {
	t.Parallel()
	m := NewMetrics()
	now := time.UnixMilli(1_800_000_000_000)
	m.jobs.set("site-u1001-resnet-ab12", jobRowOf(&report.JobStatus{Lineage: "site-u1001-resnet-ab12", User: "alice",
		Partition: "gpu", State: "RUNNING", Step: 5, TotalIters: 10, RSSBytes: 1 << 20}, now))
	m.reports.WithLabelValues("ok").Inc()
	from, err := coordconfig.ParseJobMetricsFrom([]string{"10.77.0.0/30", "192.0.2.9"})
	if err != nil {
		t.Fatal(err)
	}
	h := m.AccessHandler(from)
	for _, tc := range []struct {
		remote string
		jobs   bool
	}{
		{"127.0.0.1:40000", true},
		{"[::1]:40000", true},
		{"10.77.0.1:40000", true},   // in 10.77.0.0/30
		{"192.0.2.9:40000", true},   // a single address
		{"10.77.0.20:40000", false}, // the login host: not listed
		{"192.0.2.10:40000", false},
		{"[::ffff:10.77.0.20]:1", false},
		{"garbage", false},
	} {
		t.Run(tc.remote, func(t *testing.T) {
			req := httptest.NewRequest("GET", "/metrics", nil)
			req.RemoteAddr = tc.remote
			req.Header.Set("X-Forwarded-For", "127.0.0.1") // never trusted
			rec := httptest.NewRecorder()
			h.ServeHTTP(rec, req)
			b, _ := io.ReadAll(rec.Body)
			body := string(b)
			if rec.Code != 200 || !strings.Contains(body, `isched_coordinator_reports_total{verdict="ok"} 1`) {
				t.Fatalf("code %d: the aggregate metrics are missing:\n%.400s", rec.Code, body)
			}
			if got := strings.Contains(body, "isched_job_"); got != tc.jobs {
				t.Errorf("isched_job_ series served: %v, want %v", got, tc.jobs)
			}
			if got := strings.Contains(body, "alice"); got != tc.jobs {
				t.Errorf("alice's name served: %v, want %v", got, tc.jobs)
			}
		})
	}
}
