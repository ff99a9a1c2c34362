package coordinator

import (
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/isched/isched/internal/report"
)

// jobRow is one running lineage's exported values.
type jobRow struct {
	user, partition string
	progress        float64 // 0..1; -1 unknown
	etaS            float64 // seconds to the predicted end; -1 unknown
	rss, gpu        int64
	iterS           float64
}

// jobMetrics exports per-lineage gauges with bounded cardinality: labels
// lineage, user and partition only; at most max lineages; a lineage's
// series go when it ends (or this coordinator stops leading). The
// coordinator's loop writes rows, scrapes read them.
type jobMetrics struct {
	mu      sync.Mutex
	max     int
	rows    map[string]jobRow
	dropped map[string]bool // lineages not exported for the cap
	now     func() time.Time

	progress, eta, rss, gpu, iter, droppedDesc *prometheus.Desc
}

func newJobMetrics(max int) *jobMetrics {
	labels := []string{"lineage", "user", "partition"}
	d := func(name, help string) *prometheus.Desc { return prometheus.NewDesc(name, help, labels, nil) }
	return &jobMetrics{max: max, rows: map[string]jobRow{}, dropped: map[string]bool{}, now: time.Now,
		progress: d("isched_job_progress_ratio", "Fraction of the run's iterations done (running lineages whose total is known)."),
		eta:      d("isched_job_eta_seconds", "Seconds until the predicted end of the run (running lineages with an estimate)."),
		rss:      d("isched_job_rss_bytes", "Resident memory of the job's processes (all ranks), last sample."),
		gpu:      d("isched_job_gpu_memory_bytes", "GPU memory in use on the job's devices, summed, last sample."),
		iter:     d("isched_job_iteration_seconds", "Robust estimate of the time per iteration."),
		droppedDesc: prometheus.NewDesc("isched_coordinator_job_series_dropped",
			"Running lineages not exported as per-job series because the cap (max_job_series) was reached.", nil, nil)}
}

// set records a lineage's values; a new lineage past the cap is counted,
// not exported.
func (m *jobMetrics) set(lineage string, r jobRow) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if _, ok := m.rows[lineage]; !ok && len(m.rows) >= m.max {
		m.dropped[lineage] = true
		return
	}
	m.rows[lineage] = r
}

// remove drops an ended lineage's series.
func (m *jobMetrics) remove(lineage string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	delete(m.rows, lineage)
	delete(m.dropped, lineage)
}

// reset drops every series (the lead is lost: another coordinator exports).
func (m *jobMetrics) reset() {
	m.mu.Lock()
	defer m.mu.Unlock()
	clear(m.rows)
	clear(m.dropped)
}

// Describe implements prometheus.Collector.
func (m *jobMetrics) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{m.progress, m.eta, m.rss, m.gpu, m.iter, m.droppedDesc} {
		ch <- d
	}
}

// Collect implements prometheus.Collector.
func (m *jobMetrics) Collect(ch chan<- prometheus.Metric) {
	m.mu.Lock()
	defer m.mu.Unlock()
	for lin, r := range m.rows {
		lv := []string{lin, r.user, r.partition}
		if r.progress >= 0 {
			ch <- prometheus.MustNewConstMetric(m.progress, prometheus.GaugeValue, r.progress, lv...)
		}
		if r.etaS >= 0 {
			ch <- prometheus.MustNewConstMetric(m.eta, prometheus.GaugeValue, r.etaS, lv...)
		}
		ch <- prometheus.MustNewConstMetric(m.rss, prometheus.GaugeValue, float64(r.rss), lv...)
		ch <- prometheus.MustNewConstMetric(m.gpu, prometheus.GaugeValue, float64(r.gpu), lv...)
		if r.iterS > 0 {
			ch <- prometheus.MustNewConstMetric(m.iter, prometheus.GaugeValue, r.iterS, lv...)
		}
	}
	ch <- prometheus.MustNewConstMetric(m.droppedDesc, prometheus.GaugeValue, float64(len(m.dropped)))
}

// jobRowOf is what a lineage's status exports.
func jobRowOf(st *report.JobStatus, now time.Time) jobRow {
	r := jobRow{user: st.User, partition: st.Partition, progress: -1, etaS: -1, rss: st.RSSBytes, iterS: st.IterMS / 1000}
	if st.TotalIters > 0 {
		r.progress = min(float64(max(st.Step, 0))/float64(st.TotalIters), 1)
	}
	if st.ETAMS > 0 {
		r.etaS = max(float64(st.ETAMS-now.UnixMilli())/1000, 0)
	}
	for _, b := range st.GPUBytes {
		r.gpu += b
	}
	return r
}

// exportJob updates a lineage's series after its status changed.
func (c *Coordinator) exportJob(l *lineage, now time.Time) {
	st := &l.Status
	if l.ended() || st.State != "RUNNING" {
		c.metrics.jobs.remove(st.Lineage)
		return
	}
	c.metrics.jobs.set(st.Lineage, jobRowOf(st, now))
}
