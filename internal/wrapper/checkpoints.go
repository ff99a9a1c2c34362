package wrapper

import (
	"encoding/json"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"time"

	"github.com/isched/isched/internal/progress"
	"github.com/isched/isched/internal/report"
)

// resumeState is the lineage's last complete checkpoint, kept beside the
// checkpoints (a dot file: the watcher ignores it). Keyed by lineage, so two
// jobs sharing a directory never resume from each other's files.
type resumeState struct {
	Lineage    string `json:"lineage"`
	Path       string `json:"path"`
	Size       int64  `json:"size"`
	MTimeMS    int64  `json:"mtime_ms"`
	Step       *int64 `json:"step,omitempty"`
	JobID      uint64 `json:"job_id"`
	Attempt    int    `json:"attempt"`
	RecordedMS int64  `json:"recorded_ms"`
}

func resumeFile(dir, lineage string) string {
	return filepath.Join(dir, ".isched-lineage-"+lineage+".json")
}

// loadResume returns the lineage's last complete checkpoint if the file is
// still there, regular and of the recorded size (not truncated since).
func loadResume(dir, lineage string) (resumeState, bool) {
	b, err := os.ReadFile(resumeFile(dir, lineage))
	if err != nil {
		return resumeState{}, false
	}
	var r resumeState
	if err := json.Unmarshal(b, &r); err != nil || r.Lineage != lineage || !filepath.IsAbs(r.Path) {
		return resumeState{}, false
	}
	fi, err := os.Lstat(r.Path)
	if err != nil || !fi.Mode().IsRegular() || fi.Size() != r.Size || fi.Size() == 0 {
		return resumeState{}, false
	}
	return r, true
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
	return os.Rename(tmp, path)
}

// checkpointSeen records a complete checkpoint: the summary, the lineage's
// resume state, and a checkpoint report sent at once.
func checkpointSeen(ev CheckpointEvent, st *state, rep *reporter, opts Options, job report.JobRef, log *slog.Logger) {
	key := fmt.Sprintf("%s|%d|%d", ev.Path, ev.Size, ev.MTime.UnixNano())
	st.mu.Lock()
	if st.ckptSeen[key] {
		st.mu.Unlock()
		return
	}
	st.ckptSeen[key] = true
	if !ev.Existing {
		st.ckpts = append(st.ckpts, ev.Path)
	}
	st.mu.Unlock()
	if ev.Existing {
		return // there before this attempt started: not this run's checkpoint
	}
	log.Info("checkpoint complete", "path", ev.Path, "size", ev.Size)
	if opts.CheckpointDir != "" && job.Lineage != "" && filepath.Dir(ev.Path) == opts.CheckpointDir {
		r := resumeState{Lineage: job.Lineage, Path: ev.Path, Size: ev.Size, MTimeMS: ev.MTime.UnixMilli(), Step: ev.Step,
			JobID: job.JobID, Attempt: job.Attempt, RecordedMS: time.Now().UnixMilli()}
		if err := saveResume(opts.CheckpointDir, r); err != nil {
			log.Warn("resume state not saved", "err", err)
		}
	}
	if rep != nil {
		e := report.NewEnvelope(report.KindCheckpoint, time.Now())
		e.Checkpoint = &report.Checkpoint{Path: ev.Path, Size: ev.Size, Step: ev.Step, MTimeMS: ev.MTime.UnixMilli(), Complete: true}
		rep.emit(e)
	}
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
