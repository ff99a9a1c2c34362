package wrapper

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/isched/isched/internal/atomicfile"
	"github.com/isched/isched/internal/ckpt"
	"github.com/isched/isched/internal/progress"
	"github.com/isched/isched/internal/report"
)

// resumeKeep is how many confirmed checkpoints a lineage's resume state
// remembers: when the newest is damaged later (truncated in place, deleted),
// the next newest intact one is the resume point, not the start of the run.
const resumeKeep = 5

// maxResumeFile bounds the lineage resume file read (it holds resumeKeep
// entries: a few KiB).
const maxResumeFile = 1 << 20

// resumePoint is one confirmed, complete checkpoint of a lineage: a file,
// or a directory (Dir) whose tree had the digest Tree.
type resumePoint struct {
	Path       string `json:"path"`
	Dir        bool   `json:"dir,omitempty"`
	Tree       string `json:"tree,omitempty"`
	Size       int64  `json:"size"`
	MTimeMS    int64  `json:"mtime_ms"`
	Step       *int64 `json:"step,omitempty"`
	JobID      uint64 `json:"job_id"`
	Attempt    int    `json:"attempt"`
	RecordedMS int64  `json:"recorded_ms"`
}

// resumeState is the lineage's last few complete checkpoints, oldest first,
// kept beside the checkpoints (a dot file: the watcher ignores it). Keyed by
// lineage, so two jobs sharing a directory never resume from each other's
// files.
type resumeState struct {
	Lineage     string        `json:"lineage"`
	Checkpoints []resumePoint `json:"checkpoints"`
}

func resumeFile(dir, lineage string) string {
	return filepath.Join(dir, ".isched-lineage-"+lineage+".json")
}

// readResume reads the lineage's resume state. A missing or garbled file
// is an empty state (the run starts from scratch, as without isched); a
// file that is not the job user's own regular file, not writable by group
// or others, is refused (err says why): another user may have planted it
// to hand this job a checkpoint of theirs. Entries naming a path outside
// dir are dropped, and said in err.
func readResume(dir, lineage string) (resumeState, error) {
	empty := resumeState{Lineage: lineage}
	b, err := readOwnedFile(resumeFile(dir, lineage), maxResumeFile)
	if errors.Is(err, fs.ErrNotExist) {
		return empty, nil
	}
	if err != nil {
		return empty, fmt.Errorf("lineage resume file refused: %w", err)
	}
	var r resumeState
	if err := json.Unmarshal(b, &r); err != nil || r.Lineage != lineage {
		return empty, nil
	}
	var outside []string
	r.Checkpoints = slices.DeleteFunc(r.Checkpoints, func(p resumePoint) bool {
		if !inDir(dir, p.Path) {
			outside = append(outside, p.Path)
			return true
		}
		return false
	})
	if len(outside) > 0 {
		return r, fmt.Errorf("lineage resume file names %q, outside the checkpoint directory %s: ignored", outside, dir)
	}
	return r, nil
}

// inDir says whether path is an entry of dir (absolute and clean).
func inDir(dir, path string) bool {
	return filepath.IsAbs(path) && filepath.Clean(path) == path && filepath.Dir(path) == dir
}

// check says why the checkpoint is not (any longer) the one confirmed, nil
// when it is: in dir, the job user's, not writable by others, and
// unchanged — a file of the recorded size and modification time, a
// directory whose whole tree has the recorded digest.
func (p resumePoint) check(dir string) error {
	if !inDir(dir, p.Path) {
		return fmt.Errorf("%s is not in the checkpoint directory %s", p.Path, dir)
	}
	fi, err := os.Lstat(p.Path)
	if err != nil {
		return err
	}
	uid := os.Getuid()
	if !p.Dir {
		if err := checkOwned(p.Path, fi, 0, uid, 0o002); err != nil {
			return err
		}
		if fi.Size() == 0 || fi.Size() != p.Size || fi.ModTime().UnixMilli() != p.MTimeMS {
			return fmt.Errorf("%s changed since it was confirmed (size %d, was %d)", p.Path, fi.Size(), p.Size)
		}
		return nil
	}
	if err := checkOwned(p.Path, fi, fs.ModeDir, uid, 0o002); err != nil {
		return err
	}
	t, err := ckpt.ReadTree(p.Path)
	switch {
	case err != nil:
		return err
	case len(t.Owners) != 1 || t.Owners[0] != uid:
		return fmt.Errorf("%s holds files of uid %v, not only this job's user's (uid %d)", p.Path, t.Owners, uid)
	case t.OthersWritable != "":
		return fmt.Errorf("%s: %s may be written by others than its owner", p.Path, t.OthersWritable)
	case t.Files == 0 || t.Digest != p.Tree:
		return fmt.Errorf("%s changed since it was confirmed (%d files, %d bytes, was %d bytes)", p.Path, t.Files, t.Size, p.Size)
	}
	return nil
}

// rejected is a recorded checkpoint not resumed from, and why.
type rejected struct {
	p   resumePoint
	err error
}

// loadResume returns the newest of the lineage's confirmed checkpoints that
// is still intact, and the newer ones rejected (to be said in the log);
// stateErr says why the resume file itself was refused.
func loadResume(dir, lineage string) (p resumePoint, rejects []rejected, ok bool, stateErr error) {
	r, stateErr := readResume(dir, lineage)
	for i := len(r.Checkpoints) - 1; i >= 0; i-- {
		p := r.Checkpoints[i]
		err := p.check(dir)
		if err == nil {
			return p, rejects, true, stateErr
		}
		rejects = append(rejects, rejected{p, err})
	}
	return resumePoint{}, rejects, false, stateErr
}

// record adds a confirmed checkpoint as the newest, replacing an older entry
// for the same path, and keeps the last resumeKeep. A new version of an
// already confirmed path that is less than half its size is refused: a
// checkpoint shrinking in place is being damaged (truncated, or rewritten
// and not finished), not saved — it also no longer holds what was
// confirmed, so its old entry goes.
func (r *resumeState) record(p resumePoint) error {
	var err error
	r.Checkpoints = slices.DeleteFunc(r.Checkpoints, func(old resumePoint) bool {
		if old.Path != p.Path {
			return false
		}
		if p.Size < old.Size/2 {
			err = fmt.Errorf("%s shrank in place from %d to %d bytes", p.Path, old.Size, p.Size)
		}
		if p.Step == nil && p.Size == old.Size && p.MTimeMS == old.MTimeMS && p.Tree == old.Tree {
			// the same version seen by another rank's wrapper, which has
			// no progress lines to know its step: rank 0's stands
			p.Step = old.Step
		}
		return true
	})
	if err != nil {
		return err
	}
	r.Checkpoints = append(r.Checkpoints, p)
	if n := len(r.Checkpoints); n > resumeKeep {
		r.Checkpoints = slices.Delete(r.Checkpoints, 0, n-resumeKeep)
	}
	return nil
}

func saveResume(dir string, r resumeState) error {
	b, err := json.Marshal(r)
	if err != nil {
		return err
	}
	return atomicfile.WriteFile(resumeFile(dir, r.Lineage), b, 0o600)
}

// checkpointSeen records a complete checkpoint: the summary, the lineage's
// resume state, and a checkpoint report sent at once. A file that shrank in
// place since it was confirmed is neither recorded nor reported.
func checkpointSeen(ev CheckpointEvent, st *state, rep *reporter, opts Options, job report.JobRef, log *slog.Logger) {
	key := fmt.Sprintf("%s|%d|%d|%s", ev.Path, ev.Size, ev.MTime.UnixNano(), ev.Tree)
	st.mu.Lock()
	if st.ckptSeen[key] {
		st.mu.Unlock()
		return
	}
	st.ckptSeen[key] = true
	st.mu.Unlock()
	if ev.Existing {
		return // there before this attempt started: not this run's checkpoint
	}
	if d := st.untrustedDir; d != "" && (ev.Path == d || strings.HasPrefix(ev.Path, d+string(filepath.Separator))) {
		log.Warn("checkpoint in the refused checkpoint directory: not recorded", "path", ev.Path, "dir", d)
		return
	}
	if opts.CheckpointDir != "" && job.Lineage != "" && filepath.Dir(ev.Path) == opts.CheckpointDir &&
		!recordResume(opts.CheckpointDir, ev, st, job, log) {
		return
	}
	st.mu.Lock()
	st.ckpts = append(st.ckpts, ev.Path)
	st.mu.Unlock()
	log.Info("checkpoint complete", "path", ev.Path, "size", ev.Size, "dir", ev.Dir)
	if rep != nil {
		e := report.NewEnvelope(report.KindCheckpoint, time.Now())
		e.Checkpoint = &report.Checkpoint{Path: ev.Path, Size: ev.Size, Step: ev.Step, MTimeMS: ev.MTime.UnixMilli(), Complete: true}
		rep.emit(e)
	}
}

// recordResume adds ev to the lineage's resume state; false when the file
// is damaged (shrank in place) or not the job user's, and must not be taken
// for a checkpoint.
func recordResume(dir string, ev CheckpointEvent, st *state, job report.JobRef, log *slog.Logger) bool {
	st.resumeMu.Lock()
	defer st.resumeMu.Unlock()
	p := resumePoint{Path: ev.Path, Dir: ev.Dir, Tree: ev.Tree, Size: ev.Size, MTimeMS: ev.MTime.UnixMilli(), Step: ev.Step,
		JobID: job.JobID, Attempt: job.Attempt, RecordedMS: time.Now().UnixMilli()}
	if err := p.check(dir); err != nil {
		log.Warn("checkpoint refused: not a resume point", "path", ev.Path, "err", err)
		return false
	}
	r, err := readResume(dir, job.Lineage)
	if err != nil {
		log.Warn("lineage resume file refused; writing a new one", "err", err)
	}
	damage := r.record(p)
	// saved either way: a damaged file's old entry is gone from the state
	if err := saveResume(dir, r); err != nil {
		log.Warn("resume state not saved", "err", err)
	}
	if damage != nil {
		log.Warn("checkpoint damaged; it is not a resume point", "path", ev.Path, "err", damage)
		return false
	}
	return true
}

// checkpointFromLoop handles the helper's "ckpt" progress line: the loop
// says it finished writing path. It is trusted only as far as Stat confirms.
func checkpointFromLoop(ev progress.Event, st *state, rep *reporter, opts Options, job report.JobRef, log *slog.Logger) {
	path := ev.Path
	if !filepath.IsAbs(path) {
		return
	}
	path = filepath.Clean(path)
	var step *int64
	if ev.Step >= 0 {
		s := ev.Step
		step = &s
	}
	fi, err := os.Lstat(path)
	if err == nil && fi.IsDir() {
		t, err := ckpt.ReadTree(path)
		if err != nil || t.Files == 0 {
			log.Warn("checkpoint directory reported by the loop is not readable or empty", "path", path, "err", err)
			return
		}
		checkpointSeen(CheckpointEvent{Path: path, Dir: true, Tree: t.Digest, Size: t.Size, MTime: t.MTime, Step: step}, st, rep, opts, job, log)
		return
	}
	if err != nil || !fi.Mode().IsRegular() || fi.Size() == 0 {
		log.Warn("checkpoint reported by the loop is not a complete file", "path", path)
		return
	}
	checkpointSeen(CheckpointEvent{Path: path, Size: fi.Size(), MTime: fi.ModTime(), Step: step}, st, rep, opts, job, log)
}

// finalSettle bounds the settle period of the final scan: the command has
// exited, a checkpoint still changing after this is not one it finished.
const finalSettle = time.Second

// finalScan is the last look at the checkpoint directory once the command
// has exited and the watcher stopped: a checkpoint saved just before the
// exit (the script saved and ran `scontrol requeue` on itself, or saved
// and exited right after a signal) may not have been delivered or
// confirmed by the watcher yet, and the next attempt would resume from an
// older one. The checkpoints complete now (ckpt.Scan: the watcher's rules,
// never a half-written one), written since the attempt began and newer
// than the lineage's newest recorded one, are recorded and reported as the
// watcher's would be, before the end report. It returns how many.
func finalScan(ctx context.Context, since time.Time, st *state, rep *reporter, opts Options, job report.JobRef, log *slog.Logger) int {
	if opts.CheckpointDir == "" {
		return 0
	}
	settle := min(max(opts.CheckpointDebounce/2, 100*time.Millisecond), finalSettle)
	evs, err := ckpt.Scan(ctx, ckpt.Config{Dir: opts.CheckpointDir, Glob: opts.CheckpointGlob, DirQuiesce: opts.CheckpointQuiesce, Logger: log},
		since, settle)
	if err != nil {
		if !errors.Is(err, fs.ErrNotExist) {
			log.Warn("final checkpoint scan failed", "dir", opts.CheckpointDir, "err", err)
		}
		return 0
	}
	var newest *resumePoint
	if job.Lineage != "" {
		if r, _ := readResume(opts.CheckpointDir, job.Lineage); len(r.Checkpoints) > 0 {
			newest = &r.Checkpoints[len(r.Checkpoints)-1]
		}
	}
	n := 0
	for _, ev := range evs {
		if newest != nil && !newerThan(ev, *newest) {
			continue
		}
		before := len(st.checkpoints())
		checkpointSeen(CheckpointEvent{Path: ev.Path, Dir: ev.Dir, Tree: ev.Tree, Size: ev.Size, MTime: ev.MTime, Step: ev.Step}, st, rep, opts, job, log)
		if len(st.checkpoints()) > before {
			n++
			log.Info("checkpoint found by the final scan", "path", ev.Path, "step", ev.Step)
		}
	}
	return n
}

// newerThan says whether the checkpoint ev comes after the recorded p: by
// step when both have one, else by modification time (the same path saved
// again counts when it changed).
func newerThan(ev ckpt.Event, p resumePoint) bool {
	if ev.Step != nil && p.Step != nil {
		return *ev.Step > *p.Step
	}
	if ev.Path == p.Path {
		return ev.MTime.UnixMilli() != p.MTimeMS || ev.Size != p.Size || ev.Tree != p.Tree
	}
	return ev.MTime.UnixMilli() > p.MTimeMS
}

// checkpoints is the attempt's confirmed checkpoints so far.
func (s *state) checkpoints() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.ckpts)
}
