// Command isched is the user's CLI: estimate, plan, submit, status and
// report (see internal/cli).
package main

import (
	"context"
	"os"
	"os/signal"
	"syscall"

	"github.com/isched/isched/internal/cli"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	code := cli.Main(ctx, os.Args[1:], os.Getenv, os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}
