package child

import (
	"bytes"
	"os"
	"path/filepath"
	"strconv"
	"syscall"
	"time"
)

// A checkpoint request (USR1, USR2) kills a process that does not catch it:
// their default action is to terminate. Slurm may send --signal's up to a
// minute early, so it can reach a job whose training loop has not installed
// its handler yet (Python importing torch): forwarded then, it would end
// the run at step 0 (ci54: "exit 138, killed by SIGUSR1" 0.3 s after the
// start). Forward holds such a signal until a process of the child's group
// catches it, and delivers it then; monitoring never harms training.

// requestSignal reports whether sig is a checkpoint request whose default
// action would kill a process that does not catch it.
func requestSignal(sig syscall.Signal) bool {
	return sig == syscall.SIGUSR1 || sig == syscall.SIGUSR2
}

// deferPoll is how often a held signal looks for a catcher.
const deferPoll = 50 * time.Millisecond

// groupCatches reports whether a process of process group pgid catches sig
// (its SigCgt mask in /proc/PID/status), and whether the group has any
// member left.
func groupCatches(pgid int, sig syscall.Signal) (catches, members bool) {
	stats, _ := filepath.Glob("/proc/[0-9]*/stat")
	for _, stat := range stats {
		b, err := os.ReadFile(stat)
		if err != nil || statPgrp(b) != pgid {
			continue
		}
		members = true
		status, err := os.ReadFile(filepath.Join(filepath.Dir(stat), "status"))
		if err == nil && caughtIn(status, sig) {
			return true, true
		}
	}
	return false, members
}

// statPgrp is the process group of a /proc/PID/stat line (its fifth
// field; the second, the command, is in parentheses and may hold spaces).
func statPgrp(stat []byte) int {
	i := bytes.LastIndexByte(stat, ')')
	if i < 0 {
		return -1
	}
	f := bytes.Fields(stat[i+1:]) // state, ppid, pgrp, ...
	if len(f) < 3 {
		return -1
	}
	n, err := strconv.Atoi(string(f[2]))
	if err != nil {
		return -1
	}
	return n
}

// caughtIn reports whether a /proc/PID/status text's SigCgt mask has sig.
func caughtIn(status []byte, sig syscall.Signal) bool {
	for _, line := range bytes.Split(status, []byte("\n")) {
		v, ok := bytes.CutPrefix(line, []byte("SigCgt:"))
		if !ok {
			continue
		}
		mask, err := strconv.ParseUint(string(bytes.TrimSpace(v)), 16, 64)
		return err == nil && mask&(1<<(uint(sig)-1)) != 0
	}
	return false
}
