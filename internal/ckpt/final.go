package ckpt

import (
	"cmp"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"time"
)

// maxScanCandidates bounds the entries a Scan looks at twice: the newest
// ones (by modification time) are the ones that matter.
const maxScanCandidates = 64

// Scan is a one-off look at cfg.Dir for checkpoints complete now, modified
// at or after since: what the wrapper does once its command has exited, so
// that a checkpoint saved just before the exit (the watcher's debounce
// period not over, its event not yet delivered) is still recorded. It
// applies the watcher's rules with a short settle period in place of the
// debounce: each candidate is looked at, then again settle later, and
// counts only if it did not change in between —
//   - a file: a non-empty regular file matching the glob, not ignored, not
//     DeepSpeed's "latest", whose size, mtime and inode stayed the same;
//   - a directory of a known layout: its marker is there and its tree's
//     digest stayed the same;
//   - a directory of no known layout whose name has a step: its tree stayed
//     the same and its newest change is at least cfg.DirQuiesce old (a
//     directory still being written never counts).
//
// Events come oldest first (by step when both have one, else by mtime). An
// error means the directory could not be read; ctx ending during the settle
// period returns what was found before it (nothing) and ctx's error.
func Scan(ctx context.Context, cfg Config, since time.Time, settle time.Duration) ([]Event, error) {
	w, err := New(cfg)
	if err != nil {
		return nil, err
	}
	defer w.Close()
	looks, err := w.scanCandidates(since)
	if err != nil {
		return nil, err
	}
	if len(looks) == 0 {
		return nil, nil
	}
	select {
	case <-ctx.Done():
		return nil, ctx.Err()
	case <-time.After(settle):
	}
	now := time.Now()
	var out []Event
	for _, l := range looks {
		if ev, ok := w.settled(l, now); ok {
			out = append(out, ev)
		}
	}
	slices.SortFunc(out, func(a, b Event) int {
		if a.Step != nil && b.Step != nil && *a.Step != *b.Step {
			return cmp.Compare(*a.Step, *b.Step)
		}
		return a.MTime.Compare(b.MTime)
	})
	return out, nil
}

// scanLook is Scan's first look at one candidate.
type scanLook struct {
	name  string
	dir   bool
	id    fileID
	tree  Tree
	mtime time.Time
}

// scanCandidates is Scan's first look: the newest entries (at most
// maxScanCandidates) that may be checkpoints complete now.
func (w *Watcher) scanCandidates(since time.Time) ([]scanLook, error) {
	entries, err := os.ReadDir(w.dir)
	if err != nil {
		return nil, fmt.Errorf("ckpt: scan %s: %w", w.dir, err)
	}
	var looks []scanLook
	for _, e := range entries {
		name := e.Name()
		if !w.candidate(name) || !(e.IsDir() || e.Type().IsRegular()) {
			continue
		}
		fi, err := e.Info()
		if err != nil || fi.ModTime().Before(since) && !e.IsDir() {
			continue
		}
		looks = append(looks, scanLook{name: name, dir: e.IsDir(), mtime: fi.ModTime()})
	}
	// the newest first, at most maxScanCandidates of them
	slices.SortFunc(looks, func(a, b scanLook) int { return b.mtime.Compare(a.mtime) })
	looks = looks[:min(len(looks), maxScanCandidates)]
	kept := looks[:0]
	for _, l := range looks {
		if w.firstLook(&l, since) {
			kept = append(kept, l)
		}
	}
	return kept, nil
}

// firstLook records what l is now; false when it cannot be a complete
// checkpoint (an empty file, DeepSpeed's "latest", a step-less directory
// of no known layout, an empty or old tree).
func (w *Watcher) firstLook(l *scanLook, since time.Time) bool {
	if !l.dir {
		id, ok := w.lstat(l.name)
		l.id = id
		return ok && id.size > 0 && !isDeepSpeedLatest(w.dir, l.name)
	}
	layout, _ := dirLayout(w.dir, l.name)
	if _, _, ok := ParseStep(l.name); !ok && layout == LayoutUnknown {
		return false
	}
	t, err := ReadTree(filepath.Join(w.dir, l.name))
	l.tree = t
	return err == nil && t.Files > 0 && !t.MTime.Before(since)
}

// settled is l's event when it did not change since the first look and
// is complete now.
func (w *Watcher) settled(l scanLook, now time.Time) (Event, bool) {
	path := filepath.Join(w.dir, l.name)
	ev := Event{Path: path, At: now}
	if !l.dir {
		id, ok := w.lstat(l.name)
		if !ok || id != l.id {
			return Event{}, false // written (or gone) during the settle period
		}
		ev.Size, ev.MTime = id.size, id.mtime
	} else {
		t, err := ReadTree(path)
		if err != nil || t.Digest != l.tree.Digest {
			return Event{}, false
		}
		layout, marked := dirLayout(w.dir, l.name)
		if !marked && (layout != LayoutUnknown || now.Sub(t.MTime) < w.quiesce) {
			return Event{}, false // a known layout without its marker, or not quiet long enough
		}
		ev.Dir, ev.Tree, ev.Layout, ev.Size, ev.MTime = true, t.Digest, layout, t.Size, t.MTime
	}
	if n, from, ok := ParseStep(l.name); ok {
		ev.Step, ev.StepFrom = &n, from
	}
	return ev, true
}
