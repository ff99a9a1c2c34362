package coordinator

import (
	"maps"
	"net/http"
	"slices"

	"github.com/isched/isched/internal/coordconfig"
	"github.com/isched/isched/internal/policy"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// Metrics are the coordinator's Prometheus metrics, on their own registry,
// prefixed isched_coordinator_, and the per-job gauges isched_job_* of the
// running lineages (jobMetrics: labels lineage, user and partition only, at
// most coordconfig.DefaultMaxJobSeries lineages, ended ones removed).
type Metrics struct {
	Registry *prometheus.Registry
	// aggregate holds every collector of Registry but the per-job series:
	// what /metrics shows a client outside job_metrics_from
	// (AccessHandler).
	aggregate *prometheus.Registry
	reports   *prometheus.CounterVec
	rejected  *prometheus.CounterVec
	decisions *prometheus.CounterVec
	actions   *prometheus.CounterVec
	// refusedTransitions counts lifecycle transitions the table refused
	// (a protocol bug: the tests fail on any).
	refusedTransitions *prometheus.CounterVec
	estimateError      prometheus.Histogram
	ingestLatency      prometheus.Histogram
	writeLatency       prometheus.Histogram
	pollAge            *prometheus.GaugeVec
	pollSuccess        *prometheus.GaugeVec
	leader             prometheus.Gauge
	tracked            prometheus.Gauge
	ingestLag          prometheus.Gauge
	trimmed            prometheus.Counter
	repairs            *prometheus.CounterVec
	learnedSpeed       *prometheus.GaugeVec
	learnedN           *prometheus.GaugeVec
	jobs               *jobMetrics
}

// NewMetrics registers the metrics on a fresh registry.
func NewMetrics() *Metrics {
	r := prometheus.NewRegistry()
	m := &Metrics{
		Registry: r,
		reports: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "isched_coordinator_reports_total",
			Help: "Wrapper reports read from the ingest stream, by verdict."}, []string{"verdict"}),
		rejected: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "isched_coordinator_reports_rejected_total",
			Help: "Rejected reports by reason (forged, replayed, malformed, foreign, ...)."}, []string{"reason"}),
		decisions: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "isched_coordinator_decisions_total",
			Help: "Decisions taken, by kind."}, []string{"kind"}),
		actions: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "isched_coordinator_actions_total",
			Help: "Action results from the agent, by type and status."}, []string{"type", "status"}),
		refusedTransitions: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "isched_coordinator_refused_transitions_total",
			Help: "Lineage lifecycle transitions refused as illegal (internal/lifecycle), by state and event: a protocol bug, logged as an error."},
			[]string{"state", "event"}),
		estimateError: prometheus.NewHistogram(prometheus.HistogramOpts{Name: "isched_coordinator_estimate_error_seconds",
			Help:    "Actual minus first predicted end of finished jobs.",
			Buckets: []float64{-3600, -600, -120, -30, -5, 0, 5, 30, 120, 600, 3600}}),
		ingestLatency: prometheus.NewHistogram(prometheus.HistogramOpts{Name: "isched_coordinator_ingest_duration_seconds",
			Help: "Time to judge and apply one report.", Buckets: prometheus.ExponentialBuckets(0.00005, 4, 10)}),
		writeLatency: prometheus.NewHistogram(prometheus.HistogramOpts{Name: "isched_coordinator_batch_write_duration_seconds",
			Help:    "Time for a round's writes (state, sessions, series, acks: one MULTI/EXEC) to land; an ingest round's are written behind while the next round is judged.",
			Buckets: prometheus.ExponentialBuckets(0.0005, 2.5, 10)}),
		pollAge: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "isched_coordinator_input_age_seconds",
			Help: "Age of the agent's last snapshot and job table."}, []string{"input"}),
		pollSuccess: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "isched_coordinator_input_success",
			Help: "1 when the last read of the input was fresh and valid."}, []string{"input"}),
		leader:  prometheus.NewGauge(prometheus.GaugeOpts{Name: "isched_coordinator_leader", Help: "1 while this coordinator leads."}),
		tracked: prometheus.NewGauge(prometheus.GaugeOpts{Name: "isched_coordinator_lineages", Help: "Lineages held in memory."}),
		ingestLag: prometheus.NewGauge(prometheus.GaugeOpts{Name: "isched_coordinator_ingest_lag",
			Help: "Entries added to the ingest stream and not yet read by the coordinators' group (Redis's lag, read each tick)."}),
		trimmed: prometheus.NewCounter(prometheus.CounterOpts{Name: "isched_coordinator_ingest_trimmed_unread_total",
			Help: "Reports the ingest stream's MAXLEN removed before the coordinator read them (lost), seen at ticks."}),
		repairs: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "isched_coordinator_ingest_repairs_total",
			Help: "Damage to the ingest stream the coordinator undid, by kind (recreated-stream, recreated-group, future-ids)."}, []string{"what"}),
		learnedSpeed: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "isched_coordinator_learned_speed",
			Help: "Partition speed learned for a model configuration (policy.LearnSpeeds; the configured speed is its prior), for the tracked lineages' models."},
			[]string{"model", "partition"}),
		learnedN: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "isched_coordinator_learned_speed_measurements",
			Help: "Measurements (confirmed receipts and running jobs) behind isched_coordinator_learned_speed."},
			[]string{"model", "partition"}),
		jobs: newJobMetrics(coordconfig.DefaultMaxJobSeries),
	}
	shared := []prometheus.Collector{m.reports, m.rejected, m.decisions, m.actions, m.refusedTransitions, m.estimateError, m.ingestLatency, m.writeLatency,
		m.pollAge, m.pollSuccess, m.leader, m.tracked, m.ingestLag, m.trimmed, m.repairs, m.learnedSpeed, m.learnedN,
		collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{})}
	r.MustRegister(append(shared, m.jobs)...)
	m.aggregate = newAggregate(shared...)
	for _, r := range RejectReasons {
		m.rejected.WithLabelValues(r)
	}
	return m
}

// Describe sends the descriptions of the coordinator's own metrics and the
// per-job gauges (not the Go and process collectors).
func (m *Metrics) Describe(ch chan<- *prometheus.Desc) {
	for _, c := range []prometheus.Collector{m.reports, m.rejected, m.decisions, m.actions, m.refusedTransitions, m.estimateError, m.ingestLatency,
		m.writeLatency, m.pollAge, m.pollSuccess, m.leader, m.tracked, m.ingestLag, m.trimmed, m.repairs, m.learnedSpeed, m.learnedN, m.jobs} {
		c.Describe(ch)
	}
}

// Handler serves every metric, the per-job series with them, to anyone:
// tests and in-process readers; the listener uses AccessHandler.
func (m *Metrics) Handler() http.Handler {
	return promhttp.HandlerFor(m.Registry, promhttp.HandlerOpts{Registry: m.Registry})
}

// setLearnedSpeeds exports the learned speeds of the given models (the
// tracked lineages'), at most max models (in name order): the labels stay
// bounded by the lineages the coordinator follows.
func (m *Metrics) setLearnedSpeeds(ls policy.LearnedSpeeds, models map[string]bool, max int) {
	m.learnedSpeed.Reset()
	m.learnedN.Reset()
	if max <= 0 {
		max = coordconfig.DefaultMaxJobSeries
	}
	names := slices.Sorted(maps.Keys(models))
	n := 0
	for _, model := range names {
		parts, ok := ls[model]
		if !ok {
			continue
		}
		if n++; n > max {
			return
		}
		for p, s := range parts {
			m.learnedSpeed.WithLabelValues(model, p).Set(s.Speed)
			m.learnedN.WithLabelValues(model, p).Set(float64(s.N))
		}
	}
}
