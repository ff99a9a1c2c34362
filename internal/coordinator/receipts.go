package coordinator

import (
	"encoding/json"
	"fmt"
	"time"

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
	p, isPlan, err := report.JobPlan(j)
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

// maxHeldReceipts bounds the receipts waiting for a newer job table.
const maxHeldReceipts = 4096

// heldReceipt is the receipt of a run that ended, with what confirmRun
// needs, until a job table can vouch for it.
type heldReceipt struct {
	r       report.Receipt
	lineage string
	jobID   uint64
	run     ranFor
	heldAt  time.Time // zero until held
}

// settleReceipt confirms a receipt against the job table and queues it
// for Redis. A run can start and end between two job tables (the agent
// polls Slurm every few seconds): when the table in hand was taken before
// the run ended and does not confirm it, the receipt waits for a newer
// one (releaseReceipts) rather than being judged on a picture that could
// not yet show the job running. final settles it on the table in hand.
func (c *Coordinator) settleReceipt(h heldReceipt, now time.Time, final bool) {
	j, listed := c.jobs[h.jobID]
	h.run.NowMS = now.UnixMilli()
	ok, why := confirmRun(j, listed, h.r, h.run)
	if !ok && !final && c.jobsAt.UnixMilli() < h.run.EndedMS && len(c.heldReceipts) < maxHeldReceipts {
		if h.heldAt.IsZero() {
			h.heldAt = now
		}
		c.heldReceipts = append(c.heldReceipts, h)
		return
	}
	r := h.r
	if r.Confirmed = ok; ok {
		r.User = j.User
	} else {
		c.log.Info("receipt not confirmed by Slurm: kept for its owner's estimates only", "lineage", h.lineage, "job", h.jobID, "why", why)
	}
	if b, err := json.Marshal(r); err == nil {
		c.receipts = append(c.receipts, b)
	}
	if c.speeds.loaded {
		c.speeds.noteReceipt(r)
	}
}

// releaseReceipts settles the held receipts a newer job table can now
// judge, and those held longer than StaleAfter (the agent is not
// publishing: they are judged on what there is).
func (c *Coordinator) releaseReceipts(now time.Time) {
	held := c.heldReceipts
	c.heldReceipts = nil
	for _, h := range held {
		c.settleReceipt(h, now, now.Sub(h.heldAt) > c.cfg.StaleAfter)
	}
}
