package child

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestCheckpointSignalHeldUntilCaught: a USR1 forwarded before the child
// has a handler for it is held, not delivered (it would kill the child
// at step 0); the child installs its handler and then gets it. Without the
// hold the shell dies of SIGUSR1 and never prints "caught".
func TestCheckpointSignalHeldUntilCaught(t *testing.T) {
	dir := t.TempDir()
	gate, out := filepath.Join(dir, "gate"), filepath.Join(dir, "out")
	script := `while [ ! -e "$1" ]; do sleep 0.01; done
trap 'echo caught > "$2"; exit 0' USR1
echo trapped > "$2.ready"
while :; do sleep 0.01; done`
	p, err := Start(context.Background(), Config{Argv: []string{"/bin/sh", "-c", script, "sh", gate, out}, Grace: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	if err := p.Forward(syscall.SIGUSR1); err != nil { // no trap yet: held
		t.Fatal(err)
	}
	if err := os.WriteFile(gate, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	e, err := p.Wait()
	if err != nil {
		t.Fatal(err)
	}
	b, _ := os.ReadFile(out)
	if e.Signaled || e.Code != 0 || strings.TrimSpace(string(b)) != "caught" {
		t.Errorf("exit %+v, output %q: want the held USR1 caught by the trap, exit 0", e, b)
	}
}

// A held signal is dropped, not kept for ever, when the child exits
// without catching it.
func TestHeldSignalDroppedWhenChildExits(t *testing.T) {
	p, err := Start(context.Background(), Config{Argv: []string{"/bin/sleep", "30"}, Grace: 5 * time.Second,
		catches: func(int, syscall.Signal) (bool, bool) { return false, true }})
	if err != nil {
		t.Fatal(err)
	}
	if err := p.Forward(syscall.SIGUSR2); err != nil {
		t.Fatal(err)
	}
	if err := p.Stop(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	e, _ := p.Wait()
	if !e.Signaled {
		t.Errorf("exit %+v: want the child ended by the TERM (the USR2 was held)", e)
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		p.mu.Lock()
		n := len(p.held)
		p.mu.Unlock()
		if n == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the held USR2 is still held after the child exited")
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func TestCaughtIn(t *testing.T) {
	status := []byte("Name:\tpython3\nSigBlk:\t0000000000000000\nSigIgn:\t0000000001001000\nSigCgt:\t0000000180000202\n")
	// 0x202: bits 1 (SIGINT, 2) and 9 (SIGUSR1, 10)
	if !caughtIn(status, syscall.SIGUSR1) || caughtIn(status, syscall.SIGUSR2) || !caughtIn(status, syscall.SIGINT) {
		t.Error("SigCgt 0x180000202: want USR1 and INT caught, USR2 not")
	}
	if caughtIn([]byte("Name:\tx\n"), syscall.SIGUSR1) {
		t.Error("no SigCgt line: nothing caught")
	}
	for stat, want := range map[string]int{"42 (python3) S 1 4242 4242 0": 4242, "7 (a) b (c)) R 1 99 99": 99, "junk": -1} {
		if got := statPgrp([]byte(stat)); got != want {
			t.Errorf("statPgrp(%q) = %d, want %d", stat, got, want)
		}
	}
}
