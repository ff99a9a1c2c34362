package coordinator

import (
	"context"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
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
	sock := filepath.Join(dir, "notify")
	ln, err := net.ListenUnixgram("unixgram", &net.UnixAddr{Name: sock, Net: "unixgram"})
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	env := map[string]string{"ISCHED_REDIS_ADDR": mr.Addr(), "ISCHED_REDIS_USER": "coordinator", "ISCHED_REDIS_PASSWORD_FILE": pw,
		"ISCHED_CLUSTER": "lab", "NOTIFY_SOCKET": sock, "WATCHDOG_USEC": "400000"}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan int, 1)
	var stderr strings.Builder
	go func() {
		done <- Main(ctx, []string{"-metrics-listen", "", "-tick", "50ms"}, func(k string) string { return env[k] }, &stderr)
	}()
	read := func() string {
		_ = ln.SetReadDeadline(time.Now().Add(20 * time.Second))
		buf := make([]byte, 1024)
		n, err := ln.Read(buf)
		if err != nil {
			t.Fatalf("no notification: %v\n%s", err, stderr.String())
		}
		return string(buf[:n])
	}
	if got := read(); got != "READY=1\nSTATUS=cluster lab" {
		t.Fatalf("first notification %q", got)
	}
	if got := read(); got != "WATCHDOG=1" {
		t.Fatalf("second notification %q, want a watchdog ping from a round", got)
	}
	cancel()
	for {
		if got := read(); got == "STOPPING=1" {
			break
		} else if got != "WATCHDOG=1" {
			t.Fatalf("notification %q", got)
		}
	}
	if code := <-done; code != 0 {
		t.Errorf("exit %d: %s", code, stderr.String())
	}
}
