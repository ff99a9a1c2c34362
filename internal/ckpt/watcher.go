// Package ckpt watches a checkpoint directory and reports each checkpoint file
// once it is complete. It is the only package that imports fsnotify.
//
// The directory is watched, not the files (a file watch is lost when the
// training script writes a temporary file and renames it over the
// checkpoint, which is the normal pattern). A file is complete when no
// Create/Write event arrived for it for one debounce period and two Lstats one
// debounce period apart agree on size, mtime and inode. A renamed-in
// checkpoint is therefore reported one debounce period after the rename; a
// file written in place between one and two periods after its last write.
// Stat is not called on every Write event: a checkpoint written in 64 KiB
// chunks produces thousands, and a stat on a parallel file system can cost a
// round trip to the metadata server.
//
// Directories are checkpoints too (Hugging Face's checkpoint-<step>/,
// torch.distributed.checkpoint, DeepSpeed's global_step<N>/): see dirs.go
// for when one is complete.
package ckpt

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/fsnotify/fsnotify"
)

// Defaults for Config.
const (
	DefaultDebounce = 2 * time.Second
	DefaultDirPoll  = time.Second
	// DefaultDirQuiesce is how long a directory checkpoint of no known
	// layout must stay unchanged to count as complete.
	DefaultDirQuiesce = 30 * time.Second
)

// DefaultIgnore are the temporary-file patterns never reported: the halves of
// write-then-rename and editor or rsync droppings.
var DefaultIgnore = []string{"*.tmp", "*.partial", ".*", "tmp-*"}

// Config configures a Watcher. Only Dir is required.
type Config struct {
	Dir string
	// Glob selects checkpoint files by base name (filepath.Match syntax, no
	// '/'). Default "*".
	Glob string
	// Debounce is the quiet period after which a file counts as complete.
	Debounce time.Duration
	// DirPoll is how often a missing directory is looked for, and how often
	// the directory is rescanned if inotify cannot be used.
	DirPoll time.Duration
	// Ignore lists base-name patterns never reported; nil means
	// DefaultIgnore, an empty non-nil slice ignores nothing.
	Ignore []string
	// DirQuiesce is how long a directory checkpoint without a known
	// layout's marker must stay unchanged (every name, size and mtime in
	// it) to count as complete. Default DefaultDirQuiesce.
	DirQuiesce time.Duration
	Logger     *slog.Logger
}

// Event is a complete checkpoint: a file, or a directory (Dir).
type Event struct {
	Path  string // absolute (the directory made absolute, symlinks not resolved)
	Size  int64
	MTime time.Time
	// Step is parsed from the base name (see ParseStep), nil if it has none;
	// StepFrom says which rule found it.
	Step     *int64
	StepFrom string
	// Existing marks files found by the first scan of a directory that
	// existed when Run started: checkpoints of an earlier run, not this one.
	Existing bool
	At       time.Time // when the file was found complete
	// Dir marks a directory checkpoint: Size is the bytes of its files,
	// MTime the newest modification in it, Tree its Tree.Digest and Layout
	// the layout whose marker (or, for LayoutUnknown, the quiet period)
	// confirmed it.
	Dir    bool
	Tree   string
	Layout string
}

// Stats are counters of a Watcher, safe to read while it runs.
type Stats struct {
	Events    uint64 // checkpoints reported
	Errors    uint64 // fsnotify, stat and directory errors (logged, never fatal)
	Overflows uint64 // inotify queue overflows, each followed by a rescan
	PollMode  bool   // inotify failed; the directory is rescanned every DirPoll
	Watches   uint64 // times the directory was watched (or polled) and first scanned
}

// Watcher reports complete checkpoint files of one directory.
type Watcher struct {
	dir      string
	glob     string
	ignore   []string
	debounce time.Duration
	quiesce  time.Duration
	dirPoll  time.Duration
	logger   *slog.Logger
	events   chan Event

	newFS func() (*fsnotify.Watcher, error) // replaced in tests

	nEvents, nErrors, nOverflows atomic.Uint64
	nWatches                     atomic.Uint64
	nPending                     atomic.Int64 // len(pending), for Pending
	pollMode                     atomic.Bool

	mu      sync.Mutex
	started bool
	closed  bool
	stop    context.CancelFunc
	stopCtx context.Context
	done    chan struct{}

	// owned by Run
	pending      map[string]*pending
	reported     map[string]fileID
	dirs         map[string]*dirPending // directory checkpoints being written
	reportedDirs map[string]string      // name -> Tree.Digest reported
}

// dirPending is a directory checkpoint not yet complete. Writes inside it
// raise no event on the watched directory: it is re-read every debounce
// period until its marker is there and it stopped changing.
type dirPending struct {
	tree     Tree
	changed  time.Time // when tree was last seen different
	next     time.Time // next read
	existing bool
	// undecided: no step in its name and no known layout when it appeared
	// (an empty "final/" of torch.distributed.checkpoint, or "runs/"):
	// followed until a layout shows or it stays quiet for DirQuiesce, and
	// not counted as pending meanwhile
	undecided bool
}

type fileID struct {
	size  int64
	mtime time.Time
	ino   uint64
}

type pending struct {
	last     time.Time // last Create/Write or observed change
	id       fileID    // Lstat at last, the baseline for the stability check
	dirty    bool      // events arrived after id was taken
	existing bool
}

// New checks cfg and returns a Watcher; nothing happens until Run.
func New(cfg Config) (*Watcher, error) {
	if cfg.Dir == "" {
		return nil, errors.New("ckpt: empty checkpoint directory")
	}
	dir, err := filepath.Abs(cfg.Dir)
	if err != nil {
		return nil, fmt.Errorf("ckpt: %w", err)
	}
	if cfg.Glob == "" {
		cfg.Glob = "*"
	}
	ignore := cfg.Ignore
	if ignore == nil {
		ignore = DefaultIgnore
	}
	for _, g := range append([]string{cfg.Glob}, ignore...) {
		if strings.ContainsRune(g, '/') {
			return nil, fmt.Errorf("ckpt: pattern %q: matches base names, must not contain '/'", g)
		}
		if _, err := filepath.Match(g, ""); err != nil {
			return nil, fmt.Errorf("ckpt: pattern %q: %w", g, err)
		}
	}
	if cfg.Debounce <= 0 {
		cfg.Debounce = DefaultDebounce
	}
	if cfg.DirQuiesce <= 0 {
		cfg.DirQuiesce = DefaultDirQuiesce
	}
	if cfg.DirPoll <= 0 {
		cfg.DirPoll = DefaultDirPoll
	}
	logger := cfg.Logger
	if logger == nil {
		logger = slog.Default()
	}
	stopCtx, stop := context.WithCancel(context.Background())
	return &Watcher{
		dir: dir, glob: cfg.Glob, ignore: ignore, debounce: cfg.Debounce, quiesce: cfg.DirQuiesce, dirPoll: cfg.DirPoll,
		logger: logger.With("component", "ckpt", "dir", dir),
		events: make(chan Event, 64),
		newFS:  fsnotify.NewWatcher,
		stop:   stop, stopCtx: stopCtx, done: make(chan struct{}),
	}, nil
}

// Events delivers complete checkpoints. It is closed when Run returns (or by
// Close if Run never ran). Run blocks while the channel is full.
func (w *Watcher) Events() <-chan Event { return w.events }

// Stats returns the counters so far.
func (w *Watcher) Stats() Stats {
	return Stats{Events: w.nEvents.Load(), Errors: w.nErrors.Load(), Overflows: w.nOverflows.Load(),
		PollMode: w.pollMode.Load(), Watches: w.nWatches.Load()}
}

// Close stops Run and waits for it to return. It may be called more than
// once, and before or without Run.
func (w *Watcher) Close() {
	w.mu.Lock()
	w.stop()
	started := w.started
	if !started && !w.closed {
		close(w.events)
	}
	w.closed = true
	w.mu.Unlock()
	if started {
		<-w.done
	}
}

// Run watches until ctx is done or Close is called, then returns nil. It waits
// for the directory to exist, watches it, scans it once, and goes back to
// waiting if the directory is removed or renamed. Errors are logged and
// counted, never returned; Run only fails if called twice.
func (w *Watcher) Run(ctx context.Context) error {
	w.mu.Lock()
	if w.started {
		w.mu.Unlock()
		return errors.New("ckpt: Run called twice")
	}
	w.started = true
	closed := w.closed
	w.mu.Unlock()
	defer close(w.done)
	if closed {
		return nil
	}
	defer close(w.events)
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	defer context.AfterFunc(w.stopCtx, cancel)()

	w.pending = make(map[string]*pending)
	w.reported = make(map[string]fileID)
	w.dirs = make(map[string]*dirPending)
	w.reportedDirs = make(map[string]string)
	existedAtStart := w.dirExists()
	for first := true; ; first = false {
		if !w.waitForDir(ctx) {
			return nil
		}
		w.watch(ctx, first && existedAtStart)
		if ctx.Err() != nil {
			return nil
		}
		// The directory went away: its files are no longer pending.
		clear(w.pending)
		clear(w.reported)
		clear(w.dirs)
		clear(w.reportedDirs)
	}
}

func (w *Watcher) dirExists() bool {
	fi, err := os.Stat(w.dir)
	return err == nil && fi.IsDir()
}

// waitForDir polls for the directory; false when ctx ended first. The
// training script often creates the directory at its first save.
func (w *Watcher) waitForDir(ctx context.Context) bool {
	logged := false
	for {
		if w.dirExists() {
			return true
		}
		if !logged {
			w.logger.Debug("waiting for checkpoint directory")
			logged = true
		}
		select {
		case <-ctx.Done():
			return false
		case <-time.After(w.dirPoll):
		}
	}
}

func (w *Watcher) errorf(msg string, err error) {
	w.nErrors.Add(1)
	w.logger.Warn(msg, "err", err)
}

// watch runs until ctx ends or the directory disappears.
func (w *Watcher) watch(ctx context.Context, existing bool) {
	src := w.openWatch()
	defer src.close()
	// Scan after the watch is in place, so a file created in between is
	// seen by one or the other (both is fine: paths are deduplicated).
	if !w.scan(existing) {
		return
	}
	w.nWatches.Add(1)
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	for {
		w.armTimer(timer)
		if !w.handleNext(ctx, src, timer) {
			return
		}
	}
}

// watchSource is where watch hears of changes: fsnotify's channels, or a
// rescan ticker when the directory cannot be watched.
type watchSource struct {
	events <-chan fsnotify.Event
	errs   <-chan error
	rescan <-chan time.Time
	close  func()
}

// openWatch watches the directory, or falls back to rescanning it.
func (w *Watcher) openWatch() watchSource {
	fw, err := w.newFS()
	if err == nil {
		if err = fw.Add(w.dir); err != nil {
			fw.Close()
		}
	}
	if err != nil {
		// Out of inotify instances or watches (fs.inotify.max_user_*) must not
		// cost the job its checkpoint reports: rescan instead.
		w.errorf("cannot watch checkpoint directory, rescanning periodically", err)
		w.pollMode.Store(true)
		t := time.NewTicker(w.dirPoll)
		return watchSource{rescan: t.C, close: t.Stop}
	}
	w.pollMode.Store(false)
	return watchSource{events: fw.Events, errs: fw.Errors, close: func() { fw.Close() }}
}

// handleNext handles what comes first; false when watch is to return.
func (w *Watcher) handleNext(ctx context.Context, src watchSource, timer *time.Timer) bool {
	select {
	case <-ctx.Done():
		return false
	case ev, ok := <-src.events:
		return ok && w.handle(ev)
	case err, ok := <-src.errs:
		if !ok {
			return false
		}
		if errors.Is(err, fsnotify.ErrEventOverflow) {
			w.nOverflows.Add(1)
			w.errorf("inotify queue overflow, rescanning", err)
			return w.scan(false)
		}
		w.errorf("fsnotify error", err)
		return true
	case <-src.rescan:
		return w.scan(false)
	case <-timer.C:
		return w.checkPending(ctx)
	}
}

// Pending is how many files wait for their debounce period: a caller
// about to stop the watcher (the wrapper, once its child has exited) can
// give a checkpoint renamed into place at the last moment the time to be
// confirmed and reported.
func (w *Watcher) Pending() int { return int(w.nPending.Load()) }

func (w *Watcher) armTimer(t *time.Timer) {
	n := len(w.pending)
	for _, d := range w.dirs {
		if !d.undecided {
			n++
		}
	}
	w.nPending.Store(int64(n))
	if len(w.pending) == 0 && len(w.dirs) == 0 {
		t.Stop()
		return
	}
	var next time.Time
	for _, p := range w.pending {
		if d := p.last.Add(w.debounce); next.IsZero() || d.Before(next) {
			next = d
		}
	}
	for _, p := range w.dirs {
		if next.IsZero() || p.next.Before(next) {
			next = p.next
		}
	}
	t.Reset(max(time.Until(next), 0))
}

// candidate reports whether a base name may be a checkpoint.
func (w *Watcher) candidate(name string) bool {
	for _, g := range w.ignore {
		if ok, _ := filepath.Match(g, name); ok {
			return false
		}
	}
	ok, _ := filepath.Match(w.glob, name)
	return ok
}

// handle applies one fsnotify event; false when the directory itself went away.
func (w *Watcher) handle(ev fsnotify.Event) bool {
	if filepath.Clean(ev.Name) == w.dir {
		if ev.Has(fsnotify.Remove) || ev.Has(fsnotify.Rename) {
			w.logger.Info("checkpoint directory removed or renamed, waiting for it again")
			return false
		}
		return true
	}
	if filepath.Dir(ev.Name) != w.dir {
		return true
	}
	name := filepath.Base(ev.Name)
	if !w.candidate(name) {
		return true
	}
	switch {
	case ev.Has(fsnotify.Create) || ev.Has(fsnotify.Write):
		if fi, err := os.Lstat(ev.Name); err == nil && fi.IsDir() {
			w.addDir(name, false, time.Now())
			return true
		}
		if p := w.pending[name]; p != nil {
			p.last, p.dirty, p.existing = time.Now(), true, false
			return true
		}
		id, ok := w.lstat(name)
		if !ok {
			return true
		}
		w.pending[name] = &pending{last: time.Now(), id: id}
	case ev.Has(fsnotify.Remove) || ev.Has(fsnotify.Rename):
		// Rename is the old name moving away; the new name gets a Create.
		delete(w.pending, name)
		delete(w.reported, name)
		delete(w.dirs, name)
		delete(w.reportedDirs, name)
	}
	return true
}

// lstat returns the identity of a regular file; false for anything else,
// including a symlink (the file it points to is reported under its own name
// if it matches, not twice).
func (w *Watcher) lstat(name string) (fileID, bool) {
	fi, err := os.Lstat(filepath.Join(w.dir, name))
	if err != nil {
		if !errors.Is(err, fs.ErrNotExist) {
			w.errorf("stat checkpoint", err)
		}
		return fileID{}, false
	}
	if !fi.Mode().IsRegular() {
		return fileID{}, false
	}
	id := fileID{size: fi.Size(), mtime: fi.ModTime()}
	if st, ok := fi.Sys().(*syscall.Stat_t); ok {
		id.ino = uint64(st.Ino) // not uint64 on every platform
	}
	return id, true
}

// scan looks at every candidate in the directory; false when it is gone.
func (w *Watcher) scan(existing bool) bool {
	entries, err := os.ReadDir(w.dir)
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return false
		}
		w.errorf("scan checkpoint directory", err)
		return true
	}
	now := time.Now()
	for _, e := range entries {
		name := e.Name()
		if e.IsDir() && w.candidate(name) {
			w.addDir(name, existing, now)
			continue
		}
		if !e.Type().IsRegular() || !w.candidate(name) {
			continue
		}
		id, ok := w.lstat(name)
		if !ok {
			continue
		}
		if p := w.pending[name]; p != nil {
			if id != p.id {
				p.last, p.dirty = now, true
			}
			continue
		}
		if r, ok := w.reported[name]; ok && r == id {
			continue
		}
		w.pending[name] = &pending{last: now, id: id, existing: existing}
	}
	return true
}

// checkPending reports the files quiet for a debounce period whose Lstat
// did not change; false when ctx ended while sending.
func (w *Watcher) checkPending(ctx context.Context) bool {
	now := time.Now()
	for name, p := range w.pending {
		if now.Sub(p.last) < w.debounce {
			continue
		}
		id, ok := w.lstat(name)
		switch {
		case !ok:
			delete(w.pending, name)
		case p.dirty || id != p.id:
			// Written since the baseline: take a new one, wait once more.
			p.id, p.dirty, p.last = id, false, now
		case id.size == 0:
			// Created but not written; a Write event brings it back.
			delete(w.pending, name)
		case isDeepSpeedLatest(w.dir, name):
			// DeepSpeed's tag file: the marker of a directory, not a checkpoint
			delete(w.pending, name)
		default:
			delete(w.pending, name)
			if r, ok := w.reported[name]; ok && r == id {
				continue
			}
			w.reported[name] = id
			ev := Event{
				Path: filepath.Join(w.dir, name), Size: id.size, MTime: id.mtime,
				Existing: p.existing, At: now,
			}
			if n, from, ok := ParseStep(name); ok {
				ev.Step, ev.StepFrom = &n, from
			}
			if !w.send(ctx, ev) {
				return false
			}
		}
	}
	return w.checkDirs(ctx, now)
}

func (w *Watcher) send(ctx context.Context, ev Event) bool {
	select {
	case w.events <- ev:
		w.nEvents.Add(1)
		w.logger.Debug("checkpoint complete", "path", ev.Path, "size", ev.Size, "dir", ev.Dir, "existing", ev.Existing)
		return true
	case <-ctx.Done():
		return false
	}
}
