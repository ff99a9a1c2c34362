package slurm

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"regexp"
	"strings"
	"time"
)

// DefaultTimeout bounds one Slurm command when Client.Timeout is zero. It is
// longer than slurmctld's default MessageTimeout (10 s), so a slow controller
// answers with its own error before we give up, and long enough for
// `squeue --json` on a large queue.
const DefaultTimeout = 30 * time.Second

// maxStderr is how much of a command's stderr is kept. Slurm's messages are
// one or two lines; the bound only matters for a misbehaving binary.
const maxStderr = 8 << 10

// Runner runs one command without a shell and returns its stdout. A command
// that ran and failed is reported as a *ExitError carrying its stderr.
// Implementations must honour ctx (the Client puts a timeout on it).
type Runner interface {
	Run(ctx context.Context, name string, args []string, stdin []byte) (stdout []byte, err error)
}

// EnvRunner is a Runner that can add environment variables to one
// command (ExecRunner: the user's SBATCH_* variables for sbatch).
type EnvRunner interface {
	RunEnv(ctx context.Context, name string, args []string, stdin []byte, env []string) (stdout []byte, err error)
}

// RunnerFunc adapts a function to Runner (fakes in tests).
type RunnerFunc func(ctx context.Context, name string, args []string, stdin []byte) ([]byte, error)

// Run implements Runner.
func (f RunnerFunc) Run(ctx context.Context, name string, args []string, stdin []byte) ([]byte, error) {
	return f(ctx, name, args, stdin)
}

// ExitError is a Slurm command that failed: it exited non-zero, was killed
// (Code -1) or timed out (Code -1, Err wraps context.DeadlineExceeded).
// Stderr is what the command said, which is what a user needs to see.
type ExitError struct {
	Cmd    string
	Args   []string
	Code   int
	Stderr string
	Err    error // the underlying cause; may be nil
}

func (e *ExitError) Error() string {
	var b strings.Builder
	b.WriteString(e.Cmd)
	for _, a := range e.Args {
		b.WriteByte(' ')
		b.WriteString(a)
	}
	switch {
	case e.Err != nil && e.Code < 0:
		fmt.Fprintf(&b, ": %v", e.Err)
	default:
		fmt.Fprintf(&b, ": exit status %d", e.Code)
	}
	if s := strings.TrimSpace(e.Stderr); s != "" {
		b.WriteString(": ")
		b.WriteString(s)
	}
	return b.String()
}

func (e *ExitError) Unwrap() error { return e.Err }

// ErrNotFound is matched (errors.Is) by a command that failed because
// slurmctld does not know the job: it never existed or ended more than
// MinJobAge ago.
var ErrNotFound = errors.New("slurm: job not found")

// ErrInvalid marks an argument refused before any command ran.
var ErrInvalid = errors.New("slurm: invalid argument")

// notFound reports whether Slurm's stderr says the job id is unknown.
func notFound(stderr string) bool {
	return strings.Contains(stderr, "Invalid job id specified")
}

// Client runs the Slurm client commands. The zero value is ready to use: it
// finds the binaries in PATH and runs them with ExecRunner.
//
// Like containerd/go-runc, every binary path is overridable, every call has a
// timeout, and no command ever goes through a shell: job names, paths and
// user strings are argv elements, so shell metacharacters in them are inert.
type Client struct {
	Squeue   string // default "squeue"
	Sinfo    string // default "sinfo"
	Scontrol string // default "scontrol"
	Scancel  string // default "scancel"
	Sbatch   string // default "sbatch"

	Timeout time.Duration // per command; default DefaultTimeout
	Runner  Runner        // default ExecRunner{}

	// LookupGroup returns a user's numeric primary group for Submit;
	// default: the passwd/NSS entry (os/user).
	LookupGroup func(user string) (gid string, err error)

	// PollEvery is how often Move polls the job's state; default 100 ms.
	PollEvery time.Duration
}

func or(s, def string) string {
	if s == "" {
		return def
	}
	return s
}

func (c *Client) run(ctx context.Context, name string, args []string, stdin []byte) ([]byte, error) {
	return c.runEnv(ctx, name, args, stdin, nil)
}

// runEnv is run with env added to the command's environment; the Runner
// must be an EnvRunner when env is not empty.
func (c *Client) runEnv(ctx context.Context, name string, args []string, stdin []byte, env []string) ([]byte, error) {
	timeout := c.Timeout
	if timeout <= 0 {
		timeout = DefaultTimeout
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	r := c.Runner
	if r == nil {
		r = ExecRunner{}
	}
	var out []byte
	var err error
	if len(env) == 0 {
		out, err = r.Run(ctx, name, args, stdin)
	} else if er, ok := r.(EnvRunner); ok {
		out, err = er.RunEnv(ctx, name, args, stdin, env)
	} else {
		return nil, fmt.Errorf("slurm: %s: the runner cannot pass environment variables (%T)", name, r)
	}
	if err == nil {
		return out, nil
	}
	var ee *ExitError
	if errors.As(err, &ee) && notFound(ee.Stderr) && !errors.Is(err, ErrNotFound) {
		return out, &notFoundError{ee}
	}
	return out, err
}

// notFoundError is an *ExitError that also matches ErrNotFound.
type notFoundError struct{ *ExitError }

func (e *notFoundError) Is(target error) bool { return target == ErrNotFound }
func (e *notFoundError) Unwrap() error        { return e.ExitError }

// ExecRunner runs commands with os/exec.
//
// The environment is the process's own minus everything that changes what a
// Slurm client prints or submits (SQUEUE_FORMAT, SBATCH_PARTITION, SLURM_*,
// ...; SLURM_CONF is kept), plus TZ=UTC and SLURM_TIME_FORMAT=standard, so
// the parsers can rely on one output format and on times in UTC.
type ExecRunner struct {
	// WaitDelay bounds waiting for output after the command exited or was
	// killed (a forked child may hold the pipes); default 2 s.
	WaitDelay time.Duration
}

// Run implements Runner.
func (r ExecRunner) Run(ctx context.Context, name string, args []string, stdin []byte) ([]byte, error) {
	return r.RunEnv(ctx, name, args, stdin, nil)
}

// RunEnv implements EnvRunner: env is added after the filtered environment.
func (r ExecRunner) RunEnv(ctx context.Context, name string, args []string, stdin []byte, env []string) ([]byte, error) {
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.Env = append(CommandEnv(os.Environ()), env...)
	if stdin != nil {
		cmd.Stdin = bytes.NewReader(stdin)
	}
	var stdout bytes.Buffer
	stderr := &capped{max: maxStderr}
	cmd.Stdout, cmd.Stderr = &stdout, stderr
	cmd.WaitDelay = r.WaitDelay
	if cmd.WaitDelay <= 0 {
		cmd.WaitDelay = 2 * time.Second
	}
	err := cmd.Run()
	if err == nil {
		return stdout.Bytes(), nil
	}
	ee := &ExitError{Cmd: name, Args: args, Code: -1, Stderr: stderr.String(), Err: err}
	var xe *exec.ExitError
	if errors.As(err, &xe) {
		ee.Code = xe.ExitCode() // -1 when killed by a signal
		ee.Err = nil
	}
	if ctxErr := ctx.Err(); ctxErr != nil {
		ee.Code = -1
		ee.Err = ctxErr
	}
	if errors.Is(err, exec.ErrNotFound) || errors.Is(err, os.ErrNotExist) {
		// Not a Slurm answer: the client commands are not installed here.
		return nil, fmt.Errorf("slurm: %s: %w", name, err)
	}
	return stdout.Bytes(), ee
}

// CommandEnv filters env (KEY=VALUE entries) for running Slurm clients.
func CommandEnv(env []string) []string {
	out := make([]string, 0, len(env)+2)
	for _, kv := range env {
		k, _, _ := strings.Cut(kv, "=")
		if k == "SLURM_CONF" {
			out = append(out, kv)
			continue
		}
		if k == "TZ" || k == "SLURM_TIME_FORMAT" {
			continue
		}
		drop := false
		for _, p := range []string{"SLURM_", "SQUEUE_", "SINFO_", "SBATCH_", "SCANCEL_", "SCONTROL_", "SALLOC_", "SRUN_"} {
			if strings.HasPrefix(k, p) {
				drop = true
				break
			}
		}
		if !drop {
			out = append(out, kv)
		}
	}
	return append(out, "TZ=UTC", "SLURM_TIME_FORMAT=standard")
}

// capped keeps the first max bytes written to it and drops the rest, so a
// runaway command cannot make us hold unbounded stderr.
type capped struct {
	buf bytes.Buffer
	max int
}

func (c *capped) Write(p []byte) (int, error) {
	if room := c.max - c.buf.Len(); room > 0 {
		if len(p) > room {
			c.buf.Write(p[:room])
		} else {
			c.buf.Write(p)
		}
	}
	return len(p), nil
}

func (c *capped) String() string { return c.buf.String() }

var (
	jobIDRE   = regexp.MustCompile(`^[1-9][0-9]{0,9}(_[0-9]{1,10})?$`)
	signalRE  = regexp.MustCompile(`^(SIG)?[A-Z][A-Z0-9]{1,15}$|^[0-9]{1,2}$`)
	clusterRE = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$`)
	partRE    = regexp.MustCompile(`^[A-Za-z0-9._-]{1,128}(,[A-Za-z0-9._-]{1,128})*$`)
	gresRE    = regexp.MustCompile(`^[A-Za-z0-9._:/=-]{1,256}(,[A-Za-z0-9._:/=-]{1,256})*$`)
	userRE    = regexp.MustCompile(`^[A-Za-z0-9._][A-Za-z0-9._-]{0,63}$`)
	// sbatchEnvRE: SBATCH_* names only (SLURM_CONF and the others stay ours)
	sbatchEnvRE = regexp.MustCompile(`^SBATCH_[A-Z0-9_]{1,64}$`)
)

// ValidJobID reports whether id is a Slurm job id we accept as an argument:
// digits, optionally followed by _N for an array task ("123", "123_4").
// Everything else is refused before a command runs.
func ValidJobID(id string) bool { return jobIDRE.MatchString(id) }

func checkJobID(id string) error {
	if !ValidJobID(id) {
		return fmt.Errorf("%w: job id %q: want digits with an optional _N array suffix", ErrInvalid, id)
	}
	return nil
}
