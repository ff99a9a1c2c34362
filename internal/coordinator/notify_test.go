package coordinator

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/alicebob/miniredis/v2"
	"github.com/isched/isched/internal/testutil"
)

// TestMainTellsSystemd runs Main as systemd would (Type=notify,
// WatchdogSec): READY=1 once Redis answers, WATCHDOG=1 from the rounds,
// STOPPING=1 on the way out.
func TestMainTellsSystemd(t *testing.T) {
	mr := miniredis.RunT(t)
	mr.RequireUserAuth("coordinator", "coord-secret")
	dir := t.TempDir()
	pw := filepath.Join(dir, "coordinator.pass")
	if err := os.WriteFile(pw, []byte("coord-secret\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	notify := testutil.ListenNotify(t)
	env := map[string]string{"ISCHED_REDIS_ADDR": mr.Addr(), "ISCHED_REDIS_USER": "coordinator", "ISCHED_REDIS_PASSWORD_FILE": pw,
		"ISCHED_CLUSTER": "lab", "NOTIFY_SOCKET": notify.Path, "WATCHDOG_USEC": "400000"}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan int, 1)
	var stderr strings.Builder
	go func() {
		done <- Main(ctx, []string{"-metrics-listen", "", "-tick", "50ms"}, func(k string) string { return env[k] }, &stderr)
	}()
	stderrText := func() string { return stderr.String() }
	if got := notify.Next(stderrText); got != "READY=1\nSTATUS=cluster lab" {
		t.Fatalf("first notification %q", got)
	}
	if got := notify.Next(stderrText); got != "WATCHDOG=1" {
		t.Fatalf("second notification %q, want a watchdog ping from a round", got)
	}
	cancel()
	notify.UntilStopping(stderrText)
	if code := <-done; code != 0 {
		t.Errorf("exit %d: %s", code, stderr.String())
	}
}
