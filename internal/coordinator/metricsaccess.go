package coordinator

import (
	"net"
	"net/http"
	"net/netip"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// The per-job series (isched_job_*, labels lineage, user and partition)
// tell every user's runs, progress, memory and ETA. Slurm's PrivateData=jobs
// is the model: they go only to a client on the coordinator's own host
// (loopback) or at an address the site names (its Prometheus,
// job_metrics_from); any other client of the same /metrics gets the
// aggregate metrics alone. The choice is by the connection's remote
// address only: no header (X-Forwarded-For and the like) is trusted.

// jobSeriesAllowed says whether a client at remoteAddr (an http.Request's
// RemoteAddr, "ip:port") may read the per-job series.
func jobSeriesAllowed(remoteAddr string, from []netip.Prefix) bool {
	host, _, err := net.SplitHostPort(remoteAddr)
	if err != nil {
		return false
	}
	a, err := netip.ParseAddr(host)
	if err != nil {
		return false
	}
	a = a.Unmap()
	if a.IsLoopback() {
		return true
	}
	for _, p := range from {
		if p.Contains(a) {
			return true
		}
	}
	return false
}

// AccessHandler serves /metrics: the whole registry (the per-job series
// with it) to loopback clients and those in from, the aggregate registry
// to everyone else.
func (m *Metrics) AccessHandler(from []netip.Prefix) http.Handler {
	full := promhttp.HandlerFor(m.Registry, promhttp.HandlerOpts{Registry: m.Registry})
	agg := promhttp.HandlerFor(m.aggregate, promhttp.HandlerOpts{Registry: m.aggregate})
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if jobSeriesAllowed(r.RemoteAddr, from) {
			full.ServeHTTP(w, r)
			return
		}
		agg.ServeHTTP(w, r)
	})
}

// newAggregate is a registry of cs (every collector but the per-job one).
func newAggregate(cs ...prometheus.Collector) *prometheus.Registry {
	r := prometheus.NewRegistry()
	r.MustRegister(cs...)
	return r
}
