package child

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/isched/isched/internal/atomicfile"
	"golang.org/x/sys/unix"
)

// forwarded are the signals Run relays to the child.
//
// The list is explicit, unlike runc's signal.Notify(ch) for everything,
// because two signals the wrapper receives are about the wrapper, not the
// job, and must never be forwarded:
//   - SIGCHLD is the kernel telling the wrapper that its own child changed
//     state. Forwarded, it would tell the training process that one of *its*
//     children died when none did, and launchers that reap on SIGCHLD
//     (torchrun, multiprocessing pools, shells) would act on it.
//   - SIGURG is sent by the Go runtime to its own threads to preempt
//     goroutines (since Go 1.14), so the wrapper receives it all the time
//     without anyone having sent it; forwarding it would pepper the child
//     with signals nobody sent.
//
// Job control signals (SIGTSTP/SIGCONT, ^Z) are left out too: in an
// interactive step the terminal delivers them to the child's foreground
// group directly, and the wrapper does not track stopped children.
var forwarded = []os.Signal{syscall.SIGTERM, syscall.SIGINT, syscall.SIGUSR1, syscall.SIGUSR2, syscall.SIGHUP}

// Delivery says how a received signal reaches the child. The zero Delivery
// forwards the received signal unchanged.
type Delivery struct {
	// Signal, when non-zero, is sent to the child's group instead of the
	// received signal (USR1=TERM).
	Signal syscall.Signal
	// File, when set, is written instead of sending any signal
	// (USR2=file:/path). The write is atomic (temporary file in the same
	// directory, then rename), so a poller never sees a partial file, and
	// its content is one line: "<received signal name> <unix seconds>\n",
	// e.g. "SIGUSR1 1732200000". This exists because NCCL and other native
	// libraries install their own handlers and swallow SIGUSR1; a Python
	// helper polling the file sees the request regardless.
	File string
}

func (d Delivery) String() string {
	switch {
	case d.File != "":
		return "file:" + d.File
	case d.Signal != 0:
		return shortName(d.Signal)
	default:
		return "same"
	}
}

func (d Delivery) validate() error {
	if d.File != "" && d.Signal != 0 {
		return errors.New("delivery sets both a signal and a file")
	}
	if d.File != "" && !filepath.IsAbs(d.File) {
		return fmt.Errorf("control file %q is not an absolute path", d.File)
	}
	return nil
}

// ParseSignalMap parses the --signal-map flag: comma-separated FROM=TO
// entries, where FROM is one of the forwarded signals and TO is a signal or
// file:/absolute/path. Signal names are case-insensitive, with or without the
// SIG prefix. For example "USR1=TERM,USR2=file:/scratch/run1/ckpt-request".
// An empty string is an empty map. Errors name the offending entry.
func ParseSignalMap(s string) (map[os.Signal]Delivery, error) {
	m := make(map[os.Signal]Delivery)
	if strings.TrimSpace(s) == "" {
		return m, nil
	}
	for i, entry := range strings.Split(s, ",") {
		entry = strings.TrimSpace(entry)
		bad := func(format string, args ...any) error {
			return fmt.Errorf("signal map entry %d %q: %s", i+1, entry, fmt.Sprintf(format, args...))
		}
		if entry == "" {
			return nil, bad("empty entry")
		}
		from, to, ok := strings.Cut(entry, "=")
		if !ok {
			return nil, bad("want FROM=TO, like USR1=TERM or USR2=file:/path")
		}
		from, to = strings.TrimSpace(from), strings.TrimSpace(to)
		fs, err := parseSignal(from)
		if err != nil {
			return nil, bad("%v", err)
		}
		if !isForwarded(fs) {
			return nil, bad("%s is not a forwarded signal (want one of %s)", shortName(fs), forwardedNames())
		}
		if _, dup := m[fs]; dup {
			return nil, bad("%s is mapped twice", shortName(fs))
		}
		var d Delivery
		if path, isFile := strings.CutPrefix(to, "file:"); isFile {
			if path == "" {
				return nil, bad("empty control file path after file:")
			}
			d.File = path
		} else {
			if d.Signal, err = parseSignal(to); err != nil {
				return nil, bad("%v", err)
			}
		}
		if err := d.validate(); err != nil {
			return nil, bad("%v", err)
		}
		m[fs] = d
	}
	return m, nil
}

func parseSignal(name string) (syscall.Signal, error) {
	if name == "" {
		return 0, errors.New("empty signal name")
	}
	up := strings.ToUpper(name)
	if !strings.HasPrefix(up, "SIG") {
		up = "SIG" + up
	}
	s := unix.SignalNum(up)
	if s == 0 {
		return 0, fmt.Errorf("unknown signal %q", name)
	}
	return s, nil
}

func isForwarded(s syscall.Signal) bool {
	for _, f := range forwarded {
		if f == s {
			return true
		}
	}
	return false
}

func forwardedNames() string {
	names := make([]string, len(forwarded))
	for i, s := range forwarded {
		names[i] = shortName(s.(syscall.Signal))
	}
	return strings.Join(names, ", ")
}

// shortName is "TERM" for SIGTERM, the spelling of the flag syntax.
func shortName(s syscall.Signal) string {
	if n := unix.SignalName(s); n != "" {
		return strings.TrimPrefix(n, "SIG")
	}
	return fmt.Sprintf("signal %d", int(s))
}

// Forward delivers sig to the child as Config.SignalMap says: to the whole
// process group, so workers and ranks get it as well. It is harmless to
// forward a signal the child already got (Slurm signals every process of the
// step directly too, so the child may see it twice; handlers for TERM and
// USR1 must be idempotent anyway, since signals coalesce). When the group is
// already gone, Forward returns nil; a control file is not written once the
// leader has exited.
func (p *Process) Forward(sig os.Signal) error {
	s, ok := sig.(syscall.Signal)
	if !ok {
		return fmt.Errorf("forward %v: not a syscall.Signal", sig)
	}
	d := p.cfg.SignalMap[s]
	if d.File == "" && d.Signal == 0 {
		d.Signal = s
	}
	if d.File != "" {
		select {
		case <-p.leaderDone:
			p.log.Debug("child gone, control file not written", "received", shortName(s), "file", d.File)
		default:
			if err := writeControlFile(d.File, s, time.Now()); err != nil {
				return fmt.Errorf("forward %s: %w", shortName(s), err)
			}
			p.log.Info("wrote control file", "received", shortName(s), "file", d.File)
		}
	} else if requestSignal(d.Signal) && !p.caught(d.Signal) {
		p.holdUntilCaught(s, d.Signal)
	} else if err := p.deliver(s, d.Signal); err != nil {
		return err
	}
	if p.cfg.OnSignal != nil {
		p.cfg.OnSignal(sig, d)
	}
	return nil
}

// deliver sends sig (received as s) to the child's process group.
func (p *Process) deliver(s, sig syscall.Signal) error {
	gone, err := p.signalGroup(sig)
	if err != nil {
		return fmt.Errorf("forward %s as %s to group %d: %w", shortName(s), shortName(sig), p.pid, err)
	}
	if gone {
		p.log.Debug("child group gone, signal not forwarded", "received", shortName(s), "pgid", p.pid)
	} else {
		p.log.Info("forwarded signal", "received", shortName(s), "delivered", shortName(sig), "pgid", p.pid)
	}
	return nil
}

// caught reports whether a process of the child's group catches sig; a
// group with no member left counts as catching (the signal then goes
// nowhere, as before).
func (p *Process) caught(sig syscall.Signal) bool {
	catches, members := p.catches()(p.pid, sig)
	return catches || !members
}

func (p *Process) catches() func(int, syscall.Signal) (bool, bool) {
	if p.cfg.catches != nil {
		return p.cfg.catches
	}
	return groupCatches
}

// holdUntilCaught delivers sig once a process of the group catches it, or
// drops it when the child exits first; one hold per signal at a time (a
// signal sent again meanwhile coalesces with it, as pending signals do).
func (p *Process) holdUntilCaught(s, sig syscall.Signal) {
	p.mu.Lock()
	select {
	case <-p.leaderDone: // the group's number may be a stranger's now
		p.mu.Unlock()
		return
	default:
	}
	if p.held == nil {
		p.held = map[syscall.Signal]bool{}
	}
	if p.held[sig] {
		p.mu.Unlock()
		return
	}
	p.held[sig] = true
	p.mu.Unlock()
	p.log.Info("signal held: no process of the child's group catches it yet, and it would kill them; delivered once one does",
		"received", shortName(s), "delivered", shortName(sig), "pgid", p.pid)
	go func() {
		defer func() { p.mu.Lock(); delete(p.held, sig); p.mu.Unlock() }()
		tick := time.NewTicker(deferPoll)
		defer tick.Stop()
		for {
			select {
			case <-p.leaderDone:
				p.log.Info("held signal dropped: the child exited before catching it", "received", shortName(s), "pgid", p.pid)
				return
			case <-tick.C:
			}
			if p.caught(sig) {
				if err := p.deliver(s, sig); err != nil {
					p.log.Warn("held signal", "err", err)
				}
				return
			}
		}
	}()
}

// signalGroup sends sig to the child's process group; gone reports that no
// member was left.
//
// The group ID cannot be recycled while any member (even a zombie) exists,
// so this never hits a stranger while the child or its descendants live.
// Once the group is empty and the leader reaped, its number could in
// principle be reused by a new group leader; kill then fails with ESRCH in
// all but the most unlucky timing, the same exposure exec.Cmd and Nomad
// accept.
func (p *Process) signalGroup(sig syscall.Signal) (gone bool, err error) {
	err = unix.Kill(-p.pid, sig)
	if errors.Is(err, unix.ESRCH) {
		return true, nil
	}
	return false, err
}

// Stop asks the child to stop: it delivers sig as Forward does and, on the
// first call, arms a timer that sends SIGKILL to the whole group when Grace
// expires. If the leader exits before then, remaining group members are
// killed at once. Stop does not wait; use Wait. Calling Stop again forwards
// the signal again but does not restart the timer.
func (p *Process) Stop(sig os.Signal) error {
	if p.stopping.CompareAndSwap(false, true) {
		p.mu.Lock()
		select {
		case <-p.leaderDone: // reaped: no timer may outlive the group's number
		default:
			p.killTimer = time.AfterFunc(p.cfg.Grace, p.escalate)
		}
		p.mu.Unlock()
		p.log.Info("stopping child", "signal", fmt.Sprint(sig), "grace", p.cfg.Grace, "pgid", p.pid)
	}
	return p.Forward(sig)
}

func (p *Process) escalate() {
	select {
	case <-p.done:
		return
	default:
	}
	select {
	case <-p.leaderDone:
		// the reaper killed a stop's stragglers when it reaped the leader;
		// the group's number may belong to a stranger by now
		return
	default:
	}
	// Set before the kill: the reaper may read it as soon as the leader
	// dies, which can be before kill returns here.
	p.escalated.Store(true)
	gone, err := p.signalGroup(syscall.SIGKILL)
	switch {
	case err != nil:
		p.escalated.Store(false)
		p.log.Error("kill child group after grace", "pgid", p.pid, "err", err)
	case gone:
		p.escalated.Store(false)
	default:
		p.log.Warn("grace expired, killed child group", "pgid", p.pid, "grace", p.cfg.Grace)
	}
}

// killRemaining SIGKILLs what is left of the group after the leader exited.
func (p *Process) killRemaining(why string) {
	if gone, _ := p.signalGroup(0); gone {
		return
	}
	if _, err := p.signalGroup(syscall.SIGKILL); err != nil {
		p.log.Error("kill remaining group members", "pgid", p.pid, "err", err)
		return
	}
	p.log.Info("killed remaining group members", "pgid", p.pid, "why", why)
}

// Run starts cfg's command and relays the forwarded signals the wrapper
// receives to it until it has exited, then stops listening and returns
// Wait's result. SIGTERM (Slurm's scancel, time limit and preemption) goes
// through Stop, so it starts the grace timer; the others are forwarded
// only, because what they mean (USR1: checkpoint now) is up to the child.
// Cancelling ctx stops the child as SIGTERM would.
//
// Run listens for signals before the fork so that none is lost in between:
// a signal received before the child exists is delivered right after it
// started. Once Run returns, the default actions are back: a wrapper with
// more work to do after the child exited should handle signals itself.
// started, if not nil, is called once the child runs (to hand its PID to
// samplers) and must not block.
func Run(ctx context.Context, cfg Config, started func(*Process)) (Exit, error) {
	ch := make(chan os.Signal, 16)
	signal.Notify(ch, forwarded...)
	defer signal.Stop(ch)
	p, err := Start(ctx, cfg)
	if err != nil {
		return Exit{}, err
	}
	if started != nil {
		started(p)
	}
	return p.relay(ctx, ch)
}

func (p *Process) relay(ctx context.Context, ch <-chan os.Signal) (Exit, error) {
	cancelled := ctx.Done()
	for {
		select {
		case sig := <-ch:
			var err error
			if sig == syscall.SIGTERM {
				err = p.Stop(sig)
			} else {
				err = p.Forward(sig)
			}
			if err != nil {
				p.log.Warn("relay signal", "signal", fmt.Sprint(sig), "err", err)
			}
		case <-cancelled:
			cancelled = nil
			if err := p.Stop(syscall.SIGTERM); err != nil {
				p.log.Warn("stop on cancel", "err", err)
			}
		case <-p.done:
			return p.Wait()
		}
	}
}

// writeControlFile atomically replaces path with "<SIGNAME> <unix time>\n".
func writeControlFile(path string, sig syscall.Signal, now time.Time) error {
	err := atomicfile.Write(path, 0o600, func(w io.Writer) error {
		_, err := fmt.Fprintf(w, "%s %d\n", unix.SignalName(sig), now.Unix())
		return err
	})
	if err != nil {
		return fmt.Errorf("control file: %w", err)
	}
	return nil
}
