// Command isched-relay holds the reporter's Redis password so that jobs
// need none: wrappers send their reports to it over TCP, authenticated by
// MUNGE, and it appends them to the ingest stream with its own ids, cap
// and per-uid ration. See internal/relay and docs/deployment.md.
package main

import (
	"context"
	"os"
	"os/signal"
	"syscall"

	"github.com/isched/isched/internal/relay"
)

func main() {
	// SIGTERM (systemd stop) and SIGINT end the relay's context: it
	// closes its connections (wrappers spool and reconnect) and exits 0.
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	code := relay.Main(ctx, os.Args[1:], os.Getenv, os.Stderr)
	stop()
	os.Exit(code)
}
