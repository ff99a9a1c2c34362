// Package sdnotify speaks systemd's notify protocol (sd_notify(3)) with the
// standard library: one datagram per state change on the unix socket named
// by NOTIFY_SOCKET ("READY=1", "STOPPING=1", "WATCHDOG=1"). Outside systemd
// (NOTIFY_SOCKET unset) every call does nothing, so the daemons call it
// unconditionally.
package sdnotify

import (
	"fmt"
	"net"
	"strconv"
	"sync"
	"time"
)

// Notifier sends states to systemd. The zero value and a nil *Notifier do
// nothing. Safe for concurrent use.
type Notifier struct {
	socket   string        // NOTIFY_SOCKET: a path, or "@name" (abstract)
	watchdog time.Duration // WATCHDOG_USEC for this process; 0: none
	now      func() time.Time

	mu   sync.Mutex
	last time.Time // last WATCHDOG=1 sent
}

// FromEnv reads NOTIFY_SOCKET, WATCHDOG_USEC and WATCHDOG_PID (the
// watchdog is ours only when WATCHDOG_PID is unset or names pid).
func FromEnv(getenv func(string) string, pid int) *Notifier {
	n := &Notifier{socket: getenv("NOTIFY_SOCKET"), now: time.Now}
	if n.socket == "" {
		return n
	}
	if p := getenv("WATCHDOG_PID"); p != "" && p != strconv.Itoa(pid) {
		return n
	}
	if us, err := strconv.ParseInt(getenv("WATCHDOG_USEC"), 10, 64); err == nil && us > 0 {
		n.watchdog = time.Duration(us) * time.Microsecond
	}
	return n
}

// Enabled reports whether a notify socket is set.
func (n *Notifier) Enabled() bool { return n != nil && n.socket != "" }

// WatchdogInterval is systemd's WatchdogSec for this process (0: none).
func (n *Notifier) WatchdogInterval() time.Duration {
	if n == nil {
		return 0
	}
	return n.watchdog
}

// Send sends one datagram of newline-separated assignments.
func (n *Notifier) Send(state string) error {
	if !n.Enabled() {
		return nil
	}
	// Go maps a leading '@' to the abstract namespace (a NUL byte).
	c, err := net.DialUnix("unixgram", nil, &net.UnixAddr{Name: n.socket, Net: "unixgram"})
	if err != nil {
		return fmt.Errorf("sd_notify: %w", err)
	}
	defer c.Close()
	if _, err := c.Write([]byte(state)); err != nil {
		return fmt.Errorf("sd_notify %q: %w", state, err)
	}
	return nil
}

// Ready says start-up is complete (Type=notify units wait for it).
func (n *Notifier) Ready(status string) error {
	return n.Send("READY=1\nSTATUS=" + status)
}

// Stopping says the service is shutting down.
func (n *Notifier) Stopping() error { return n.Send("STOPPING=1") }

// Watchdog keeps systemd's watchdog fed: the daemons call it from their
// main loop every round, and it sends WATCHDOG=1 at most every quarter of
// the interval. No watchdog configured: nothing.
func (n *Notifier) Watchdog() error {
	if n.WatchdogInterval() <= 0 {
		return nil
	}
	n.mu.Lock()
	now := n.now()
	if !n.last.IsZero() && now.Sub(n.last) < n.watchdog/4 {
		n.mu.Unlock()
		return nil
	}
	n.last = now
	n.mu.Unlock()
	return n.Send("WATCHDOG=1")
}
