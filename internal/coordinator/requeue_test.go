package coordinator

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/isched/isched/internal/auth"
	"github.com/isched/isched/internal/report"
)

// attemptWrapper is a fake wrapper session of attempt n of a job.
func (e *env) attemptWrapper(jobID uint64, lineage string, attempt int) *wrapperSession {
	e.t.Helper()
	w := e.wrapper(jobID, 1001, "alice", lineage, "cpu")
	w.job.Attempt = attempt
	cred, err := auth.Issue(context.Background(), mungeAs{e.m, 1001}, w.sess, "lab", jobID, lineage, attempt, time.Minute, e.now)
	if err != nil {
		e.t.Fatal(err)
	}
	w.cred = cred
	return w
}

// An attempt killed with its node (no end report) and requeued by Slurm:
// its span ends at the last step it reported, says Slurm requeued it, and
// the next attempt opens a new span.
func TestSlurmRequeueWithoutEndReportClosesTheSpan(t *testing.T) {
	t.Parallel()
	for _, seenPending := range []bool{true, false} {
		e := newEnv(t)
		const lin = "lab-40"
		e.publish([]report.Job{job(40, 1001, "alice", "RUNNING", "cpu", "")}, nil)
		w0 := e.attemptWrapper(40, lin, 0)
		e.start(w0)
		e.sample(w0, 1, 50, 100)
		e.rounds(1)
		if seenPending {
			e.now = e.now.Add(time.Second)
			j := job(40, 1001, "alice", "PENDING", "cpu", "")
			j.RestartCount, j.Reason = 1, "BeginTime"
			e.publish([]report.Job{j}, nil)
			e.rounds(1)
			st := e.status(lin)
			if len(st.History) != 1 || st.History[0].EndMS == 0 || st.History[0].EndStep != 50 ||
				!strings.HasPrefix(st.History[0].Reason, "requeued by Slurm") {
				t.Fatalf("span after Slurm's requeue: %+v, want ended at step 50, requeued by Slurm", st.History)
			}
			if st.State == "ENDED" {
				t.Errorf("lineage ended on a requeued job")
			}
			var found bool
			for _, ev := range st.Events {
				found = found || ev.Kind == "requeued"
			}
			if !found {
				t.Errorf("no requeued event: %+v", st.Events)
			}
		}
		e.now = e.now.Add(10 * time.Second)
		j := job(40, 1001, "alice", "RUNNING", "cpu", "")
		j.RestartCount = 1
		e.publish([]report.Job{j}, nil)
		w1 := e.attemptWrapper(40, lin, 1)
		e.start(w1)
		e.sample(w1, 41, 5, 100)
		e.rounds(1)
		st := e.status(lin)
		if len(st.History) != 2 || st.History[0].EndStep != 50 || st.History[1].Attempt != 1 || st.History[1].EndMS != 0 {
			t.Errorf("seen pending %v: history %+v, want attempt 0 ended at step 50, attempt 1 open", seenPending, st.History)
		}
	}
}
