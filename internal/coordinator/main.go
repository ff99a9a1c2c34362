package coordinator

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"time"

	"github.com/isched/isched/internal/auth"
	"github.com/isched/isched/internal/policy"
	"github.com/isched/isched/internal/profiling"
	"github.com/isched/isched/internal/report"
	"github.com/isched/isched/internal/retry"
	"github.com/isched/isched/internal/sdnotify"
	"github.com/isched/isched/internal/stream"
	"github.com/isched/isched/internal/version"
)

// FileConfig is the coordinator's optional config file (JSON, strict): see
// systemd/coordinator.json for a documented example.
type FileConfig struct {
	Cluster       string        `json:"cluster"`
	MetricsListen string        `json:"metrics_listen"`
	Tick          string        `json:"tick"`
	StaleAfter    string        `json:"stale_after"`
	LeaderTTL     string        `json:"leader_ttl"`
	EndGrace      string        `json:"end_grace"`
	EndedTTL      string        `json:"ended_ttl"`
	MaxJobSeries  int           `json:"max_job_series"`
	AdminComment  bool          `json:"admin_comment"`
	Policy        *PolicyConfig `json:"policy"`
}

// PolicyConfig is the policy part of the config file.
type PolicyConfig struct {
	Margin      string  `json:"margin"`
	MinGain     float64 `json:"min_gain"`
	MoveCost    string  `json:"move_cost"`
	MinInterval string  `json:"min_interval"`
	MaxMoves    int     `json:"max_moves"`
	// MaxContinuations bounds continuations per lineage (rules 1 and 5);
	// absent: the default (20); 0: none (an ended job with work left is
	// reported, never requeued); negative: unbounded.
	MaxContinuations *int               `json:"max_continuations"`
	Speed            map[string]float64 `json:"speed"`
	DevPartitions    []string           `json:"dev_partitions"`
	AllowExtend      bool               `json:"allow_extend"`
	DefaultCkpt      string             `json:"default_ckpt"`
	MinPending       string             `json:"min_pending"`
	DevWindows       []string           `json:"dev_windows"`
}

// LoadFileConfig reads and checks a config file; errors name the field.
func LoadFileConfig(path string) (FileConfig, error) {
	var fc FileConfig
	b, err := os.ReadFile(path)
	if err != nil {
		return fc, err
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&fc); err != nil {
		return fc, fmt.Errorf("config %s: %w", path, err)
	}
	return fc, nil
}

func dur(field, s string, dst *time.Duration) error {
	if s == "" {
		return nil
	}
	d, err := time.ParseDuration(s)
	if err != nil || d < 0 {
		return fmt.Errorf("config field %q: %q is not a duration", field, s)
	}
	*dst = d
	return nil
}

// apply puts the file's values into cfg.
func (fc FileConfig) apply(cfg *Config) error {
	for _, d := range []struct {
		f, v string
		p    *time.Duration
	}{{"tick", fc.Tick, &cfg.Tick}, {"stale_after", fc.StaleAfter, &cfg.StaleAfter}, {"leader_ttl", fc.LeaderTTL, &cfg.LeaderTTL},
		{"end_grace", fc.EndGrace, &cfg.EndGrace}, {"ended_ttl", fc.EndedTTL, &cfg.EndedTTL}} {
		if err := dur(d.f, d.v, d.p); err != nil {
			return err
		}
	}
	if fc.MaxJobSeries < 0 {
		return errors.New("config field \"max_job_series\" must not be negative")
	}
	cfg.MaxJobSeries, cfg.AdminComment = fc.MaxJobSeries, fc.AdminComment
	if p := fc.Policy; p != nil {
		for _, d := range []struct {
			f, v string
			p    *time.Duration
		}{{"policy.margin", p.Margin, &cfg.Policy.Margin}, {"policy.move_cost", p.MoveCost, &cfg.Policy.MoveCost},
			{"policy.min_interval", p.MinInterval, &cfg.Policy.MinInterval},
			{"policy.default_ckpt", p.DefaultCkpt, &cfg.Policy.DefaultCkpt}, {"policy.min_pending", p.MinPending, &cfg.Policy.MinPending}} {
			if err := dur(d.f, d.v, d.p); err != nil {
				return err
			}
		}
		if p.MinInterval != "" && cfg.Policy.MinInterval == 0 {
			cfg.Policy.MinInterval = -1 // "0s" written out: no hysteresis (0 in policy.Config means the default)
		}
		if p.MinGain < 0 || p.MaxMoves < 0 {
			return errors.New("config fields \"policy.min_gain\" and \"policy.max_moves\" must not be negative")
		}
		if p.MinGain > 0 {
			cfg.Policy.MinGain = p.MinGain
		}
		if p.MaxMoves > 0 {
			cfg.Policy.MaxMoves = p.MaxMoves
		}
		switch {
		case p.MaxContinuations == nil:
		case *p.MaxContinuations == 0:
			cfg.Policy.NoContinuations = true
		default:
			cfg.Policy.MaxContinuations = *p.MaxContinuations
		}
		for k, v := range p.Speed {
			if v <= 0 {
				return fmt.Errorf("config field \"policy.speed.%s\": must be positive", k)
			}
		}
		if p.Speed != nil {
			cfg.Policy.Speed = p.Speed
		}
		if p.DevPartitions != nil {
			cfg.Policy.DevPartitions = p.DevPartitions
		}
		cfg.Policy.AllowExtend = p.AllowExtend
		for i, ws := range p.DevWindows {
			win, err := policy.ParseWindow(ws)
			if err != nil {
				return fmt.Errorf("config field \"policy.dev_windows[%d]\": %w", i, err)
			}
			cfg.Policy.DevWindows = append(cfg.Policy.DevWindows, win)
		}
	}
	return nil
}

// Main is isched-coordinator's entry point; it returns the exit status.
func Main(ctx context.Context, args []string, getenv func(string) string, stderr io.Writer) int {
	fs := flag.NewFlagSet("isched-coordinator", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var (
		configPath = fs.String("config", getenv("ISCHED_COORDINATOR_CONFIG"), "config file (JSON)")
		listen     = fs.String("metrics-listen", "127.0.0.1:9470", "address of /metrics (empty: off)")
		cluster    = fs.String("cluster", getenv("ISCHED_CLUSTER"), "cluster name in every Redis key")
		logLevel   = fs.String("log-level", "info", "debug, info, warn or error")
		tick       = fs.Duration("tick", 0, "decision interval (default 2s)")
		pprofOn    = fs.Bool("pprof", false, "also serve Go's /debug/pprof/ on the metrics address (for diagnosing; keep the address on loopback)")
		showVer    = fs.Bool("version", false, "print the version and exit")
	)
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		return 2
	}
	if *showVer {
		fmt.Fprintln(os.Stdout, version.String("isched-coordinator"))
		return 0
	}
	var level slog.Level
	if err := level.UnmarshalText([]byte(*logLevel)); err != nil {
		fmt.Fprintf(stderr, "isched-coordinator: -log-level: %v\n", err)
		return 2
	}
	log := slog.New(slog.NewJSONHandler(stderr, &slog.HandlerOptions{Level: level}))
	cfg := Config{Logger: log, Policy: policy.DefaultConfig()}
	if *configPath != "" {
		fc, err := LoadFileConfig(*configPath)
		if err == nil {
			err = fc.apply(&cfg)
		}
		if err != nil {
			fmt.Fprintf(stderr, "isched-coordinator: %v\n", err)
			return 2
		}
		if *cluster == "" {
			*cluster = fc.Cluster
		}
		if fc.MetricsListen != "" && !flagSet(fs, "metrics-listen") {
			*listen = fc.MetricsListen
		}
	}
	if *tick > 0 {
		cfg.Tick = *tick
	}
	rcfg, err := stream.ConfigFromEnv(func(k string) string {
		if k == "ISCHED_CLUSTER" && *cluster != "" {
			return *cluster
		}
		return getenv(k)
	}, "coordinator")
	if err != nil {
		fmt.Fprintf(stderr, "isched-coordinator: %v\n", err)
		return 2
	}
	rcfg.Private = true // refuse a password file readable by others
	// wrappers' reports are at most report.MaxPayload: a larger entry
	// (a hostile writer's) is deleted inside Redis, never read
	rcfg.MaxEntry = report.MaxPayload
	var store *stream.Client
	b := &retry.Backoff{Min: 200 * time.Millisecond, Max: 10 * time.Second, Log: log, What: "redis connection"}
	err = retry.Do(ctx, b, func(ctx context.Context) (err error) {
		store, err = stream.Open(ctx, rcfg)
		return err
	}, func(err error) bool { return errors.Is(err, stream.ErrConfig) })
	if errors.Is(err, stream.ErrConfig) {
		fmt.Fprintf(stderr, "isched-coordinator: %v\n", err)
		return 2
	}
	if err != nil {
		return 0 // stopped while Redis was away
	}
	defer store.Close()
	m := NewMetrics()
	if *listen != "" {
		ln, err := net.Listen("tcp", *listen)
		if err != nil {
			fmt.Fprintf(stderr, "isched-coordinator: metrics listener: %v\n", err)
			return 1
		}
		mux := http.NewServeMux()
		mux.Handle("/metrics", m.Handler())
		if *pprofOn {
			profiling.Handle(mux)
		}
		srv := &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
		go func() { _ = srv.Serve(ln) }()
		defer srv.Close()
		log.Info("metrics", "listen", ln.Addr().String())
	}
	// credentials of start reports: libmunge in-process where built with
	// it (make's default), else the unmunge command
	log.Info("munge", "via", auth.MungerKind)
	notify := sdnotify.FromEnv(getenv, os.Getpid())
	cfg.Heartbeat = func() { _ = notify.Watchdog() }
	c := New(cfg, store, auth.DefaultMunger(""), m)
	// ready: configuration read, Redis connected, metrics listening
	// (Type=notify); leading or standing by is decided in Run
	if err := notify.Ready("cluster " + rcfg.Cluster); err != nil {
		log.Warn("systemd notify", "err", err)
	}
	defer func() { _ = notify.Stopping() }()
	if err := c.Run(ctx); err != nil && !errors.Is(err, context.Canceled) {
		log.Error("coordinator stopped", "err", err)
		return 1
	}
	return 0
}

func flagSet(fs *flag.FlagSet, name string) bool {
	set := false
	fs.Visit(func(f *flag.Flag) { set = set || f.Name == name })
	return set
}
