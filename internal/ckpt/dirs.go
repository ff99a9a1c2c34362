package ckpt

import (
	"context"
	"errors"
	"io/fs"
	"path/filepath"
	"time"
)

// Directory checkpoints. A directory in the watched directory is a
// checkpoint once it is complete:
//   - a known layout (Hugging Face checkpoint-<step>/, DeepSpeed
//     global_step<N>/, torch.distributed.checkpoint *.distcp shards) when
//     the file that layout writes last is there (trainer_state.json, the
//     parent's "latest" naming the tag, .metadata) and the whole tree did
//     not change over one debounce period;
//   - a directory of no known layout whose name has a step number, when
//     the whole tree (every name, size and mtime) did not change for the
//     quiet period (Config.DirQuiesce).
// A known layout without its marker is never complete, however long it
// stays quiet: a save that died halfway is not a resume point.

// addDir starts following the directory name, unless it was reported as
// it is now. One with no step in its name and no known layout yet is
// followed undecided: writes inside it raise no event here, and a
// torch.distributed.checkpoint directory named "final/" is empty when it
// appears; it becomes a checkpoint once its layout shows, and is dropped
// ("runs/", "logs/") once it stayed quiet for DirQuiesce without one.
func (w *Watcher) addDir(name string, existing bool, now time.Time) {
	if w.dirs[name] != nil {
		return
	}
	layout, _ := dirLayout(w.dir, name)
	_, _, hasStep := ParseStep(name)
	undecided := !hasStep && layout == LayoutUnknown
	if undecided && existing {
		return // there before the run and still no checkpoint: not followed
	}
	t, err := ReadTree(filepath.Join(w.dir, name))
	if err != nil {
		if !errors.Is(err, fs.ErrNotExist) && !undecided {
			w.errorf("read checkpoint directory", err)
		}
		return
	}
	if d, ok := w.reportedDirs[name]; ok && d == t.Digest {
		return
	}
	w.dirs[name] = &dirPending{tree: t, changed: now, next: now.Add(w.debounce), existing: existing, undecided: undecided}
}

// checkDirs re-reads the directories due and reports the complete ones;
// false when ctx ended while sending.
func (w *Watcher) checkDirs(ctx context.Context, now time.Time) bool {
	for name, p := range w.dirs {
		if now.Before(p.next) {
			continue
		}
		p.next = now.Add(w.debounce)
		path := filepath.Join(w.dir, name)
		t, err := ReadTree(path)
		if err != nil {
			if !errors.Is(err, fs.ErrNotExist) && !p.undecided { // a huge "logs/" is no error
				w.errorf("read checkpoint directory", err)
			}
			delete(w.dirs, name)
			continue
		}
		if p.undecided {
			if layout, _ := dirLayout(w.dir, name); layout != LayoutUnknown {
				p.undecided = false // a checkpoint being written: pending now
			}
		}
		if t.Digest != p.tree.Digest {
			p.tree, p.changed = t, now
			continue
		}
		quiet := now.Sub(p.changed)
		if p.undecided {
			if quiet >= w.quiesce {
				delete(w.dirs, name) // "runs/": no checkpoint
			}
			continue
		}
		layout, marked := dirLayout(w.dir, name)
		complete := t.Files > 0 && (marked && quiet >= w.debounce || layout == LayoutUnknown && quiet >= w.quiesce)
		if !complete {
			continue
		}
		delete(w.dirs, name)
		w.reportedDirs[name] = t.Digest
		ev := Event{Path: path, Size: t.Size, MTime: t.MTime, Existing: p.existing, At: now,
			Dir: true, Tree: t.Digest, Layout: layout}
		if n, from, ok := ParseStep(name); ok {
			ev.Step, ev.StepFrom = &n, from
		}
		if !w.send(ctx, ev) {
			return false
		}
	}
	return true
}
