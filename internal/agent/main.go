package agent

import (
	"context"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"time"

	"github.com/isched/isched/internal/daemon"
	"github.com/isched/isched/internal/sdnotify"
	"github.com/isched/isched/internal/slurm"
	"github.com/isched/isched/internal/stream"
	"github.com/isched/isched/internal/version"
)

// Exit codes of Main: the daemons share them (daemon.ExitOK, ...).
const (
	ExitOK    = daemon.ExitOK    // stopped by its context (SIGTERM)
	ExitError = daemon.ExitError // could not run
	ExitUsage = daemon.ExitUsage // bad flags or configuration
)

// options are isched-agent's command line.
type options struct {
	daemon.Flags
	cluster, binDir          string
	scriptDir                string
	poll, ttl, maxAge, slurm time.Duration
	rootSubmit, once         bool
}

// parseOptions reads the command line; ok false: return code at once.
func parseOptions(args []string, stderr io.Writer) (o options, code int, ok bool) {
	fs := flag.NewFlagSet("isched-agent", flag.ContinueOnError)
	fs.SetOutput(stderr)
	o.Register(fs, "")
	fs.StringVar(&o.cluster, "cluster", "", "cluster name in every Redis key (default: $ISCHED_CLUSTER, else Slurm's ClusterName)")
	fs.DurationVar(&o.poll, "poll", 5*time.Second, "how often to publish the cluster snapshot")
	fs.DurationVar(&o.ttl, "snapshot-ttl", 0, "lifetime of a published snapshot (default: 3 polls, at least 15s)")
	fs.DurationVar(&o.maxAge, "max-action-age", 15*time.Minute, "refuse actions issued longer ago")
	fs.BoolVar(&o.rootSubmit, "allow-root-submit", false, "let submit actions run sbatch as root")
	fs.StringVar(&o.scriptDir, "script-dir", "/var/lib/isched-agent/scripts", "where the batch scripts of isched jobs are saved (0700, the agent's own) to resubmit a run slurmctld forgot (empty: off)")
	fs.StringVar(&o.binDir, "slurm-bin-dir", "", "directory of squeue, sinfo, scontrol, scancel, sbatch (default: $PATH)")
	fs.DurationVar(&o.slurm, "slurm-timeout", slurm.DefaultTimeout, "timeout of one Slurm command")
	fs.BoolVar(&o.once, "once", false, "publish one snapshot and exit (no actions)")
	if code, ok := daemon.Parse(fs, args); !ok {
		return o, code, false
	}
	if o.Version {
		fmt.Fprintln(os.Stdout, version.String("isched-agent"))
		return o, ExitOK, false
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "isched-agent: unexpected arguments %q\n", fs.Args())
		return o, ExitUsage, false
	}
	for name, d := range map[string]time.Duration{"poll": o.poll, "snapshot-ttl": o.ttl, "max-action-age": o.maxAge, "slurm-timeout": o.slurm} {
		if d < 0 {
			fmt.Fprintf(stderr, "isched-agent: -%s %s is negative\n", name, d)
			return o, ExitUsage, false
		}
	}
	return o, 0, true
}

// slurmClient is the Slurm CLI client the flags describe.
func (o options) slurmClient(m *Metrics) *slurm.Client {
	sc := &slurm.Client{Timeout: o.slurm, Runner: m.Runner(slurm.ExecRunner{})}
	if o.binDir != "" {
		sc.Squeue = filepath.Join(o.binDir, "squeue")
		sc.Sinfo = filepath.Join(o.binDir, "sinfo")
		sc.Scontrol = filepath.Join(o.binDir, "scontrol")
		sc.Scancel = filepath.Join(o.binDir, "scancel")
		sc.Sbatch = filepath.Join(o.binDir, "sbatch")
	}
	return sc
}

// connect opens Redis for cluster name, retrying with jitter while it is
// away (a boot order, a restart) rather than exit and let systemd restart
// us in lockstep; ok false: return code (a configuration error exits 2).
func connect(ctx context.Context, name string, getenv func(string) string, log *slog.Logger) (rdb *stream.Client, code int, ok bool) {
	rcfg, err := stream.ConfigFromEnv(func(k string) string {
		if k == "ISCHED_CLUSTER" {
			return name
		}
		return getenv(k)
	}, "agent")
	if err != nil {
		log.Error("redis configuration", "err", err)
		return nil, ExitUsage, false
	}
	rcfg.Private = true
	return daemon.ConnectRedis(ctx, rcfg, log)
}

// Main is isched-agent's entry point: flags and environment in, exit code
// out. Redis is configured by the environment (stream.ConfigFromEnv: the
// agent ACL user, its password file, which must be private); the cluster is
// -cluster, else ISCHED_CLUSTER, else Slurm's ClusterName.
func Main(ctx context.Context, args []string, getenv func(string) string, stderr io.Writer) int {
	o, code, ok := parseOptions(args, stderr)
	if !ok {
		return code
	}
	log, err := o.Logger(stderr)
	if err != nil {
		fmt.Fprintf(stderr, "isched-agent: %v\n", err)
		return ExitUsage
	}
	metrics := NewMetrics()
	stop, err := o.ServeMetrics(metrics.Handler(), log)
	defer stop()
	if err != nil {
		log.Error("listener", "err", err)
		return ExitUsage
	}
	sc := o.slurmClient(metrics)
	name := o.cluster
	if name == "" {
		name = getenv("ISCHED_CLUSTER")
	}
	if name == "" {
		if name, err = sc.ClusterName(ctx); err != nil {
			log.Error("cluster name: set -cluster or ISCHED_CLUSTER, or make scontrol answer", "err", err)
			return ExitError
		}
	}
	rdb, code, ok := connect(ctx, name, getenv, log)
	if !ok {
		return code
	}
	defer rdb.Close()
	return o.run(ctx, name, sc, rdb, getenv, metrics, log)
}

// run builds the agent and runs it (or publishes once) until ctx ends,
// telling systemd.
func (o options) run(ctx context.Context, name string, sc *slurm.Client, rdb *stream.Client, getenv func(string) string, m *Metrics, log *slog.Logger) int {
	notify := sdnotify.FromEnv(getenv, os.Getpid())
	a, err := New(Config{
		Cluster: name, PollInterval: o.poll, SnapshotTTL: o.ttl, MaxActionAge: o.maxAge,
		AllowRootSubmit: o.rootSubmit, ScriptDir: o.scriptDir, Logger: log, Heartbeat: func() { _ = notify.Watchdog() }, Metrics: m,
	}, sc, rdb)
	if err != nil {
		log.Error("configuration", "err", err)
		return ExitUsage
	}
	if o.once {
		if err := a.PublishOnce(ctx); err != nil {
			log.Error("publish", "err", err)
			return ExitError
		}
		return ExitOK
	}
	log.Info("started", "poll", o.poll.String())
	// ready: configured and connected to Redis (Type=notify); a Slurm that
	// does not answer yet is retried by the poll loop, not a failed start
	if err := notify.Ready("polling " + name); err != nil {
		log.Warn("systemd notify", "err", err)
	}
	defer func() { _ = notify.Stopping() }()
	if err := a.Run(ctx); err != nil {
		log.Error("stopped", "err", err)
		return ExitError
	}
	log.Info("stopped")
	return ExitOK
}
