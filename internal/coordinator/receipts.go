package coordinator

import (
	"fmt"

	"github.com/isched/isched/internal/report"
)

// confirmSlack is how far the wrapper's and Slurm's clocks (and the job
// table's age) may disagree when a receipt's run is checked against Slurm.
const confirmSlack int64 = 60_000

// ranFor is what the coordinator saw of a run, in its clock (ms).
type ranFor struct {
	StartedMS      int64 // the lineage's first start report
	AttemptStartMS int64 // the current attempt's start report (0: none)
	EndedMS        int64 // the run's end
	NowMS          int64
}

// confirmRun says whether the agent's job table backs a receipt (r, its
// UID set to the lineage's owner) of a run that ended: the job is listed
// and owned by that uid, its comment's plan names the receipt's model and
// batch, Slurm started it, and the run fits in Slurm's record — the
// lineage started no earlier than the job was submitted, the current
// attempt no earlier than Slurm started it, it ended no later than Slurm
// ended it, and the iterations it claims (iterations × iteration time)
// fit in its wall time. A user can still lie about their own job, within
// what Slurm saw: pooling (plan.Site.Estimate) limits what such a receipt
// does to other users' estimates. why says what failed.
func confirmRun(j report.Job, listed bool, r report.Receipt, run ranFor) (ok bool, why string) {
	switch {
	case !listed:
		return false, "job not in the job table"
	case r.UID == nil || j.UID != *r.UID:
		return false, fmt.Sprintf("job owned by uid %d, not the lineage's owner", j.UID)
	}
	p, isPlan, err := report.ParsePlanComment(j.Comment)
	switch {
	case !isPlan || err != nil:
		return false, "no isched plan in the job's comment"
	case p.Model != r.Model || p.Batch != r.Batch:
		return false, fmt.Sprintf("the comment names model %q batch %d", p.Model, p.Batch)
	case j.StartMS <= 0:
		return false, "Slurm never started the job"
	case run.StartedMS < j.SubmitMS-confirmSlack:
		return false, "the run started before the job was submitted"
	case run.AttemptStartMS > 0 && run.AttemptStartMS < j.StartMS-confirmSlack:
		return false, "the attempt started before Slurm started the job"
	}
	end := run.NowMS
	if j.EndMS > 0 {
		end = j.EndMS
	}
	if run.EndedMS > end+confirmSlack {
		return false, "the run ended after Slurm ended the job"
	}
	wall := float64(run.EndedMS - run.StartedMS)
	if work := float64(r.Iters) * r.IterMS; work > 1.5*wall+float64(confirmSlack) {
		return false, fmt.Sprintf("%d iterations of %.0f ms do not fit in %.0f s", r.Iters, r.IterMS, wall/1000)
	}
	return true, ""
}
