package progress

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"os"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
)

// DefaultPollInterval is how often a Tail looks at its file.
const DefaultPollInterval = 200 * time.Millisecond

// maxReadPerPoll bounds the work of one poll; the rest is read on the next.
const maxReadPerPoll = 1 << 20

// ErrUnsafeFile is wrapped by Tail.Run when the progress path is not a regular
// file owned by this user. The path comes from the job's environment, so a
// user could point it at a FIFO (blocking or feeding the wrapper forever), a
// device (opening some has side effects), a symlink to another user's file,
// or a directory.
var ErrUnsafeFile = errors.New("unsafe progress file")

// Clock is the time source of a Tail; tests inject a fake.
type Clock interface {
	Now() time.Time
	NewTicker(d time.Duration) Ticker
}

// Ticker is the part of *time.Ticker a Tail uses.
type Ticker interface {
	Chan() <-chan time.Time
	Stop()
}

type realClock struct{}

func (realClock) Now() time.Time { return time.Now() }

func (realClock) NewTicker(d time.Duration) Ticker { return realTicker{time.NewTicker(d)} }

type realTicker struct{ t *time.Ticker }

func (r realTicker) Chan() <-chan time.Time { return r.t.C }
func (r realTicker) Stop()                  { r.t.Stop() }

// TailConfig configures a Tail. Only Path is required.
type TailConfig struct {
	Path     string
	Interval time.Duration // default DefaultPollInterval
	Clock    Clock         // default the real clock
	Logger   *slog.Logger  // default slog.Default()
	// SkipExisting starts at the end of a file that already exists when Run
	// starts, for a progress file reused across runs.
	SkipExisting bool
	// AnyOwner accepts a file owned by another user. By default the file must
	// be owned by the effective uid: the training loop runs as the same user
	// and creates it, and a wrapper with more rights must not be talked into
	// reading someone else's file.
	AnyOwner bool
}

// TailStats are counters of a Tail, safe to read while it runs.
type TailStats struct {
	Events    uint64 // events emitted
	Rejected  uint64 // lines ParseLine refused
	TooLong   uint64 // lines longer than MaxLineLen, skipped
	Reopened  uint64 // the path was replaced by a new file
	Truncated uint64 // the file shrank; read again from its start
	ReadErrs  uint64 // failed reads or stats, retried on the next poll
	LastErr   string // last rejection or read error
}

// Tail follows a progress file as the training loop appends to it. It polls
// rather than using inotify: the file may live on a network file system and
// 200 ms is well below an iteration of interest.
//
// The file may not exist yet (Tail waits), may be truncated (Tail restarts at
// offset 0) or replaced (Tail finishes the old file, then reads the new one
// from its start). An unterminated last line is kept until its newline.
// Tail refuses, with an error wrapping ErrUnsafeFile, anything that is not a
// regular file owned by the user (see TailConfig.AnyOwner).
type Tail struct {
	cfg    TailConfig
	clock  Clock
	logger *slog.Logger

	events, rejected, tooLong, reopened, truncated, readErrs atomic.Uint64
	mu                                                       sync.Mutex
	lastErr                                                  string

	// owned by Run
	f          *os.File
	dev, ino   uint64
	off        int64
	partial    []byte
	discarding bool
	warned     bool
	readBuf    []byte
}

// NewTail checks cfg and returns a Tail; nothing is opened until Run.
func NewTail(cfg TailConfig) (*Tail, error) {
	if cfg.Path == "" {
		return nil, errors.New("progress: empty progress file path")
	}
	if cfg.Interval <= 0 {
		cfg.Interval = DefaultPollInterval
	}
	t := &Tail{cfg: cfg, clock: cfg.Clock, logger: cfg.Logger}
	if t.clock == nil {
		t.clock = realClock{}
	}
	if t.logger == nil {
		t.logger = slog.Default()
	}
	t.logger = t.logger.With("component", "progress", "path", cfg.Path)
	return t, nil
}

// Run polls the file until ctx is done, calling emit with the events of each
// poll that found any. All events of one call share the same At (the time the
// poll read them) and Source SourceFile; emit runs on Run's goroutine and may
// keep the slice. When ctx is done Run reads once more, so lines written just
// before the child exited are not lost, and returns nil. It returns an error
// wrapping ErrUnsafeFile if the path is or becomes something other than a
// regular file owned by the user; other errors are counted and retried.
// Run must not be called more than once at a time.
func (t *Tail) Run(ctx context.Context, emit func([]Event)) error {
	ticker := t.clock.NewTicker(t.cfg.Interval)
	defer ticker.Stop()
	defer t.closeFile()
	if err := t.poll(emit, t.cfg.SkipExisting); err != nil {
		return err
	}
	for {
		select {
		case <-ctx.Done():
			return t.poll(emit, false)
		case <-ticker.Chan():
			if err := t.poll(emit, false); err != nil {
				return err
			}
		}
	}
}

func (t *Tail) poll(emit func([]Event), skipExisting bool) error {
	var batch []Event
	if t.f != nil {
		fi, err := os.Lstat(t.cfg.Path)
		switch {
		case errors.Is(err, fs.ErrNotExist):
			// Removed: what was written before the removal still counts.
			t.read(&batch)
			t.closeFile()
		case err != nil:
			t.readErr(err)
		case !sameInode(fi, t.dev, t.ino):
			t.read(&batch)
			t.closeFile()
			t.reopened.Add(1)
			t.logger.Debug("progress file replaced")
		}
	}
	if t.f == nil {
		err := t.open(skipExisting)
		switch {
		case errors.Is(err, ErrUnsafeFile):
			return err
		case errors.Is(err, fs.ErrNotExist):
		case err != nil:
			t.readErr(err)
		}
	}
	if t.f != nil {
		var st syscall.Stat_t
		if err := syscall.Fstat(int(t.f.Fd()), &st); err != nil {
			t.readErr(err)
		} else if st.Size < t.off {
			t.truncated.Add(1)
			t.logger.Debug("progress file truncated", "size", st.Size, "offset", t.off)
			t.off = 0
			t.partial = t.partial[:0]
			t.discarding = false
		}
		t.read(&batch)
	}
	if len(batch) == 0 {
		return nil
	}
	at := t.clock.Now()
	for i := range batch {
		batch[i].At = at
	}
	t.events.Add(uint64(len(batch)))
	emit(batch)
	return nil
}

// Stat_t field types differ between platforms, hence the conversions.
func sameInode(fi fs.FileInfo, dev, ino uint64) bool {
	st, ok := fi.Sys().(*syscall.Stat_t)
	return ok && uint64(st.Dev) == dev && uint64(st.Ino) == ino
}

func (t *Tail) unsafe(why string) error {
	return fmt.Errorf("progress: refusing to follow %q: %s: %w", t.cfg.Path, why, ErrUnsafeFile)
}

func describeMode(m fs.FileMode) string {
	switch {
	case m&fs.ModeSymlink != 0:
		return "a symlink"
	case m&fs.ModeNamedPipe != 0:
		return "a FIFO"
	case m&fs.ModeDevice != 0:
		return "a device"
	case m.IsDir():
		return "a directory"
	case m&fs.ModeSocket != 0:
		return "a socket"
	}
	return "not a regular file"
}

// open opens the path if it is a regular file owned by the user. The Lstat
// comes first so that a FIFO or device is never opened at all in the common
// case; O_NOFOLLOW|O_NONBLOCK and the fstat close the race with a path
// swapped in between (a FIFO opened O_NONBLOCK does not wait for a writer).
func (t *Tail) open(skipExisting bool) error {
	fi, err := os.Lstat(t.cfg.Path)
	if err != nil {
		return err
	}
	if !fi.Mode().IsRegular() {
		return t.unsafe(describeMode(fi.Mode()))
	}
	fd, err := syscall.Open(t.cfg.Path, syscall.O_RDONLY|syscall.O_NOFOLLOW|syscall.O_NONBLOCK|syscall.O_CLOEXEC, 0)
	if errors.Is(err, syscall.ELOOP) {
		return t.unsafe("a symlink")
	}
	if err != nil {
		return &os.PathError{Op: "open", Path: t.cfg.Path, Err: err}
	}
	var st syscall.Stat_t
	if err := syscall.Fstat(fd, &st); err != nil {
		syscall.Close(fd)
		return &os.PathError{Op: "fstat", Path: t.cfg.Path, Err: err}
	}
	if st.Mode&syscall.S_IFMT != syscall.S_IFREG {
		syscall.Close(fd)
		return t.unsafe("not a regular file")
	}
	if !t.cfg.AnyOwner && int(st.Uid) != os.Geteuid() {
		syscall.Close(fd)
		return t.unsafe(fmt.Sprintf("owned by uid %d, not %d", st.Uid, os.Geteuid()))
	}
	// Blocking mode again, so os.File does not try to use the poller.
	if err := syscall.SetNonblock(fd, false); err != nil {
		syscall.Close(fd)
		return &os.PathError{Op: "fcntl", Path: t.cfg.Path, Err: err}
	}
	t.f = os.NewFile(uintptr(fd), t.cfg.Path)
	t.dev, t.ino = uint64(st.Dev), uint64(st.Ino)
	t.off = 0
	if skipExisting {
		t.off = st.Size
	}
	t.partial = t.partial[:0]
	t.discarding = false
	return nil
}

func (t *Tail) closeFile() {
	if t.f == nil {
		return
	}
	t.f.Close()
	t.f = nil
	// An unterminated line of a file that is gone is never completed.
	t.partial = t.partial[:0]
	t.discarding = false
}

func (t *Tail) readErr(err error) {
	t.readErrs.Add(1)
	t.setLastErr(err)
	t.logger.Debug("progress file read failed", "err", err)
}

func (t *Tail) setLastErr(err error) {
	t.mu.Lock()
	t.lastErr = err.Error()
	t.mu.Unlock()
}

// read reads from the current offset to EOF (at most maxReadPerPoll bytes).
func (t *Tail) read(batch *[]Event) {
	if t.readBuf == nil {
		t.readBuf = make([]byte, 64<<10)
	}
	for total := 0; total < maxReadPerPoll; {
		n, err := t.f.ReadAt(t.readBuf, t.off)
		if n > 0 {
			t.off += int64(n)
			total += n
			t.consume(t.readBuf[:n], batch)
		}
		if errors.Is(err, io.EOF) || n == 0 {
			return
		}
		if err != nil {
			t.readErr(err)
			return
		}
	}
}

func (t *Tail) consume(p []byte, batch *[]Event) {
	for len(p) > 0 {
		i := bytes.IndexByte(p, '\n')
		if i < 0 {
			if t.discarding {
				return
			}
			// +1 leaves room for a "\r" before the newline.
			if len(t.partial)+len(p) > MaxLineLen+1 {
				t.tooLong.Add(1)
				t.discarding = true
				t.partial = t.partial[:0]
				return
			}
			t.partial = append(t.partial, p...)
			return
		}
		seg := p[:i]
		p = p[i+1:]
		if t.discarding {
			t.discarding = false
			continue
		}
		line := seg
		if len(t.partial) > 0 {
			if len(t.partial)+len(seg) > MaxLineLen+1 {
				t.tooLong.Add(1)
				t.partial = t.partial[:0]
				continue
			}
			t.partial = append(t.partial, seg...)
			line = t.partial
		}
		t.line(line, batch)
		t.partial = t.partial[:0]
	}
}

func (t *Tail) line(line []byte, batch *[]Event) {
	if len(bytes.TrimSuffix(line, []byte("\r"))) > MaxLineLen {
		t.tooLong.Add(1)
		return
	}
	if len(bytes.Trim(line, " \t\r")) == 0 {
		return
	}
	ev, err := ParseLine(line)
	if err != nil {
		t.rejected.Add(1)
		t.setLastErr(err)
		// One warning tells the user their loop writes bad lines; the rest
		// are counted.
		if !t.warned {
			t.warned = true
			t.logger.Warn("rejected progress line", "err", err)
		} else {
			t.logger.Debug("rejected progress line", "err", err)
		}
		return
	}
	ev.Source = SourceFile
	*batch = append(*batch, ev)
}
