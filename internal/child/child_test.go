package child

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"reflect"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// Timeouts here only keep a broken test from hanging; no assertion depends
// on the machine being fast.
const patience = 60 * time.Second

// helper returns a Config that runs this test binary in a helper mode, with
// a ready file in a fresh directory.
func helper(t *testing.T, mode string, args ...string) (Config, string) {
	t.Helper()
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	readyFile := filepath.Join(t.TempDir(), "ready")
	return Config{
		Argv: append([]string{exe}, args...),
		Env:  helperEnv(envHelper+"="+mode, envReady+"="+readyFile),
	}, readyFile
}

// start starts cfg and makes sure the group is gone when the test ends.
func start(t *testing.T, cfg Config) *Process {
	t.Helper()
	p, err := Start(context.Background(), cfg)
	if err != nil {
		t.Fatalf("Start: %v", err)
	}
	t.Cleanup(func() {
		select {
		case <-p.Done():
		default:
			unix.Kill(-p.PID(), syscall.SIGKILL)
			p.Wait()
		}
	})
	return p
}

func wait(t *testing.T, p *Process) Exit {
	t.Helper()
	select {
	case <-p.Done():
	case <-time.After(patience):
		t.Fatalf("child %d did not exit within %v", p.PID(), patience)
	}
	e, err := p.Wait()
	if err != nil {
		t.Fatalf("Wait: %v", err)
	}
	return e
}

// waitFor polls until cond holds.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(patience)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// waitFile waits for path to exist and returns its content.
func waitFile(t *testing.T, path string) []byte {
	t.Helper()
	var b []byte
	waitFor(t, path, func() bool {
		var err error
		b, err = os.ReadFile(path)
		return err == nil
	})
	return b
}

func waitPID(t *testing.T, readyFile string) int {
	t.Helper()
	pid, err := strconv.Atoi(string(waitFile(t, readyFile)))
	if err != nil {
		t.Fatalf("ready file %s: %v", readyFile, err)
	}
	return pid
}

// gone reports whether pid has died: it no longer exists, or it is a zombie
// waiting for init (which in a container may never reap it).
func gone(pid int) bool {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return true
	}
	// pid (comm) state ...; comm may contain spaces and parentheses.
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	return i < 0 || i+2 >= len(s) || s[i+2] == 'Z' || s[i+2] == 'X'
}

func TestExitStatus(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		mode string
		args []string
		want Exit
		// status is what the wrapper exits with.
		status int
	}{
		{"exit 0", "exit", []string{"0"}, Exit{Code: 0}, 0},
		{"exit 3", "exit", []string{"3"}, Exit{Code: 3}, 3},
		{"killed by SIGKILL", "sigkill", nil, Exit{Code: -1, Signaled: true, Signal: syscall.SIGKILL}, 137},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			cfg, _ := helper(t, tt.mode, tt.args...)
			got := wait(t, start(t, cfg))
			if got.Wall <= 0 {
				t.Errorf("Wall = %v, want > 0", got.Wall)
			}
			got.Wall = 0
			if got != tt.want {
				t.Errorf("Exit = %+v, want %+v", got, tt.want)
			}
			if got.Status() != tt.status {
				t.Errorf("Status() = %d, want %d", got.Status(), tt.status)
			}
		})
	}
}

func TestStartErrors(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	notExec := filepath.Join(dir, "train.py")
	if err := os.WriteFile(notExec, []byte("print('hi')\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	badInterp := filepath.Join(dir, "bad-interp.sh")
	if err := os.WriteFile(badInterp, []byte("#!/nonexistent/python3\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name string
		cfg  Config
		code int
	}{
		{"not in PATH", Config{Argv: []string{"isched-no-such-command"}}, StatusNotFound},
		{"no such path", Config{Argv: []string{"/nonexistent/bin/python3"}}, StatusNotFound},
		{"not executable", Config{Argv: []string{notExec}}, StatusCannotExecute},
		{"directory", Config{Argv: []string{dir}}, StatusCannotExecute},
		{"bad interpreter", Config{Argv: []string{badInterp}}, StatusCannotExecute},
		{"missing working directory", Config{Argv: []string{"true"}, Dir: filepath.Join(dir, "nope")}, StatusCannotExecute},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			p, err := Start(context.Background(), tt.cfg)
			var se *StartError
			if !errors.As(err, &se) {
				if p != nil {
					p.Wait()
				}
				t.Fatalf("Start error = %v, want *StartError", err)
			}
			if se.Code != tt.code {
				t.Errorf("Code = %d, want %d (err: %v)", se.Code, tt.code, err)
			}
		})
	}

	t.Run("invalid config", func(t *testing.T) {
		t.Parallel()
		for _, cfg := range []Config{
			{},
			{Argv: []string{"true"}, Grace: -time.Second},
			{Argv: []string{"true"}, SignalMap: map[os.Signal]Delivery{syscall.SIGUSR1: {Signal: syscall.SIGTERM, File: "/x"}}},
			{Argv: []string{"true"}, SignalMap: map[os.Signal]Delivery{syscall.SIGUSR1: {File: "relative"}}},
		} {
			_, err := Start(context.Background(), cfg)
			var se *StartError
			if err == nil || errors.As(err, &se) {
				t.Errorf("Start(%+v) = %v, want a config error", cfg, err)
			}
		}
	})
}

func TestForward(t *testing.T) {
	t.Parallel()
	type signalEvent struct {
		received  os.Signal
		delivered Delivery
	}
	tests := []struct {
		name      string
		mode      string // "record" gets the record file as its argument
		signalMap string
		// send forwards each signal in turn; after each one, the record
		// file must end with the corresponding line of recorded (if
		// non-empty) before the next one is sent.
		send     []syscall.Signal
		recorded []string
		status   int
		events   []signalEvent
		// controlFile is checked to hold this signal's name when set.
		controlFile string
	}{
		{
			name: "TERM default action", mode: "sleep",
			send: []syscall.Signal{syscall.SIGTERM}, status: 143,
			events: []signalEvent{{syscall.SIGTERM, Delivery{Signal: syscall.SIGTERM}}},
		},
		{
			name: "TERM handled", mode: "record",
			send: []syscall.Signal{syscall.SIGTERM}, recorded: []string{"SIGTERM"}, status: 0,
		},
		{
			name: "USR1 mapped to TERM", mode: "record", signalMap: "USR1=TERM",
			send: []syscall.Signal{syscall.SIGUSR1}, recorded: []string{"SIGTERM"}, status: 0,
			events: []signalEvent{{syscall.SIGUSR1, Delivery{Signal: syscall.SIGTERM}}},
		},
		{
			// The child never sees USR1: the record shows only the TERM
			// that ends it.
			name: "USR1 to control file", mode: "record", signalMap: "USR1=file:CONTROL",
			send: []syscall.Signal{syscall.SIGUSR1, syscall.SIGTERM}, recorded: []string{"", "SIGTERM"}, status: 0,
			controlFile: "SIGUSR1",
		},
		{
			name: "forwarding twice is harmless", mode: "record",
			send:     []syscall.Signal{syscall.SIGUSR2, syscall.SIGUSR2, syscall.SIGHUP, syscall.SIGINT, syscall.SIGTERM},
			recorded: []string{"SIGUSR2", "SIGUSR2", "SIGHUP", "SIGINT", "SIGTERM"}, status: 0,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			dir := t.TempDir()
			recordFile := filepath.Join(dir, "record")
			control := filepath.Join(dir, "ckpt-request")
			var args []string
			if tt.mode == "record" {
				args = []string{recordFile}
			} else {
				args = []string{"10m"}
			}
			cfg, readyFile := helper(t, tt.mode, args...)
			sm, err := ParseSignalMap(strings.ReplaceAll(tt.signalMap, "CONTROL", control))
			if err != nil {
				t.Fatal(err)
			}
			cfg.SignalMap = sm
			var mu sync.Mutex
			var events []signalEvent
			cfg.OnSignal = func(r os.Signal, d Delivery) {
				mu.Lock()
				events = append(events, signalEvent{r, d})
				mu.Unlock()
			}
			p := start(t, cfg)
			waitPID(t, readyFile)

			var want []string
			for i, sig := range tt.send {
				if err := p.Forward(sig); err != nil {
					t.Fatalf("Forward(%v): %v", sig, err)
				}
				if tt.recorded == nil || tt.recorded[i] == "" {
					continue
				}
				// Wait until the child got it: a signal sent while the
				// same one is pending merges with it.
				want = append(want, tt.recorded[i])
				waitFor(t, "child to record "+tt.recorded[i], func() bool {
					b, _ := os.ReadFile(recordFile)
					return len(strings.Fields(string(b))) == len(want)
				})
			}
			e := wait(t, p)
			if e.Status() != tt.status {
				t.Errorf("Status() = %d (%v), want %d", e.Status(), e, tt.status)
			}
			if tt.mode == "record" {
				b, _ := os.ReadFile(recordFile)
				if got := strings.Fields(string(b)); !reflect.DeepEqual(got, want) {
					t.Errorf("child recorded %q, want %q", got, want)
				}
			}
			if tt.controlFile != "" {
				b, err := os.ReadFile(control)
				if err != nil {
					t.Fatalf("control file: %v", err)
				}
				f := strings.Fields(string(b))
				if len(f) != 2 || f[0] != tt.controlFile || !strings.HasSuffix(string(b), "\n") {
					t.Errorf("control file = %q, want %q <unix time>\\n", b, tt.controlFile)
				} else if ts, err := strconv.ParseInt(f[1], 10, 64); err != nil || time.Since(time.Unix(ts, 0)) > time.Hour {
					t.Errorf("control file time %q is not a recent unix time", f[1])
				}
				if leftovers, _ := filepath.Glob(filepath.Join(dir, ".ckpt-request*")); len(leftovers) != 0 {
					t.Errorf("temporary files left: %v", leftovers)
				}
			}
			mu.Lock()
			if tt.events != nil && !reflect.DeepEqual(events, tt.events) {
				t.Errorf("OnSignal got %v, want %v", events, tt.events)
			}
			mu.Unlock()

			// The child is gone: forwarding is a no-op, not an error, and
			// does not write control files any more.
			os.Remove(control)
			for _, sig := range tt.send {
				if err := p.Forward(sig); err != nil {
					t.Errorf("Forward(%v) after exit: %v", sig, err)
				}
			}
			if _, err := os.Stat(control); err == nil {
				t.Errorf("control file written after the child exited")
			}
		})
	}
}

// Slurm signals every process of the step, so the child gets a signal both
// directly and through us.
func TestForwardAlongsideSlurm(t *testing.T) {
	t.Parallel()
	recordFile := filepath.Join(t.TempDir(), "record")
	cfg, readyFile := helper(t, "record", recordFile)
	p := start(t, cfg)
	pid := waitPID(t, readyFile)
	unix.Kill(pid, syscall.SIGTERM)
	if err := p.Stop(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if err := p.Stop(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	e := wait(t, p)
	if e.Status() != 0 || e.Escalated {
		t.Errorf("Exit = %+v, want a clean exit 0", e)
	}
}

func TestStopGrace(t *testing.T) {
	t.Parallel()
	const grace = 300 * time.Millisecond
	cfg, readyFile := helper(t, "ignore-term")
	cfg.Grace = grace
	p := start(t, cfg)
	waitPID(t, readyFile)
	if err := p.Stop(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	e := wait(t, p)
	if !e.Signaled || e.Signal != syscall.SIGKILL || e.Status() != 137 || !e.Escalated {
		t.Errorf("Exit = %+v, want SIGKILL after grace (137, escalated)", e)
	}
	if e.Wall < grace {
		t.Errorf("Wall = %v, killed before the %v grace", e.Wall, grace)
	}
}

func TestStopKillsGroup(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name   string
		leader string // spawn's "after"
		grace  time.Duration
		stop   bool
		status int
		// grandchildDies: whether the grandchild (which ignores SIGTERM)
		// must be dead after Wait.
		grandchildDies bool
	}{
		// Nobody obeys SIGTERM: SIGKILL to the group when grace expires.
		{"grace expires", "ignore-term", 300 * time.Millisecond, true, 137, true},
		// The leader obeys at once: the stragglers are killed when it
		// exits, long before the (deliberately long) grace.
		{"leader exits while stopping", "sleep", time.Hour, true, 143, true},
		// No stop: a leader exiting normally leaves its group alone.
		{"leader exits normally", "exit", time.Hour, false, 0, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			cfg, readyFile := helper(t, "spawn", tt.leader)
			gready := filepath.Join(t.TempDir(), "grandchild-ready")
			cfg.Env = append(cfg.Env, envGrandchildReady+"="+gready)
			cfg.Grace = tt.grace
			p := start(t, cfg)
			waitPID(t, readyFile)
			gpid := waitPID(t, gready)
			t.Cleanup(func() { unix.Kill(gpid, syscall.SIGKILL) })
			if tt.stop {
				if err := p.Stop(syscall.SIGTERM); err != nil {
					t.Fatal(err)
				}
			}
			e := wait(t, p)
			if e.Status() != tt.status {
				t.Errorf("Status() = %d (%v), want %d", e.Status(), e, tt.status)
			}
			if tt.grandchildDies {
				// SIGKILL is sent before Wait returns; dying may take
				// the kernel a moment.
				waitFor(t, "grandchild to die", func() bool { return gone(gpid) })
			} else if gone(gpid) {
				t.Errorf("grandchild %d was killed although no stop was requested", gpid)
			}
		})
	}
}

func TestCancelStops(t *testing.T) {
	t.Parallel()
	for _, supervise := range []bool{false, true} {
		t.Run("supervise="+strconv.FormatBool(supervise), func(t *testing.T) {
			t.Parallel()
			cfg, readyFile := helper(t, "sleep", "10m")
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			startCtx := ctx
			if supervise {
				startCtx = context.Background()
			}
			p, err := Start(startCtx, cfg)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { unix.Kill(-p.PID(), syscall.SIGKILL) })
			waitPID(t, readyFile)
			var e Exit
			if supervise {
				go cancel()
				e, err = p.supervise(ctx)
				if err != nil {
					t.Fatal(err)
				}
			} else {
				cancel()
				e = wait(t, p)
			}
			if e.Status() != 143 {
				t.Errorf("Status() = %d (%v), want 143", e.Status(), e)
			}
		})
	}
}

func TestPIDAndGroup(t *testing.T) {
	t.Parallel()
	cfg, readyFile := helper(t, "sleep", "10m")
	p := start(t, cfg)
	if pid := waitPID(t, readyFile); pid != p.PID() {
		t.Errorf("PID() = %d, child says %d", p.PID(), pid)
	}
	pgid, err := unix.Getpgid(p.PID())
	if err != nil {
		t.Fatal(err)
	}
	if pgid != p.PID() || pgid == unix.Getpgrp() {
		t.Errorf("child group %d, PID() %d, ours %d: want a group of its own, led by the child", pgid, p.PID(), unix.Getpgrp())
	}
	p.Stop(syscall.SIGKILL)
	wait(t, p)
}

// TestSupervise runs the wrapper in miniature (Run in a helper process) and
// signals it the way srun and Slurm do.
func TestSupervise(t *testing.T) {
	t.Parallel()
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	supervise := func(t *testing.T, signalMap, grace string, child ...string) (*exec.Cmd, *bytes.Buffer, string) {
		readyFile := filepath.Join(t.TempDir(), "ready")
		cmd := exec.Command(exe, child...)
		cmd.Env = helperEnv(envHelper+"=supervisor", envReady+"="+readyFile,
			envSignalMap+"="+signalMap, envGrace+"="+grace)
		var out bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &out
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			if b, err := os.ReadFile(readyFile); err == nil {
				// Never kill(0) or kill(-1): those hit us.
				if pid, err := strconv.Atoi(string(b)); err == nil && pid > 1 {
					unix.Kill(-pid, syscall.SIGKILL)
				}
			}
			cmd.Process.Kill()
			cmd.Wait()
		})
		return cmd, &out, readyFile
	}
	exitStatus := func(t *testing.T, cmd *exec.Cmd, out *bytes.Buffer) int {
		t.Helper()
		done := make(chan error, 1)
		go func() { done <- cmd.Wait() }()
		select {
		case <-done:
		case <-time.After(patience):
			t.Fatalf("supervisor did not exit; output:\n%s", out)
		}
		return cmd.ProcessState.ExitCode()
	}

	t.Run("relays and maps", func(t *testing.T) {
		t.Parallel()
		dir := t.TempDir()
		recordFile, control := filepath.Join(dir, "record"), filepath.Join(dir, "ckpt-request")
		cmd, out, readyFile := supervise(t, "USR2=file:"+control+",HUP=USR1", "", "record", recordFile)
		pid := waitPID(t, readyFile)
		var want []string
		step := func(sig syscall.Signal, recorded string) {
			t.Helper()
			if err := cmd.Process.Signal(sig); err != nil {
				t.Fatal(err)
			}
			if recorded == "" {
				return
			}
			want = append(want, recorded)
			waitFor(t, "child to record "+recorded, func() bool {
				b, _ := os.ReadFile(recordFile)
				return len(strings.Fields(string(b))) == len(want)
			})
		}
		step(syscall.SIGUSR1, "SIGUSR1")
		step(syscall.SIGINT, "SIGINT")
		step(syscall.SIGHUP, "SIGUSR1")
		step(syscall.SIGUSR2, "")
		waitFile(t, control)
		// scancel: Slurm signals the child directly and srun signals the
		// wrapper, which forwards.
		unix.Kill(pid, syscall.SIGTERM)
		step(syscall.SIGTERM, "")
		if st := exitStatus(t, cmd, out); st != 0 {
			t.Errorf("supervisor exit status %d, want 0; output:\n%s", st, out)
		}
		b, _ := os.ReadFile(recordFile)
		if got := strings.Fields(string(b)); !reflect.DeepEqual(got, append(want, "SIGTERM")) {
			t.Errorf("child recorded %q, want %q", got, append(want, "SIGTERM"))
		}
	})

	t.Run("TERM then SIGKILL after grace", func(t *testing.T) {
		t.Parallel()
		cmd, out, readyFile := supervise(t, "", "300ms", "ignore-term")
		waitPID(t, readyFile)
		cmd.Process.Signal(syscall.SIGTERM)
		if st := exitStatus(t, cmd, out); st != 137 {
			t.Errorf("supervisor exit status %d, want 137; output:\n%s", st, out)
		}
	})

	t.Run("exit status passes through", func(t *testing.T) {
		t.Parallel()
		cmd, out, _ := supervise(t, "", "", "exit", "42")
		if st := exitStatus(t, cmd, out); st != 42 {
			t.Errorf("supervisor exit status %d, want 42; output:\n%s", st, out)
		}
	})
}

// TestForeground runs the supervisor as a session leader on a pty, as under
// srun --pty: the child must own the terminal while it runs, and the
// supervisor must own it again afterwards.
func TestForeground(t *testing.T) {
	t.Parallel()
	tty := openPty(t)

	dir := t.TempDir()
	childOut, supOut := filepath.Join(dir, "child"), filepath.Join(dir, "supervisor")
	exe, _ := os.Executable()
	cmd := exec.Command(exe, childOut, supOut)
	cmd.Env = helperEnv(envHelper + "=tty-supervisor")
	cmd.Stdin = tty
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true, Setctty: true, Ctty: 0}
	if err := cmd.Run(); err != nil {
		t.Fatalf("tty supervisor: %v\n%s", err, out.String())
	}
	// Each reports "fg=<foreground group> pgrp=<own group> ...": the child
	// while it runs, the supervisor after the child exited.
	for _, path := range []string{childOut, supOut} {
		b, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		var fg, pgrp int
		if _, err := fmt.Sscanf(string(b), "fg=%d pgrp=%d", &fg, &pgrp); err != nil || fg != pgrp || fg <= 0 {
			t.Errorf("%s reports %q, want its own group in the foreground", filepath.Base(path), b)
		}
	}
	if b, _ := os.ReadFile(supOut); !strings.Contains(string(b), "foreground=true") {
		t.Errorf("supervisor reports %q, want foreground=true", b)
	}
}

// openPty opens a pseudo-terminal pair and returns its terminal side,
// reading and discarding what is written to it. A failure fails the test:
// Linux with devpts (Debian, CI's containers) always has ptys, and a skip
// would hide the check srun --pty relies on.
func openPty(t *testing.T) *os.File {
	t.Helper()
	master, err := os.OpenFile("/dev/ptmx", os.O_RDWR|unix.O_NOCTTY, 0)
	if err != nil {
		t.Fatalf("no pty: %v", err)
	}
	t.Cleanup(func() { master.Close() })
	if err := unix.IoctlSetPointerInt(int(master.Fd()), unix.TIOCSPTLCK, 0); err != nil {
		t.Fatalf("unlock pty: %v", err)
	}
	n, err := unix.IoctlGetInt(int(master.Fd()), unix.TIOCGPTN)
	if err != nil {
		t.Fatalf("pty number: %v", err)
	}
	tty, err := os.OpenFile("/dev/pts/"+strconv.Itoa(n), os.O_RDWR|unix.O_NOCTTY, 0)
	if err != nil {
		t.Fatalf("open pty: %v", err)
	}
	t.Cleanup(func() { tty.Close() })
	go io.Copy(io.Discard, master)
	return tty
}

// supervise relays the forwarded signals to a child already started, as
// Run does to the one it starts: the tests' way to start the child with
// one context and supervise it with another.
func (p *Process) supervise(ctx context.Context) (Exit, error) {
	ch := make(chan os.Signal, 16)
	signal.Notify(ch, forwarded...)
	defer signal.Stop(ch)
	return p.relay(ctx, ch)
}
