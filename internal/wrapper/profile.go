package wrapper

import (
	"context"
	"log/slog"
	"maps"
	"syscall"
	"time"

	"github.com/isched/isched/internal/child"
)

// profileWindow is the measured window of `isched profile`
// (--profile-window): the first warmup iteration durations are not
// measured (data loader start, allocator growth, the first iteration's
// set-up); the window starts when the last of them ends and is measured
// once an iteration ends window or more after that. The wrapper then stops
// the child the way it stops it on SIGTERM: signal to the group, grace
// period, SIGKILL. Guarded by state.mu.
type profileWindow struct {
	warmup   int64
	window   time.Duration
	startIdx int       // index into state.durations of the first measured iteration; -1: warming up
	start    time.Time // end of the warm-up
	last     time.Time // end of the last measured iteration
	measured chan struct{}
	closed   bool
	// the peaks when the window was measured: what stopping the command
	// makes it do (a checkpoint saved on SIGTERM) is not its training
	peakRSS int64
	peakGPU map[string]int64
}

func newProfileWindow(warmup int64, window time.Duration) *profileWindow {
	return &profileWindow{warmup: warmup, window: window, startIdx: -1, measured: make(chan struct{})}
}

// note is called after each iteration duration is appended (n: how many
// there are now; at: when the iteration ended; the state's peaks so far).
func (p *profileWindow) note(n int, at time.Time, peakRSS int64, peakGPU map[string]int64) {
	if p == nil || p.closed {
		return
	}
	if p.startIdx < 0 {
		if int64(n) >= p.warmup {
			p.startIdx, p.start = n, at
		}
		return
	}
	if n > p.startIdx {
		p.last = at
	}
	if n-p.startIdx >= 2 && p.last.Sub(p.start) >= p.window {
		p.closed = true
		p.peakRSS = peakRSS
		p.peakGPU = maps.Clone(peakGPU)
		close(p.measured)
	}
}

// measuredDurations are the iteration durations of the window (all of
// them while no profile is asked for).
func (p *profileWindow) measuredDurations(all []float64) []float64 {
	if p == nil {
		return all
	}
	if p.startIdx < 0 || p.startIdx > len(all) {
		return nil
	}
	return all[p.startIdx:]
}

// stopWhenMeasured stops the child once the window is measured.
func (p *profileWindow) stopWhenMeasured(ctx context.Context, proc *child.Process, log *slog.Logger) {
	if p == nil {
		return
	}
	select {
	case <-ctx.Done():
	case <-p.measured:
		log.Info("profile window measured; stopping the child", "window", p.window.String(), "warmup_iters", p.warmup)
		if err := proc.Stop(syscall.SIGTERM); err != nil {
			log.Warn("stop after the profile window", "err", err)
		}
	}
}

// fill adds the window's figures to the summary.
func (p *profileWindow) fill(sum *Summary, durations []float64) {
	if p == nil {
		return
	}
	m := p.measuredDurations(durations)
	sum.Profile = &ProfileSummary{WarmupIters: p.warmup, MeasuredIters: len(m), Complete: p.closed,
		PeakRSSBytes: sum.PeakRSSBytes, PeakGPUBytes: sum.PeakGPUBytes}
	if p.closed {
		sum.Profile.PeakRSSBytes, sum.Profile.PeakGPUBytes = p.peakRSS, p.peakGPU
	}
	if len(m) > 0 {
		sum.Profile.WindowSeconds = p.last.Sub(p.start).Seconds()
		var total float64
		for _, d := range m {
			total += d
		}
		sum.Profile.MeanIterMS = total / float64(len(m))
	}
	sum.MedianIterMS, sum.P90IterMS = quantile(m, 0.5), quantile(m, 0.9)
}

// ProfileSummary is the measured window of --profile-window.
type ProfileSummary struct {
	WarmupIters   int64   `json:"warmup_iters"`
	MeasuredIters int     `json:"measured_iters"`
	WindowSeconds float64 `json:"window_seconds"`
	MeanIterMS    float64 `json:"mean_iter_ms"`
	// Complete: the window was measured and the wrapper stopped the child;
	// false when the run ended first.
	Complete bool `json:"complete"`
	// PeakRSSBytes and PeakGPUBytes are the peaks until the window was
	// measured (the whole run's when it ended first): a training loop
	// that checkpoints on SIGTERM peaks higher while it stops.
	PeakRSSBytes int64            `json:"peak_rss_bytes"`
	PeakGPUBytes map[string]int64 `json:"peak_gpu_bytes,omitempty"`
}
