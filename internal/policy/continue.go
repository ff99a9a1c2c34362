package policy

import (
	"fmt"
	"strings"
	"time"

	"github.com/isched/isched/internal/report"
)

// RuleContinue is rule 5: an attempt ended with work left.
const RuleContinue = "continue"

// End is how an attempt of a job ended.
type End struct {
	// State is Slurm's final state of the job (COMPLETED, FAILED, TIMEOUT,
	// PREEMPTED, NODE_FAIL, CANCELLED, ...); "" when slurmctld no longer
	// holds the job (it ended more than MinJobAge ago).
	State string
	// Exit is the training command's exit status from the wrapper's end
	// report (128+n after signal n); nil when no end report came.
	Exit *int
	// Signal is the signal that killed the training command ("" when it
	// exited on its own, also with 143 after saving on SIGTERM).
	Signal string
	// ResumeStep is the step the attempt resumed from (0: from scratch).
	ResumeStep int64
	// NewCkpts counts the checkpoints confirmed during the attempt.
	NewCkpts int64
}

// AfterEnd is rule 5: an attempt ended (the training command exited, or
// Slurm ended the job: TIMEOUT, PREEMPTED without a requeue, NODE_FAIL)
// and the run has steps left. It is continued from its last confirmed
// checkpoint (a Requeue of the ended job, onto the partition rule 1's
// continuation chooses; a Resubmit of its batch script when slurmctld no
// longer holds the job, State "") unless that would loop or the user ended it: a
// CANCELLED job, an attempt that made no progress since the previous one
// (its newest checkpoint is the one it resumed from), a crash (a non-zero
// exit that was no signal, with no new checkpoint), MaxContinuations
// reached, no total or no checkpoint to continue from. The Decision's
// Reason says which, with the numbers.
func AfterEnd(cfg Config, j Job, e End, snap *report.Snapshot, now time.Time) Decision {
	return withIdealCPUs(afterEnd(cfg, j, e, snap, now), &j)
}

func afterEnd(cfg Config, j Job, e End, snap *report.Snapshot, now time.Time) Decision {
	v := newView(cfg, j, snap, now)
	stop := func(format string, a ...any) Decision {
		return Decision{Kind: None, Rule: RuleContinue, Reason: fmt.Sprintf(format, a...)}
	}
	ended := endedText(e)
	switch {
	case e.State == "CANCELLED":
		return stop("%s: the run was cancelled (scancel): not continued", ended)
	case v.total <= 0:
		return stop("%s at step %d; the total is unknown, so the run counts as done", ended, max(j.Step, 0))
	case j.Step >= v.total:
		return stop("%s at step %d of %d: the run is done", ended, j.Step, v.total)
	case j.LastCkptStep >= v.total:
		// the loop saved its last step; the steps after the last reported
		// may be lost with the attempt (killed right after that save)
		return stop("%s at step %d of %d with its checkpoint at the last step %d: the run is done", ended, j.Step, v.total, j.LastCkptStep)
	case j.LastCkptAt.IsZero():
		return stop("%s at step %d of %d with no checkpoint to continue from: not continued", ended, j.Step, v.total)
	case e.Exit != nil && *e.Exit != 0 && e.Signal == "" && e.NewCkpts == 0:
		return stop("%s at step %d of %d: a crash (exit %d) with no new checkpoint since the attempt began: not continued blindly",
			ended, j.Step, v.total, *e.Exit)
	case e.NewCkpts == 0 || (j.LastCkptStep > 0 && j.LastCkptStep <= e.ResumeStep):
		return stop("%s at step %d of %d with no progress since the previous attempt (it resumed at step %d and its newest checkpoint is %s): not continued blindly",
			ended, j.Step, v.total, e.ResumeStep, ckptText(j))
	}
	resume := j
	if j.LastCkptStep > 0 {
		resume.Step = j.LastCkptStep
	}
	rv := newView(cfg, resume, snap, now)
	target, gres, tl, why, ok := rv.continuation()
	if !ok {
		return stop("%s at step %d of %d; %s", ended, j.Step, v.total, why)
	}
	d := Decision{Kind: Requeue, Rule: RuleContinue, Target: target, Gres: gres, TimeLimit: tl}
	how := "requeueing"
	if e.State == "" {
		// slurmctld forgot the job (it ended more than MinJobAge ago, e.g.
		// while the coordinator was down): a requeue would be refused
		d.Kind, how = Resubmit, "slurmctld no longer holds the job (MinJobAge): resubmitting its batch script as a new job"
	}
	d.Reason = fmt.Sprintf("continue: %s at step %d of %d (%d left); resuming from %s: %s onto %s",
		ended, j.Step, v.total, v.total-j.Step, ckptText(j), how, why)
	return d
}

func endedText(e End) string {
	var b strings.Builder
	b.WriteString("the attempt ended")
	if e.State != "" {
		b.WriteString(" " + e.State)
	}
	switch {
	case e.Exit == nil:
		b.WriteString(" (no end report)")
	case e.Signal != "":
		fmt.Fprintf(&b, " (exit %d, killed by %s)", *e.Exit, e.Signal)
	default:
		fmt.Fprintf(&b, " (exit %d)", *e.Exit)
	}
	return b.String()
}

func ckptText(j Job) string {
	if j.LastCkptAt.IsZero() {
		return "no checkpoint"
	}
	if j.LastCkptStep > 0 {
		return fmt.Sprintf("the checkpoint at step %d", j.LastCkptStep)
	}
	return "the last checkpoint (step unknown)"
}
