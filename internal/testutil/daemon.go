package testutil

import (
	"fmt"
	"os"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// DaemonPid returns the pid in a dev-cluster pid file if that process still
// runs comm (pid files can be stale and pids reused); 0 if not.
func DaemonPid(pidFile, comm string) int {
	b, err := os.ReadFile(pidFile)
	if err != nil {
		return 0
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil || pid <= 0 {
		return 0
	}
	if !runs(pid, comm) {
		return 0
	}
	return pid
}

// runs reports whether process pid exists and runs comm.
func runs(pid int, comm string) bool {
	c, err := os.ReadFile(fmt.Sprintf("/proc/%d/comm", pid))
	return err == nil && strings.TrimSpace(string(c)) == comm
}

// StopDaemon sends sig to the daemon of a pid file and waits until the
// process is gone (SIGKILL after 30 s). It waits on the process, not on its
// pid file: redis-server removes its pid file while it still holds its port
// and flushes its append-only file.
func StopDaemon(t testing.TB, pidFile, comm string, sig syscall.Signal) {
	t.Helper()
	pid := DaemonPid(pidFile, comm)
	if pid == 0 {
		t.Fatalf("%s is not running (pid file %s)", comm, pidFile)
	}
	if err := syscall.Kill(pid, sig); err != nil {
		t.Fatalf("kill %s %d: %v", comm, pid, err)
	}
	deadline := time.Now().Add(30 * time.Second)
	killed := false
	for runs(pid, comm) {
		if time.Now().After(deadline) {
			if killed {
				t.Fatalf("%s (pid %d) still runs 10 s after SIGKILL", comm, pid)
			}
			_ = syscall.Kill(pid, syscall.SIGKILL)
			killed = true
			deadline = time.Now().Add(10 * time.Second)
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Logf("%s (pid %d) stopped with %s", comm, pid, sig)
}
