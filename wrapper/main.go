// Command isched-wrapper runs a training command as its child, measures it
// and reports to isched, and exits with the child's status:
//
//	srun isched-wrapper [flags] -- python train.py --epochs 50
//
// With --send-spools it runs no command: it sends the reports this user's
// ended wrappers left undelivered on the node (a Slurm TaskEpilog, a login
// or a cron job runs it).
//
// Its own logs go to stderr; stdout belongs to the training job.
package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"

	"github.com/isched/isched/internal/auth"
	"github.com/isched/isched/internal/version"
	"github.com/isched/isched/internal/wrapper"
)

func main() {
	os.Exit(run(os.Args[1:]))
}

func run(args []string) int {
	// where to report, from isched.conf where the environment says nothing
	getenv, confErr := wrapper.ConfigEnv(os.Getenv)
	opts, err := wrapper.ParseArgs(args, getenv, os.Stderr)
	var help *wrapper.ErrHelp
	if errors.As(err, &help) {
		fmt.Print(help.Usage)
		return 0
	}
	if err != nil {
		if !errors.Is(err, wrapper.ErrUsage) || len(args) > 0 {
			fmt.Fprintf(os.Stderr, "isched-wrapper: %v\n", err)
		}
		return 2
	}
	if opts.Version {
		fmt.Println(version.String("isched-wrapper"))
		return 0
	}
	var level slog.Level
	if err := level.UnmarshalText([]byte(opts.LogLevel)); err != nil {
		fmt.Fprintf(os.Stderr, "isched-wrapper: --log-level %q: %v\n", opts.LogLevel, err)
		return 2
	}
	logger := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: level}))
	if confErr != nil {
		logger.Warn("isched.conf not read: the environment alone says where to report", "err", confErr)
	}
	deps := wrapper.Deps{
		Getenv: getenv,
		Stdin:  os.Stdin,
		Stdout: os.Stdout,
		Stderr: os.Stderr,
		Munger: auth.ExecMunger{},
		Logger: logger,
	}
	path, why := wrapper.ChooseReportPath(opts)
	switch path {
	case wrapper.ReportRelay: // this job holds no Redis password
		deps.Connect = wrapper.RelayConnect(opts.Relay, opts.RelayUID, deps.Munger)
	case wrapper.ReportDirect: // the site's opt-in: the reporter password
		deps.Connect = wrapper.StreamConnect(getenv)
	default:
		opts.NoReport = true
	}
	if opts.SendSpools && path == wrapper.ReportNone {
		fmt.Fprintf(os.Stderr, "isched-wrapper: --send-spools: %s\n", why)
		return 2
	}
	if why != "" && getenv("SLURM_JOB_ID") != "" {
		logger.Error(why) // a job isched is meant to follow, and it will not
	}
	if opts.SendSpools {
		return wrapper.SendSpools(context.Background(), opts, deps)
	}
	wrapper.AddSystemDeps(&deps)
	// The wrapper does not stop on its own signals: the child package relays
	// them to the child, and the wrapper ends when the child does.
	return wrapper.Run(context.Background(), opts, deps)
}
