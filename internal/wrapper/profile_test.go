package wrapper

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func TestProfileWindowNote(t *testing.T) {
	t0 := time.Unix(1000, 0)
	at := func(s float64) time.Time { return t0.Add(time.Duration(s * float64(time.Second))) }
	cases := []struct {
		name         string
		warmup       int64
		window       time.Duration
		ends         []float64 // iteration ends, seconds
		wantMeasured bool
		wantStart    int
		closeAt      int // the iteration that completes the window (its peak is kept)
	}{
		{"warming up", 3, time.Second, []float64{1, 2, 3}, false, 3, 0},
		{"window not yet long", 2, 5 * time.Second, []float64{1, 2, 3, 4, 6}, false, 2, 0},
		{"window measured at the iteration that reaches it", 2, 5 * time.Second, []float64{1, 2, 3, 4, 6, 7}, true, 2, 6},
		{"one measured iteration is not a window", 1, 0, []float64{1, 30}, false, 1, 0},
		{"two are", 1, 0, []float64{1, 30, 31}, true, 1, 3},
		{"no warm-up", 0, 2 * time.Second, []float64{1, 2, 3}, true, 0, 2},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			p := newProfileWindow(c.warmup, c.window)
			p.note(0, t0, 0, nil) // the start: nothing measured
			for i, e := range c.ends {
				p.note(i+1, at(e), int64(i+1), nil)
			}
			if p.closed != c.wantMeasured {
				t.Errorf("measured %v, want %v", p.closed, c.wantMeasured)
			}
			if c.wantMeasured && p.peakRSS != int64(c.closeAt) {
				t.Errorf("peak %d kept, want the one when the window was measured (%d)", p.peakRSS, c.closeAt)
			}
			if int64(len(c.ends)) >= c.warmup && p.startIdx != c.wantStart {
				t.Errorf("window starts at iteration %d, want %d", p.startIdx, c.wantStart)
			}
		})
	}
}

// The wrapper stops a loop that would run for minutes once the window is
// measured, and the summary's iteration times leave the warm-up out: the
// fake loop's first iterations are ten times slower.
func TestRunProfileWindow(t *testing.T) {
	dir := t.TempDir()
	sum := filepath.Join(dir, "sum.json")
	loop := `import sys, time
for i in range(1, 100000):
    time.sleep(1.0 if i <= 4 else 0.05)
    print(f"step {i}/100000", flush=True)
`
	getenv := func(k string) string {
		if k == "TMPDIR" {
			return dir
		}
		return ""
	}
	opts, err := ParseArgs([]string{"--no-report", "--interval", "100ms", "--grace", "5s", "--summary-json", sum,
		"--iter-pattern", `step (?P<step>\d+)/(?P<total>\d+)`, "--profile-window", "1s", "--profile-warmup", "5",
		"--", "/usr/bin/python3", "-u", "-c", loop}, getenv, &bytes.Buffer{})
	if err != nil {
		t.Fatal(err)
	}
	var stderr bytes.Buffer
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	Run(ctx, opts, Deps{Getenv: getenv, Stdout: &bytes.Buffer{}, Stderr: &stderr})
	if ctx.Err() != nil {
		t.Fatalf("the wrapper did not stop the loop: %s", stderr.String())
	}
	b, err := os.ReadFile(sum)
	if err != nil {
		t.Fatal(err)
	}
	var s Summary
	if err := json.Unmarshal(b, &s); err != nil {
		t.Fatal(err)
	}
	p := s.Profile
	if p == nil || !p.Complete {
		t.Fatalf("profile %+v, want a complete window; stderr: %s", p, stderr.String())
	}
	if p.WarmupIters != 5 || p.MeasuredIters < 2 || p.WindowSeconds < 1 {
		t.Errorf("profile %+v: want 5 warm-up iterations, 2+ measured over 1 s+", p)
	}
	// measured: 50 ms iterations (loaded machine: generous bound), the
	// 500 ms warm-up ones left out
	if p.MeanIterMS < 40 || p.MeanIterMS > 150 || s.MedianIterMS > 150 {
		t.Errorf("mean %.1f ms, median %.1f ms per iteration: want ~50 ms, the warm-up left out", p.MeanIterMS, s.MedianIterMS)
	}
	if s.Signal != "SIGTERM" && !strings.Contains(stderr.String(), "profile window measured") {
		t.Errorf("the child was not stopped by the window: %+v\n%s", s, stderr.String())
	}
}
