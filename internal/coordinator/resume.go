package coordinator

import (
	"fmt"
	"strconv"
	"time"

	"github.com/isched/isched/internal/report"
)

// A resume the job did not make must not read as progress (issue 26,
// item 4): the wrapper offers the attempt a checkpoint (ISCHED_RESUME_FROM,
// the start report's ResumeFrom), but only the training loop's first step
// says where it went on from. A loop that restarted (a resume file it
// could not read or replace, a script that ignores the variable) is
// flagged at that first step, the status's step goes back to the loop's,
// and after MaxResumeFailures such attempts the policy stops continuing
// and moving the run (policy.Job.ResumeFailures).

// resumeCheck is an attempt given a checkpoint, until its first step.
type resumeCheck struct {
	Attempt spanKey `json:"attempt"`
	Step    int64   `json:"step"` // the checkpoint's step (0: unknown)
	Path    string  `json:"path"`
}

// resumedBehind says whether a loop given the checkpoint of step ckpt and
// reporting first as its first step restarted behind it. Loops print every
// k-th step and Lightning reruns the batch of a mid-epoch checkpoint, so a
// first step a little behind the checkpoint is a resume; more than a tenth
// of the checkpoint's progress behind (and at least 2 steps) is not.
func resumedBehind(ckpt, first int64) bool {
	if ckpt <= 0 {
		return false // the checkpoint's step is unknown: nothing to compare
	}
	return first < ckpt-max(2, ckpt/10)
}

// checkResume judges the pending resume of this attempt by its first
// iterations (rank 0's, fresh).
func (l *lineage) checkResume(job *report.JobRef, iters []report.Iter, atMS int64) {
	rc := l.Resuming
	if rc == nil || rc.Attempt != (spanKey{job.JobID, job.Attempt}) {
		return
	}
	l.Resuming = nil
	first, last := iters[0].Step, iters[0].Step
	for _, it := range iters {
		first, last = min(first, it.Step), max(last, it.Step)
	}
	now := time.UnixMilli(atMS)
	if !resumedBehind(rc.Step, first) {
		l.eventEach(now, "resumed", fmt.Sprintf("attempt %d resumed: its first step is %d, after %s%s", job.Attempt, first, rc.Path, stepText(rc.Step)))
		return
	}
	st := &l.Status
	st.ResumeFailures++
	l.eventEach(now, "resume-failed", fmt.Sprintf("attempt %d was given %s%s but its first step is %d: it restarted and redoes %d steps "+
		"(does the script read ISCHED_RESUME_FROM, and can it read that file?); %d such attempt(s) in this run",
		job.Attempt, rc.Path, stepText(rc.Step), first, rc.Step-first+1, st.ResumeFailures))
	// the status shows where the loop is, not where it was offered to be
	st.Step = last
	if sp := l.span(job.JobID, job.Attempt); sp != nil {
		sp.StartStep, sp.EndStep = max(first-1, 0), last
	}
}

func stepText(step int64) string {
	if step <= 0 {
		return ""
	}
	return " (step " + strconv.FormatInt(step, 10) + ")"
}
