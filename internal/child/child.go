// Package child runs and supervises the training command the wrapper wraps
// (`srun isched-wrapper [flags] -- python train.py ...`).
//
// It follows the contract runc (signals.go) and Nomad's executor keep with
// their payload: argv runs directly, never through a shell; the child leads its
// own process group so a signal reaches DataLoader workers and torchrun ranks
// too; received signals are forwarded (optionally remapped, or turned into a
// control file); stopping is signal, grace, then SIGKILL of the whole group; and
// the exit status is reported exactly (128+signal when signalled) so that the
// wrapper can exit with it and sacct tells the truth.
//
// This package is the only user of os/exec for the training command.
package child

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"os"
	"os/exec"
	"reflect"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// DefaultGrace is the stop grace period when Config.Grace is zero. It is
// shorter than Slurm's default KillWait (30s) so that our SIGKILL, and with it
// an honest exit status, comes before slurmstepd's.
const DefaultGrace = 20 * time.Second

// DefaultWaitDelay is the output drain bound when Config.WaitDelay is zero.
const DefaultWaitDelay = 2 * time.Second

// tapQueue is how many chunks a tap may lag behind the output before chunks
// are dropped. A chunk is at most copyBufSize bytes, so a tap holds at most
// 8 MiB per stream.
const tapQueue = 256

// Config describes the training command and how to supervise it.
type Config struct {
	// Argv is the command and its arguments. Argv[0] is looked up in the
	// wrapper's PATH (not the PATH in Env, which matters only if they differ)
	// and executed directly; no shell is involved.
	Argv []string
	// Env is the child's environment; nil means the wrapper's environment.
	Env []string
	// Dir is the child's working directory; empty means the wrapper's.
	Dir string

	// Stdin, Stdout and Stderr follow os/exec: nil means /dev/null. An
	// *os.File without a tap is handed to the child as is (no copy, no
	// delay). As with os/exec, when Stdout and Stderr are the same
	// non-file writer, only one goroutine at a time writes to it. If Stdin
	// is the wrapper's controlling terminal, the child's group becomes the
	// terminal's foreground group (see foregroundTTY).
	Stdin          io.Reader
	Stdout, Stderr io.Writer
	// StdoutTap and StderrTap, when set, observe the stream: the child writes
	// into a pipe, each chunk goes to Stdout/Stderr first and only then a
	// copy is queued for the tap. The tap runs on its own goroutine and
	// never slows the output: when it lags by more than a bounded queue,
	// chunks are dropped for it (their bytes counted) and the next chunk it
	// gets is preceded by a call with nil, meaning "bytes are missing here"
	// (a line scanner should discard the partial line it holds). Chunks are
	// raw bytes, not lines: partial lines and \r progress bars arrive as
	// written. Each chunk is the tap's own copy; it may keep it.
	StdoutTap, StderrTap func([]byte)

	// Grace is how long Stop waits after the first signal before it sends
	// SIGKILL to the whole group. Zero means DefaultGrace.
	Grace time.Duration
	// WaitDelay bounds how long Wait keeps draining a piped stdout/stderr
	// and feeding the taps after the leader exited, for when a surviving
	// group member (or anything it spawned) still holds the pipe open.
	// Zero means DefaultWaitDelay.
	WaitDelay time.Duration

	// SignalMap says how each received signal reaches the child; signals not
	// in the map are forwarded unchanged. Build it with ParseSignalMap.
	SignalMap map[os.Signal]Delivery
	// Logger receives the package's events; nil discards them.
	Logger *slog.Logger
	// OnSignal, when set, is called after Forward (and so Stop and
	// Run) handled a signal without error, with the delivery actually
	// used (Signal set to the received signal when it was forwarded as is).
	// It is also called when the child was already gone and nothing was
	// delivered: the wrapper still received the signal and may report it.
	// It runs on the goroutine that called Forward and must not block.
	OnSignal func(received os.Signal, delivered Delivery)

	// catches reports whether a process of a group catches a signal, and
	// whether the group has members (tests; default groupCatches).
	catches func(pgid int, sig syscall.Signal) (catches, members bool)
}

// Exit is how the child ended.
type Exit struct {
	// Code is the exit code when the child exited, -1 when it was killed
	// by a signal.
	Code int
	// Signal is the signal that killed the child, 0 if it exited.
	Signal   syscall.Signal
	Signaled bool
	// Wall is the time from just before the fork to the leader's death.
	Wall time.Duration
	// Escalated reports that Stop's grace expired and the group was sent
	// SIGKILL by us (as opposed to SIGKILL from the OOM killer or Slurm).
	Escalated bool
}

// Status is the status the wrapper should exit with: the child's exit code,
// or 128+signal when it was killed by a signal, as a shell reports it.
func (e Exit) Status() int {
	if e.Signaled {
		return 128 + int(e.Signal)
	}
	return e.Code
}

func (e Exit) String() string {
	if e.Signaled {
		return fmt.Sprintf("killed by %s (status %d)", unix.SignalName(e.Signal), e.Status())
	}
	return fmt.Sprintf("exit status %d", e.Code)
}

// Exit statuses for a command that could not be started, as shells report
// them: the wrapper exits with StartError.Code.
const (
	StatusCannotExecute = 126
	StatusNotFound      = 127
)

// StartError is returned by Start when the command could not be executed.
type StartError struct {
	Argv0 string
	// Code is StatusNotFound when argv[0] does not exist (or is not in
	// PATH), StatusCannotExecute when it exists but cannot be run
	// (permissions, a directory, a bad interpreter line, working directory
	// missing, fork failure).
	Code int
	Err  error
}

func (e *StartError) Error() string {
	return fmt.Sprintf("start %q: %v", e.Argv0, e.Err)
}

func (e *StartError) Unwrap() error { return e.Err }

// Process is a started child. Its methods are safe for concurrent use.
type Process struct {
	cfg   Config
	log   *slog.Logger
	cmd   *exec.Cmd
	pid   int
	start time.Time
	// tty is the terminal whose foreground group we handed to the child;
	// nil when the child was not given a terminal.
	tty  *os.File
	outs [2]*tee // stdout, stderr; nil when not piped

	stopping  atomic.Bool
	escalated atomic.Bool

	leaderDone chan struct{} // closed when the leader has been reaped
	done       chan struct{} // closed when Wait's result is ready

	mu        sync.Mutex
	killTimer *time.Timer
	held      map[syscall.Signal]bool // checkpoint requests held until caught (holdUntilCaught)

	exit Exit
	err  error
}

// Start starts the command in its own process group and returns without
// waiting for it. If ctx is cancelled before the child exits, the child is
// stopped as by Stop(SIGTERM).
func Start(ctx context.Context, cfg Config) (*Process, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	cfg, err := normalize(cfg)
	if err != nil {
		return nil, err
	}
	path, err := lookup(cfg)
	if err != nil {
		return nil, err
	}
	p := &Process{
		cfg:        cfg,
		log:        cfg.Logger,
		leaderDone: make(chan struct{}),
		done:       make(chan struct{}),
	}
	cmd := p.command(path)
	childEnds, err := p.wireOutputs(cmd)
	if err != nil {
		return nil, err
	}
	if err := p.launch(cmd, childEnds); err != nil {
		return nil, err
	}
	p.log.Debug("child started", "pid", p.pid, "argv0", cfg.Argv[0], "foreground", p.tty != nil)
	go p.reap()
	if ctx.Done() != nil {
		go func() {
			select {
			case <-ctx.Done():
				if err := p.Stop(syscall.SIGTERM); err != nil {
					p.log.Warn("stop on cancel", "err", err)
				}
			case <-p.done:
			}
		}()
	}
	return p, nil
}

// lookup finds the command and checks the working directory; errors are
// *StartError.
func lookup(cfg Config) (string, error) {
	argv0 := cfg.Argv[0]
	path, err := exec.LookPath(argv0)
	if err != nil {
		return "", &StartError{Argv0: argv0, Code: lookupStatus(err), Err: err}
	}
	if cfg.Dir != "" {
		// With SysProcAttr set, os.StartProcess no longer checks Dir, and
		// a failed chdir in the child reads as "fork/exec <cmd>: no such
		// file or directory", blaming the command.
		if _, err := os.Stat(cfg.Dir); err != nil {
			return "", &StartError{Argv0: argv0, Code: StatusCannotExecute, Err: fmt.Errorf("working directory: %w", err)}
		}
	}
	return path, nil
}

// command is the child's exec.Cmd, in a process group of its own and, on
// a terminal, in the foreground.
func (p *Process) command(path string) *exec.Cmd {
	cfg := p.cfg
	cmd := &exec.Cmd{
		Path:  path,
		Args:  cfg.Argv,
		Env:   cfg.Env,
		Dir:   cfg.Dir,
		Stdin: cfg.Stdin,
		// A group of its own, so that one kill(-pgid) reaches the leader
		// and everything it forked (DataLoader workers, torchrun ranks,
		// shells in a launch script) and nothing else: the wrapper is not
		// in it, so stopping the job never kills the wrapper before it
		// reported the exit status.
		SysProcAttr: &syscall.SysProcAttr{Setpgid: true},
		// Bounds the stdin copy os/exec runs when Stdin is not a file.
		WaitDelay: cfg.WaitDelay,
	}
	if tty := foregroundTTY(cfg.Stdin); tty != nil {
		// An interactive step (srun --pty): only the terminal's foreground
		// group may read from it; any other group gets SIGTTIN (and
		// SIGTTOU on terminal settings changes, e.g. pdb, ipdb or a pager),
		// which stops the child and hangs the step. The child's group is
		// made the foreground group between fork and exec (with signals
		// blocked, so the child itself does not get SIGTTOU for it). This
		// also makes ^C reach the child's group directly, as in a shell.
		// The wrapper's group is restored after the leader exits.
		cmd.SysProcAttr.Foreground = true
		cmd.SysProcAttr.Ctty = int(tty.Fd())
		p.tty = tty
	}
	return cmd
}

// wireOutputs gives the child its stdout and stderr: a file as it is, a
// writer or a tap through a pipe and a tee. It returns the pipes' child
// ends, which launch closes once the child has its copies.
func (p *Process) wireOutputs(cmd *exec.Cmd) ([]*os.File, error) {
	var childEnds []*os.File
	stdout, stderr := p.cfg.Stdout, p.cfg.Stderr
	if _, isFile := stdout.(*os.File); !isFile && stdout != nil && sameWriter(stdout, stderr) {
		// One writer gets both streams from two copying goroutines; as
		// with os/exec, only one of them writes at a time. (An *os.File
		// is safe for concurrent writes by itself.)
		lw := &lockedWriter{w: stdout}
		stdout, stderr = lw, lw
	}
	for i, s := range [2]struct {
		w    io.Writer
		tap  func([]byte)
		set  *io.Writer
		name string
	}{
		{stdout, p.cfg.StdoutTap, &cmd.Stdout, "stdout"},
		{stderr, p.cfg.StderrTap, &cmd.Stderr, "stderr"},
	} {
		if f, ok := s.w.(*os.File); ok && s.tap == nil {
			*s.set = f
			continue
		}
		if s.w == nil && s.tap == nil {
			continue // /dev/null
		}
		r, w, err := os.Pipe()
		if err != nil {
			closeAll(childEnds)
			p.closeTees()
			return nil, fmt.Errorf("%s pipe: %w", s.name, err)
		}
		childEnds = append(childEnds, w)
		*s.set = w
		p.outs[i] = newTee(s.name, r, s.w, s.tap, p.log)
	}
	return childEnds, nil
}

func closeAll(fs []*os.File) {
	for _, f := range fs {
		f.Close()
	}
}

// launch starts cmd and the tees; a failure is a *StartError, with the
// terminal's foreground group given back.
func (p *Process) launch(cmd *exec.Cmd, childEnds []*os.File) error {
	p.start = time.Now()
	err := cmd.Start()
	// The child has its own copies now; ours would keep the pipes from
	// reaching EOF.
	closeAll(childEnds)
	if err != nil {
		p.closeTees()
		if p.tty != nil {
			// The child may have taken the terminal before its exec
			// failed.
			if rerr := restoreForeground(p.tty); rerr != nil {
				err = errors.Join(err, fmt.Errorf("restore terminal foreground group: %w", rerr))
			}
		}
		return &StartError{Argv0: p.cfg.Argv[0], Code: StatusCannotExecute, Err: err}
	}
	p.cmd = cmd
	p.pid = cmd.Process.Pid
	for _, t := range p.outs {
		if t != nil {
			t.start()
		}
	}
	return nil
}

func normalize(cfg Config) (Config, error) {
	if len(cfg.Argv) == 0 || cfg.Argv[0] == "" {
		return cfg, errors.New("child: empty command")
	}
	if cfg.Grace < 0 || cfg.WaitDelay < 0 {
		return cfg, errors.New("child: negative grace or wait delay")
	}
	if cfg.Grace == 0 {
		cfg.Grace = DefaultGrace
	}
	if cfg.WaitDelay == 0 {
		cfg.WaitDelay = DefaultWaitDelay
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	for sig, d := range cfg.SignalMap {
		if _, ok := sig.(syscall.Signal); !ok {
			return cfg, fmt.Errorf("child: signal map key %v is not a syscall.Signal", sig)
		}
		if err := d.validate(); err != nil {
			return cfg, fmt.Errorf("child: signal map %v: %w", sig, err)
		}
	}
	return cfg, nil
}

// lookupStatus maps a PATH lookup failure to a shell's exit status.
func lookupStatus(err error) int {
	if errors.Is(err, exec.ErrNotFound) || errors.Is(err, fs.ErrNotExist) {
		return StatusNotFound
	}
	// Permission denied, a directory, or exec.ErrDot (found only through
	// a relative PATH entry, which os/exec refuses to run): it exists but
	// we will not run it.
	return StatusCannotExecute
}

// PID is the leader's process ID.
func (p *Process) PID() int { return p.pid }

// Wait waits for the leader to exit and its piped output to drain (bounded
// by WaitDelay) and returns how it ended. A non-zero exit or a death by
// signal is not an error; the error is for when the child could not be
// waited for at all. Wait may be called any number of times.
func (p *Process) Wait() (Exit, error) {
	<-p.done
	return p.exit, p.err
}

func (p *Process) reap() {
	err := p.cmd.Wait()
	wall := time.Since(p.start)
	// The leader is reaped: its number may be reused by another process
	// group's leader (a Slurm job's batch script, on a busy node) at any
	// time from now, so the grace timer must not fire later and SIGKILL
	// that number (ci56: a job on the same machine died of SIGKILL while
	// a supervised child's output drained). Stragglers of a stop are
	// killed just below, while the group still holds its number.
	p.mu.Lock() // Stop arms the timer under mu only while leaderDone is open
	if p.killTimer != nil {
		p.killTimer.Stop()
	}
	close(p.leaderDone)
	p.mu.Unlock()
	deadline := time.Now().Add(p.cfg.WaitDelay)

	if p.tty != nil {
		if err := restoreForeground(p.tty); err != nil {
			p.log.Warn("restore terminal foreground group", "err", err)
		}
	}
	// After the leader exits, the rest of the group is left alone unless
	// we are stopping. DataLoader workers and torchrun ranks notice their
	// parent is gone and exit by themselves; something the user started in
	// the background on purpose (an uploader finishing a checkpoint copy)
	// gets to finish. Under Slurm nothing leaks either way: when the wrapper
	// exits, slurmstepd kills what is left of the step's cgroup. But once
	// a stop was requested, the promise is that the group is gone within
	// the grace period, so stragglers are killed as soon as the leader is.
	if p.stopping.Load() {
		p.killRemaining("leader exited while stopping")
	}

	st := p.cmd.ProcessState
	switch {
	case st == nil:
		p.err = fmt.Errorf("wait for child %d: %w", p.pid, err)
	default:
		var ee *exec.ExitError
		if err != nil && !errors.As(err, &ee) {
			// The stdin copy failed or did not finish within WaitDelay;
			// the exit status is still exact.
			p.log.Warn("child stdin", "err", err)
		}
		p.exit = exitFrom(st, wall, p.escalated.Load())
	}
	for _, t := range p.outs {
		if t != nil {
			t.drain(deadline)
		}
	}
	p.log.Debug("child exited", "pid", p.pid, "exit", p.exit.String(), "wall", wall)
	close(p.done)
}

func exitFrom(st *os.ProcessState, wall time.Duration, escalated bool) Exit {
	e := Exit{Code: st.ExitCode(), Wall: wall, Escalated: escalated}
	if ws, ok := st.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
		e.Signaled = true
		e.Signal = ws.Signal()
		e.Code = -1
	}
	return e
}

func (p *Process) closeTees() {
	for _, t := range p.outs {
		if t != nil {
			t.r.Close()
		}
	}
}

// sameWriter reports whether a and b are the same writer, without panicking
// on writers whose type cannot be compared.
func sameWriter(a, b io.Writer) bool {
	if a == nil || b == nil || reflect.TypeOf(a) != reflect.TypeOf(b) || !reflect.TypeOf(a).Comparable() {
		return false
	}
	return a == b
}

type lockedWriter struct {
	mu sync.Mutex
	w  io.Writer
}

func (l *lockedWriter) Write(b []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(b)
}
