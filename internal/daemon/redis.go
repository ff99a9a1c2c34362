package daemon

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"time"

	"github.com/isched/isched/internal/retry"
	"github.com/isched/isched/internal/stream"
)

// ConnectRedis opens Redis as rcfg says, retrying with jitter while it is
// away (a boot order, a restart) rather than exit and let systemd restart
// us in lockstep; ok false: return code (a configuration error is
// ExitUsage, ctx ending first ExitOK).
func ConnectRedis(ctx context.Context, rcfg stream.Config, log *slog.Logger) (rdb *stream.Client, code int, ok bool) {
	b := &retry.Backoff{Min: time.Second, Max: 30 * time.Second, Log: log, What: "redis connection", Level: slog.LevelError}
	err := retry.Do(ctx, b, func(ctx context.Context) (err error) {
		rdb, err = stream.Open(ctx, rcfg)
		return err
	}, func(err error) bool { return errors.Is(err, stream.ErrConfig) })
	if errors.Is(err, stream.ErrConfig) {
		log.Error("redis configuration", "err", err, "addrs", rcfg.Addrs, "user", rcfg.User)
		return nil, ExitUsage, false
	}
	if err != nil {
		log.Info("stopped before Redis answered", "err", err)
		return nil, ExitOK, false
	}
	log.Info("redis", "addrs", rcfg.Addrs, "redis_user", rcfg.User)
	return rdb, 0, true
}

// ServeMetrics starts /debug/pprof/ (-pprof-listen) and /metrics
// (-metrics-listen, served by metrics) where configured; stop ends both.
func (f Flags) ServeMetrics(metrics http.Handler, log *slog.Logger) (stop func(), err error) {
	var stops []func() error
	stop = func() {
		for _, s := range stops {
			_ = s()
		}
	}
	s, err := f.ServePprof(log)
	if err != nil {
		return stop, fmt.Errorf("pprof listener: %w", err)
	}
	stops = append(stops, s)
	if f.MetricsListen != "" {
		mux := http.NewServeMux()
		mux.Handle("/metrics", metrics)
		s, err := Serve(f.MetricsListen, "metrics", mux, log)
		if err != nil {
			return stop, fmt.Errorf("metrics listener: %w", err)
		}
		stops = append(stops, s)
	}
	return stop, nil
}
