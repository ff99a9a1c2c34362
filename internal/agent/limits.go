package agent

import (
	"context"
	"time"

	"github.com/isched/isched/internal/report"
	"github.com/isched/isched/internal/slurm"
)

// LimitsReader reads the accounting's QOS and associations (sacctmgr); the
// agent publishes per-user limits when its Slurm client is one. Without
// accounting it fails, and the snapshot has no limits.
type LimitsReader interface {
	Limits(ctx context.Context) ([]slurm.QOS, []slurm.Association, error)
}

// limitsCache holds the last accounting read: sacctmgr asks slurmdbd, so it
// is read once per LimitsInterval, not on every poll. Use is recomputed
// from every poll's jobs.
type limitsCache struct {
	qos    []slurm.QOS
	assocs []slurm.Association
	at     time.Time
	ok     bool
	failed bool // the last read failed: say so once, not on every read
}

// userLimits are the per-user limits with use from jobs, reading the
// accounting again when the cached read is older than LimitsInterval.
func (a *Agent) userLimits(ctx context.Context, jobs []report.Job, now time.Time) []report.UserLimit {
	lr, ok := a.slurm.(LimitsReader)
	if !ok {
		return nil
	}
	c := &a.limits
	if c.at.IsZero() || now.Sub(c.at) >= a.cfg.LimitsInterval {
		c.at = now
		qos, assocs, err := lr.Limits(ctx)
		switch {
		case err != nil && !c.failed:
			a.log.Info("per-user limits not published: accounting not readable (a cluster without slurmdbd has none)", "err", err)
			c.failed, c.ok = true, false
		case err != nil:
			c.ok = false
		default:
			if c.failed {
				a.log.Info("per-user limits readable again")
			}
			c.qos, c.assocs, c.ok, c.failed = qos, assocs, true, false
		}
	}
	if !c.ok {
		return nil
	}
	return slurm.BuildLimits("", c.qos, c.assocs, jobs)
}
