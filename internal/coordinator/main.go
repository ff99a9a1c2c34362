package coordinator

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/netip"
	"os"
	"time"

	"github.com/isched/isched/internal/auth"
	"github.com/isched/isched/internal/coordconfig"
	"github.com/isched/isched/internal/daemon"
	"github.com/isched/isched/internal/profiling"
	"github.com/isched/isched/internal/report"
	"github.com/isched/isched/internal/retry"
	"github.com/isched/isched/internal/sdnotify"
	"github.com/isched/isched/internal/stream"
	"github.com/isched/isched/internal/version"
)

// options are isched-coordinator's command line.
type options struct {
	daemon.Flags
	config, cluster string
	tick            time.Duration
	pprofOnMetrics  bool // -pprof, deprecated
	fs              *flag.FlagSet
	// jobMetricsFrom: who may read the per-job series (job_metrics_from)
	jobMetricsFrom []netip.Prefix
}

// parseOptions reads the command line; ok false: return code at once.
func parseOptions(args []string, getenv func(string) string, stderr io.Writer) (o options, code int, ok bool) {
	o.fs = flag.NewFlagSet("isched-coordinator", flag.ContinueOnError)
	o.fs.SetOutput(stderr)
	o.Register(o.fs, coordconfig.DefaultMetricsListen)
	o.fs.StringVar(&o.config, "config", getenv("ISCHED_COORDINATOR_CONFIG"), "config file (JSON; see /etc/isched/coordinator.json)")
	o.fs.StringVar(&o.cluster, "cluster", getenv("ISCHED_CLUSTER"), "cluster name in every Redis key (default: the config file's)")
	o.fs.DurationVar(&o.tick, "tick", 0, "decision interval (default: the config file's, else 2s)")
	o.fs.BoolVar(&o.pprofOnMetrics, "pprof", false, "deprecated, use -pprof-listen: also serve Go's /debug/pprof/ on the metrics address")
	if code, ok := daemon.Parse(o.fs, args); !ok {
		return o, code, false
	}
	if o.Version {
		fmt.Fprintln(os.Stdout, version.String("isched-coordinator"))
		return o, daemon.ExitOK, false
	}
	if o.fs.NArg() > 0 {
		fmt.Fprintf(stderr, "isched-coordinator: unexpected arguments %q\n", o.fs.Args())
		return o, daemon.ExitUsage, false
	}
	if daemon.FlagSet(o.fs, "tick") && o.tick <= 0 {
		fmt.Fprintf(stderr, "isched-coordinator: -tick %s is not positive\n", o.tick)
		return o, daemon.ExitUsage, false
	}
	return o, 0, true
}

// settings builds the coordinator's Settings: the defaults, then the
// config file, then the flags; then Validate.
func (o *options) settings() (coordconfig.Settings, error) {
	s := coordconfig.DefaultSettings()
	if o.config != "" {
		if err := coordconfig.Load(o.config, &s); err != nil {
			return s, err
		}
	}
	o.overlay(&s)
	if err := s.Validate(); err != nil {
		if o.config == "" {
			return s, err
		}
		return s, fmt.Errorf("config %s: %w", o.config, err) // the flags are checked when parsed
	}
	return s, nil
}

// overlay puts the command line (and $ISCHED_CLUSTER, -cluster's default)
// over s.
func (o *options) overlay(s *coordconfig.Settings) {
	if o.cluster != "" {
		s.Cluster = o.cluster
	}
	if daemon.FlagSet(o.fs, "metrics-listen") {
		s.MetricsListen = o.MetricsListen
	}
	if daemon.FlagSet(o.fs, "tick") {
		s.Tick = daemon.Duration(o.tick)
	}
}

// configure builds the coordinator's and Redis's configuration from the
// settings and the environment.
func (o *options) configure(getenv func(string) string, log *slog.Logger) (Config, stream.Config, error) {
	s, err := o.settings()
	if err != nil {
		return Config{}, stream.Config{}, err
	}
	cfg, err := configOf(s)
	if err != nil {
		return Config{}, stream.Config{}, err
	}
	cfg.Logger = log
	o.cluster, o.MetricsListen = s.Cluster, s.MetricsListen
	if o.jobMetricsFrom, err = coordconfig.ParseJobMetricsFrom(s.JobMetricsFrom); err != nil {
		return Config{}, stream.Config{}, err // Validate checked it
	}
	rcfg, err := stream.ConfigFromEnv(func(k string) string {
		if k == "ISCHED_CLUSTER" && o.cluster != "" {
			return o.cluster
		}
		return getenv(k)
	}, "coordinator")
	if err != nil {
		return Config{}, stream.Config{}, err
	}
	rcfg.Private = true // refuse a password file readable by others
	// wrappers' reports are at most report.MaxPayload: a larger entry
	// (a hostile writer's) is deleted inside Redis, never read
	rcfg.MaxEntry = report.MaxPayload
	return cfg, rcfg, nil
}

// serve starts /metrics and /debug/pprof/ where configured; stop ends both.
func (o options) serve(m *Metrics, log *slog.Logger) (stop func(), err error) {
	var stops []func() error
	stop = func() {
		for _, s := range stops {
			_ = s()
		}
	}
	if o.MetricsListen != "" {
		mux := http.NewServeMux()
		mux.Handle("/metrics", m.AccessHandler(o.jobMetricsFrom))
		if o.pprofOnMetrics {
			profiling.Handle(mux)
		}
		s, err := daemon.Serve(o.MetricsListen, "metrics", mux, log)
		if err != nil {
			return stop, err
		}
		stops = append(stops, s)
	}
	s, err := o.ServePprof(log)
	if err != nil {
		return stop, fmt.Errorf("pprof listener: %w", err)
	}
	stops = append(stops, s)
	return stop, nil
}

// Main is isched-coordinator's entry point; it returns the exit status
// (daemon.ExitOK, ExitError, ExitUsage).
func Main(ctx context.Context, args []string, getenv func(string) string, stderr io.Writer) int {
	o, code, ok := parseOptions(args, getenv, stderr)
	if !ok {
		return code
	}
	log, err := o.Logger(stderr)
	if err != nil {
		fmt.Fprintf(stderr, "isched-coordinator: %v\n", err)
		return daemon.ExitUsage
	}
	cfg, rcfg, err := o.configure(getenv, log)
	if err != nil {
		fmt.Fprintf(stderr, "isched-coordinator: %v\n", err)
		return daemon.ExitUsage
	}
	var store *stream.Client
	b := &retry.Backoff{Min: 200 * time.Millisecond, Max: 10 * time.Second, Log: log, What: "redis connection"}
	err = retry.Do(ctx, b, func(ctx context.Context) (err error) {
		store, err = stream.Open(ctx, rcfg)
		return err
	}, func(err error) bool { return errors.Is(err, stream.ErrConfig) })
	if errors.Is(err, stream.ErrConfig) {
		fmt.Fprintf(stderr, "isched-coordinator: %v\n", err)
		return daemon.ExitUsage
	}
	if err != nil {
		return daemon.ExitOK // stopped while Redis was away
	}
	defer store.Close()
	m := NewMetrics()
	stop, err := o.serve(m, log)
	defer stop()
	if err != nil {
		fmt.Fprintf(stderr, "isched-coordinator: %v\n", err)
		return daemon.ExitUsage
	}
	return run(ctx, cfg, rcfg.Cluster, store, m, getenv, log)
}

// run runs the coordinator until ctx ends, telling systemd.
func run(ctx context.Context, cfg Config, cluster string, store *stream.Client, m *Metrics, getenv func(string) string, log *slog.Logger) int {
	// credentials of start reports: libmunge in-process where built with
	// it (make's default), else the unmunge command
	log.Info("munge", "via", auth.MungerKind)
	notify := sdnotify.FromEnv(getenv, os.Getpid())
	cfg.Heartbeat = func() { _ = notify.Watchdog() }
	c := New(cfg, store, auth.DefaultMunger(""), m)
	// ready: configuration read, Redis connected, metrics listening
	// (Type=notify); leading or standing by is decided in Run
	if err := notify.Ready("cluster " + cluster); err != nil {
		log.Warn("systemd notify", "err", err)
	}
	defer func() { _ = notify.Stopping() }()
	if err := c.Run(ctx); err != nil && !errors.Is(err, context.Canceled) {
		log.Error("coordinator stopped", "err", err)
		return daemon.ExitError
	}
	return daemon.ExitOK
}
