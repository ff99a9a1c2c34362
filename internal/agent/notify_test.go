package agent

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
// WatchdogSec): READY=1 once Redis answers, WATCHDOG=1 from the poll loop
// even while Slurm fails, STOPPING=1 on the way out.
func TestMainTellsSystemd(t *testing.T) {
	mr := miniredis.RunT(t)
	mr.RequireUserAuth("agent", "agent-secret")
	dir := t.TempDir()
	pw := filepath.Join(dir, "agent.pass")
	if err := os.WriteFile(pw, []byte("agent-secret\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	notify := testutil.ListenNotify(t)
	env := map[string]string{"ISCHED_REDIS_ADDR": mr.Addr(), "ISCHED_REDIS_USER": "agent", "ISCHED_REDIS_PASSWORD_FILE": pw,
		"NOTIFY_SOCKET": notify.Path, "WATCHDOG_USEC": "400000"}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan int, 1)
	var stderr strings.Builder
	go func() {
		done <- Main(ctx, []string{"-cluster", "lab", "-poll", "50ms", "-slurm-bin-dir", filepath.Join(dir, "no-slurm"), "-script-dir", filepath.Join(dir, "scripts")}, func(k string) string { return env[k] }, &stderr)
	}()
	stderrText := func() string { return stderr.String() }
	if got := notify.Next(stderrText); !strings.HasPrefix(got, "READY=1\n") {
		t.Fatalf("first notification %q", got)
	}
	if got := notify.Next(stderrText); got != "WATCHDOG=1" {
		t.Fatalf("second notification %q, want a watchdog ping from the poll loop", got)
	}
	cancel()
	notify.UntilStopping(stderrText)
	if code := <-done; code != ExitOK {
		t.Errorf("exit %d", code)
	}
}

// TestMainConfigErrorExits2: a configuration error is exit 2, which the
// unit's RestartPreventExitStatus=2 does not restart.
func TestMainConfigErrorExits2(t *testing.T) {
	pw := filepath.Join(t.TempDir(), "agent.pass")
	if err := os.WriteFile(pw, []byte("secret\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(pw, 0o644); err != nil {
		t.Fatal(err)
	}
	env := map[string]string{"ISCHED_REDIS_ADDR": "127.0.0.1:1", "ISCHED_REDIS_PASSWORD_FILE": pw}
	var stderr strings.Builder
	code := Main(context.Background(), []string{"-cluster", "lab"}, func(k string) string { return env[k] }, &stderr)
	if code != ExitUsage || !strings.Contains(stderr.String(), "readable by others") {
		t.Errorf("exit %d, stderr %q: want 2 and the reason", code, stderr.String())
	}
}
