// Package profiling registers Go's /debug/pprof/ handlers for the
// long-running services: on their own address (-pprof-listen, served by
// internal/daemon) or beside the coordinator's metrics. Off by default, for
// diagnosing, on an address the operator keeps on loopback.
package profiling

import (
	"net/http"
	"net/http/pprof"
)

// Handle registers the /debug/pprof/ handlers on mux.
func Handle(mux *http.ServeMux) {
	mux.HandleFunc("/debug/pprof/", pprof.Index)
	mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
	mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
	mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
}
