package coordinator

import (
	"context"
	"os"
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
	cred, err := auth.Issue(context.Background(), mungeAs{e.m, 1001}, w.sess, "lab", jobID, lineage, os.Geteuid(), time.Minute, e.now)
	if err != nil {
		e.t.Fatal(err)
	}
	w.cred = cred
	return w
}

// trainedAttempt0 lists a job RUNNING on partition and has its attempt 0
// start and report steps 1..steps, applied.
func (e *env) trainedAttempt0(jobID uint64, lineage, partition string, steps int64) *wrapperSession {
	e.t.Helper()
	e.publish([]report.Job{job(jobID, 1001, "alice", "RUNNING", partition, "")}, nil)
	w := e.attemptWrapper(jobID, lineage, 0)
	e.start(w)
	e.sample(w, 1, steps, 100)
	e.rounds(1)
	return w
}

// slurmRequeued publishes, a second later, the job as Slurm's requeue
// leaves it (PENDING, restart 1, BeginTime), applies it, and returns it.
func (e *env) slurmRequeued(jobID uint64, partition string) report.Job {
	e.t.Helper()
	e.now = e.now.Add(time.Second)
	j := job(jobID, 1001, "alice", "PENDING", partition, "")
	j.RestartCount, j.Reason = 1, "BeginTime"
	e.publish([]report.Job{j}, nil)
	e.rounds(1)
	return j
}

// An attempt killed with its node (no end report) and requeued by Slurm:
// its span ends at the last step it reported, says Slurm requeued it, and
// the next attempt opens a new span.
func TestSlurmRequeueWithoutEndReportClosesTheSpan(t *testing.T) {
	t.Parallel()
	for _, seenPending := range []bool{true, false} {
		e := newEnv(t)
		const lin = "lab-40"
		e.trainedAttempt0(40, lin, "cpu", 50)
		if seenPending {
			e.slurmRequeued(40, "cpu")
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

// A preempted attempt whose last reports are late: the job table shows
// Slurm's requeue first (the span closes at the last step seen), then the
// attempt's last iterations and its end report arrive. The span must end
// where the trainer stopped, with the wrapper's own end, so the history
// shows no lost iterations.
func TestLateReportsOfARequeuedAttemptExtendItsSpan(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	const lin = "lab-41"
	w0 := e.trainedAttempt0(41, lin, "scavenger", 44)
	j := e.slurmRequeued(41, "scavenger")
	if st := e.status(lin); len(st.History) != 1 || st.History[0].EndStep != 44 {
		t.Fatalf("span after Slurm's requeue: %s, want ended at step 44", spans(st))
	}
	closedMS := e.status(lin).History[0].EndMS

	// the late reports: iterations 45..53, then the end after the SIGTERM save
	// (sent before the coordinator saw the requeue: the wrapper's clock)
	tableAt := e.now
	e.now = e.now.Add(-500 * time.Millisecond)
	endAt := e.now
	e.sample(w0, 45, 9, 100)
	e.end(w0, 0)
	e.now = tableAt
	e.rounds(1)
	st := e.status(lin)
	if len(st.History) != 1 || st.History[0].EndStep != 53 {
		t.Fatalf("span after the late reports: %s, want ended at step 53", spans(st))
	}
	sp := st.History[0]
	if sp.EndMS != endAt.UnixMilli() || sp.EndMS == closedMS || !strings.HasPrefix(sp.Reason, report.EndExited+", requeued by Slurm") {
		t.Errorf("span %s: want the wrapper's end (at %d, %q first) and Slurm's requeue in its reason", spans(st), endAt.UnixMilli(), report.EndExited)
	}
	if st.State == "ENDED" {
		t.Errorf("lineage ended on a requeued job")
	}

	// attempt 1 resumes at 53: no gap in the history
	e.now = e.now.Add(10 * time.Second)
	j.State, j.Reason = "RUNNING", ""
	e.publish([]report.Job{j}, nil)
	w1 := e.attemptWrapper(41, lin, 1)
	e.start(w1)
	e.sample(w1, 54, 5, 100)
	e.rounds(1)
	st = e.status(lin)
	if len(st.History) != 2 || st.History[0].EndStep != 53 || st.History[1].Attempt != 1 || st.History[1].EndMS != 0 {
		t.Errorf("history %s, want attempt 0 ended at 53 and attempt 1 open", spans(st))
	}
	// a stray late sample of attempt 0 with an older step moves nothing
	e.sample(w0, 50, 1, 100)
	e.rounds(1)
	if st := e.status(lin); st.History[0].EndStep != 53 {
		t.Errorf("history %s after an older late sample", spans(st))
	}
}

// A coordinator SIGKILLed after opening a start report's MUNGE credential
// and before saving its session: MUNGE opens a credential once, so the
// next coordinator, reading the same entry again from the group's pending
// list, must still accept it (CI: TestChaosKillsDuringMigrations lost a
// whole job's reports as "bad-credential"). The same start sent as a new
// entry (a replay by someone else) is still refused.
func TestStartRedeliveredAfterACrashOpensItsSession(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	const lin = "lab-42"
	e.publish([]report.Job{job(42, 1001, "alice", "RUNNING", "cpu", "")}, nil)
	w := e.attemptWrapper(42, lin, 0)
	raw, mac := func() ([]byte, string) {
		env := report.NewEnvelope(report.KindStart, e.now)
		env.Start = &report.Start{Argv: []string{"python3", "train.py"}, Host: "h", PID: 1, Cred: w.cred, GPUs: []string{}}
		return e.send(w, env)
	}()
	// the dead coordinator: the entry delivered to it, its credential opened
	ctx := context.Background()
	if err := e.store.EnsureGroup(ctx, "isched:lab:ingest", group); err != nil {
		t.Fatal(err)
	}
	if got, err := e.store.ReadGroup(ctx, "isched:lab:ingest", group, "c1", 10, time.Millisecond); err != nil || len(got) != 1 {
		t.Fatalf("delivering the start: %d entries, %v", len(got), err)
	}
	if _, err := auth.Open(ctx, e.m, w.cred); err != nil {
		t.Fatal(err)
	}
	e.sample(w, 1, 5, 100)
	e.rounds(1)
	if n := e.counter(RejectBadCred); n != 0 {
		t.Fatalf("the redelivered start was refused as a bad credential (%v)", n)
	}
	if st := e.status(lin); st.Step != 5 || st.State != "RUNNING" {
		t.Fatalf("status after the redelivered start: state %q step %d, want RUNNING at 5", st.State, st.Step)
	}

	// someone appends the captured start again: a new entry, refused
	e.appendRaw(raw, mac)
	e.rounds(1)
	if n := e.counter(RejectReplay); n != 1 {
		t.Errorf("the start appended again: replay rejections %v, want 1", n)
	}
	// and a captured start whose session the coordinator never saw, sent as
	// a new entry after its credential was opened elsewhere
	w2 := e.attemptWrapper(43, "lab-43", 0)
	if _, err := auth.Open(ctx, e.m, w2.cred); err != nil {
		t.Fatal(err)
	}
	e.start(w2)
	e.rounds(1)
	if n := e.counter(RejectBadCred); n != 1 {
		t.Errorf("an opened credential in a new entry: bad-credential rejections %v, want 1", n)
	}
}

// sampleRSS sends a sample of n iterations from fromStep with the job's
// RSS at rss (negative: no CPU sample, iterations only).
func (e *env) sampleRSS(w *wrapperSession, fromStep, n int64, rss int64) {
	var cpu *report.CPUStat
	if rss >= 0 {
		cpu = &report.CPUStat{RSSBytes: rss, PeakRSSBytes: rss, Procs: 1}
	}
	e.sendSample(w, fromStep, n, 100, cpu)
}

// A job moved or continued resumes from a checkpoint at the last step it
// reported, so its steps never go back, and its new process holds memory
// at a level of its own (another node, another allocator's warm-up). The
// new attempt's memory trend must be its own: mixed with the last
// process's points it read as steady growth ("growing 565 KiB/iteration",
// a "possible leak" and a predicted peak above the limit after the demo's
// move), a false alarm at every move. A late sample of the old attempt
// stays out of it too.
func TestNewAttemptStartsItsOwnMemoryTrend(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	const lin = "lab-46"
	e.publish([]report.Job{job(46, 1001, "alice", "RUNNING", "cpu", "")}, nil)
	w0 := e.attemptWrapper(46, lin, 0)
	e.start(w0)
	for i := int64(0); i < 30; i++ { // 300 steps at 400 MiB, ±1 MiB
		e.now = e.now.Add(time.Second)
		e.sampleRSS(w0, 1+10*i, 10, 400<<20+(i%3)<<20)
	}
	e.rounds(1)
	if st := e.status(lin); st.RSSSlope != 0 {
		t.Fatalf("attempt 0 alone: slope %.0f B/iteration, want 0 (flat)", st.RSSSlope)
	}

	j := e.slurmRequeued(46, "cpu")
	e.now = e.now.Add(10 * time.Second)
	j.State, j.Reason = "RUNNING", ""
	e.publish([]report.Job{j}, nil)
	w1 := e.attemptWrapper(46, lin, 1)
	e.start(w1)
	for i := int64(0); i < 30; i++ { // steps 301.., 520 MiB, ±1 MiB
		e.now = e.now.Add(time.Second)
		if i != 15 {
			e.sampleRSS(w1, 301+10*i, 10, 520<<20+(i%3)<<20)
			continue
		}
		// iterations without a CPU sample, then a late sample of attempt 0
		// (its last iterations and its memory then): neither the current
		// RSS, the trend nor the iteration estimate is attempt 1's business
		e.sampleRSS(w1, 301+10*i, 10, -1)
		e.sampleRSS(w0, 299, 3, 900<<20)
	}
	e.rounds(1)
	st := e.status(lin)
	if st.RSSSlope != 0 {
		t.Errorf("attempt 1: slope %.0f B/iteration, want 0: the trend mixes the two processes", st.RSSSlope)
	}
	for _, ev := range st.Events {
		if ev.Kind == "memory-growth" || ev.Kind == "memory-near-limit" {
			t.Errorf("false alarm after the requeue: %s: %s", ev.Kind, ev.Message)
		}
	}
	l := e.lineage(lin)
	for _, p := range l.Mem.Points {
		if p.RSS < 520<<20 || p.Step <= 300 {
			t.Errorf("trend point %+v is not attempt 1's", p)
		}
	}
	if len(l.Mem.Points) == 0 || l.Mem.Restarts != 1 {
		t.Errorf("trend of attempt 1: %d points, %d restarts; want its points and one restart", len(l.Mem.Points), l.Mem.Restarts)
	}
	if rss, _ := l.Mem.Peak(); rss < 520<<20 {
		t.Errorf("peak %d MiB: the peaks must survive the new process", rss>>20)
	}
	if st.RSSBytes>>20 < 520 || st.RSSBytes>>20 > 522 || st.PeakRSSBytes != 900<<20 {
		t.Errorf("RSS %d MiB, peak %d MiB: want attempt 1's RSS now, attempt 0's late peak of 900 MiB", st.RSSBytes>>20, st.PeakRSSBytes>>20)
	}
	if l.Iter.Restarts != 1 {
		t.Errorf("iteration estimator: %d restarts, want 1 (the new attempt; attempt 0's late steps are not another)", l.Iter.Restarts)
	}
}
