// Package profiling serves Go's /debug/pprof/ for the long-running
// services (-pprof-listen on both, internal/daemon): off by
// default, for diagnosing, on an address the operator keeps on loopback.
package profiling

import (
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/http/pprof"
	"time"
)

// Handle registers the /debug/pprof/ handlers on mux.
func Handle(mux *http.ServeMux) {
	mux.HandleFunc("/debug/pprof/", pprof.Index)
	mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
	mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
	mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
}

// Serve listens on addr and serves /debug/pprof/ until the returned
// close function is called. It logs the address it listens on (msg
// "pprof", listen) — with port 0 the only way to learn it.
func Serve(addr string, log *slog.Logger) (func() error, error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("profiling: %w", err)
	}
	mux := http.NewServeMux()
	Handle(mux)
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	go func() { _ = srv.Serve(ln) }()
	log.Info("pprof", "listen", ln.Addr().String())
	return srv.Close, nil
}
