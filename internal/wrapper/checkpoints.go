package wrapper

import (
	"encoding/json"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"time"

	"github.com/isched/isched/internal/progress"
	"github.com/isched/isched/internal/report"
)

// resumeKeep is how many confirmed checkpoints a lineage's resume state
// remembers: when the newest is damaged later (truncated in place, deleted),
// the next newest intact one is the resume point, not the start of the run.
const resumeKeep = 5

// resumePoint is one confirmed, complete checkpoint of a lineage.
type resumePoint struct {
	Path       string `json:"path"`
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

// readResume reads the lineage's resume state; a missing or unreadable file
// is an empty state (the run starts from scratch, as without isched).
func readResume(dir, lineage string) resumeState {
	empty := resumeState{Lineage: lineage}
	b, err := os.ReadFile(resumeFile(dir, lineage))
	if err != nil {
		return empty
	}
	var r resumeState
	if err := json.Unmarshal(b, &r); err != nil || r.Lineage != lineage {
		return empty
	}
	r.Checkpoints = slices.DeleteFunc(r.Checkpoints, func(p resumePoint) bool { return !filepath.IsAbs(p.Path) })
	return r
}

// intact says whether the file is still the checkpoint that was confirmed:
// there, regular, not empty, and of the recorded size and modification time
// (truncated, rewritten or replaced since, it is not).
func (p resumePoint) intact() bool {
	fi, err := os.Lstat(p.Path)
	return err == nil && fi.Mode().IsRegular() && fi.Size() > 0 && fi.Size() == p.Size && fi.ModTime().UnixMilli() == p.MTimeMS
}

// loadResume returns the newest of the lineage's confirmed checkpoints that
// is still intact, and the damaged ones newer than it (to be said in the
// log).
func loadResume(dir, lineage string) (resumePoint, []resumePoint, bool) {
	r := readResume(dir, lineage)
	var damaged []resumePoint
	for i := len(r.Checkpoints) - 1; i >= 0; i-- {
		p := r.Checkpoints[i]
		if p.intact() {
			return p, damaged, true
		}
		damaged = append(damaged, p)
	}
	return resumePoint{}, damaged, false
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
	path := resumeFile(dir, r.Lineage)
	tmp := fmt.Sprintf("%s.%d.tmp", path, os.Getpid())
	if err := os.WriteFile(tmp, b, 0o644); err != nil {
		return err
	}
	if err := os.Rename(tmp, path); err != nil {
		_ = os.Remove(tmp)
		return err
	}
	return nil
}

// checkpointSeen records a complete checkpoint: the summary, the lineage's
// resume state, and a checkpoint report sent at once. A file that shrank in
// place since it was confirmed is neither recorded nor reported.
func checkpointSeen(ev CheckpointEvent, st *state, rep *reporter, opts Options, job report.JobRef, log *slog.Logger) {
	key := fmt.Sprintf("%s|%d|%d", ev.Path, ev.Size, ev.MTime.UnixNano())
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
	if opts.CheckpointDir != "" && job.Lineage != "" && filepath.Dir(ev.Path) == opts.CheckpointDir &&
		!recordResume(opts.CheckpointDir, ev, st, job, log) {
		return
	}
	st.mu.Lock()
	st.ckpts = append(st.ckpts, ev.Path)
	st.mu.Unlock()
	log.Info("checkpoint complete", "path", ev.Path, "size", ev.Size)
	if rep != nil {
		e := report.NewEnvelope(report.KindCheckpoint, time.Now())
		e.Checkpoint = &report.Checkpoint{Path: ev.Path, Size: ev.Size, Step: ev.Step, MTimeMS: ev.MTime.UnixMilli(), Complete: true}
		rep.emit(e)
	}
}

// recordResume adds ev to the lineage's resume state; false when the file
// is damaged (shrank in place) and must not be taken for a checkpoint.
func recordResume(dir string, ev CheckpointEvent, st *state, job report.JobRef, log *slog.Logger) bool {
	st.resumeMu.Lock()
	defer st.resumeMu.Unlock()
	r := readResume(dir, job.Lineage)
	damage := r.record(resumePoint{Path: ev.Path, Size: ev.Size, MTimeMS: ev.MTime.UnixMilli(), Step: ev.Step,
		JobID: job.JobID, Attempt: job.Attempt, RecordedMS: time.Now().UnixMilli()})
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
	fi, err := os.Lstat(path)
	if err != nil || !fi.Mode().IsRegular() || fi.Size() == 0 {
		log.Warn("checkpoint reported by the loop is not a complete file", "path", path)
		return
	}
	var step *int64
	if ev.Step >= 0 {
		s := ev.Step
		step = &s
	}
	checkpointSeen(CheckpointEvent{Path: filepath.Clean(path), Size: fi.Size(), MTime: fi.ModTime(), Step: step}, st, rep, opts, job, log)
}
