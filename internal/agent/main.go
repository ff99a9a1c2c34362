package agent

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"time"

	"github.com/isched/isched/internal/profiling"
	"github.com/isched/isched/internal/retry"
	"github.com/isched/isched/internal/sdnotify"
	"github.com/isched/isched/internal/slurm"
	"github.com/isched/isched/internal/stream"
	"github.com/isched/isched/internal/version"
)

// Exit codes of Main.
const (
	ExitOK    = 0 // stopped by its context (SIGTERM)
	ExitError = 1 // could not run
	ExitUsage = 2 // bad flags or configuration
)

// Main is isched-agent's entry point: flags and environment in, exit code
// out. Redis is configured by the environment (stream.ConfigFromEnv: the
// agent ACL user, its password file, which must be private); the cluster is
// -cluster, else ISCHED_CLUSTER, else Slurm's ClusterName.
func Main(ctx context.Context, args []string, getenv func(string) string, stderr io.Writer) int {
	fs := flag.NewFlagSet("isched-agent", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var (
		cluster   = fs.String("cluster", "", "cluster name in every Redis key (default: $ISCHED_CLUSTER, else Slurm's ClusterName)")
		poll      = fs.Duration("poll", 5*time.Second, "how often to publish the cluster snapshot")
		ttl       = fs.Duration("snapshot-ttl", 0, "lifetime of a published snapshot (default: 3 polls, at least 15s)")
		maxAge    = fs.Duration("max-action-age", 15*time.Minute, "refuse actions issued longer ago")
		rootSub   = fs.Bool("allow-root-submit", false, "let submit actions run sbatch as root")
		scriptDir = fs.String("script-dir", "/var/lib/isched-agent/scripts", "where the batch scripts of isched jobs are saved (0700, the agent's own) to resubmit a run slurmctld forgot (empty: off)")
		binDir    = fs.String("slurm-bin-dir", "", "directory of squeue, sinfo, scontrol, scancel, sbatch (default: $PATH)")
		timeout   = fs.Duration("slurm-timeout", slurm.DefaultTimeout, "timeout of one Slurm command")
		once      = fs.Bool("once", false, "publish one snapshot and exit (no actions)")
		logFormat = fs.String("log-format", "json", "log format: json or text")
		logLevel  = fs.String("log-level", "info", "log level: debug, info, warn, error")
		metricsAt = fs.String("metrics-listen", "", "address of /metrics (Prometheus), e.g. 127.0.0.1:9471 (empty: off)")
		pprofAddr = fs.String("pprof-listen", "", "serve Go's /debug/pprof/ on this address (off by default; for diagnosing, keep it on loopback)")
		showVer   = fs.Bool("version", false, "print the version and exit")
	)
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return ExitOK
		}
		return ExitUsage
	}
	if *showVer {
		fmt.Fprintln(os.Stdout, version.String("isched-agent"))
		return ExitOK
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "isched-agent: unexpected arguments %q\n", fs.Args())
		return ExitUsage
	}
	log, err := newLogger(stderr, *logFormat, *logLevel)
	if err != nil {
		fmt.Fprintf(stderr, "isched-agent: %v\n", err)
		return ExitUsage
	}

	if *pprofAddr != "" {
		stop, err := profiling.Serve(*pprofAddr, log)
		if err != nil {
			log.Error("pprof listener", "err", err)
			return ExitUsage
		}
		defer stop()
	}

	metrics := NewMetrics()
	if *metricsAt != "" {
		stop, err := serveMetrics(*metricsAt, metrics, log)
		if err != nil {
			log.Error("metrics listener", "err", err)
			return ExitUsage
		}
		defer stop()
	}

	sc := &slurm.Client{Timeout: *timeout, Runner: metrics.Runner(slurm.ExecRunner{})}
	if *binDir != "" {
		sc.Squeue = filepath.Join(*binDir, "squeue")
		sc.Sinfo = filepath.Join(*binDir, "sinfo")
		sc.Scontrol = filepath.Join(*binDir, "scontrol")
		sc.Scancel = filepath.Join(*binDir, "scancel")
		sc.Sbatch = filepath.Join(*binDir, "sbatch")
	}
	name := *cluster
	if name == "" {
		name = getenv("ISCHED_CLUSTER")
	}
	if name == "" {
		if name, err = sc.ClusterName(ctx); err != nil {
			log.Error("cluster name: set -cluster or ISCHED_CLUSTER, or make scontrol answer", "err", err)
			return ExitError
		}
	}
	rcfg, err := stream.ConfigFromEnv(func(k string) string {
		if k == "ISCHED_CLUSTER" {
			return name
		}
		return getenv(k)
	}, "agent")
	if err != nil {
		log.Error("redis configuration", "err", err)
		return ExitUsage
	}
	rcfg.Private = true
	// Redis away at start (a boot order, a restart): retry with jitter
	// here rather than exit and let systemd restart us in lockstep; a
	// configuration error (a password file readable by others) exits 2.
	var rdb *stream.Client
	b := &retry.Backoff{Min: time.Second, Max: 30 * time.Second, Log: log, What: "redis connection", Level: slog.LevelError}
	err = retry.Do(ctx, b, func(ctx context.Context) (err error) {
		rdb, err = stream.Open(ctx, rcfg)
		return err
	}, func(err error) bool { return errors.Is(err, stream.ErrConfig) })
	if errors.Is(err, stream.ErrConfig) {
		log.Error("redis configuration", "err", err, "addrs", rcfg.Addrs, "user", rcfg.User)
		return ExitUsage
	}
	if err != nil {
		log.Info("stopped before Redis answered", "err", err)
		return ExitOK
	}
	defer rdb.Close()

	notify := sdnotify.FromEnv(getenv, os.Getpid())
	a, err := New(Config{
		Cluster: name, PollInterval: *poll, SnapshotTTL: *ttl, MaxActionAge: *maxAge,
		AllowRootSubmit: *rootSub, ScriptDir: *scriptDir, Logger: log, Heartbeat: func() { _ = notify.Watchdog() }, Metrics: metrics,
	}, sc, rdb)
	if err != nil {
		log.Error("configuration", "err", err)
		return ExitUsage
	}
	if *once {
		if err := a.PublishOnce(ctx); err != nil {
			log.Error("publish", "err", err)
			return ExitError
		}
		return ExitOK
	}
	log.Info("started", "poll", poll.String(), "redis", rcfg.Addrs, "redis_user", rcfg.User)
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

func newLogger(w io.Writer, format, level string) (*slog.Logger, error) {
	var lv slog.Level
	if err := lv.UnmarshalText([]byte(level)); err != nil {
		return nil, fmt.Errorf("-log-level %q: %w", level, err)
	}
	opts := &slog.HandlerOptions{Level: lv}
	switch format {
	case "json":
		return slog.New(slog.NewJSONHandler(w, opts)), nil
	case "text":
		return slog.New(slog.NewTextHandler(w, opts)), nil
	}
	return nil, fmt.Errorf("-log-format %q: want json or text", format)
}

// serveMetrics serves /metrics on addr until the returned stop is called.
func serveMetrics(addr string, m *Metrics, log *slog.Logger) (func() error, error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("metrics: %w", err)
	}
	mux := http.NewServeMux()
	mux.Handle("/metrics", m.Handler())
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	go func() { _ = srv.Serve(ln) }()
	log.Info("metrics", "listen", ln.Addr().String())
	return srv.Close, nil
}
