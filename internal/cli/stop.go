package cli

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/isched/isched/internal/report"
	"github.com/isched/isched/internal/slurm"
	"github.com/isched/isched/internal/stream"
	"github.com/spf13/pflag"
)

// stopCmd is `isched stop JOB|LINEAGE`: the user says the run is done. The
// CLI has no way to write to the coordinator (it reads Redis as viewer),
// so it cancels the lineage's current job with scancel, run as the user
// (no shell): the coordinator never continues a CANCELLED job, so the run
// is over. It refuses another user's job. It asks Slurm itself (scontrol
// show job), not the agent's job table, which can be a poll old: a job
// that ended (or ends as the cancel reaches it) is not CANCELLED, and
// isched may continue the run. Then it waits up to --wait for the
// continued job (requeued: the same id queued again; resubmitted: a new
// one) and cancels that, until Slurm shows the job CANCELLED or the
// coordinator ends the run.
type stopCmd struct {
	app   *App
	wait  time.Duration
	every time.Duration
}

func (c *stopCmd) leaf() leaf {
	return leaf{
		use:   "stop JOB|LINEAGE [--wait D]",
		short: "the run is done: cancel its current job (scancel, as you); isched never continues it",
		flags: func(fs *pflag.FlagSet) {
			fs.DurationVar(&c.wait, "wait", 3*time.Minute, "how long to wait for Slurm to show the job cancelled and, between two attempts, for isched's continued job, to cancel it (0: do not wait)")
			fs.DurationVar(&c.every, "interval", 2*time.Second, "how often --wait looks again")
		},
		run: c.run, args: c.app.completeJobs,
	}
}

func (c *stopCmd) run(ctx context.Context, pos []string) error {
	a := c.app
	if len(pos) != 1 {
		return usageErr("want one job id or lineage, got %q", pos)
	}
	if c.every <= 0 {
		return usageErr("--interval %s: want a positive duration", c.every)
	}
	if ref, elements, ok := a.arrayElements(ctx, pos[0]); ok {
		return c.stopArray(ctx, ref, elements)
	}
	return c.stopOne(ctx, pos[0])
}

// stopOne stops one lineage's run (JOB|LINEAGE arg), waiting for a
// continued job as --wait says.
func (c *stopCmd) stopOne(ctx context.Context, arg string) error {
	a := c.app
	sent := map[string]bool{} // jobs this command cancelled
	said := false
	for waited := time.Duration(0); ; waited += c.every {
		err := a.stopOnce(ctx, arg, sent, waited == 0)
		switch {
		case errors.Is(err, errCancelSent) && c.wait == 0:
			fmt.Fprintf(a.stdout, "%v: a cancelled run is never continued by isched\n", err)
			return nil
		case !errors.Is(err, errBetweenAttempts) && !errors.Is(err, errCancelSent):
			return err
		case waited >= c.wait:
			return fmt.Errorf("%w (waited %s)", err, c.wait)
		case !said && errors.Is(err, errBetweenAttempts):
			fmt.Fprintf(a.stderr, "isched stop: %v; waiting up to %s for the continued job, to cancel it\n", err, c.wait)
			said = true
		}
		if err := a.Sleep(ctx, c.every); err != nil {
			return err
		}
	}
}

// stopArray stops an array's runs: scancel of the array's job id (every
// element Slurm holds under it, the pending rest among them, as scancel
// does), then each element's lineage as stopOne does, for an element
// isched continued under another job.
func (c *stopCmd) stopArray(ctx context.Context, ref arrayRef, elements []string) error {
	a := c.app
	if ref.jobID != 0 {
		id := strconv.FormatUint(ref.jobID, 10)
		switch err := a.Slurm.Cancel(ctx, id); {
		case errors.Is(err, slurm.ErrNotFound):
			fmt.Fprintf(a.stderr, "isched stop: array job %s: Slurm no longer holds it\n", id)
		case err != nil:
			return fmt.Errorf("scancel %s: %w", id, err)
		default:
			fmt.Fprintf(a.stdout, "cancelled array job %s (lineage %s_<task>)\n", id, ref.lineage)
		}
	}
	var errs []error
	for _, l := range elements {
		if err := c.stopOne(ctx, l); err != nil {
			errs = append(errs, fmt.Errorf("element %s: %w", l, err))
		}
	}
	return errors.Join(errs...)
}

var (
	// errBetweenAttempts: the lineage's job ended (not cancelled) and the
	// coordinator may be continuing the run; there is no job to cancel yet.
	errBetweenAttempts = errors.New("isched may be continuing the run")
	// errCancelSent: scancel was sent; Slurm does not show the job ended yet.
	errCancelSent = errors.New("cancel sent")
)

// stopOnce looks at the lineage once and cancels its current job unless
// this command did already (sent). nil: the job is CANCELLED or the run is
// over. On the first look, a job id that neither Slurm nor isched's
// records know is errNoSuchJob, at once: there is no run to wait for.
// Later, Slurm forgetting a job it showed is a run between attempts.
func (a *App) stopOnce(ctx context.Context, arg string, sent map[string]bool, first bool) error {
	st, err := a.openStore(ctx)
	if err != nil {
		return fmt.Errorf("redis: %w", err)
	}
	jobs, _ := a.jobTable(ctx)
	t, err := a.resolve(ctx, arg, jobs)
	if err != nil {
		return err
	}
	s, err := readStatus(ctx, st, t.lineage)
	if err != nil && !errors.Is(err, stream.ErrNotFound) {
		return err
	}
	if err := t.noSuchJob(s, false); err != nil && first {
		return err
	}
	job, owner, why := stopTarget(t, s, jobs)
	if job == "" {
		return fmt.Errorf("lineage %s: %s", t.lineage, why)
	}
	if me := a.UID(); owner >= 0 && owner != me && me != 0 {
		return fmt.Errorf("job %s of lineage %s belongs to uid %d, not to you (uid %d): not cancelled", job, t.lineage, owner, me)
	}
	// a run that ended after this command's cancel (it may land while the
	// coordinator continues the run) is this command's stop: cancelOnce
	// says so from the job's state
	if s != nil && s.EndedMS != 0 && !sent[job] {
		fmt.Fprintf(a.stdout, "lineage %s is over already (%s); nothing to stop\n", t.lineage, s.State)
		return nil
	}
	return a.cancelOnce(ctx, job, t.lineage, sent)
}

// cancelOnce cancels the lineage's job unless it has ended or this
// command cancelled it already (sent); errCancelSent: sent, not seen
// ended yet.
func (a *App) cancelOnce(ctx context.Context, job, lineage string, sent map[string]bool) error {
	info, err := a.Slurm.ShowJob(ctx, job)
	switch {
	case errors.Is(err, slurm.ErrNotFound):
		// forgotten by slurmctld (MinJobAge): ended, and isched may have
		// resubmitted the run
		return fmt.Errorf("job %s of lineage %s: Slurm no longer holds it: %w", job, lineage, errBetweenAttempts)
	case err != nil:
		return fmt.Errorf("job %s: %w", job, err)
	case info.State == "CANCELLED":
		if sent[job] {
			fmt.Fprintf(a.stdout, "cancelled job %s (lineage %s): a cancelled run is never continued by isched\n", job, lineage)
		} else {
			fmt.Fprintf(a.stdout, "job %s (lineage %s) is cancelled already: a cancelled run is never continued by isched\n", job, lineage)
		}
		return nil
	case slurm.Ended(info.State):
		// between two attempts: the continuation is the coordinator's, and
		// this CLI cannot write to it (it reads Redis as viewer)
		return fmt.Errorf("job %s of lineage %s has ended (%s): %w", job, lineage, info.State, errBetweenAttempts)
	case sent[job]:
		return fmt.Errorf("job %s of lineage %s: %w, Slurm shows it %s", job, lineage, errCancelSent, info.State)
	}
	if err := a.Slurm.Cancel(ctx, job); err != nil {
		if errors.Is(err, slurm.ErrNotFound) {
			return fmt.Errorf("job %s of lineage %s: Slurm no longer holds it: %w", job, lineage, errBetweenAttempts)
		}
		return fmt.Errorf("scancel %s: %w", job, err)
	}
	sent[job] = true
	return fmt.Errorf("job %s of lineage %s: %w", job, lineage, errCancelSent)
}

// stopTarget is the job to cancel for a lineage and its owner's uid (-1
// unknown): the coordinator's record's current job, else the job the
// argument resolved to; "" and why when there is none.
func stopTarget(t target, s *report.JobStatus, jobs *report.JobTable) (job string, owner int, why string) {
	switch {
	case s != nil && s.JobID != 0:
		return elementID(s.JobID, jobs), s.UID, ""
	case t.job != nil:
		return jobKey(t.job), t.job.UID, ""
	case t.jobArg != "":
		return t.jobArg, t.ownerUID, ""
	}
	return "", -1, "no job: the coordinator has no record of it and the job table lists none"
}

// elementID is how scancel must name job id: A_T when the job table shows
// it as an array's element. One element's own id can be the array's (Slurm
// gives it to one element when it starts), and scancel of that id
// cancels every element: stopping one run would stop its siblings.
func elementID(id uint64, jobs *report.JobTable) string {
	if jobs != nil {
		for i := range jobs.Jobs {
			if j := &jobs.Jobs[i]; j.JobID == id && j.ArrayTaskID != nil {
				return jobKey(j)
			}
		}
	}
	return strconv.FormatUint(id, 10)
}
