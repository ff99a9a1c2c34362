package retry

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"strings"
	"testing"
	"time"
)

func TestBackoff(t *testing.T) {
	t.Parallel()
	var buf bytes.Buffer
	now := time.Unix(1_800_000_000, 0)
	b := &Backoff{Min: 100 * time.Millisecond, Max: time.Second, What: "poll", Now: func() time.Time { return now },
		Log: slog.New(slog.NewTextHandler(&buf, nil)), Level: slog.LevelError, Rand: func() float64 { return 1 }} // the top of each range
	boom := errors.New("slurmctld unreachable")
	var waits []time.Duration
	for i := 0; i < 6; i++ {
		waits = append(waits, b.Failed(boom))
		now = now.Add(10 * time.Second)
	}
	want := []time.Duration{100 * time.Millisecond, 200 * time.Millisecond, 400 * time.Millisecond, 800 * time.Millisecond, time.Second, time.Second}
	for i := range want {
		if waits[i] != want[i] {
			t.Fatalf("waits %v, want %v", waits, want)
		}
	}
	// logged: the first failure, then once a minute (the 6th, 50 s later, not yet)
	if n := strings.Count(buf.String(), "poll failing"); n != 1 || !strings.Contains(buf.String(), "level=ERROR") {
		t.Errorf("failure lines:\n%s", buf.String())
	}
	now = now.Add(time.Minute)
	b.Failed(boom)
	if n := strings.Count(buf.String(), "poll failing"); n != 2 || !strings.Contains(buf.String(), "failures=7") {
		t.Errorf("after a minute, want a second line with the count:\n%s", buf.String())
	}
	b.OK()
	if !strings.Contains(buf.String(), "poll recovered") || !strings.Contains(buf.String(), "down_for=2m0s") || b.failures != 0 {
		t.Errorf("recovery not logged:\n%s", buf.String())
	}
	if w := b.Failed(boom); w != 100*time.Millisecond {
		t.Errorf("after a success the wait starts again at Min: %s", w)
	}
	b.OK()
	buf.Reset()
	b.OK()
	if buf.Len() != 0 {
		t.Errorf("a success without failures logged %q", buf.String())
	}
}

func TestBackoffDefaults(t *testing.T) {
	t.Parallel()
	top := func() float64 { return 1 }
	b := Backoff{Rand: top} // no logger, no clock: defaults
	var last time.Duration
	for i := 0; i < 20; i++ {
		last = b.Failed(errors.New("x"))
	}
	if first := (&Backoff{Rand: top}).Failed(nil); first != 200*time.Millisecond || last != 30*time.Second {
		t.Errorf("defaults: first %s, cap %s; want 200ms and 30s", first, last)
	}
	if (&Backoff{Min: 5 * time.Second, Max: time.Second, Rand: top}).Failed(nil) != 5*time.Second {
		t.Error("Max below Min: Min wins")
	}
}

func TestJitter(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		d    time.Duration
		r    float64
		want time.Duration
	}{
		{time.Second, 0, 500 * time.Millisecond},
		{time.Second, 0.5, 750 * time.Millisecond},
		{time.Second, 1, time.Second},
		{time.Second, -3, 500 * time.Millisecond}, // clamped
		{time.Second, 7, time.Second},
		{3 * time.Nanosecond, 1, 3 * time.Nanosecond}, // odd: d/2 rounds down, the top is still d
		{0, 0.5, 0},
	} {
		if got := Jitter(tt.d, tt.r); got != tt.want {
			t.Errorf("Jitter(%s, %v) = %s, want %s", tt.d, tt.r, got, tt.want)
		}
	}
}

// TestBackoffJitter: the random source places every wait in [d/2, d] of
// the doubling sequence, and loops that fail together spread out.
func TestBackoffJitter(t *testing.T) {
	t.Parallel()
	rs := []float64{0, 0.25, 1, 0.5, 0}
	i := 0
	b := Backoff{Min: 100 * time.Millisecond, Max: 800 * time.Millisecond, Rand: func() float64 { i++; return rs[i-1] }}
	want := []time.Duration{50 * time.Millisecond, 125 * time.Millisecond, 400 * time.Millisecond, 600 * time.Millisecond, 400 * time.Millisecond}
	for k, w := range want {
		if got := b.Failed(nil); got != w {
			t.Errorf("failure %d: wait %s, want %s", k+1, got, w)
		}
	}
	// the default source: 1,000 loops at their third failure (d = 400 ms)
	seen := map[time.Duration]bool{}
	for range 1000 {
		b := Backoff{Min: 100 * time.Millisecond}
		b.Failed(nil)
		b.Failed(nil)
		w := b.Failed(nil)
		if w < 200*time.Millisecond || w > 400*time.Millisecond {
			t.Fatalf("wait %s outside [200ms, 400ms]", w)
		}
		seen[w] = true
	}
	if len(seen) < 500 {
		t.Errorf("1,000 loops failing together waited only %d distinct times: no jitter", len(seen))
	}
}

func TestDo(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	calls := 0
	b := &Backoff{Min: time.Millisecond, Max: 2 * time.Millisecond}
	err := Do(ctx, b, func(context.Context) error {
		calls++
		if calls < 3 {
			return errors.New("not yet")
		}
		return nil
	}, nil)
	if err != nil || calls != 3 || b.failures != 0 {
		t.Errorf("Do: %v after %d calls, %d failures left", err, calls, b.failures)
	}
	bad := errors.New("config")
	calls = 0
	err = Do(ctx, &Backoff{}, func(context.Context) error { calls++; return bad }, func(err error) bool { return errors.Is(err, bad) })
	if !errors.Is(err, bad) || calls != 1 {
		t.Errorf("permanent error: %v after %d calls", err, calls)
	}
	cctx, cancel := context.WithCancel(ctx)
	cancel()
	if err := Do(cctx, &Backoff{}, func(context.Context) error { return errors.New("down") }, nil); !errors.Is(err, context.Canceled) {
		t.Errorf("cancelled: %v", err)
	}
}

func TestSleep(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	if err := Sleep(ctx, 0); err != nil {
		t.Errorf("Sleep(live, 0) = %v, want nil", err)
	}
	if err := Sleep(ctx, time.Millisecond); err != nil {
		t.Errorf("Sleep(live, 1ms) = %v, want nil", err)
	}
	cancel()
	if err := Sleep(ctx, time.Hour); !errors.Is(err, context.Canceled) {
		t.Errorf("Sleep(cancelled, 1h) = %v, want context.Canceled", err)
	}
	if err := Sleep(ctx, 0); !errors.Is(err, context.Canceled) {
		t.Errorf("Sleep(cancelled, 0) = %v, want context.Canceled", err)
	}
}
