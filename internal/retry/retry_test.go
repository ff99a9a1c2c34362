package retry

import (
	"bytes"
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
		Log: slog.New(slog.NewTextHandler(&buf, nil)), Level: slog.LevelError}
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
	if !strings.Contains(buf.String(), "poll recovered") || !strings.Contains(buf.String(), "down_for=2m0s") || b.Failures() != 0 {
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
	var b Backoff // no logger, no clock: defaults
	var last time.Duration
	for i := 0; i < 20; i++ {
		last = b.Failed(errors.New("x"))
	}
	if first := (&Backoff{}).Failed(nil); first != 200*time.Millisecond || last != 30*time.Second {
		t.Errorf("defaults: first %s, cap %s; want 200ms and 30s", first, last)
	}
	if (&Backoff{Min: 5 * time.Second, Max: time.Second}).Failed(nil) != 5*time.Second {
		t.Error("Max below Min: Min wins")
	}
}
