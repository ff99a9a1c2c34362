// Command isched-coordinator learns from running training jobs and decides
// checkpoints, continuations and migrations (see internal/coordinator).
//
// With -with-agent it also runs the agent in the same process, for small
// sites (the agent keeps its own Redis user: ISCHED_AGENT_REDIS_PASSWORD_FILE).
package main

import (
	"context"
	"os"
	"os/signal"
	"slices"
	"sync"
	"syscall"

	"github.com/isched/isched/internal/agent"
	"github.com/isched/isched/internal/coordinator"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	args := os.Args[1:]
	withAgent := slices.Contains(args, "-with-agent") || slices.Contains(args, "--with-agent")
	args = slices.DeleteFunc(args, func(a string) bool { return a == "-with-agent" || a == "--with-agent" })
	var wg sync.WaitGroup
	agentCode := 0
	if withAgent {
		agentEnv := func(k string) string {
			switch k {
			case "ISCHED_REDIS_USER":
				return "agent"
			case "ISCHED_REDIS_PASSWORD_FILE":
				return os.Getenv("ISCHED_AGENT_REDIS_PASSWORD_FILE")
			case "NOTIFY_SOCKET":
				return "" // the coordinator tells systemd (one process, one READY=1)
			}
			return os.Getenv(k)
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			agentCode = agent.Main(ctx, nil, agentEnv, os.Stderr)
			if agentCode != 0 {
				stop() // one process, one fate: systemd restarts both
			}
		}()
	}
	code := coordinator.Main(ctx, args, os.Getenv, os.Stderr)
	stop()
	wg.Wait()
	if code == 0 {
		code = agentCode
	}
	os.Exit(code)
}
