package agent

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/isched/isched/internal/atomicfile"
	"github.com/isched/isched/internal/report"
	"github.com/isched/isched/internal/slurm"
)

// Saved batch scripts. A run whose job ended more than MinJobAge ago (the
// coordinator was down meanwhile) cannot be requeued: slurmctld no longer
// holds it. To continue it the agent submits its batch script again, as
// its owner, with the same working directory and comment (so the same
// lineage): the script is saved when the agent first sees the job, since
// `scontrol write batch_script` fails once slurmctld forgot it.
//
// The store is a directory only the agent's user may enter (0700, owned by
// it); each job is one file job-<id>.json (0600) holding the script and
// what sbatch needs besides. Files go after ScriptTTL; at most
// maxSavedScripts are kept (the oldest go first).

const (
	// maxSavedScripts bounds the files of the store.
	maxSavedScripts = 10000
	// maxSavedFile bounds one file: the script (slurm.MaxBatchScript) in
	// JSON, and a little more.
	maxSavedFile = 2*slurm.MaxBatchScript + 64<<10
	// savesPerPoll bounds the Slurm commands one poll spends saving
	// scripts (two per job): a burst of submissions is saved over a few
	// polls.
	savesPerPoll = 20
	// DefaultScriptTTL is how long a saved script is kept.
	DefaultScriptTTL = 7 * 24 * time.Hour
)

// savedJob is what the agent keeps of a job to submit it again.
type savedJob struct {
	JobID     uint64 `json:"job_id"`
	User      string `json:"user"`
	UID       int    `json:"uid"`
	Lineage   string `json:"lineage"`
	Comment   string `json:"comment"`
	WorkDir   string `json:"work_dir"`
	Partition string `json:"partition"`
	// ArrayTask is the task id of an array element (its lineage is the
	// array's with "_<task>"); it is submitted again as that one task.
	ArrayTask *int   `json:"array_task,omitempty"`
	SavedMS   int64  `json:"saved_ms"`
	Script    string `json:"script"`
}

// scriptStore is the directory of saved scripts; nil when off.
type scriptStore struct {
	dir  string
	ttl  time.Duration
	seen map[uint64]bool // saved, or not to be saved (no batch script)
}

// openScriptStore makes dir (0700) if needed and checks that it is the
// agent's own and closed to others: the scripts are the users' and are
// run again as their owners.
func openScriptStore(dir string, ttl time.Duration) (*scriptStore, error) {
	if !filepath.IsAbs(dir) {
		return nil, fmt.Errorf("script directory %q: want an absolute path", dir)
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("script directory: %w", err)
	}
	fi, err := os.Lstat(dir)
	if err != nil {
		return nil, fmt.Errorf("script directory: %w", err)
	}
	st, ok := fi.Sys().(*syscall.Stat_t)
	switch {
	case !fi.IsDir():
		return nil, fmt.Errorf("script directory %s: not a directory", dir)
	case !ok || int(st.Uid) != os.Geteuid():
		return nil, fmt.Errorf("script directory %s: not owned by the agent's user (uid %d)", dir, os.Geteuid())
	case fi.Mode().Perm()&0o077 != 0:
		return nil, fmt.Errorf("script directory %s: mode %v, want no access for group and others (chmod 0700)", dir, fi.Mode().Perm())
	}
	if ttl <= 0 {
		ttl = DefaultScriptTTL
	}
	return &scriptStore{dir: dir, ttl: ttl, seen: map[uint64]bool{}}, nil
}

func (s *scriptStore) path(id uint64) string {
	return filepath.Join(s.dir, "job-"+strconv.FormatUint(id, 10)+".json")
}

// resubmittable: a job the agent may submit again, one with isched's plan
// naming its lineage (the lineage travels in the script, so the new job
// resumes from the lineage's checkpoints).
func resubmittable(j report.Job) (string, bool) {
	p, ok, err := report.JobPlan(j)
	if !ok || err != nil || p.Lineage == "" {
		return "", false
	}
	return p.Lineage, true
}

// saveNew saves the batch script of each resubmittable job of the table
// not saved yet (at most savesPerPoll per call). Failures are logged: a
// job whose script could not be saved cannot be resubmitted, nothing more.
func (a *Agent) saveNew(ctx context.Context, jobs []report.Job) {
	s := a.scripts
	if s == nil {
		return
	}
	listed := make(map[uint64]bool, len(jobs))
	n := 0
	for _, j := range jobs {
		listed[j.JobID] = true
		lineage, ok := resubmittable(j)
		if !ok || s.seen[j.JobID] || n >= savesPerPoll {
			continue
		}
		if _, err := os.Lstat(s.path(j.JobID)); err == nil {
			s.seen[j.JobID] = true // saved by an earlier agent
			continue
		}
		n++
		if err := a.saveScript(ctx, j, lineage); err != nil {
			if slurmDown(err) {
				continue // next poll
			}
			a.log.Warn("batch script not saved: the job cannot be resubmitted if slurmctld forgets it", "job", j.JobID, "err", err)
		}
		s.seen[j.JobID] = true
	}
	for id := range s.seen {
		if !listed[id] {
			delete(s.seen, id)
		}
	}
}

func (a *Agent) saveScript(ctx context.Context, j report.Job, lineage string) error {
	id := strconv.FormatUint(j.JobID, 10)
	info, err := a.slurm.ShowJob(ctx, id)
	if err != nil {
		return err
	}
	if !info.BatchFlag {
		return errors.New("not a batch job")
	}
	script, err := a.slurm.BatchScript(ctx, id)
	if err != nil {
		return err
	}
	rec := savedJob{JobID: j.JobID, User: info.User, UID: info.UID, Lineage: lineage, Comment: strings.TrimSpace(j.Comment),
		WorkDir: info.Fields["WorkDir"], Partition: info.Partition, ArrayTask: arrayTask(j), SavedMS: a.cfg.Now().UnixMilli(), Script: string(script)}
	b, err := json.Marshal(rec)
	if err != nil {
		return err
	}
	if len(b) > maxSavedFile {
		return fmt.Errorf("record of %d bytes is over %d", len(b), maxSavedFile)
	}
	return atomicfile.WriteFile(a.scripts.path(j.JobID), b, 0o600)
}

// arrayTask is the array element a job is (nil for none): an element's
// pending rest of one task too, which holds the array's job id.
func arrayTask(j report.Job) *int {
	if t, ok := j.Element(); ok {
		return &t
	}
	return nil
}

// load reads the saved job id; an error matching fs.ErrNotExist when none
// was saved.
func (s *scriptStore) load(id uint64) (savedJob, error) {
	var rec savedJob
	f, err := os.OpenFile(s.path(id), os.O_RDONLY|syscall.O_NOFOLLOW, 0)
	if err != nil {
		return rec, err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return rec, err
	}
	if st, ok := fi.Sys().(*syscall.Stat_t); !fi.Mode().IsRegular() || !ok || int(st.Uid) != os.Geteuid() || fi.Mode().Perm()&0o077 != 0 {
		return rec, fmt.Errorf("%s: not the agent's own private file", s.path(id))
	}
	b, err := io.ReadAll(io.LimitReader(f, maxSavedFile+1))
	if err != nil {
		return rec, err
	}
	if len(b) > maxSavedFile {
		return rec, fmt.Errorf("%s: larger than %d bytes", s.path(id), maxSavedFile)
	}
	if err := json.Unmarshal(b, &rec); err != nil {
		return rec, fmt.Errorf("%s: %w", s.path(id), err)
	}
	if rec.JobID != id || !strings.HasPrefix(rec.Script, "#!") {
		return rec, fmt.Errorf("%s: not the saved script of job %d", s.path(id), id)
	}
	return rec, nil
}

// sweep removes the files older than the TTL, then the oldest beyond
// maxSavedScripts. The TTL counts from the last sweep that saw the job in
// the job table (listed): a job that runs or waits longer than the TTL
// keeps its script, which is needed when slurmctld forgets the job, after
// it ended.
func (s *scriptStore) sweep(now time.Time, listed map[uint64]bool) error {
	entries, err := os.ReadDir(s.dir)
	if err != nil {
		return err
	}
	type file struct {
		name string
		mod  time.Time
	}
	var keep []file
	for _, e := range entries {
		fi, err := e.Info()
		if err != nil || !fi.Mode().IsRegular() {
			continue
		}
		if id, ok := savedJobID(e.Name()); ok && listed[id] {
			if err := os.Chtimes(filepath.Join(s.dir, e.Name()), now, now); err == nil {
				fi = touched{fi, now}
			}
		}
		if now.Sub(fi.ModTime()) > s.ttl || strings.HasPrefix(e.Name(), ".tmp-") && now.Sub(fi.ModTime()) > time.Hour {
			_ = os.Remove(filepath.Join(s.dir, e.Name()))
			continue
		}
		keep = append(keep, file{e.Name(), fi.ModTime()})
	}
	if len(keep) > maxSavedScripts {
		slices.SortFunc(keep, func(a, b file) int { return a.mod.Compare(b.mod) })
		for _, f := range keep[:len(keep)-maxSavedScripts] {
			_ = os.Remove(filepath.Join(s.dir, f.name))
		}
	}
	return nil
}

// savedJobID is the job id of a saved script's file name (job-<id>.json).
func savedJobID(name string) (uint64, bool) {
	rest, ok := strings.CutPrefix(name, "job-")
	if !ok {
		return 0, false
	}
	rest, ok = strings.CutSuffix(rest, ".json")
	if !ok {
		return 0, false
	}
	id, err := strconv.ParseUint(rest, 10, 64)
	return id, err == nil
}

// touched is a file's info with the modification time sweep just set.
type touched struct {
	fs.FileInfo
	mod time.Time
}

func (t touched) ModTime() time.Time { return t.mod }

// resubmit submits the saved script of act.JobID again as its owner, onto
// the action's partition, GRES and time limit, in the job's working
// directory and with its comment (the same lineage).
func (a *Agent) resubmit(ctx context.Context, act *report.Action) (*report.Result, error) {
	return a.submitSaved(ctx, act, "resubmitted", "resubmitted job %d as job %s (%s, in %s)")
}

// twin submits the saved script of the running job act.JobID once more as
// its owner, pending on the action's partition with its GRES, CPUs per task
// and time limit, with the job's comment (the same lineage): the run's twin
// in its ideal partition's queue (policy rule 10). Its wrapper waits for
// the running job to end before the script's command starts.
func (a *Agent) twin(ctx context.Context, act *report.Action) (*report.Result, error) {
	return a.submitSaved(ctx, act, "given a twin", "submitted job %d's twin as job %s (%s, in %s)")
}

// submitSaved submits the saved script of act.JobID as its owner per act
// (what: "resubmitted", in refusals; okFormat: the job, the new job, the
// user and the directory).
func (a *Agent) submitSaved(ctx context.Context, act *report.Action, what, okFormat string) (*report.Result, error) {
	refuse := func(format string, args ...any) (*report.Result, error) {
		return a.result(act.ID, report.StatusRefused, fmt.Sprintf(format, args...), nil), nil
	}
	rec, why := a.loadSubmittable(act)
	if why != "" {
		return refuse("job %d cannot be %s: %s", act.JobID, what, why)
	}
	// the agent submits as root for the user: Slurm would honour lines the
	// user could not use (a negative nice, a priority). A script without
	// #PBS or #BSUB lines is submitted with --ignore-pbs, so that no
	// reading of such lines matters; one with them is read as its first
	// submission was (a script from Torque keeps its resources), and its
	// privileged #PBS options are refused like #SBATCH ones.
	pbs := slurm.HasPBSDirectives([]byte(rec.Script))
	priv, err := slurm.PrivilegedDirectives([]byte(rec.Script), !pbs)
	if err != nil {
		return refuse("job %d cannot be %s: %v", act.JobID, what, err)
	}
	if len(priv) > 0 && !isRoot(rec.User) {
		return refuse("job %d cannot be %s: its script asks for what only a privileged user may (%s); Slurm would grant it to a submission by the agent", act.JobID, what, strings.Join(priv, "; "))
	}
	spec := slurm.SubmitSpec{User: rec.User, Partition: act.Partition, Gres: act.Gres, TimeLimit: time.Duration(act.TimeLimitMin) * time.Minute,
		CPUsPerTask: act.CPUs, Comment: rec.Comment, Chdir: rec.WorkDir, IgnorePBS: !pbs, ArrayTask: rec.ArrayTask}
	newID, err := a.slurm.SubmitWith(ctx, []byte(rec.Script), spec)
	if err != nil {
		if slurmDown(err) {
			return nil, transient(err)
		}
		status := report.StatusFailed
		if errors.Is(err, slurm.ErrInvalid) {
			status = report.StatusRefused
		}
		return a.result(act.ID, status, fmt.Sprintf("%s job %d: %v", act.Type, act.JobID, err), err), nil
	}
	r := a.result(act.ID, report.StatusOK, fmt.Sprintf(okFormat, act.JobID, newID, rec.User, rec.WorkDir), nil)
	if n, perr := strconv.ParseUint(newID, 10, 32); perr == nil {
		r.NewJobID = n
	}
	return r, nil
}

// loadSubmittable is the saved record of act.JobID, or why it cannot be
// submitted for act: none saved, another owner's or lineage's, root's.
func (a *Agent) loadSubmittable(act *report.Action) (*savedJob, string) {
	if a.scripts == nil {
		return nil, "this agent saves no batch scripts (-script-dir is off)"
	}
	rec, err := a.scripts.load(act.JobID)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Sprintf("the agent has no saved batch script of it (it never saw the job, or the script is older than %s)", a.scripts.ttl)
	}
	switch {
	case err != nil:
		return nil, err.Error()
	case rec.User != act.User:
		return nil, fmt.Sprintf("it belongs to %q, not %q", rec.User, act.User)
	case act.Lineage != "" && rec.Lineage != act.Lineage:
		return nil, fmt.Sprintf("it was of lineage %q, not %q", rec.Lineage, act.Lineage)
	case isRoot(rec.User) && !a.cfg.AllowRootSubmit:
		return nil, "submit as root refused (Config.AllowRootSubmit is off)"
	}
	return &rec, ""
}

// recoverResubmit: the agent stopped during a resubmit or a twin's
// submission. A job of the same user with the saved comment (the lineage)
// and a higher id is the new job (for a twin, one still queued or running:
// an earlier twin may have ended); else it is not done again (at most once).
func (a *Agent) recoverResubmit(ctx context.Context, act *report.Action) (*report.Result, error) {
	failed := a.result(act.ID, report.StatusFailed, fmt.Sprintf("the agent stopped during the %s and no new job of the lineage is listed: not submitted again (at most once)", act.Type), nil)
	if a.scripts == nil {
		return failed, nil
	}
	rec, err := a.scripts.load(act.JobID)
	if err != nil {
		return failed, nil
	}
	jobs, err := a.slurm.Jobs(ctx)
	if err != nil {
		return nil, transient(err)
	}
	for _, j := range jobs {
		l, _ := resubmittable(j)
		if j.JobID <= act.JobID || j.User != rec.User || strings.TrimSpace(j.Comment) != rec.Comment || l != rec.Lineage {
			continue
		}
		if act.Type == report.ActionTwin && slurm.Ended(j.State) {
			continue
		}
		verb := "resubmitted job %d as job %d"
		if act.Type == report.ActionTwin {
			verb = "submitted job %d's twin as job %d"
		}
		r := a.result(act.ID, report.StatusOK, fmt.Sprintf(verb+" (confirmed after an agent restart)", act.JobID, j.JobID), nil)
		r.NewJobID = j.JobID
		return r, nil
	}
	return failed, nil
}
