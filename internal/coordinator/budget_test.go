package coordinator

import (
	"context"
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/isched/isched/internal/report"
	"github.com/isched/isched/internal/stream"
)

func (e *env) savedSessions() map[string]string {
	e.t.Helper()
	all, err := e.store.HGetAll(context.Background(), "isched:lab:coord:sessions")
	if err != nil {
		e.t.Fatal(err)
	}
	return all
}

func (e *env) accepted() float64 {
	return testutilCounter(e.c.metrics.reports.WithLabelValues("accepted"))
}

// TestStartFloodKeepsNothingBeforeTheOwnerCheck (issue 18, item 3): bob's
// job floods start reports (each a fresh session with a valid MUNGE
// credential of his) before the agent lists it. Nothing is saved until the
// job table confirms the owner; at most PendingPerUID sessions wait, in
// memory, HeldStartsPerUID more wait unacked, the rest are refused at once
// (not kept pending). Alice's job,
// started meanwhile, is accepted in the first round that lists it, and
// its start report is applied (not judged a replay).
func TestStartFloodKeepsNothingBeforeTheOwnerCheck(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	const flood = 300
	for range flood {
		e.start(e.wrapper(30, 1002, "bob", "lab-30", "cpu"))
	}
	alice := e.wrapper(40, 1001, "alice", "lab-40", "cpu")
	e.start(alice)
	e.sample(alice, 1, 3, 100)
	e.rounds(1)
	if s := e.savedSessions(); len(s) != 0 {
		t.Fatalf("%d sessions saved before any owner was confirmed", len(s))
	}
	pending := e.c.cfg.Limits.PendingPerUID + e.c.cfg.Limits.HeldStartsPerUID
	if got := e.counter(RejectOverBudget); got != flood-float64(pending) {
		t.Errorf("refused over budget: %v, want %d", got, flood-pending)
	}
	pend, _ := e.store.ReadOwnPending(context.Background(), "isched:lab:ingest", group, "c1", 10000)
	if want := pending + 2; len(pend) != want {
		t.Errorf("%d entries wait, want %d (bob's pending and held starts, alice's start and sample)", len(pend), want)
	}

	// the agent lists both jobs; job 30 is alice's: bob's waiting
	// sessions claimed a job that is not his
	e.publish([]report.Job{job(30, 1001, "alice", "RUNNING", "cpu", ""), job(40, 1001, "alice", "RUNNING", "cpu", "")}, nil)
	e.now = e.now.Add(2 * time.Second)
	e.rounds(1)
	if got := e.counter(RejectForeignJob); got != float64(pending) {
		t.Errorf("foreign-job: %v, want %d", got, pending)
	}
	if got := e.accepted(); got != 2 {
		t.Errorf("accepted %v, want alice's 2", got)
	}
	if got := e.counter(RejectReplay); got != 0 {
		t.Errorf("%v reports judged replays", got)
	}
	st := e.status("lab-40")
	if st.JobID != 40 || st.User != "alice" || st.Step != 3 {
		t.Errorf("alice's status: job %d user %q step %d, want 40 alice 3", st.JobID, st.User, st.Step)
	}
	if s := e.savedSessions(); len(s) != 1 {
		t.Errorf("%d sessions saved, want alice's one", len(s))
	}
	if len(e.c.quota.pendingUID) != 0 || len(e.c.quota.held) != 0 {
		t.Errorf("budgets not returned: pending %v, held %d", e.c.quota.pendingUID, len(e.c.quota.held))
	}
}

// shortPending is a Store whose pending list reads return at most n
// entries, as the real one returns at most 2048 of a longer list.
type shortPending struct {
	Store
	n int64
}

func (p shortPending) ReadOwnPending(ctx context.Context, stream, group, consumer string, count int64) ([]stream.Entry, error) {
	ents, err := p.Store.ReadOwnPending(ctx, stream, group, consumer, min(count, p.n))
	return ents[:min(len(ents), int(p.n))], err // (miniredis ignores the count)
}

// TestWaitingReportsKeepTheirOrder: a session whose job is not listed yet
// waits. When its start report is past what a tick retries (other
// reports wait before it), a newer report of the session, read once the
// job is listed, must not overtake it: judged first it made the start a
// "replay" and the status stayed "job 0 · user ”" (issue 18).
func TestWaitingReportsKeepTheirOrder(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.c.store = shortPending{Store: e.c.store, n: 4}
	ghost := e.wrapper(21, 1002, "bob", "lab-21", "cpu")
	for i := range 6 {
		e.sample(ghost, int64(i+1), 1, 100) // an unknown session's reports, waiting first
	}
	w := e.wrapper(20, 1001, "alice", "lab-20", "cpu")
	e.start(w)
	e.sample(w, 1, 3, 100)
	e.rounds(1)
	e.publish([]report.Job{job(20, 1001, "alice", "RUNNING", "cpu", "")}, nil)
	e.sample(w, 4, 2, 100)
	e.now = e.now.Add(time.Second)
	e.rounds(1) // the tick retries 4 of bob's; alice's new sample is read after it
	e.now = e.now.Add(e.c.cfg.DeferLimit + time.Second)
	e.rounds(4) // bob's are refused (too old); alice's are judged in order
	if got := e.counter(RejectReplay); got != 0 {
		t.Errorf("%v reports judged replays", got)
	}
	st := e.status("lab-20")
	if st.JobID != 20 || st.User != "alice" || st.Step != 5 {
		t.Errorf("status: job %d user %q step %d, want 20 alice 5", st.JobID, st.User, st.Step)
	}
}

// TestHeldReportsAreBounded: a session that waits for its job holds at
// most HeldPerSession reports; reports of sessions not known at all, at
// most HeldUnknown. More are refused at once, so a flood cannot fill the
// pending list every tick retries.
func TestHeldReportsAreBounded(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	w := e.wrapper(20, 1001, "alice", "lab-20", "cpu")
	e.start(w)
	for i := range 40 {
		e.sample(w, int64(i+1), 1, 100)
	}
	ghost := e.wrapper(21, 1002, "bob", "lab-21", "cpu")
	for i := range 400 {
		e.sample(ghost, int64(i+1), 1, 100) // no start: an unknown session
	}
	e.rounds(2)
	lim := e.c.cfg.Limits
	if got, want := e.counter(RejectOverBudget), float64(41-lim.HeldPerSession+400-lim.HeldUnknown); got != want {
		t.Errorf("refused over budget: %v, want %v", got, want)
	}
	pend, _ := e.store.ReadOwnPending(context.Background(), "isched:lab:ingest", group, "c1", 10000)
	if want := lim.HeldPerSession + lim.HeldUnknown; len(pend) != want {
		t.Errorf("%d entries wait, want %d", len(pend), want)
	}
}

// startAttempt has a new session of job jobID open attempt n of lineage.
func (e *env) startAttempt(jobID uint64, lineage string, attempt int) *wrapperSession {
	e.t.Helper()
	w := e.attemptWrapper(jobID, lineage, attempt)
	e.start(w)
	return w
}

// TestLineageStateIsBounded (issue 18, item 4): a job that opens a new
// attempt per report, names new GPU ids and ranks in every sample, and
// reports into new lineage after new lineage, leaves at most History
// spans, DeviceIDs GPU ids, Ranks ranks and LineagesPerJob lineages; its
// sessions stop at SessionsPerJob.
func TestLineageStateIsBounded(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.c.cfg.Limits.SessionsPerJob = 150
	e.c.cfg.Limits.Ranks = 100
	lim := e.c.cfg.Limits
	e.publish([]report.Job{job(50, 1001, "alice", "RUNNING", "cpu", "")}, nil)
	for a := range 200 {
		w := e.startAttempt(50, "lab-50", a)
		env := report.NewEnvelope(report.KindSample, e.now)
		env.Sample = &report.Sample{CPU: &report.CPUStat{RSSBytes: 1 << 20, Procs: 1},
			GPU: &report.GPUStat{Devices: []report.GPUDevice{{UUID: fmt.Sprintf("GPU-%d", a), Name: "x", UsedBytes: 1}}}}
		w.job.Rank = a
		e.send(w, env)
	}
	e.rounds(2)
	l := e.lineage("lab-50")
	st := e.status("lab-50")
	if len(st.History) != lim.History {
		t.Errorf("history: %d spans, want %d", len(st.History), lim.History)
	}
	if len(st.PeakGPUBytes) > lim.DeviceIDs || len(st.GPUBytes) > lim.DeviceIDs {
		t.Errorf("GPU ids kept: %d peak, %d current, cap %d", len(st.PeakGPUBytes), len(st.GPUBytes), lim.DeviceIDs)
	}
	if len(l.RankRSS) > lim.Ranks {
		t.Errorf("ranks kept: %d, cap %d", len(l.RankRSS), lim.Ranks)
	}
	if n := len(e.savedSessions()); n != lim.SessionsPerJob {
		t.Errorf("sessions saved: %d, want the cap %d", n, lim.SessionsPerJob)
	}
	// many lineages from one job
	for i := range 40 {
		e.start(e.wrapper(50, 1001, "alice", fmt.Sprintf("squat-%d", i), "cpu"))
	}
	e.c.cfg.Limits.SessionsPerJob = 1000
	e.rounds(1)
	names, _ := e.store.HGetAll(context.Background(), "isched:lab:coord:lineages")
	if len(names) > lim.LineagesPerJob {
		t.Errorf("%d lineages tracked for one job, cap %d", len(names), lim.LineagesPerJob)
	}
}

// TestLimitsDefaults: every cap has a default (a zero cap would refuse
// every report).
func TestLimitsDefaults(t *testing.T) {
	var l Limits
	l.defaults()
	for name, v := range map[string]int{"SessionsPerJob": l.SessionsPerJob, "SessionsPerUID": l.SessionsPerUID, "PendingPerUID": l.PendingPerUID,
		"HeldPerSession": l.HeldPerSession, "HeldUnknown": l.HeldUnknown, "LineagesPerJob": l.LineagesPerJob, "LineagesPerUID": l.LineagesPerUID,
		"History": l.History, "DeviceIDs": l.DeviceIDs, "Ranks": l.Ranks} {
		if v <= 0 {
			t.Errorf("%s default %d", name, v)
		}
	}
}

// TestUserCapsSpanJobs: the per-user caps hold across a user's jobs: at
// most LineagesPerUID lineages in progress and SessionsPerUID sessions,
// whatever the jobs; another user is not affected.
func TestUserCapsSpanJobs(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.c.cfg.Limits.LineagesPerUID = 3
	e.c.cfg.Limits.SessionsPerUID = 5
	var jobs []report.Job
	for id := uint64(70); id < 78; id++ {
		jobs = append(jobs, job(id, 1002, "bob", "RUNNING", "cpu", ""))
	}
	jobs = append(jobs, job(80, 1001, "alice", "RUNNING", "cpu", ""))
	e.publish(jobs, nil)
	for id := uint64(70); id < 78; id++ {
		e.start(e.wrapper(id, 1002, "bob", fmt.Sprintf("bob-%d", id), "cpu"))
	}
	e.start(e.wrapper(80, 1001, "alice", "alice-80", "cpu"))
	e.rounds(1)
	bobs, alices := 0, 0
	for name, l := range e.c.lineages {
		switch uid, _ := l.owner(); uid {
		case 1002:
			bobs++
		case 1001:
			alices++
		default:
			t.Errorf("lineage %s owned by %d", name, uid)
		}
	}
	if bobs != 3 || alices != 1 {
		t.Errorf("lineages: bob %d (cap 3), alice %d (want 1)", bobs, alices)
	}
	saved := map[int]int{}
	for _, v := range e.savedSessions() {
		var s session
		if err := json.Unmarshal([]byte(v), &s); err != nil {
			t.Fatal(err)
		}
		saved[s.UID]++
	}
	if saved[1002] != 3 || saved[1001] != 1 {
		t.Errorf("sessions saved per uid: %v, want bob's 3 (with a lineage), alice's 1", saved)
	}
	if e.c.quota.perUID[1002] != 5 {
		t.Errorf("bob's sessions counted: %d, want the cap 5 (the rest refused)", e.c.quota.perUID[1002])
	}
	if got := e.counter(RejectOverBudget); got != 5 {
		t.Errorf("over-budget: %v, want 5 (2 over the lineage cap, 3 over the session cap)", got)
	}
}

// TestManyStartsAtOnceLoseNone: a user who starts more jobs at once than
// PendingPerUID, before the agent lists any of them (a job array, the
// chaos test's 20 jobs), loses none of their sessions: the starts over
// the pending budget wait unacked and are opened again once listed.
func TestManyStartsAtOnceLoseNone(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	n := e.c.cfg.Limits.PendingPerUID + e.c.cfg.Limits.HeldStartsPerUID/2
	var jobs []report.Job
	for i := range n {
		id := uint64(100 + i)
		lin := fmt.Sprintf("lab-%d", id)
		e.start(e.wrapper(id, 1002, "bob", lin, "cpu"))
		jobs = append(jobs, job(id, 1002, "bob", "RUNNING", "cpu", ""))
	}
	e.rounds(1)
	if got := e.counter(RejectOverBudget); got != 0 {
		t.Fatalf("%v of %d starts refused over budget", got, n)
	}
	e.publish(jobs, nil)
	e.now = e.now.Add(2 * time.Second)
	e.rounds(2)
	if s := e.savedSessions(); len(s) != n {
		t.Errorf("%d sessions saved, want all %d", len(s), n)
	}
	if got := e.counter(RejectBadCred) + e.counter(RejectOverBudget) + e.counter(RejectReplay); got != 0 {
		t.Errorf("%v starts rejected", got)
	}
}
