package coordinator

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/isched/isched/internal/auth"
	"github.com/isched/isched/internal/policy"
	"github.com/isched/isched/internal/report"
	"github.com/isched/isched/internal/stream"
)

// fakeMunger stands in for MUNGE: Encode records the uid of whoever "runs"
// munge (set per wrapper), Decode opens each credential once.
type fakeMunger struct {
	mu    sync.Mutex
	n     int
	creds map[string]fakeCred
}

type fakeCred struct {
	payload  []byte
	uid      int
	restrict int
	opened   bool
}

type mungeAs struct {
	m   *fakeMunger
	uid int
}

func (a mungeAs) Encode(_ context.Context, p []byte, restrict int, _ time.Duration) (string, error) {
	a.m.mu.Lock()
	defer a.m.mu.Unlock()
	if a.m.creds == nil {
		a.m.creds = map[string]fakeCred{}
	}
	a.m.n++
	id := fmt.Sprintf("MUNGE:%d:", a.m.n)
	a.m.creds[id] = fakeCred{payload: append([]byte(nil), p...), uid: a.uid, restrict: restrict}
	return id, nil
}

func (a mungeAs) Decode(context.Context, string) (auth.Decoded, error) {
	return auth.Decoded{}, errors.New("not used")
}

func (m *fakeMunger) Encode(context.Context, []byte, int, time.Duration) (string, error) {
	return "", errors.New("not used")
}

func (m *fakeMunger) Decode(_ context.Context, cred string) (auth.Decoded, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	c, ok := m.creds[cred]
	if !ok {
		return auth.Decoded{}, errors.New("invalid credential")
	}
	d := auth.Decoded{Payload: c.payload, UID: c.uid, GID: c.uid, RestrictUID: c.restrict}
	if c.opened {
		// as MUNGE: refused, with what it decoded
		return d, fmt.Errorf("%w: replayed credential", auth.ErrReplayed)
	}
	c.opened = true
	m.creds[cred] = c
	return d, nil
}

type env struct {
	t     testing.TB
	mr    *miniredis.Miniredis
	store *stream.Client
	c     *Coordinator
	m     *fakeMunger
	now   time.Time
	// metrics are every coordinator's of this env, one per start: the
	// test fails if any of them refused a lifecycle transition
	metrics []*Metrics
}

func newEnv(t testing.TB) *env {
	t.Helper()
	mr := miniredis.RunT(t)
	pw := filepath.Join(t.TempDir(), "pw")
	if err := os.WriteFile(pw, []byte("x"), 0o600); err != nil {
		t.Fatal(err)
	}
	mr.RequireUserAuth("coordinator", "x")
	st, err := stream.Open(context.Background(), stream.Config{Addrs: []string{mr.Addr()}, User: "coordinator", PasswordFile: pw, Cluster: "lab"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = st.Close() })
	e := &env{t: t, mr: mr, store: st, m: &fakeMunger{}, now: time.Now().Truncate(time.Millisecond)}
	e.c = e.newCoordinator()
	t.Cleanup(func() {
		if n := refusedTransitions(e.metrics...); n != 0 {
			t.Errorf("%g lifecycle transitions refused (the coordinator's log says which)", n)
		}
	})
	return e
}

// newCoordinator is the env's coordinator, started afresh on its store
// (what a restart finds in Redis).
func (e *env) newCoordinator() *Coordinator {
	m := NewMetrics()
	e.metrics = append(e.metrics, m)
	return New(Config{ID: "c1", Tick: 50 * time.Millisecond, Now: func() time.Time { return e.now }, Policy: policy.Config{Speed: map[string]float64{"gpu": 8, "cpu": 1}}}, e.store, e.m, m)
}

// wrapperSession is a fake wrapper run of one job.
type wrapperSession struct {
	sess auth.Session
	job  report.JobRef
	seq  uint64
	cred string
}

func (e *env) wrapper(jobID uint64, uid int, user, lineage, partition string) *wrapperSession {
	s, _ := auth.NewSession()
	w := &wrapperSession{sess: s, job: report.JobRef{Cluster: "lab", JobID: jobID, Lineage: lineage, User: user, UID: uid, Partition: partition, Node: partition + "1"}}
	cred, err := auth.Issue(context.Background(), mungeAs{e.m, uid}, s, "lab", jobID, lineage, os.Geteuid(), time.Minute, e.now)
	if err != nil {
		e.t.Fatal(err)
	}
	w.cred = cred
	return w
}

// send signs and appends one report; it returns the raw entry values.
func (e *env) send(w *wrapperSession, env *report.Envelope) ([]byte, string) {
	e.t.Helper()
	j := w.job
	env.Job, env.SID = &j, w.sess.SID
	w.seq++
	env.Seq = w.seq
	env.TimeMS = e.now.UnixMilli()
	b, err := report.Encode(env)
	if err != nil {
		e.t.Fatal(err)
	}
	mac := w.sess.Sign(b)
	e.appendRaw(b, mac)
	return b, mac
}

func (e *env) appendRaw(b []byte, mac string) {
	e.t.Helper()
	if _, err := e.store.Append(context.Background(), "isched:lab:ingest", b, mac, 0); err != nil {
		e.t.Fatal(err)
	}
}

func (e *env) start(w *wrapperSession) { e.sendStart(w) }

// sendStart sends w's start report and returns its raw entry values.
func (e *env) sendStart(w *wrapperSession) ([]byte, string) {
	env := report.NewEnvelope(report.KindStart, e.now)
	env.Start = &report.Start{Argv: []string{"python3", "train.py"}, Host: "h", PID: 1, Cred: w.cred, GPUs: []string{}}
	return e.send(w, env)
}

func (e *env) sample(w *wrapperSession, fromStep, n int64, iterMS float64) {
	e.sendSample(w, fromStep, n, iterMS, &report.CPUStat{RSSBytes: 100 << 20, PeakRSSBytes: 120 << 20, Procs: 1})
}

// sendSample sends a sample of n iterations of iterMS from fromStep with
// cpu (nil: iterations only).
func (e *env) sendSample(w *wrapperSession, fromStep, n int64, iterMS float64, cpu *report.CPUStat) {
	env := report.NewEnvelope(report.KindSample, e.now)
	env.Sample = &report.Sample{CPU: cpu}
	for i := int64(0); i < n; i++ {
		env.Sample.Iters = append(env.Sample.Iters, report.Iter{Step: fromStep + i, AtMS: e.now.UnixMilli(), DurMS: iterMS, Source: report.SourceFile})
	}
	e.send(w, env)
}

// publish writes the agent's snapshot and job table.
func (e *env) publish(jobs []report.Job, parts []report.Partition) {
	e.t.Helper()
	s := report.NewEnvelope(report.KindSnapshot, e.now)
	s.Snapshot = &report.Snapshot{Cluster: "lab", TakenMS: e.now.UnixMilli(), Partitions: parts}
	j := report.NewEnvelope(report.KindJobs, e.now)
	j.Jobs = &report.JobTable{Cluster: "lab", TakenMS: e.now.UnixMilli(), Jobs: jobs}
	for key, env := range map[string]*report.Envelope{"isched:lab:snapshot": s, "isched:lab:jobs": j} {
		b, err := report.Encode(env)
		if err != nil {
			e.t.Fatal(err)
		}
		if err := e.store.Set(context.Background(), key, b, 0); err != nil {
			e.t.Fatal(err)
		}
	}
}

// rounds runs the coordinator's loop body n times (each a tick).
func (e *env) rounds(n int) {
	e.t.Helper()
	for range n {
		var last time.Time
		if err := e.c.round(context.Background(), &last); err != nil {
			e.t.Fatal(err)
		}
		e.quiesce()
	}
}

// quiesce ends what a round leaves under way, as the loop's next round
// would: what its read ahead found is judged, and the batch written behind
// lands, before the test looks at Redis.
func (e *env) quiesce() {
	e.t.Helper()
	if e.c.reading != nil {
		ents, err := e.c.readDone()
		if err != nil {
			e.t.Fatal(err)
		}
		if err := e.c.ingest(context.Background(), ents); err != nil {
			e.t.Fatal(err)
		}
	}
	if err := e.c.settle(); err != nil {
		e.t.Fatal(err)
	}
}

func (e *env) counter(reason string) float64 {
	return testutilCounter(e.c.metrics.rejected.WithLabelValues(reason))
}

func (e *env) status(lineage string) report.JobStatus {
	e.t.Helper()
	b, err := e.store.Get(context.Background(), "isched:lab:job:{"+lineage+"}:status")
	if err != nil {
		e.t.Fatalf("status of %s: %v", lineage, err)
	}
	var st report.JobStatus
	if err := json.Unmarshal(b, &st); err != nil {
		e.t.Fatal(err)
	}
	return st
}

func job(id uint64, uid int, user, state, partition, comment string) report.Job {
	lim := int64(60)
	return report.Job{JobID: id, User: user, UID: uid, State: state, Partition: partition, Comment: comment, TimeLimitMin: &lim}
}

func TestAcceptsOwnersReportsAndRejectsForgeries(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.publish([]report.Job{job(10, 1001, "alice", "RUNNING", "cpu", ""), job(11, 1002, "bob", "RUNNING", "cpu", "")}, nil)

	alice := e.wrapper(10, 1001, "alice", "lab-10", "cpu")
	e.start(alice)
	e.sample(alice, 1, 5, 100)
	e.sample(alice, 6, 2, 100)

	// bob's wrapper claims alice's job: MUNGE says uid 1002, the job is 1001's
	bobAsAlice := e.wrapper(10, 1002, "bob", "lab-10", "cpu")
	bobAsAlice.job.UID = 1002
	e.start(bobAsAlice)
	// bob lies about his uid in the envelope too: the credential disagrees
	liar := e.wrapper(10, 1002, "bob", "lab-10", "cpu")
	liar.job.UID = 1001
	e.start(liar)
	// a report signed with the wrong key
	forged := *alice
	forged.sess.Key = make([]byte, 32)
	e.sample(&forged, 6, 1, 100)
	ents, _ := e.store.Range(context.Background(), "isched:lab:ingest", "-", "+", 10)
	e.rounds(2)
	// the rejected reports are deleted from the stream, alice's stay
	if left, _ := e.store.Range(context.Background(), "isched:lab:ingest", "-", "+", 10); len(left) != 3 {
		t.Errorf("%d entries left in the ingest stream, want alice's 3 (the rejected ones deleted)", len(left))
	}
	// a replay of alice's first sample (same bytes, same seq), older than
	// her latest report
	e.appendRaw(ents[1].Payload, ents[1].MAC)
	// garbage
	e.appendRaw([]byte(`{"v":1,"kind":"sample"`), "x")
	// a start without credential
	nocred := e.wrapper(11, 1002, "bob", "lab-11", "cpu")
	nocred.cred = ""
	e.start(nocred)
	// bob's own job, its wrapper claiming alice's lineage (lineage ids are
	// public: squeue shows the plan comment): MUNGE and the job table agree
	// it is bob's, but the lineage is alice's
	hijack := e.wrapper(11, 1002, "bob", "lab-10", "cpu")
	e.start(hijack)
	e.sample(hijack, 1, 500, 1)
	e.rounds(2)

	for reason, want := range map[string]float64{RejectForeignJob: 1, RejectForged: 1, RejectBadMAC: 1, RejectReplay: 1, RejectMalformed: 1,
		RejectUnauth: 1, RejectForeignLineage: 2} {
		if got := e.counter(reason); got != want {
			t.Errorf("rejected %s: %v, want %v", reason, got, want)
		}
	}
	st := e.status("lab-10")
	if st.User != "alice" || st.Step != 7 || st.JobID != 10 {
		t.Errorf("alice's status %+v", st)
	}
	if n := testutilCounter(e.c.metrics.reports.WithLabelValues("accepted")); n != 3 {
		t.Errorf("accepted %v, want 3 (start and two samples)", n)
	}
	if n := testutilCounter(e.c.metrics.reports.WithLabelValues("duplicate")); n != 0 {
		t.Errorf("%v reports taken for retransmissions", n)
	}
}

// TestRetransmissionIsADuplicateNotAReplay: a wrapper whose XADD reply was
// lost sends the report again, so the stream holds a second copy right
// after the first (in the session's order). The copy is dropped as a
// duplicate (counted, not logged as an attack), also by a coordinator
// restarted in between; an older report sent again, or a report with the
// latest number but other bytes, is still a replay.
func TestRetransmissionIsADuplicateNotAReplay(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.publish([]report.Job{job(10, 1001, "alice", "RUNNING", "cpu", "")}, nil)
	alice := e.wrapper(10, 1001, "alice", "lab-10", "cpu")
	startB, startMAC := e.sendStart(alice)
	e.appendRaw(startB, startMAC) // the start, twice
	e.sample(alice, 1, 5, 100)
	ents, _ := e.store.Range(context.Background(), "isched:lab:ingest", "-", "+", 10)
	last := ents[len(ents)-1]
	e.rounds(1)
	dups := func() float64 { return testutilCounter(e.c.metrics.reports.WithLabelValues("duplicate")) }
	if n, acc := dups(), testutilCounter(e.c.metrics.reports.WithLabelValues("accepted")); n != 1 || acc != 2 {
		t.Fatalf("start sent twice: %v duplicates, %v accepted, want 1 and 2", n, acc)
	}
	// the coordinator restarts: the session (and its latest MAC) is read back
	e.c = e.newCoordinator()
	e.appendRaw(last.Payload, last.MAC) // the latest sample, twice
	e.rounds(1)
	if n := dups(); n != 1 {
		t.Fatalf("restarted coordinator: %v duplicates, want 1 (the latest sample's copy)", n)
	}
	if n := e.counter(RejectReplay); n != 0 {
		t.Fatalf("%v retransmissions refused as replays", n)
	}
	// an older report again is a replay
	e.appendRaw(ents[0].Payload, ents[0].MAC)
	// the latest number with other bytes (the wrapper never does this;
	// only its key can sign it) is a replay too
	other := report.NewEnvelope(report.KindSample, e.now)
	j := alice.job
	other.Job, other.SID, other.Seq, other.TimeMS = &j, alice.sess.SID, alice.seq, e.now.UnixMilli()
	other.Sample = &report.Sample{CPU: &report.CPUStat{RSSBytes: 1, PeakRSSBytes: 1, Procs: 1}}
	b, err := report.Encode(other)
	if err != nil {
		t.Fatal(err)
	}
	e.appendRaw(b, alice.sess.Sign(b))
	e.rounds(1)
	if n := e.counter(RejectReplay); n != 2 {
		t.Errorf("%v replays, want 2 (an older report, other bytes under the latest number)", n)
	}
	if n := dups(); n != 1 {
		t.Errorf("%v duplicates after the replays, want still 1", n)
	}
	// the next report is taken as usual
	e.sample(alice, 6, 1, 100)
	e.rounds(1)
	if st := e.status("lab-10"); st.Step != 6 {
		t.Errorf("after the copies: step %d, want 6", st.Step)
	}
}

// TestIngestFlushSavesTheLineagesItsReportsChanged: when ingest returns
// (and acks), the lineages its reports changed are in Redis; a lineage
// changed elsewhere in memory waits for the tick's flush, which looks at
// every lineage.
func TestIngestFlushSavesTheLineagesItsReportsChanged(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.publish([]report.Job{job(10, 1001, "alice", "RUNNING", "cpu", ""), job(11, 1002, "bob", "RUNNING", "cpu", "")}, nil)
	alice, bob := e.wrapper(10, 1001, "alice", "lab-10", "cpu"), e.wrapper(11, 1002, "bob", "lab-11", "cpu")
	e.start(alice)
	e.start(bob)
	e.rounds(1)
	ctx := context.Background()
	// bob's lineage changes in memory, not through a report
	e.c.lineages["lab-11"].Status.Step, e.c.lineages["lab-11"].dirty = 42, true
	e.sample(alice, 1, 5, 100)
	ents, err := e.store.ReadGroup(ctx, "isched:lab:ingest", group, "c1", 10, 0)
	if err != nil || len(ents) != 1 {
		t.Fatalf("read %d entries, %v; want alice's sample", len(ents), err)
	}
	if err := e.c.ingest(ctx, ents); err != nil {
		t.Fatal(err)
	}
	if err := e.c.settle(); err != nil {
		t.Fatal(err)
	}
	if st := e.status("lab-10"); st.Step != 5 {
		t.Errorf("after ingest: alice's saved step %d, want 5", st.Step)
	}
	if st := e.status("lab-11"); st.Step == 42 {
		t.Errorf("ingest saved bob's lineage, which no report of it touched")
	}
	e.rounds(1)
	if st := e.status("lab-11"); st.Step != 42 {
		t.Errorf("after the tick: bob's saved step %d, want 42", st.Step)
	}
}

func TestDefersUntilTheJobTableListsTheJob(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	w := e.wrapper(20, 1001, "alice", "lab-20", "cpu")
	e.start(w)
	e.sample(w, 1, 3, 100)
	e.rounds(1)
	if n := testutilCounter(e.c.metrics.reports.WithLabelValues("accepted")); n != 0 {
		t.Fatalf("accepted %v reports of a job the agent has not listed", n)
	}
	e.publish([]report.Job{job(20, 1001, "alice", "RUNNING", "cpu", "")}, nil)
	e.now = e.now.Add(3 * time.Second)
	e.rounds(1)
	if st := e.status("lab-20"); st.Step != 3 {
		t.Fatalf("after the job table listed it: step %d, want 3", st.Step)
	}
	// nothing left pending
	pend, _ := e.store.ReadOwnPending(context.Background(), "isched:lab:ingest", group, "c1", 10)
	if len(pend) != 0 {
		t.Errorf("%d entries still pending", len(pend))
	}
}

func TestRestartContinuesFromRedis(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.publish([]report.Job{job(30, 1001, "alice", "RUNNING", "cpu", "")}, nil)
	w := e.wrapper(30, 1001, "alice", "lab-30", "cpu")
	e.start(w)
	e.sample(w, 1, 10, 100)
	e.rounds(1)
	// a new coordinator process (the old one died: its lock lapses)
	e.mr.FastForward(10 * time.Second)
	e.c = New(Config{ID: "c2", Tick: 50 * time.Millisecond, Now: func() time.Time { return e.now }}, e.store, e.m, nil)
	e.sample(w, 11, 10, 100)
	e.rounds(2)
	st := e.status("lab-30")
	if st.Step != 20 || st.IterMS < 99 || st.IterMS > 101 {
		t.Errorf("after restart: step %d iter %.1f ms", st.Step, st.IterMS)
	}
	if testutilCounter(e.c.metrics.rejected.WithLabelValues(RejectUnknownSession)) != 0 {
		t.Error("the session was forgotten across the restart")
	}
}

func TestOnlyTheLeaderWorks(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	standby := New(Config{ID: "c2", Tick: 50 * time.Millisecond, Now: func() time.Time { return e.now }}, e.store, e.m, nil)
	e.rounds(1) // c1 leads
	var last time.Time
	if err := standby.round(context.Background(), &last); err != nil {
		t.Fatal(err)
	}
	if standby.leader || !e.c.leader {
		t.Fatalf("leaders: c1 %v c2 %v", e.c.leader, standby.leader)
	}
	e.mr.FastForward(6 * time.Second) // c1 died: its lock lapses
	if err := standby.round(context.Background(), &last); err != nil {
		t.Fatal(err)
	}
	if !standby.leader {
		t.Fatal("standby did not take over")
	}
}

// labPartitions is the agent's view of gpu (two nodes, four GPUs, all
// idle or all allocated) and cpu (one node of two idle).
func labPartitions(gpuIdle bool) []report.Partition {
	gpu := report.Partition{Name: "gpu", State: "UP", NodesAlloc: 2, NodesTotal: 2, GPUs: []report.GPUCount{{Type: "gpu", Alloc: 4, Total: 4}}}
	if gpuIdle {
		gpu.NodesAlloc, gpu.NodesIdle, gpu.GPUs = 0, 2, []report.GPUCount{{Type: "gpu", Idle: 4, Total: 4}}
	}
	return []report.Partition{gpu, {Name: "cpu", State: "UP", NodesAlloc: 1, NodesIdle: 1, NodesTotal: 2}}
}

// TestMigrationFlow: a job on its fallback (cpu) whose ideal partition (gpu)
// frees gets a checkpoint request, then — once the checkpoint landed — a
// requeue onto gpu with its GRES and the plan's CPUs there; the new
// attempt's start completes the move.
func TestMigrationFlow(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	plan := report.Plan{Lineage: "L1", Ideal: "gpu", IdealGres: "gpu:1", IdealCPUs: 2, Fallbacks: []string{"cpu"}, Total: 100000, Migrate: true}
	running := job(40, 1001, "alice", "RUNNING", "cpu", plan.FormatComment())
	running.StartMS = e.now.Add(-time.Minute).UnixMilli()
	busy := labPartitions(false)
	e.publish([]report.Job{running}, busy)
	w := e.wrapper(40, 1001, "alice", "L1", "cpu")
	e.start(w)
	for i := int64(0); i < 5; i++ {
		e.sample(w, 1+i*20, 20, 500)
	}
	e.rounds(2)
	if acts := e.actions(); len(acts) != 0 {
		t.Fatalf("actions while gpu is busy: %+v", acts)
	}
	idle := labPartitions(true)
	e.now = e.now.Add(3 * time.Second)
	e.publish([]report.Job{running}, idle)
	e.rounds(1)
	acts := e.actions()
	if len(acts) != 1 || acts[0].Type != report.ActionSignal || acts[0].Signal != "SIGUSR1" || acts[0].JobID != 40 || acts[0].User != "alice" {
		t.Fatalf("want one checkpoint request, got %+v", acts)
	}
	e.result(acts[0].ID, report.StatusOK)
	// the checkpoint lands
	ck := report.NewEnvelope(report.KindCheckpoint, e.now)
	step := int64(100)
	ck.Checkpoint = &report.Checkpoint{Path: "/ck/step100.pt", Size: 10, Step: &step, MTimeMS: e.now.UnixMilli(), Complete: true}
	e.now = e.now.Add(2 * time.Second)
	e.send(w, ck)
	e.publish([]report.Job{running}, idle)
	e.rounds(2) // the round that reads the checkpoint, then the decision it kicks
	acts = e.actions()
	if len(acts) != 2 || acts[1].Type != report.ActionRequeue || acts[1].Partition != "gpu" || acts[1].Gres != "gpu:1" || acts[1].CPUs != 2 {
		t.Fatalf("want a requeue to gpu with gpu:1 and 2 CPUs after the checkpoint, got %+v", acts)
	}
	e.result(acts[1].ID, report.StatusOK)
	e.rounds(1)
	// the new attempt starts on gpu
	w2 := e.wrapper(40, 1001, "alice", "L1", "gpu")
	w2.job.Attempt = 1
	e.start(w2)
	e.rounds(1)
	st := e.status("L1")
	if len(st.History) != 2 || st.History[0].Partition != "cpu" || st.History[1].Partition != "gpu" || st.Partition != "gpu" {
		t.Errorf("history %+v", st.History)
	}
	if len(st.Decisions) != 2 || !strings.HasPrefix(st.Decisions[1].Result, "ok") || st.Decisions[0].Reason == "" {
		t.Errorf("decisions %+v", st.Decisions)
	}
	// hysteresis: no new move right away even with gpu idle
	e.now = e.now.Add(5 * time.Second)
	e.rounds(1)
	if n := len(e.actions()); n != 2 {
		t.Errorf("%d actions after the move, want no new one", n)
	}
}

func (e *env) actions() []report.Action {
	e.t.Helper()
	ents, err := e.store.Range(context.Background(), "isched:lab:actions", "-", "+", 100)
	if err != nil {
		e.t.Fatal(err)
	}
	var out []report.Action
	for _, en := range ents {
		env, err := report.Decode(en.Payload)
		if err != nil {
			e.t.Fatalf("action does not decode: %v", err)
		}
		out = append(out, *env.Action)
	}
	return out
}

func (e *env) result(id string, status report.ResultStatus) {
	e.resultNewJob(id, status, 0)
}

// resultNewJob is the agent's result of a submit or resubmit (newJob: the
// job it made).
func (e *env) resultNewJob(id string, status report.ResultStatus, newJob uint64) {
	env := report.NewEnvelope(report.KindResult, e.now)
	env.Result = &report.Result{ActionID: id, Status: status, Message: "done", DoneMS: e.now.UnixMilli(), NewJobID: newJob}
	b, err := report.Encode(env)
	if err != nil {
		e.t.Fatal(err)
	}
	if _, err := e.store.Append(context.Background(), "isched:lab:results", b, "", 0); err != nil {
		e.t.Fatal(err)
	}
}

// TestAnotherUsersJobCannotTakeOverALineage: bob queues a job whose plan
// comment names alice's lineage (lineage ids are public: squeue shows
// comments). The lineage stays alice's: her job is the one tracked, and
// nothing the coordinator does touches bob's job on her lineage's behalf.
func TestAnotherUsersJobCannotTakeOverALineage(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	plan := report.Plan{Lineage: "L1", Ideal: "gpu", IdealGres: "gpu:1", Fallbacks: []string{"cpu"}, Total: 100000, Migrate: true}
	alice := job(40, 1001, "alice", "PENDING", "cpu", plan.FormatComment())
	bob := job(41, 1002, "bob", "PENDING", "cpu", plan.FormatComment())
	busy := labPartitions(false)
	e.publish([]report.Job{bob, alice}, busy)
	e.rounds(2)
	if st := e.status("L1"); st.JobID != 40 || st.User != "alice" {
		t.Fatalf("lineage L1 tracks job %d of %q, want alice's 40", st.JobID, st.User)
	}
	// both run; gpu frees: the checkpoint request goes to alice's job only
	alice.State, bob.State = "RUNNING", "RUNNING"
	alice.StartMS, bob.StartMS = e.now.Add(-time.Minute).UnixMilli(), e.now.Add(-time.Minute).UnixMilli()
	e.publish([]report.Job{bob, alice}, busy)
	w := e.wrapper(40, 1001, "alice", "L1", "cpu")
	e.start(w)
	for i := int64(0); i < 5; i++ {
		e.sample(w, 1+i*20, 20, 500)
	}
	evil := e.wrapper(41, 1002, "bob", "L1", "cpu")
	e.start(evil)
	e.sample(evil, 1, 50, 1)
	e.rounds(2)
	idle := labPartitions(true)
	e.now = e.now.Add(3 * time.Second)
	e.publish([]report.Job{bob, alice}, idle)
	e.rounds(2)
	acts := e.actions()
	if len(acts) == 0 {
		t.Fatal("no checkpoint request for alice's job once gpu freed")
	}
	for _, a := range acts {
		if a.JobID != 40 || a.User != "alice" {
			t.Errorf("action on job %d of %q for alice's lineage: %+v", a.JobID, a.User, a)
		}
	}
	if st := e.status("L1"); st.JobID != 40 || st.User != "alice" || st.Step != 100 {
		t.Errorf("alice's status: job %d user %q step %d, want 40 alice 100", st.JobID, st.User, st.Step)
	}
	if got := e.counter(RejectForeignLineage); got != 2 {
		t.Errorf("rejected foreign-lineage reports: %v, want 2 (bob's start and sample)", got)
	}
}

// TestSessionsForgottenAfterRetention: a wrapper session is kept while its
// credential could still be replayed and the wrapper may still speak, then
// forgotten, so the session hash does not grow by one entry per run forever.
func TestSessionsForgottenAfterRetention(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.publish([]report.Job{job(50, 1001, "alice", "RUNNING", "cpu", ""), job(51, 1001, "alice", "RUNNING", "cpu", "")}, nil)
	old := e.wrapper(50, 1001, "alice", "lab-50", "cpu")
	e.start(old)
	e.sample(old, 1, 5, 100)
	e.rounds(1)
	sessions := func() map[string]string {
		m, err := e.store.HGetAll(context.Background(), "isched:lab:coord:sessions")
		if err != nil {
			t.Fatal(err)
		}
		return m
	}
	if _, ok := sessions()[old.sess.SID]; !ok {
		t.Fatal("the session was never stored")
	}
	// 24 h on: the credential's life is not over, the session stays
	e.now = e.now.Add(24 * time.Hour)
	e.publish([]report.Job{job(51, 1001, "alice", "RUNNING", "cpu", "")}, nil)
	fresh := e.wrapper(51, 1001, "alice", "lab-51", "cpu")
	e.start(fresh)
	e.rounds(1)
	if _, ok := sessions()[old.sess.SID]; !ok {
		t.Fatal("forgotten after 24 h, while its credential could still be replayed")
	}
	// past the retention (25 h) and idle: forgotten; the recent one stays
	e.now = e.now.Add(90 * time.Minute)
	e.publish([]report.Job{job(51, 1001, "alice", "RUNNING", "cpu", "")}, nil)
	e.rounds(1)
	m := sessions()
	if _, ok := m[old.sess.SID]; ok {
		t.Error("the session of a run over for 25 h is still kept")
	}
	if _, ok := m[fresh.sess.SID]; !ok {
		t.Error("the recent session was forgotten")
	}
	// a report of the forgotten session is no longer accepted
	e.sample(old, 6, 1, 100)
	e.now = e.now.Add(10 * time.Minute)
	e.rounds(1)
	if got := e.counter(RejectUnknownSession); got != 1 {
		t.Errorf("rejected unknown-session %v, want 1", got)
	}
}

// TestEndedLineagesLeaveMemory: an ended lineage lingers in memory for a
// while, then only Redis holds it (its status stays readable); a new
// leader does not revive lineages whose state expired.
func TestEndedLineagesLeaveMemory(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	plan := report.Plan{Lineage: "L60", Ideal: "cpu", Total: 10}
	j := job(60, 1001, "alice", "RUNNING", "cpu", plan.FormatComment())
	e.publish([]report.Job{j}, nil)
	w := e.wrapper(60, 1001, "alice", "L60", "cpu")
	e.start(w)
	e.sample(w, 1, 10, 100)
	end := report.NewEnvelope(report.KindEnd, e.now)
	end.End = &report.End{ExitCode: 0, Iters: 10, Reason: report.EndExited}
	e.send(w, end)
	j.State = "COMPLETED"
	e.publish([]report.Job{j}, nil)
	e.rounds(2)
	if st := e.status("L60"); st.State != "ENDED" {
		t.Fatalf("lineage state %q, want ENDED", st.State)
	}
	tracked := func() bool {
		m, err := e.store.HGetAll(context.Background(), "isched:lab:coord:lineages")
		if err != nil {
			t.Fatal(err)
		}
		_, ok := m["L60"]
		return ok
	}
	if _, ok := e.c.lineages["L60"]; !ok || !tracked() {
		t.Fatal("ended lineage dropped at once: late reports would find nothing")
	}
	e.now = e.now.Add(11 * time.Minute)
	e.publish(nil, nil)
	e.rounds(1)
	if _, ok := e.c.lineages["L60"]; ok {
		t.Error("ended lineage still in memory after 11 min")
	}
	if tracked() {
		t.Error("ended lineage still in the tracked set")
	}
	if st := e.status("L60"); st.State != "ENDED" || st.Step != 10 {
		t.Errorf("status after eviction: %q step %d, want ENDED at 10 (for isched status)", st.State, st.Step)
	}
	// a tracked name whose state expired is dropped, not revived empty
	if err := e.store.HSet(context.Background(), "isched:lab:coord:lineages", "gone", "1"); err != nil {
		t.Fatal(err)
	}
	e.mr.FastForward(10 * time.Second)
	e.c = New(Config{ID: "c2", Tick: 50 * time.Millisecond, Now: func() time.Time { return e.now }}, e.store, e.m, nil)
	e.rounds(2)
	if _, ok := e.c.lineages["gone"]; ok {
		t.Error("a new leader revived a lineage whose state had expired")
	}
}

// TestAgentInputsDecodedOncePerValue: the coordinator reads the agent's
// snapshot and job table every tick but decodes each published value
// once; a new value is decoded and used, and the age of an unchanged one
// still moves (stale: no snapshot to decide on).
func TestAgentInputsDecodedOncePerValue(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.publish([]report.Job{job(30, 1001, "alice", "RUNNING", "cpu", "")}, []report.Partition{{Name: "cpu"}})
	e.rounds(1)
	if e.c.inputDecodes != 2 || e.c.snap == nil || e.c.jobs[30].JobID != 30 {
		t.Fatalf("first read: %d decodes, snapshot %v, jobs %v", e.c.inputDecodes, e.c.snap != nil, e.c.jobs)
	}
	e.now = e.now.Add(3 * time.Second)
	e.rounds(3)
	if e.c.inputDecodes != 2 || e.c.snap == nil || len(e.c.jobs) != 1 {
		t.Fatalf("unchanged values: %d decodes (want 2), snapshot %v, %d jobs", e.c.inputDecodes, e.c.snap != nil, len(e.c.jobs))
	}
	e.publish([]report.Job{job(31, 1002, "bob", "RUNNING", "cpu", "")}, []report.Partition{{Name: "cpu"}})
	e.rounds(1)
	if e.c.inputDecodes != 4 || len(e.c.jobs) != 1 || e.c.jobs[31].UID != 1002 {
		t.Fatalf("new values: %d decodes (want 4), jobs %v", e.c.inputDecodes, e.c.jobs)
	}
	e.now = e.now.Add(time.Minute) // the same values, now stale
	e.rounds(1)
	if e.c.inputDecodes != 4 || e.c.snap != nil {
		t.Fatalf("stale unchanged snapshot: %d decodes, snapshot still used: %v", e.c.inputDecodes, e.c.snap != nil)
	}
}

// TestNoMoveOnAStaleSnapshot: the agent's last snapshot shows room on the
// ideal partition, then the agent falls silent (Redis or the agent away,
// Slurm unreachable). A job that becomes worth moving meanwhile must not
// be moved on that old view, however much it shows: no decision until a
// fresh snapshot, and then the move (so the same job and view would have
// been moved: the check can fail). Decisions on stale data are what the
// Redis and slurmctld fault tests look for; this one makes them happen.
func TestNoMoveOnAStaleSnapshot(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	plan := report.Plan{Lineage: "S1", Ideal: "gpu", IdealGres: "gpu:1", Fallbacks: []string{"cpu"}, Total: 100000, Migrate: true}
	running := job(47, 1001, "alice", "RUNNING", "cpu", plan.FormatComment())
	running.StartMS = e.now.Add(-time.Minute).UnixMilli()
	idle := labPartitions(true)
	e.publish([]report.Job{running}, idle)
	w := e.wrapper(47, 1001, "alice", "S1", "cpu")
	e.start(w)
	e.rounds(2)
	if acts := e.actions(); len(acts) != 0 {
		t.Fatalf("actions before the job has an estimate: %+v", acts)
	}
	// the agent falls silent; time passes and iterations arrive, which
	// make the move pay, but the newest snapshot is older than stale_after
	e.now = e.now.Add(e.c.cfg.StaleAfter + time.Second)
	for i := int64(0); i < 5; i++ {
		e.sample(w, 1+i*20, 20, 500)
	}
	e.rounds(3)
	if acts := e.actions(); len(acts) != 0 {
		t.Fatalf("acted on a snapshot %s old (stale after %s): %+v", e.c.cfg.StaleAfter+time.Second, e.c.cfg.StaleAfter, acts)
	}
	if st := e.status("S1"); len(st.Decisions) != 0 {
		t.Fatalf("decided on a stale snapshot: %+v", st.Decisions)
	}
	// the same view, fresh: the move starts
	e.now = e.now.Add(time.Second)
	e.publish([]report.Job{running}, idle)
	e.rounds(1)
	acts := e.actions()
	if len(acts) != 1 || acts[0].Type != report.ActionSignal || acts[0].JobID != 47 {
		t.Fatalf("with a fresh snapshot: want the checkpoint request of the move, got %+v", acts)
	}
}

// refusedTransitions is how many lifecycle transitions ms counted as
// refused.
func refusedTransitions(ms ...*Metrics) float64 {
	var n float64
	for _, m := range ms {
		ch := make(chan prometheus.Metric, 64)
		go func() { m.refusedTransitions.Collect(ch); close(ch) }()
		for metric := range ch {
			var pb dto.Metric
			if metric.Write(&pb) == nil {
				n += pb.GetCounter().GetValue()
			}
		}
	}
	return n
}
