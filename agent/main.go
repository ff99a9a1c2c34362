// Command isched-agent publishes the Slurm cluster's state to Redis and
// executes the coordinator's actions on jobs. See internal/agent.
package main

import (
	"context"
	"os"
	"os/signal"
	"syscall"

	"github.com/isched/isched/internal/agent"
)

func main() {
	// SIGTERM (systemd stop) and SIGINT end the agent's context: it
	// finishes the action in hand, then exits 0.
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	code := agent.Main(ctx, os.Args[1:], os.Getenv, os.Stderr)
	stop()
	os.Exit(code)
}
