package relay

import (
	"context"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"time"

	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/isched/isched/internal/auth"
	"github.com/isched/isched/internal/daemon"
	"github.com/isched/isched/internal/sdnotify"
	"github.com/isched/isched/internal/stream"
	"github.com/isched/isched/internal/version"
)

// DefaultListen is isched-relay's default address (all interfaces: the
// wrappers run on every compute node).
const DefaultListen = ":6395"

// capCheckPeriod: how often the relay re-reads Redis's maxmemory (an
// operator's CONFIG SET takes effect within it).
const capCheckPeriod = 30 * time.Second

// options are isched-relay's command line.
type options struct {
	daemon.Flags
	listen, cluster, mungeSocket string
	maxLen                       int64
	maxLenSet                    bool
	streamFraction               float64
	ration                       Ration
	maxConnsPerUID               int
	maxUnauth, maxUnauthSource   int
	inFlight, inFlightPerUID     int64
	readablePassword             bool
	query                        queryOptions
}

func parseOptions(args []string, getenv func(string) string, stderr io.Writer) (o options, code int, ok bool) {
	fs := flag.NewFlagSet("isched-relay", flag.ContinueOnError)
	fs.SetOutput(stderr)
	o.Register(fs, "")
	d := DefaultConfig("x")
	listen := getenv("ISCHED_RELAY_LISTEN")
	if listen == "" {
		listen = DefaultListen
	}
	fs.StringVar(&o.listen, "listen", listen, "TCP address wrappers connect to (env ISCHED_RELAY_LISTEN)")
	fs.StringVar(&o.cluster, "cluster", getenv("ISCHED_CLUSTER"), "cluster name: the relay appends to isched:<cluster>:ingest only (default $ISCHED_CLUSTER; required)")
	fs.StringVar(&o.mungeSocket, "munge-socket", "", "munged's socket (default: MUNGE's)")
	fs.Int64Var(&o.maxLen, "max-len", d.MaxLen, "approximate cap of the ingest stream (XADD MAXLEN ~); lowered to what -stream-memory-fraction of Redis's maxmemory holds at 64 KiB an entry, an error if given and over it")
	fs.Float64Var(&o.streamFraction, "stream-memory-fraction", DefaultStreamFraction, "share of Redis's maxmemory the ingest stream may take at worst (the rest: the coordinator's keys, the job table, client buffers)")
	fs.Float64Var(&o.ration.EntriesPerSec, "uid-entries-per-sec", d.Ration.EntriesPerSec, "reports one uid may send per second, over all its jobs")
	fs.Float64Var(&o.ration.EntryBurst, "uid-entry-burst", d.Ration.EntryBurst, "reports one uid may send at once above its rate")
	fs.Float64Var(&o.ration.BytesPerSec, "uid-bytes-per-sec", d.Ration.BytesPerSec, "report bytes one uid may send per second")
	fs.Float64Var(&o.ration.ByteBurst, "uid-byte-burst", d.Ration.ByteBurst, "report bytes one uid may send at once above its rate")
	fs.IntVar(&o.maxConnsPerUID, "uid-max-conns", d.MaxConnsPerUID, "open connections one uid may hold")
	fs.IntVar(&o.maxUnauth, "max-unauthenticated", d.MaxUnauthenticated, "connections that have not yet sent their credential, in all (when full, a new one from a source holding fewer closes the oldest connection of the sources holding the most)")
	fs.IntVar(&o.maxUnauthSource, "source-max-unauthenticated", d.MaxUnauthenticatedPerSource, "connections that have not yet sent their credential from one source: a uid on the relay's own host (from the kernel's socket table), else an IP; a new one from a source at this share closes that source's oldest (never one whose credential is being checked)")
	fs.Int64Var(&o.inFlight, "in-flight-bytes", d.InFlightBytes, "memory lent to frames being read, in all (a frame's buffer grows as its bytes arrive; over this, its connection is refused)")
	fs.Int64Var(&o.inFlightPerUID, "uid-in-flight-bytes", d.InFlightBytesPerUID, "memory lent to one uid's frames being read (before authentication: one source's)")
	fs.BoolVar(&o.readablePassword, "allow-readable-password", false, "accept a reporter password file readable by others (a site still giving it to jobs, the dev cluster); by default it must be private")
	o.query.register(fs, getenv)
	if code, ok := daemon.Parse(fs, args); !ok {
		return o, code, false
	}
	if o.Version {
		fmt.Fprintln(os.Stdout, version.String("isched-relay"))
		return o, daemon.ExitOK, false
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "isched-relay: unexpected arguments %q\n", fs.Args())
		return o, daemon.ExitUsage, false
	}
	if o.cluster == "" {
		fmt.Fprintln(stderr, "isched-relay: no cluster name: set -cluster or ISCHED_CLUSTER (the -cluster of the site's isched-agent)")
		return o, daemon.ExitUsage, false
	}
	fs.Visit(func(f *flag.Flag) { o.maxLenSet = o.maxLenSet || f.Name == "max-len" })
	return o, 0, true
}

// Main is isched-relay's entry point: flags and environment in, exit code
// out. Redis is configured by the environment (stream.ConfigFromEnv, the
// reporter ACL user by default, whose password file must be private: the
// relay's host is the only one that needs it).
func Main(ctx context.Context, args []string, getenv func(string) string, stderr io.Writer) int {
	o, code, ok := parseOptions(args, getenv, stderr)
	if !ok {
		return code
	}
	log, err := o.Logger(stderr)
	if err != nil {
		fmt.Fprintf(stderr, "isched-relay: %v\n", err)
		return daemon.ExitUsage
	}
	keys, cfg, req, err := o.config()
	if err != nil {
		log.Error("configuration", "err", err)
		return daemon.ExitUsage
	}
	metrics := NewMetrics()
	stopHTTP, err := o.ServeMetrics(promhttp.HandlerFor(metrics.Registry, promhttp.HandlerOpts{}), log)
	defer stopHTTP()
	if err != nil {
		log.Error("listener", "err", err)
		return daemon.ExitUsage
	}
	ln, err := net.Listen("tcp", o.listen)
	if err != nil {
		log.Error("listen", "err", err)
		return daemon.ExitUsage
	}
	defer ln.Close()
	rdb, code, ok := o.connect(ctx, getenv, log)
	if !ok {
		return code
	}
	defer rdb.Close()
	sc, err := startCap(ctx, rdb, req)
	if err != nil {
		log.Error("configuration", "err", err)
		return daemon.ExitUsage
	}
	cfg.MaxLen = sc.Entries
	metrics.streamCap(sc)
	v := MungeVerifier{Munger: auth.DefaultMunger(o.mungeSocket), UID: os.Getuid(), Cluster: o.cluster}
	srv, err := NewServer(cfg, v, rdb, nil, metrics, log)
	if err != nil {
		log.Error("configuration", "err", err)
		return daemon.ExitUsage
	}
	stopQueries, code, ok := o.serveQueries(ctx, srv, keys, getenv, log)
	if !ok {
		return code
	}
	defer stopQueries()
	logCap(log, "relay stream cap", sc)
	stopWatch := watchCap(ctx, srv, rdb, req, sc, metrics, log)
	defer stopWatch()
	log.Info("started", "listen", ln.Addr().String(), "stream", cfg.Stream, "max_len", cfg.MaxLen, "uid", v.UID,
		"uid_entries_per_sec", cfg.Ration.EntriesPerSec, "uid_bytes_per_sec", cfg.Ration.BytesPerSec, "munge", auth.MungerKind)
	return serve(ctx, srv, ln, cfg.Stream, getenv, log)
}

// config is the relay's configuration from the options: the cluster's
// keys, the server's Config and the stream cap asked for, checked before
// Redis is asked anything.
func (o options) config() (stream.Keys, Config, CapRequest, error) {
	keys, err := stream.NewKeys(o.cluster)
	if err != nil {
		return keys, Config{}, CapRequest{}, err
	}
	cfg := DefaultConfig(keys.Ingest())
	cfg.MaxLen, cfg.Ration, cfg.MaxConnsPerUID = o.maxLen, o.ration, o.maxConnsPerUID
	cfg.InFlightBytes, cfg.InFlightBytesPerUID = o.inFlight, o.inFlightPerUID
	cfg.MaxUnauthenticated, cfg.MaxUnauthenticatedPerSource = o.maxUnauth, o.maxUnauthSource
	req := CapRequest{MaxEntry: cfg.MaxEntry, Fraction: o.streamFraction, MaxLen: o.maxLen, Explicit: o.maxLenSet}
	if err := cfg.validate(); err != nil {
		return keys, cfg, req, err
	}
	if _, err := DeriveStreamCap(req); err != nil { // the flags alone, before Redis is asked
		return keys, cfg, req, err
	}
	return keys, cfg, req, nil
}

// serve tells systemd the relay is ready and serves ln until ctx ends.
func serve(ctx context.Context, srv *Server, ln net.Listener, streamName string, getenv func(string) string, log *slog.Logger) int {
	notify := sdnotify.FromEnv(getenv, os.Getpid())
	if err := notify.Ready("relaying to " + streamName); err != nil {
		log.Warn("systemd notify", "err", err)
	}
	defer func() { _ = notify.Stopping() }()
	if err := srv.Serve(ctx, ln); err != nil {
		log.Error("stopped", "err", err)
		return daemon.ExitError
	}
	log.Info("stopped")
	return daemon.ExitOK
}

// connect opens Redis as the reporter, retrying while it is away; ok
// false: return code.
func (o options) connect(ctx context.Context, getenv func(string) string, log *slog.Logger) (rdb *stream.Client, code int, ok bool) {
	rcfg, err := stream.ConfigFromEnv(func(k string) string {
		if k == "ISCHED_CLUSTER" {
			return o.cluster
		}
		return getenv(k)
	}, "reporter")
	if err != nil {
		log.Error("redis configuration", "err", err)
		return nil, daemon.ExitUsage, false
	}
	rcfg.Private = !o.readablePassword
	return daemon.ConnectRedis(ctx, rcfg, log)
}

// watchCap follows Redis's maxmemory every capCheckPeriod, changing srv's
// cap from sc when it changes, until the returned stop is called.
func watchCap(ctx context.Context, srv *Server, mem MemoryReader, req CapRequest, sc StreamCap, m *Metrics, log *slog.Logger) (stop func()) {
	ctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	w := &capWatch{mem: mem, req: req, cur: sc, log: log, warn: srv.warns.warn,
		set: func(c StreamCap) { srv.SetMaxLen(c.Entries); m.streamCap(c) }}
	go func() { defer close(done); w.run(ctx, capCheckPeriod) }()
	return func() { cancel(); <-done }
}
