package cli

import (
	"context"
	"errors"
	"fmt"
	"strconv"

	"github.com/isched/isched/internal/report"
	"github.com/isched/isched/internal/slurm"
	"github.com/isched/isched/internal/stream"
)

// stop is `isched stop JOB|LINEAGE`: the user says the run is done. The
// CLI has no way to write to the coordinator (it reads Redis as viewer),
// so it cancels the lineage's current job with scancel, run as the user
// (no shell): the coordinator never continues a CANCELLED job, so the run
// is over. It refuses another user's job.
func (a *App) stop(ctx context.Context, args []string) error {
	fs := a.newFlags("stop", "JOB|LINEAGE")
	pos, err := parse(fs, args)
	if err != nil {
		return err
	}
	if len(pos) != 1 {
		return usageErr("want one job id or lineage, got %q", pos)
	}
	st, err := a.openStore(ctx)
	if err != nil {
		return fmt.Errorf("redis: %w", err)
	}
	jobs, _ := a.jobTable(ctx)
	t, err := a.resolve(ctx, pos[0], jobs)
	if err != nil {
		return err
	}
	s, err := readStatus(ctx, st, t.lineage)
	if err != nil && !errors.Is(err, stream.ErrNotFound) {
		return err
	}
	job, owner, why := stopTarget(t, s)
	if job == "" {
		return fmt.Errorf("lineage %s: %s", t.lineage, why)
	}
	if me := a.UID(); owner >= 0 && owner != me && me != 0 {
		return fmt.Errorf("job %s of lineage %s belongs to uid %d, not to you (uid %d): not cancelled", job, t.lineage, owner, me)
	}
	if s != nil && s.EndedMS != 0 {
		fmt.Fprintf(a.stdout, "lineage %s is over already (%s); nothing to stop\n", t.lineage, s.State)
		return nil
	}
	if j := t.job; j != nil && jobKey(j) == job && slurm.Ended(j.State) && j.State != "CANCELLED" {
		// between two attempts: the continuation is the coordinator's, and
		// this CLI cannot write to it (it reads Redis as viewer)
		return fmt.Errorf("job %s of lineage %s has ended (%s) and isched may be continuing it; run isched stop again once the continued job is queued", job, t.lineage, j.State)
	}
	if err := a.Slurm.Cancel(ctx, job); err != nil {
		if errors.Is(err, slurm.ErrNotFound) {
			return fmt.Errorf("job %s of lineage %s: Slurm no longer holds it: %w", job, t.lineage, err)
		}
		return fmt.Errorf("scancel %s: %w", job, err)
	}
	fmt.Fprintf(a.stdout, "cancelled job %s (lineage %s): a cancelled run is never continued by isched\n", job, t.lineage)
	return nil
}

// stopTarget is the job to cancel for a lineage and its owner's uid (-1
// unknown): the coordinator's record's current job, else the job the
// argument resolved to; "" and why when there is none.
func stopTarget(t target, s *report.JobStatus) (job string, owner int, why string) {
	switch {
	case s != nil && s.JobID != 0:
		return strconv.FormatUint(s.JobID, 10), s.UID, ""
	case t.job != nil:
		return jobKey(t.job), t.job.UID, ""
	case t.jobArg != "":
		return t.jobArg, t.ownerUID, ""
	}
	return "", -1, "no job: the coordinator has no record of it and the job table lists none"
}
