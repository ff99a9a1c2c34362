package sdnotify

import (
	"net"
	"path/filepath"
	"strconv"
	"testing"
	"time"
)

// listen opens a unixgram socket like systemd's and returns a reader of
// its datagrams.
func listen(t *testing.T, name string) func() string {
	t.Helper()
	c, err := net.ListenUnixgram("unixgram", &net.UnixAddr{Name: name, Net: "unixgram"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return func() string {
		t.Helper()
		_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
		buf := make([]byte, 4096)
		n, err := c.Read(buf)
		if err != nil {
			t.Fatalf("no datagram: %v", err)
		}
		return string(buf[:n])
	}
}

func env(m map[string]string) func(string) string { return func(k string) string { return m[k] } }

func TestNotify(t *testing.T) {
	t.Parallel()
	for _, sock := range []string{filepath.Join(t.TempDir(), "notify"), "@isched-sdnotify-test-" + strconv.FormatInt(time.Now().UnixNano(), 36)} {
		read := listen(t, sock)
		n := FromEnv(env(map[string]string{"NOTIFY_SOCKET": sock}), 42)
		if err := n.Ready("publishing"); err != nil {
			t.Fatal(err)
		}
		if got := read(); got != "READY=1\nSTATUS=publishing" {
			t.Errorf("%s: got %q", sock, got)
		}
		if err := n.Stopping(); err != nil || read() != "STOPPING=1" {
			t.Errorf("%s: stopping: %v", sock, err)
		}
		if n.WatchdogInterval() != 0 || n.Watchdog() != nil {
			t.Errorf("a watchdog without WATCHDOG_USEC")
		}
	}
}

func TestWatchdog(t *testing.T) {
	t.Parallel()
	sock := filepath.Join(t.TempDir(), "notify")
	read := listen(t, sock)
	n := FromEnv(env(map[string]string{"NOTIFY_SOCKET": sock, "WATCHDOG_USEC": "8000000", "WATCHDOG_PID": "42"}), 42)
	now := time.Unix(1_800_000_000, 0)
	n.now = func() time.Time { return now }
	if n.WatchdogInterval() != 8*time.Second {
		t.Fatalf("interval %s", n.WatchdogInterval())
	}
	sent := 0
	for i := 0; i < 12; i++ { // every second for 12 s: one ping per 2 s (a quarter)
		if err := n.Watchdog(); err != nil {
			t.Fatal(err)
		}
		now = now.Add(time.Second)
	}
	_ = n.Send("END")
	for {
		m := read()
		if m == "END" {
			break
		}
		if m != "WATCHDOG=1" {
			t.Fatalf("got %q", m)
		}
		sent++
	}
	if sent != 6 {
		t.Errorf("%d pings in 12 s with an 8 s watchdog, want 6", sent)
	}
	// another process's watchdog is not ours
	if FromEnv(env(map[string]string{"NOTIFY_SOCKET": sock, "WATCHDOG_USEC": "8000000", "WATCHDOG_PID": "7"}), 42).WatchdogInterval() != 0 {
		t.Error("WATCHDOG_PID of another process accepted")
	}
}

func TestOutsideSystemd(t *testing.T) {
	t.Parallel()
	var nilN *Notifier
	for _, n := range []*Notifier{FromEnv(env(nil), 1), nilN} {
		if n.Enabled() || n.Ready("x") != nil || n.Watchdog() != nil || n.Stopping() != nil {
			t.Error("a notifier without NOTIFY_SOCKET did something")
		}
	}
	// a socket nobody listens on is an error the caller may log
	if err := FromEnv(env(map[string]string{"NOTIFY_SOCKET": filepath.Join(t.TempDir(), "none")}), 1).Ready("x"); err == nil {
		t.Error("no error for a missing socket")
	}
}
