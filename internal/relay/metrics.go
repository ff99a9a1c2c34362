package relay

import (
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
)

// Metrics are the relay's Prometheus metrics (prefix isched_relay_). Labels
// are bounded: reply codes only, never a uid.
type Metrics struct {
	Registry *prometheus.Registry
	conns    *prometheus.CounterVec
	entries  *prometheus.CounterVec
	queries  *prometheus.CounterVec
	inflight prometheus.Gauge
	maxLen   prometheus.Gauge
	budget   prometheus.Gauge
}

// NewMetrics registers the relay's metrics on a fresh registry.
func NewMetrics() *Metrics {
	r := prometheus.NewRegistry()
	m := &Metrics{
		Registry: r,
		conns: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "isched_relay_connections_total",
			Help: "Connections by outcome: ok (authenticated), auth (credential refused or none sent), busy (over a connection limit), evicted (closed unauthenticated to make room: the oldest of its source when a new connection came from that source at its share, or of the sources holding the most when the pool was full)."}, []string{"verdict"}),
		entries: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "isched_relay_entries_total",
			Help: "Entries by verdict: ok (appended), throttled (the uid's ration spent), oversize, bad-entry, busy (over the in-flight frame budget), unavailable (Redis failed)."}, []string{"verdict"}),
		queries: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "isched_relay_queries_total",
			Help: "Status queries by verdict: ok (answered, found or not), bad-query, throttled, busy, unavailable (Redis failed)."}, []string{"verdict"}),
		inflight: prometheus.NewGauge(prometheus.GaugeOpts{Name: "isched_relay_frame_bytes_in_flight",
			Help: "Memory lent to frames being read (the in-flight budget's use)."}),
		maxLen: prometheus.NewGauge(prometheus.GaugeOpts{Name: "isched_relay_stream_max_len",
			Help: "The ingest stream's cap in entries (XADD MAXLEN ~), derived from Redis's maxmemory."}),
		budget: prometheus.NewGauge(prometheus.GaugeOpts{Name: "isched_relay_stream_budget_bytes",
			Help: "The share of Redis's maxmemory the ingest stream may take at worst (0: Redis has no maxmemory)."}),
	}
	r.MustRegister(m.conns, m.entries, m.queries, m.inflight, m.maxLen, m.budget, collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return m
}

func (m *Metrics) conn(verdict string) {
	if m != nil {
		m.conns.WithLabelValues(verdict).Inc()
	}
}

// entry counts a reply by its code ("" is ok).
func (m *Metrics) entry(code string) {
	if m == nil {
		return
	}
	if code == "" {
		code = "ok"
	}
	m.entries.WithLabelValues(code).Inc()
}

// query counts a status query's reply by its code ("" is ok).
func (m *Metrics) query(code string) {
	if m == nil {
		return
	}
	if code == "" {
		code = "ok"
	}
	m.queries.WithLabelValues(code).Inc()
}

func (m *Metrics) inFlight(bytes int64) {
	if m != nil {
		m.inflight.Set(float64(bytes))
	}
}

// streamCap shows the cap in force.
func (m *Metrics) streamCap(c StreamCap) {
	if m != nil {
		m.maxLen.Set(float64(c.Entries))
		m.budget.Set(float64(c.Budget))
	}
}
