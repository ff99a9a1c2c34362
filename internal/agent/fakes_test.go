package agent

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/isched/isched/internal/report"
	"github.com/isched/isched/internal/slurm"
	"github.com/isched/isched/internal/stream"
)

// crash is panicked by hooks to stop an agent dead at a chosen point, as
// SIGKILL would: nothing after it runs, Redis keeps what was written.
type crash struct{ at string }

// fakeSlurm is a small Slurm: jobs by id, and every action changes them as
// Slurm would. Calls are recorded as "verb id".
type fakeSlurm struct {
	mu      sync.Mutex
	jobs    map[string]*slurm.JobInfo
	calls   []string
	nextID  int
	pollErr error
	state   *slurm.State
	polls   int
	fail    map[string]error  // verb -> error to return (after recording the call)
	after   func(call string) // runs after a call took effect (crash hooks)

	lastCPUs int    // the last CPUs per task a move or update set
	lastSize string // the last size a move or update set, "tasks/nodes"
	// updateErr makes Move's update fail: the job is released unchanged
	// (MoveResult.UpdateErr) and Move returns it.
	updateErr error
	// restoreFails: a failed resize's size is not set back (MoveResult.Restored)
	restoreFails bool
	lastSubmit   slurm.SubmitSpec // the last SubmitWith's spec and script
	lastScript   string
}

func newFakeSlurm() *fakeSlurm {
	return &fakeSlurm{jobs: map[string]*slurm.JobInfo{}, nextID: 500, fail: map[string]error{}}
}

// addJob adds a job; extra sets fields ("partition=gpu", "state=PENDING",
// "name=x", "comment=...", "user=bob", "restarts=2", "held").
func (f *fakeSlurm) addJob(id string, extra ...string) *slurm.JobInfo {
	f.mu.Lock()
	defer f.mu.Unlock()
	tl := 30 * time.Minute
	j := &slurm.JobInfo{JobID: id, Name: "isched-train", User: "alice", UID: 1001, State: "RUNNING", Reason: "None", Partition: "cpu",
		Requeue: true, BatchFlag: true, TimeLimit: &tl, Fields: map[string]string{"Priority": "100"}}
	for _, e := range extra {
		k, v, _ := strings.Cut(e, "=")
		switch k {
		case "partition":
			j.Partition = v
		case "state":
			j.State = v
		case "name":
			j.Name = v
		case "comment":
			j.Comment = v
		case "user":
			j.User = v
		case "restarts":
			j.Restarts, _ = strconv.Atoi(v)
		case "held":
			j.State, j.Reason, j.Fields["Priority"] = "PENDING", "JobHeldUser", "0"
		case "array": // "11_3": element 3 of array 11
			j.ArrayJobID, j.ArrayTaskID, _ = strings.Cut(v, "_")
		case "rest": // an array's pending rest of these tasks ("3", "2-3")
			j.ArrayJobID, j.ArrayTaskID, j.Fields["rest"] = id, v, "1"
		}
	}
	f.jobs[id] = j
	return j
}

func (f *fakeSlurm) job(id string) slurm.JobInfo {
	f.mu.Lock()
	defer f.mu.Unlock()
	return *f.jobs[id]
}

func (f *fakeSlurm) Calls() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]string(nil), f.calls...)
}

func (f *fakeSlurm) count(prefix string) int {
	n := 0
	for _, c := range f.Calls() {
		if strings.HasPrefix(c, prefix) {
			n++
		}
	}
	return n
}

// do records a call, applies its effect unless it is set to fail, and runs
// the after hook outside the lock.
func (f *fakeSlurm) cpus() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.lastCPUs
}

func (f *fakeSlurm) size() string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.lastSize
}

func (f *fakeSlurm) do(verb, id string, effect func(j *slurm.JobInfo) error) error {
	f.mu.Lock()
	call := verb + " " + id
	f.calls = append(f.calls, call)
	err := f.fail[verb]
	if err == nil {
		j, ok := f.jobs[id]
		if !ok && effect != nil {
			err = &slurm.ExitError{Cmd: "scontrol", Code: 1, Stderr: "Invalid job id specified"}
		} else if effect != nil {
			err = effect(j)
		}
	}
	hook := f.after
	f.mu.Unlock()
	if err == nil && hook != nil {
		hook(call)
	}
	return err
}

func (f *fakeSlurm) Poll(ctx context.Context) (*slurm.State, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.polls++
	if f.pollErr != nil {
		return nil, f.pollErr
	}
	return f.state, nil
}

func (f *fakeSlurm) Jobs(ctx context.Context) ([]report.Job, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []report.Job
	for id, j := range f.jobs {
		n, _ := strconv.ParseUint(id, 10, 64)
		rj := report.Job{JobID: n, Name: j.Name, User: j.User, State: j.State, Partition: j.Partition, Comment: j.Comment}
		if j.Fields["rest"] != "" {
			rj.ArrayTasks = j.ArrayTaskID
		} else if task, err := strconv.Atoi(j.ArrayTaskID); err == nil {
			rj.ArrayJobID, _ = strconv.ParseUint(j.ArrayJobID, 10, 64)
			rj.ArrayTaskID = &task
		}
		out = append(out, rj)
	}
	return out, nil
}

func (f *fakeSlurm) ShowJob(ctx context.Context, id string) (*slurm.JobInfo, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := f.fail["show"]; err != nil {
		return nil, err
	}
	j, ok := f.jobs[id]
	if !ok {
		return nil, fmt.Errorf("%w: %w", slurm.ErrNotFound, &slurm.ExitError{Cmd: "scontrol", Args: []string{"show", "job", id}, Code: 1, Stderr: "slurm_load_jobs error: Invalid job id specified"})
	}
	c := *j
	c.Fields = map[string]string{"Priority": j.Fields["Priority"], "WorkDir": j.Fields["WorkDir"]}
	return &c, nil
}

func (f *fakeSlurm) Signal(ctx context.Context, id, sig string, batchOnly bool) error {
	scope := "batch"
	if !batchOnly {
		scope = "full"
	}
	return f.do("signal", id+" "+sig+" "+scope, nil)
}

func (f *fakeSlurm) Move(ctx context.Context, id string, spec slurm.MoveSpec) (slurm.MoveResult, error) {
	var res slurm.MoveResult
	err := f.do("move", id, func(j *slurm.JobInfo) error {
		res.From = j.Partition
		if j.State == "RUNNING" || spec.Ended && slurm.Ended(j.State) {
			j.Restarts++
			res.Requeued = true
		}
		if spec.Partition != "" {
			j.Partition = spec.Partition
		}
		if spec.TimeLimit != 0 {
			tl := spec.TimeLimit
			j.TimeLimit = &tl
		}
		if spec.Gres != "" {
			j.TresPerNode = "gres:" + spec.Gres
		}
		res.FromTasks, res.FromNodes = j.Tasks(), j.Nodes()
		if f.updateErr != nil {
			j.State, res.UpdateErr, res.Released, res.Restored = "RUNNING", f.updateErr, true, spec.Tasks != 0 && !f.restoreFails
			return f.updateErr
		}
		res.CPUsPerTask, res.CPUsKept = slurm.CPUsFor(j, spec.CPUsPerTask, spec.Tasks)
		if res.CPUsPerTask != 0 {
			f.lastCPUs = res.CPUsPerTask
		}
		f.resize(j, spec.Tasks, spec.Nodes, res.CPUsPerTask)
		if spec.Hold {
			j.State, j.Reason, j.Fields["Priority"] = "PENDING", "job_requeued_in_held_state", "0"
		} else {
			j.State, res.Released = "RUNNING", true
		}
		res.To, res.Restarts = j.Partition, j.Restarts
		return nil
	})
	return res, err
}

func (f *fakeSlurm) Update(ctx context.Context, id string, u slurm.UpdateSpec) error {
	return f.do("update", id, func(j *slurm.JobInfo) error {
		if (u.Partition != "" || u.Gres != "") && j.State != "PENDING" {
			return &slurm.ExitError{Cmd: "scontrol", Code: 1, Stderr: "Job is no longer pending execution for job " + id}
		}
		if u.Partition != "" {
			j.Partition = u.Partition
		}
		if u.TimeLimit != 0 {
			tl := u.TimeLimit
			j.TimeLimit = &tl
		}
		if u.CPUsPerTask != 0 {
			f.lastCPUs = u.CPUsPerTask
		}
		if u.Gres != "" {
			j.TresPerNode = "gres:" + u.Gres
		}
		f.resize(j, u.Tasks, u.Nodes, u.CPUsPerTask)
		return nil
	})
}

// resize sets job j's size as scontrol update NumNodes=N-N NumTasks=T
// CPUsPerTask=C would (tasks 0: unchanged).
func (f *fakeSlurm) resize(j *slurm.JobInfo, tasks, nodes, cpus int) {
	if tasks == 0 {
		return
	}
	nodes = max(nodes, 1)
	f.lastSize = fmt.Sprintf("%d/%d", tasks, nodes)
	j.Fields["NumTasks"], j.Fields["TRES"] = strconv.Itoa(tasks), fmt.Sprintf("cpu=%d,node=%d", cpus*tasks, nodes)
	if cpus != 0 {
		j.Fields["CPUs/Task"] = strconv.Itoa(cpus)
	}
}

func (f *fakeSlurm) SetAdminComment(ctx context.Context, id, text string) error {
	return f.do("annotate", id, func(j *slurm.JobInfo) error {
		j.Fields["AdminComment"] = text
		return nil
	})
}

func (f *fakeSlurm) Release(ctx context.Context, id string) error {
	return f.do("release", id, func(j *slurm.JobInfo) error {
		j.Reason, j.Fields["Priority"] = "None", "100"
		if j.State == "PENDING" {
			j.State = "RUNNING"
		}
		return nil
	})
}

func (f *fakeSlurm) Cancel(ctx context.Context, id string) error {
	return f.do("cancel", id, func(j *slurm.JobInfo) error { j.State = "CANCELLED"; return nil })
}

// BatchScript returns the job's script (the "script" of addJob, else a
// small one); "Invalid job id" for a job it does not hold.
func (f *fakeSlurm) BatchScript(ctx context.Context, id string) ([]byte, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.calls = append(f.calls, "batch_script "+id)
	j, ok := f.jobs[id]
	if !ok {
		return nil, fmt.Errorf("%w: %w", slurm.ErrNotFound, &slurm.ExitError{Cmd: "scontrol", Code: 1, Stderr: "job script retrieval failed: Invalid job id specified"})
	}
	return []byte("#!/bin/sh\n# job " + id + " of " + j.User + "\nexec srun isched-wrapper -- train\n"), nil
}

func (f *fakeSlurm) SubmitWith(ctx context.Context, script []byte, spec slurm.SubmitSpec) (string, error) {
	f.mu.Lock()
	err := f.fail["submit"]
	id := ""
	if err == nil {
		// sbatch has created the job by the time it returns (or dies).
		f.nextID++
		id = strconv.Itoa(f.nextID)
		f.jobs[id] = &slurm.JobInfo{JobID: id, Name: "isched-resumed", User: spec.User, State: "PENDING", Partition: spec.Partition, Comment: spec.Comment, Fields: map[string]string{}}
	}
	f.lastSubmit, f.lastScript = spec, string(script)
	f.mu.Unlock()
	if err != nil {
		return "", err
	}
	if err := f.do("submit", spec.User+" "+spec.Partition+" "+spec.Comment, nil); err != nil {
		return "", err
	}
	return id, nil
}

// hookStore wraps the Redis client to crash after a chosen write.
type hookStore struct {
	Store
	after func(op, key string)
}

func (h *hookStore) hook(op, key string) {
	if h.after != nil {
		h.after(op, key)
	}
}

func (h *hookStore) Set(ctx context.Context, key string, val []byte, ttl time.Duration) error {
	err := h.Store.Set(ctx, key, val, ttl)
	if err == nil {
		h.hook("set", key)
	}
	return err
}

func (h *hookStore) Del(ctx context.Context, keys ...string) error {
	err := h.Store.Del(ctx, keys...)
	if err == nil {
		h.hook("del", keys[0])
	}
	return err
}

func (h *hookStore) Append(ctx context.Context, s string, payload []byte, mac string, maxLen int64) (string, error) {
	id, err := h.Store.Append(ctx, s, payload, mac, maxLen)
	if err == nil {
		h.hook("append", s)
	}
	return id, err
}

func (h *hookStore) HSet(ctx context.Context, key string, fv ...string) error {
	err := h.Store.HSet(ctx, key, fv...)
	if err == nil {
		h.hook("hset", key)
	}
	return err
}

// env is one test's Redis, fake Slurm and log.
type env struct {
	t     *testing.T
	mr    *miniredis.Miniredis
	rdb   *stream.Client
	slurm *fakeSlurm
	logs  *syncBuffer
	now   time.Time
}

type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

var testNow = time.Date(2026, 11, 22, 3, 0, 0, 0, time.UTC)

func newEnv(t *testing.T) *env {
	t.Helper()
	mr := miniredis.RunT(t)
	rdb, err := stream.Open(context.Background(), stream.Config{Addrs: []string{mr.Addr()}, User: "agent", Cluster: "lab"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { rdb.Close() })
	return &env{t: t, mr: mr, rdb: rdb, slurm: newFakeSlurm(), logs: &syncBuffer{}, now: testNow}
}

func (e *env) config() Config {
	return Config{
		Cluster: "lab", PollInterval: 20 * time.Millisecond, MinBackoff: 5 * time.Millisecond, MaxBackoff: 40 * time.Millisecond,
		ActionBlock: 20 * time.Millisecond, Logger: slog.New(slog.NewTextHandler(e.logs, &slog.HandlerOptions{Level: slog.LevelDebug})),
		Now: func() time.Time { return e.now },
	}
}

func (e *env) agent(st Store) *Agent {
	e.t.Helper()
	if st == nil {
		st = e.rdb
	}
	a, err := New(e.config(), e.slurm, st)
	if err != nil {
		e.t.Fatal(err)
	}
	return a
}

var actionSeq atomic.Int64

// action builds a valid action for job id issued now.
func (e *env) action(typ report.ActionType, job uint64, mod ...func(*report.Action)) *report.Action {
	a := &report.Action{ID: fmt.Sprintf("a-%d", actionSeq.Add(1)), Type: typ, Cluster: "lab", JobID: job, User: "alice", IssuedMS: e.now.UnixMilli()}
	switch typ {
	case report.ActionSignal:
		a.Signal = "SIGUSR1"
	case report.ActionUpdate:
		a.TimeLimitMin = 45
	case report.ActionSubmit:
		a.Script = "#!/bin/sh\nsrun isched-wrapper -- python train.py\n"
		a.Lineage = "L1"
	case report.ActionAnnotate:
		a.AdminComment = "isched: asked 1.0 GiB, used 115 MiB peak: ask --mem=256M next time"
	}
	for _, m := range mod {
		m(a)
	}
	return a
}

// send appends an action to the actions stream as the coordinator would.
func (e *env) send(a *report.Action) string {
	e.t.Helper()
	env := report.NewEnvelope(report.KindAction, e.now)
	env.Action = a
	b, err := report.Encode(env)
	if err != nil {
		e.t.Fatalf("encode action: %v", err)
	}
	return e.sendRaw(b)
}

func (e *env) sendRaw(b []byte) string {
	e.t.Helper()
	id, err := e.rdb.Append(context.Background(), "isched:lab:actions", b, "", 0)
	if err != nil {
		e.t.Fatal(err)
	}
	return id
}

// results returns every result on the results stream, decoded.
func (e *env) results() []*report.Result {
	e.t.Helper()
	entries, err := e.rdb.Range(context.Background(), "isched:lab:results", "-", "+", 10000)
	if err != nil {
		e.t.Fatal(err)
	}
	var out []*report.Result
	for _, en := range entries {
		env, err := report.Decode(en.Payload)
		if err != nil {
			e.t.Fatalf("result entry %s does not decode: %v", en.ID, err)
		}
		out = append(out, env.Result)
	}
	return out
}

func (e *env) resultFor(id string) *report.Result {
	e.t.Helper()
	var found *report.Result
	for _, r := range e.results() {
		if r.ActionID == id {
			if found != nil {
				e.t.Errorf("two results for action %s", id)
			}
			found = r
		}
	}
	if found == nil {
		e.t.Fatalf("no result for action %s; results: %+v", id, e.results())
	}
	return found
}

// drain handles every pending entry like one turn of the action loop
// (resume, then read until the stream is exhausted). A crash panic is
// recovered and reported.
func drain(ctx context.Context, a *Agent) (crashedAt string, err error) {
	defer func() {
		if r := recover(); r != nil {
			c, ok := r.(crash)
			if !ok {
				panic(r)
			}
			crashedAt = c.at
		}
	}()
	cursor, err := a.resume(ctx)
	if err != nil {
		return "", err
	}
	for {
		entries, err := a.store.ReadAfter(ctx, a.keys.Actions(), cursor, 16, 0)
		if err != nil {
			return "", err
		}
		if len(entries) == 0 {
			return "", nil
		}
		for _, en := range entries {
			if err := a.handle(ctx, en); err != nil {
				return "", err
			}
			cursor = en.ID
		}
	}
}
