// Package daemon holds what isched's two daemons, isched-agent and
// isched-coordinator, share so that the same thing is spelled the same way
// on both: the common flags (-log-format, -log-level, -metrics-listen,
// -pprof-listen, -version), the logger they build, the exit codes, and the
// typed values and strict loader of their JSON config files.
package daemon

import (
	"bytes"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"time"

	"github.com/isched/isched/internal/profiling"
)

// Exit codes of both daemons' Main.
const (
	ExitOK    = 0 // stopped by its context (SIGTERM), or -h / -version
	ExitError = 1 // could not run (a failure restarting may fix)
	// ExitUsage is a configuration error: flags, config file, password
	// file mode, an address that cannot be listened on. The systemd units
	// do not restart on it (RestartPreventExitStatus=2).
	ExitUsage = 2
)

// Flags are the flags both daemons have, with the same names and meaning.
type Flags struct {
	LogFormat     string
	LogLevel      string
	MetricsListen string
	PprofListen   string
	Version       bool
}

// Register defines the common flags on fs; metricsDefault is the daemon's
// default -metrics-listen address ("" for off).
func (f *Flags) Register(fs *flag.FlagSet, metricsDefault string) {
	fs.StringVar(&f.LogFormat, "log-format", "json", "log format: json or text")
	fs.StringVar(&f.LogLevel, "log-level", "info", "log level: debug, info, warn, error")
	fs.StringVar(&f.MetricsListen, "metrics-listen", metricsDefault, "address of /metrics (Prometheus), e.g. 127.0.0.1:9471 (empty: off)")
	fs.StringVar(&f.PprofListen, "pprof-listen", "", "serve Go's /debug/pprof/ on this address (off by default; for diagnosing, keep it on loopback)")
	fs.BoolVar(&f.Version, "version", false, "print the version and exit")
}

// Logger builds the daemon's structured logger on w from -log-format and
// -log-level; an error names the flag.
func (f Flags) Logger(w io.Writer) (*slog.Logger, error) {
	var lv slog.Level
	if err := lv.UnmarshalText([]byte(f.LogLevel)); err != nil {
		return nil, fmt.Errorf("-log-level %q: %w", f.LogLevel, err)
	}
	opts := &slog.HandlerOptions{Level: lv}
	switch f.LogFormat {
	case "json":
		return slog.New(slog.NewJSONHandler(w, opts)), nil
	case "text":
		return slog.New(slog.NewTextHandler(w, opts)), nil
	}
	return nil, fmt.Errorf("-log-format %q: want json or text", f.LogFormat)
}

// HelpOut is where Parse prints the usage asked for with -h or --help
// (os.Stdout; tests replace it).
var HelpOut io.Writer = os.Stdout

// Parse parses args into fs. It returns ok false with the exit code when
// the caller must return at once: -h or --help (ExitOK, the usage printed
// on HelpOut, as every GNU tool does) or a bad flag (ExitUsage, the flag
// package's error and the usage printed on fs's output).
func Parse(fs *flag.FlagSet, args []string) (code int, ok bool) {
	out := fs.Output()
	var buf bytes.Buffer
	fs.SetOutput(&buf)
	err := fs.Parse(args)
	fs.SetOutput(out)
	switch {
	case errors.Is(err, flag.ErrHelp):
		_, _ = buf.WriteTo(HelpOut)
		return ExitOK, false
	case err != nil:
		_, _ = buf.WriteTo(out)
		return ExitUsage, false
	}
	return 0, true
}

// FlagSet reports whether the flag name was given on fs's command line.
func FlagSet(fs *flag.FlagSet, name string) bool {
	set := false
	fs.Visit(func(f *flag.Flag) { set = set || f.Name == name })
	return set
}

// Serve listens on addr and serves mux until the returned close function
// is called; it logs the address (msg what, listen), with port 0 the only
// way to learn it.
func Serve(addr, what string, mux *http.ServeMux, log *slog.Logger) (func() error, error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", what, err)
	}
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	go func() { _ = srv.Serve(ln) }()
	log.Info(what, "listen", ln.Addr().String())
	return srv.Close, nil
}

// ServePprof serves /debug/pprof/ on addr when it is not empty; the close
// function is never nil.
func (f Flags) ServePprof(log *slog.Logger) (func() error, error) {
	if f.PprofListen == "" {
		return func() error { return nil }, nil
	}
	mux := http.NewServeMux()
	profiling.Handle(mux)
	return Serve(f.PprofListen, "pprof", mux, log)
}
