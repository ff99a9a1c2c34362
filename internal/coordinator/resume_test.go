package coordinator

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/isched/isched/internal/report"
)

func TestResumedBehind(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		ckpt, first int64
		behind      bool
	}{
		{0, 1, false},     // the checkpoint's step is unknown
		{294, 295, false}, // resumed
		{294, 294, false}, // Lightning reruns the batch of a mid-epoch checkpoint
		{294, 300, false}, // a loop that prints every 10th step
		{294, 266, false}, // within a tenth of the progress
		{294, 264, true},
		{294, 1, true}, // restarted
		{5, 3, false},  // within 2 steps
		{5, 2, true},
		{40, 1, true},
	} {
		if got := resumedBehind(tt.ckpt, tt.first); got != tt.behind {
			t.Errorf("checkpoint at %d, first step %d: behind %v, want %v", tt.ckpt, tt.first, got, tt.behind)
		}
	}
}

func lastEvent(st report.JobStatus, kind string) string {
	for i := len(st.Events) - 1; i >= 0; i-- {
		if st.Events[i].Kind == kind {
			return st.Events[i].Message
		}
	}
	return ""
}

// Issue 26, item 4: an attempt given a checkpoint that restarts from step 1
// (a resume file it could not read) is flagged at its first step, the
// status's step is the loop's again, and after policy.MaxResumeFailures
// such attempts the run is not continued: before, the status kept step 294
// and every continuation redid the work until max_continuations.
func TestResumeThatRestartedIsFlagged(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	const lin = "lab-62"
	j := e.savedAndExited(62, lin)
	ckpt, ckptStep := "/ck/ckpt-294.pt", int64(294)
	for attempt := 1; attempt <= 3; attempt++ {
		e.now = e.now.Add(time.Second)
		j.State = "COMPLETED"
		e.publish([]report.Job{j}, nil)
		e.rounds(1)
		acts := e.actions()
		if attempt == 3 {
			if len(acts) != 2 {
				t.Fatalf("after 2 restarted attempts: %d actions, want no third requeue", len(acts))
			}
			st := e.status(lin)
			if d := st.Decisions[len(st.Decisions)-1]; !strings.Contains(d.Reason, "2 attempts restarted behind the checkpoint") {
				t.Errorf("last decision %q, want the restarts named", d.Reason)
			}
			return
		}
		if len(acts) != attempt || acts[attempt-1].Type != report.ActionRequeue {
			t.Fatalf("attempt %d: actions %+v, want a requeue", attempt, acts)
		}
		e.result(acts[attempt-1].ID, report.StatusOK)
		e.now = e.now.Add(5 * time.Second)
		j.State, j.RestartCount = "RUNNING", attempt
		e.publish([]report.Job{j}, nil)
		w := e.attemptWrapper(62, lin, attempt)
		e.startResumed(w, ckpt)
		e.rounds(1)
		if st := e.status(lin); !strings.Contains(lastEvent(st, "resuming"), fmt.Sprintf("was given %s (step %d)", ckpt, ckptStep)) {
			t.Fatalf("attempt %d: events %+v, want the offer named", attempt, st.Events)
		}
		e.sampleTotal(w, 1, 20, 3000) // the loop starts over
		e.checkpoint(w, "/ck/ckpt-20.pt", 20)
		e.rounds(1)
		st := e.status(lin)
		if st.Step != 20 || st.ResumeFailures != attempt {
			t.Fatalf("attempt %d: step %d, resume failures %d; want the loop's step 20 and %d", attempt, st.Step, st.ResumeFailures, attempt)
		}
		if msg := lastEvent(st, "resume-failed"); !strings.Contains(msg, "its first step is 1") ||
			!strings.Contains(msg, fmt.Sprintf("redoes %d steps", ckptStep)) {
			t.Errorf("attempt %d: resume-failed event %q", attempt, msg)
		}
		if lastEvent(st, "resumed") != "" {
			t.Errorf("attempt %d: a resumed event for a restart: %q", attempt, lastEvent(st, "resumed"))
		}
		e.sampleTotal(w, 21, 300, 3000) // it got further this time, then exits with work left
		ckpt, ckptStep = fmt.Sprintf("/ck/ckpt-320-%d.pt", attempt), 320
		e.checkpoint(w, ckpt, ckptStep)
		e.end(w, 0)
		e.rounds(1)
	}
}

// A resume the loop confirms is an event at its first step, and nothing else changes.
func TestResumeConfirmedByTheFirstStep(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	const lin = "lab-63"
	j := e.savedAndExited(63, lin)
	e.now = e.now.Add(time.Second)
	j.State = "COMPLETED"
	e.publish([]report.Job{j}, nil)
	e.rounds(1)
	acts := e.actions()
	e.result(acts[0].ID, report.StatusOK)
	j.State, j.RestartCount = "RUNNING", 1
	e.publish([]report.Job{j}, nil)
	w := e.attemptWrapper(63, lin, 1)
	e.startResumed(w, "/ck/ckpt-294.pt")
	e.sampleTotal(w, 295, 10, 3000)
	e.rounds(1)
	st := e.status(lin)
	if msg := lastEvent(st, "resumed"); !strings.Contains(msg, "its first step is 295, after /ck/ckpt-294.pt (step 294)") {
		t.Errorf("resumed event %q", msg)
	}
	if st.ResumeFailures != 0 || st.Step != 304 {
		t.Errorf("resume failures %d, step %d; want 0 and 304", st.ResumeFailures, st.Step)
	}
}
