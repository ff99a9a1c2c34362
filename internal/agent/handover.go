package agent

import (
	"context"
	"errors"
	"fmt"
	"strconv"

	"github.com/isched/isched/internal/report"
	"github.com/isched/isched/internal/slurm"
)

// handover ends job j (act.JobID), whose checkpoint has landed, so that its
// twin act.TwinJobID, which Slurm started on the run's ideal partition,
// resumes from it (policy rule 10). The twin is checked first: it must be
// running, the same user's and name the same lineage, or the run would be
// ended for nothing to take over; then the job is cancelled (its wrapper
// forwards SIGTERM, and the twin's waits for it to be gone before the
// script's command starts). A job that ended of itself after saving is
// handed over as it is.
func (a *Agent) handover(ctx context.Context, act *report.Action, j *slurm.JobInfo) (*report.Result, error) {
	twin := strconv.FormatUint(act.TwinJobID, 10)
	tw, err := a.slurm.ShowJob(ctx, twin)
	switch {
	case errors.Is(err, slurm.ErrNotFound):
		return a.result(act.ID, report.StatusRefused, fmt.Sprintf("twin job %s is gone: job %d goes on", twin, act.JobID), err), nil
	case err != nil && slurmDown(err):
		return nil, transient(fmt.Errorf("check twin job %s: %w", twin, err))
	case err != nil:
		return a.result(act.ID, report.StatusFailed, fmt.Sprintf("check twin job %s: %v", twin, err), err), nil
	}
	if why := twinRefusal(act, tw); why != "" {
		return a.result(act.ID, report.StatusRefused, why+": job "+strconv.FormatUint(act.JobID, 10)+" goes on", nil), nil
	}
	id := jobID(act)
	if j != nil && (j.Ended() || j.State == slurm.StateCompleting) {
		return a.result(act.ID, report.StatusOK, fmt.Sprintf("job %s is %s already: its twin %s takes over", id, j.State, twin), nil), nil
	}
	return a.outcome(act, a.slurm.Cancel(ctx, id), fmt.Sprintf("cancelled job %s: its twin %s takes over from its checkpoint", id, twin))
}

// twinRefusal says why tw cannot take over act's run, or "": it must be
// running, act.User's, and name act.Lineage in its plan comment.
func twinRefusal(act *report.Action, tw *slurm.JobInfo) string {
	p, ok, err := report.JobPlan(report.Job{Comment: tw.Comment})
	switch {
	case tw.User != act.User:
		return fmt.Sprintf("twin job %s belongs to %q, not %q", tw.JobID, tw.User, act.User)
	case !ok || err != nil || p.Lineage != act.Lineage:
		return fmt.Sprintf("twin job %s does not name lineage %q in its plan comment", tw.JobID, act.Lineage)
	case slurm.JobState(tw.State) != slurm.StateRunning:
		return fmt.Sprintf("twin job %s is %s, not running", tw.JobID, tw.State)
	}
	return ""
}
