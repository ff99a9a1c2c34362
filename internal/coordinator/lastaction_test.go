package coordinator

import (
	"testing"
	"time"
)

// TestBeforeLastAction: no decision on a job table older than the
// lineage's last action (it still shows the old time limit or partition),
// for at most StaleAfter.
func TestBeforeLastAction(t *testing.T) {
	t.Parallel()
	now := time.UnixMilli(1_800_000_000_000)
	for _, tt := range []struct {
		name   string
		last   time.Duration // before now; 0: no action yet
		jobsAt time.Duration // before now
		want   bool
	}{
		{"no action yet", 0, 3 * time.Second, false},
		{"table older than the action", 2 * time.Second, 3 * time.Second, true},
		{"table newer than the action", 2 * time.Second, time.Second, false},
		{"waited StaleAfter already", 16 * time.Second, 20 * time.Second, false},
	} {
		c := &Coordinator{cfg: Config{StaleAfter: 15 * time.Second}, jobsAt: now.Add(-tt.jobsAt)}
		l := &lineage{}
		if tt.last > 0 {
			l.LastMoveMS = now.Add(-tt.last).UnixMilli()
		}
		if got := c.beforeLastAction(l, now); got != tt.want {
			t.Errorf("%s: %v, want %v", tt.name, got, tt.want)
		}
	}
}
