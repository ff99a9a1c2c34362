package testutil

import (
	"net"
	"path/filepath"
	"testing"
	"time"
)

// Notify is a systemd notification socket (NOTIFY_SOCKET) for a daemon's
// Main under test.
type Notify struct {
	// Path is the socket's path, for NOTIFY_SOCKET.
	Path string
	t    testing.TB
	ln   *net.UnixConn
}

// ListenNotify opens a notification socket in a temporary directory; it is
// closed when the test ends.
func ListenNotify(t testing.TB) *Notify {
	t.Helper()
	path := filepath.Join(t.TempDir(), "notify")
	ln, err := net.ListenUnixgram("unixgram", &net.UnixAddr{Name: path, Net: "unixgram"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	return &Notify{Path: path, t: t, ln: ln}
}

// Next is the next notification. The test fails after 20 s without one,
// with what context returns (the daemon's stderr, say).
func (n *Notify) Next(context func() string) string {
	n.t.Helper()
	_ = n.ln.SetReadDeadline(time.Now().Add(20 * time.Second))
	buf := make([]byte, 1024)
	k, err := n.ln.Read(buf)
	if err != nil {
		n.t.Fatalf("no notification: %v\n%s", err, context())
	}
	return string(buf[:k])
}

// UntilStopping reads watchdog pings until STOPPING=1; anything else fails
// the test.
func (n *Notify) UntilStopping(context func() string) {
	n.t.Helper()
	for {
		switch got := n.Next(context); got {
		case "STOPPING=1":
			return
		case "WATCHDOG=1":
		default:
			n.t.Fatalf("notification %q, want WATCHDOG=1 or STOPPING=1\n%s", got, context())
		}
	}
}
