package agent

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/isched/isched/internal/daemon"
	"github.com/isched/isched/internal/report"
	"github.com/isched/isched/internal/slurm"
)

const testdata = "../slurm/testdata/22.05"

// realState polls a slurm.Client whose runner answers from the captured
// 22.05 output and counts the commands run.
func realState(t *testing.T) (*slurm.Client, *[]string) {
	t.Helper()
	files := map[string]string{
		"scontrol --all show partition --oneliner":       "partitions.txt",
		"sinfo --all --json":                             "sinfo.json",
		"squeue --all --json":                            "squeue.json",
		"squeue --all --start --noheader --format=%i %S": "start.txt",
	}
	var mu sync.Mutex
	var calls []string
	c := &slurm.Client{Runner: slurm.RunnerFunc(func(ctx context.Context, name string, args []string, stdin []byte) ([]byte, error) {
		argv := strings.Join(append([]string{name}, args...), " ")
		mu.Lock()
		calls = append(calls, argv)
		mu.Unlock()
		f, ok := files[argv]
		if !ok {
			t.Errorf("unexpected command %q", argv)
			return nil, errors.New("unexpected")
		}
		return os.ReadFile(filepath.Join(testdata, f))
	})}
	return c, &calls
}

// slurmPoller adapts a real slurm.Client's Poll into the fake (actions stay fake).
type slurmPoller struct {
	*fakeSlurm
	c *slurm.Client
}

func (p slurmPoller) Poll(ctx context.Context) (*slurm.State, error) { return p.c.Poll(ctx) }

func TestPublishOnce(t *testing.T) {
	e := newEnv(t)
	c, calls := realState(t)
	a, err := New(e.config(), slurmPoller{e.slurm, c}, e.rdb)
	if err != nil {
		t.Fatal(err)
	}
	if err := a.PublishOnce(context.Background()); err != nil {
		t.Fatal(err)
	}
	// Exactly one of each command per poll, however many jobs.
	if len(*calls) != 4 {
		t.Errorf("one poll ran %d commands: %q", len(*calls), *calls)
	}
	for key, kind := range map[string]report.Kind{"isched:lab:snapshot": report.KindSnapshot, "isched:lab:jobs": report.KindJobs} {
		b, err := e.mr.Get(key)
		if err != nil {
			t.Fatalf("%s: %v", key, err)
		}
		env, err := report.Decode([]byte(b))
		if err != nil || env.Kind != kind || env.TimeMS != testNow.UnixMilli() {
			t.Fatalf("%s: %v %+v", key, err, env)
		}
		if ttl := e.mr.TTL(key); ttl != 15*time.Second {
			t.Errorf("%s TTL %s, want 15s (3 polls, at least 15 s)", key, ttl)
		}
		switch kind {
		case report.KindSnapshot:
			if env.Snapshot.TakenMS != testNow.UnixMilli() || len(env.Snapshot.Partitions) != 5 {
				t.Errorf("snapshot %+v", env.Snapshot)
			}
		case report.KindJobs:
			if len(env.Jobs.Jobs) != 19 {
				t.Errorf("job table has %d jobs", len(env.Jobs.Jobs))
			}
			for _, j := range env.Jobs.Jobs {
				if j.JobID == 13 && j.ExpectedStartMS == 0 {
					t.Error("pending job 13 lacks its squeue --start estimate")
				}
			}
		}
	}
}

func TestPublishNothingWhenSlurmFails(t *testing.T) {
	e := newEnv(t)
	e.slurm.pollErr = &slurm.ExitError{Cmd: "sinfo", Code: 1, Stderr: "slurm_load_partitions: Unable to contact slurm controller (connect failure)"}
	a := e.agent(nil)
	if err := a.PublishOnce(context.Background()); err == nil || !strings.Contains(err.Error(), "Unable to contact") {
		t.Fatalf("err %v", err)
	}
	if e.mr.Exists("isched:lab:snapshot") || e.mr.Exists("isched:lab:jobs") {
		t.Error("published although Slurm failed")
	}
}

// TestPollLoopBacksOffAndRecovers: while slurmctld is away the loop retries
// with backoff, logs the failure once (not once per try), publishes nothing,
// and logs the recovery.
func TestPollLoopBacksOffAndRecovers(t *testing.T) {
	e := newEnv(t)
	c, _ := realState(t)
	p := &flakyPoller{fakeSlurm: e.slurm, c: c, failures: 5}
	a, err := New(e.config(), p, e.rdb)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan struct{})
	go func() { a.pollLoop(ctx); close(done) }()
	// the recovery is logged after the publish: wait for the line, not
	// for the snapshot (a cancel in between would hide it)
	deadline := time.Now().Add(5 * time.Second)
	for !strings.Contains(e.logs.String(), "poll recovered") && time.Now().Before(deadline) {
		time.Sleep(5 * time.Millisecond)
	}
	cancel()
	<-done
	if !e.mr.Exists("isched:lab:snapshot") {
		t.Fatal("never published after Slurm came back")
	}
	logs := e.logs.String()
	if n := strings.Count(logs, "poll failing"); n != 1 {
		t.Errorf("%d 'poll failing' lines for 5 failures, want 1 (rate-limited):\n%s", n, logs)
	}
	if !strings.Contains(logs, "poll recovered") || !strings.Contains(logs, "failures=5") {
		t.Errorf("no recovery line:\n%s", logs)
	}
	// Backoff 5, 10, 20, 40, 40 ms between the 5 failures, each jittered
	// down to half at worst (retry.Jitter): the 6th poll comes at least
	// 2.5 + 5 + 10 + 20 + 20 = 57.5 ms after the first. A lower bound of
	// sleeps, so a slow machine cannot fail it; 75 ms, the sum without
	// jitter, is above the jittered sum in 1 draw of 9.
	if gap := p.times[5].Sub(p.times[0]); gap < 57500*time.Microsecond {
		t.Errorf("6 polls within %s: no backoff", gap)
	}
}

type flakyPoller struct {
	*fakeSlurm
	c        *slurm.Client
	mu       sync.Mutex
	failures int
	times    []time.Time
}

func (p *flakyPoller) Poll(ctx context.Context) (*slurm.State, error) {
	p.mu.Lock()
	p.times = append(p.times, time.Now())
	n := len(p.times)
	p.mu.Unlock()
	if n <= p.failures {
		return nil, &slurm.ExitError{Cmd: "scontrol", Code: 1, Stderr: "Unable to contact slurm controller (connect failure)"}
	}
	return p.c.Poll(ctx)
}

func TestJobTableKeepsLargeClusters(t *testing.T) {
	var jobs []report.Job
	for i := 0; i < 2000; i++ {
		tl := int64(60)
		jobs = append(jobs, report.Job{JobID: uint64(1000 + i), Name: "someone-else", User: "bob", UID: 1002, State: "RUNNING", Partition: "cpu", TimeLimitMin: &tl})
	}
	b, kept, err := encodeJobTable(report.JobTable{Cluster: "lab", TakenMS: testNow.UnixMilli(), Jobs: jobs}, testNow)
	if err != nil {
		t.Fatal(err)
	}
	// more than one stream report holds, all kept (report.MaxTablePayload)
	if len(b) <= report.MaxPayload || kept != len(jobs) {
		t.Fatalf("%d bytes, kept %d of %d", len(b), kept, len(jobs))
	}
	env, err := report.DecodeTable(b)
	if err != nil || len(env.Jobs.Jobs) != len(jobs) {
		t.Fatalf("decode: %v", err)
	}
}

func TestActions(t *testing.T) {
	type tc struct {
		name   string
		setup  func(f *fakeSlurm)
		action func(e *env) *report.Action
		status report.ResultStatus
		msg    string // substring of the result message
		stderr string // substring of the result stderr
		calls  []string
		cpus   int    // CPUs per task Slurm was given
		size   string // the size Slurm was given, "tasks/nodes"
	}
	cases := []tc{
		{name: "signal the batch step", action: func(e *env) *report.Action { return e.action(report.ActionSignal, 12) },
			status: report.StatusOK, msg: "sent SIGUSR1 to the batch step of job 12", calls: []string{"signal 12 SIGUSR1 batch"}},
		{name: "signal all steps", action: func(e *env) *report.Action {
			return e.action(report.ActionSignal, 12, func(a *report.Action) { a.Steps = report.StepsAll; a.Signal = "USR2" })
		}, status: report.StatusOK, calls: []string{"signal 12 USR2 full"}},
		{name: "requeue with a move", action: func(e *env) *report.Action {
			return e.action(report.ActionRequeue, 12, func(a *report.Action) { a.Partition, a.Gres = "gpu", "gpu:1" })
		}, status: report.StatusOK, msg: "requeued job 12 (restart 1) to partition gpu, gres gpu:1, released", calls: []string{"move 12"}},
		{name: "requeue with a move and the plan's CPUs there", action: func(e *env) *report.Action {
			return e.action(report.ActionRequeue, 12, func(a *report.Action) { a.Partition, a.Gres, a.CPUs = "gpu", "gpu:1", 2 })
		}, status: report.StatusOK, msg: "requeued job 12 (restart 1) to partition gpu, gres gpu:1, 2 CPUs per task, released", calls: []string{"move 12"}, cpus: 2},
		{name: "update a pending job's CPUs", setup: func(f *fakeSlurm) { f.jobs["12"].State = "PENDING" },
			action: func(e *env) *report.Action {
				return e.action(report.ActionUpdate, 12, func(a *report.Action) { a.TimeLimitMin, a.Partition, a.CPUs = 0, "gpu", 2 })
			}, status: report.StatusOK, msg: "partition gpu, 2 CPUs per task", calls: []string{"update 12"}, cpus: 2},
		{name: "resize: grow to 2 tasks on one node with the job's own CPUs", action: func(e *env) *report.Action {
			return e.action(report.ActionRequeue, 12, func(a *report.Action) { a.Gres, a.Tasks = "gpu:2", 2 })
		}, status: report.StatusOK, calls: []string{"move 12"}, cpus: 1, size: "2/1",
			msg: "requeued job 12 (restart 1) to gres gpu:2, 2 tasks on 1 node (its own CPUs per task, 1: 2 per node), from 1 task on 1 node, released"},
		{name: "resize: an ended attempt grows past one node", setup: func(f *fakeSlurm) { f.jobs["12"].State = "COMPLETED" },
			action: func(e *env) *report.Action {
				return e.action(report.ActionRequeue, 12, func(a *report.Action) { a.Gres, a.Tasks, a.Nodes, a.CPUs, a.Ended = "gpu:2", 4, 2, 2, true })
			}, status: report.StatusOK, calls: []string{"move 12"}, cpus: 2, size: "4/2",
			msg: "requeued job 12 (restart 1) to gres gpu:2, 4 tasks on 2 nodes, 2 CPUs per task, from 1 task on 1 node, released"},
		{name: "resize: shrink to one task", setup: func(f *fakeSlurm) {
			f.jobs["12"].Fields["NumTasks"], f.jobs["12"].Fields["TRES"], f.jobs["12"].Fields["CPUs/Task"] = "2", "cpu=4,node=1", "2"
		}, action: func(e *env) *report.Action {
			return e.action(report.ActionRequeue, 12, func(a *report.Action) { a.Gres, a.Tasks = "gpu:1", 1 })
		}, status: report.StatusOK, calls: []string{"move 12"}, cpus: 2, size: "1/1", msg: "1 task on 1 node (its own CPUs per task, 2: 2 per node), from 2 tasks on 1 node"},
		{name: "resize: a pending job's size by update", setup: func(f *fakeSlurm) { f.jobs["12"].State = "PENDING" },
			action: func(e *env) *report.Action {
				return e.action(report.ActionUpdate, 12, func(a *report.Action) { a.TimeLimitMin, a.Gres, a.Tasks, a.CPUs = 0, "gpu:2", 2, 3 })
			}, status: report.StatusOK, calls: []string{"update 12"}, cpus: 3, size: "2/1", msg: "updated job 12 (gres gpu:2, 2 tasks on 1 node, 3 CPUs per task)"},
		{name: "resize: GRES without a GPU per task", action: func(e *env) *report.Action {
			return e.action(report.ActionRequeue, 12, func(a *report.Action) { a.Gres, a.Tasks, a.Nodes = "gpu:1", 4, 2 })
		}, status: report.StatusRefused, msg: "with gres gpu:1: want 2 GPUs per node, one per task"},
		{name: "resize: GRES not GPUs", setup: func(f *fakeSlurm) { f.jobs["12"].State = "PENDING" }, action: func(e *env) *report.Action {
			return e.action(report.ActionUpdate, 12, func(a *report.Action) { a.Gres, a.Tasks = "mps:100", 1 })
		}, status: report.StatusRefused, msg: "want 1 GPUs per node, one per task"},
		{name: "resize: Slurm refuses the update", setup: func(f *fakeSlurm) {
			f.updateErr = &slurm.ExitError{Cmd: "scontrol", Code: 1, Stderr: "Node count specification invalid for job 12"}
		}, action: func(e *env) *report.Action {
			return e.action(report.ActionRequeue, 12, func(a *report.Action) { a.Gres, a.Tasks, a.Nodes = "gpu:2", 4, 2 })
		}, status: report.StatusFailed, calls: []string{"move 12"}, stderr: "Node count specification invalid",
			msg: "set back to its old size (1 task on 1 node), released, and restarts where it was"},
		{name: "resize: Slurm refuses the update and the restore", setup: func(f *fakeSlurm) {
			f.updateErr = &slurm.ExitError{Cmd: "scontrol", Code: 1, Stderr: "Node count specification invalid for job 12"}
			f.restoreFails = true
		}, action: func(e *env) *report.Action {
			return e.action(report.ActionRequeue, 12, func(a *report.Action) { a.Gres, a.Tasks, a.Nodes = "gpu:2", 4, 2 })
		}, status: report.StatusFailed, calls: []string{"move 12"}, stderr: "Node count specification invalid",
			msg: "its old size (1 task on 1 node) could not be set again: Slurm may have kept part of the update"},
		{name: "requeue of a pending job without placement", setup: func(f *fakeSlurm) { f.jobs["12"].State = "PENDING" },
			action: func(e *env) *report.Action { return e.action(report.ActionRequeue, 12) }, status: report.StatusRefused, msg: "requeue needs a running job"},
		{name: "continuation: requeue of an ended job", setup: func(f *fakeSlurm) { f.jobs["12"].State = "COMPLETED" },
			action: func(e *env) *report.Action {
				return e.action(report.ActionRequeue, 12, func(a *report.Action) { a.Ended = true })
			}, status: report.StatusOK, msg: "requeued job 12 (restart 1)", calls: []string{"move 12"}},
		{name: "requeue of an ended job without Ended", setup: func(f *fakeSlurm) { f.jobs["12"].State = "TIMEOUT" },
			action: func(e *env) *report.Action { return e.action(report.ActionRequeue, 12) }, status: report.StatusRefused, msg: "already ended (TIMEOUT)"},
		{name: "continuation of a cancelled job", setup: func(f *fakeSlurm) { f.jobs["12"].State = "CANCELLED" },
			action: func(e *env) *report.Action {
				return e.action(report.ActionRequeue, 12, func(a *report.Action) { a.Ended = true })
			}, status: report.StatusRefused, msg: "already ended (CANCELLED)"},
		{name: "continuation of a job that requeued itself: no double action", setup: func(f *fakeSlurm) { f.jobs["12"].State = "PENDING" },
			action: func(e *env) *report.Action {
				return e.action(report.ActionRequeue, 12, func(a *report.Action) { a.Ended, a.TimeLimitMin = true, 0 })
			}, status: report.StatusRefused, msg: "requeued already, by the job itself or by Slurm"},
		{name: "continuation of a job that requeued itself: its new time limit only", setup: func(f *fakeSlurm) { f.jobs["12"].State = "PENDING" },
			action: func(e *env) *report.Action {
				return e.action(report.ActionRequeue, 12, func(a *report.Action) { a.Ended, a.TimeLimitMin = true, 3 })
			}, status: report.StatusOK, msg: "re-placed pending job 12 to time limit 3 min", calls: []string{"move 12"}},
		{name: "update time limit", action: func(e *env) *report.Action { return e.action(report.ActionUpdate, 12) },
			status: report.StatusOK, msg: "time limit 45 min", calls: []string{"update 12"}},
		{name: "update partition of a running job: Slurm's refusal", action: func(e *env) *report.Action {
			return e.action(report.ActionUpdate, 12, func(a *report.Action) { a.TimeLimitMin, a.Partition = 0, "gpu" })
		}, status: report.StatusFailed, stderr: "Job is no longer pending execution", calls: []string{"update 12"}},
		{name: "cancel", action: func(e *env) *report.Action { return e.action(report.ActionCancel, 12) }, status: report.StatusOK, calls: []string{"cancel 12"}},
		{name: "release", setup: func(f *fakeSlurm) { f.addJob("12", "held") },
			action: func(e *env) *report.Action { return e.action(report.ActionRelease, 12) }, status: report.StatusOK, calls: []string{"release 12"}},
		{name: "release of a running job", action: func(e *env) *report.Action { return e.action(report.ActionRelease, 12) },
			status: report.StatusRefused, msg: "not pending"},
		{name: "submit replaces a job", action: func(e *env) *report.Action {
			return e.action(report.ActionSubmit, 12, func(a *report.Action) { a.Partition = "gpu" })
		}, status: report.StatusOK, msg: "submitted job 501 as alice", calls: []string{"submit alice gpu isched lineage=L1 action="}},
		{name: "submit without a known job", action: func(e *env) *report.Action { return e.action(report.ActionSubmit, 0) },
			status: report.StatusOK, calls: []string{"submit alice  isched lineage=L1 action="}},
		{name: "submit as root", action: func(e *env) *report.Action {
			return e.action(report.ActionSubmit, 0, func(a *report.Action) { a.User = "root" })
		}, status: report.StatusRefused, msg: "submit as root refused"},
		{name: "unknown job: refused with Slurm's stderr", action: func(e *env) *report.Action { return e.action(report.ActionCancel, 99) },
			status: report.StatusRefused, msg: "job 99 not found", stderr: "Invalid job id specified"},
		{name: "ended job", setup: func(f *fakeSlurm) { f.jobs["12"].State = "COMPLETED" },
			action: func(e *env) *report.Action { return e.action(report.ActionSignal, 12) }, status: report.StatusRefused, msg: "job 12 already ended (COMPLETED)"},
		{name: "someone else's job", action: func(e *env) *report.Action {
			return e.action(report.ActionCancel, 12, func(a *report.Action) { a.User = "bob" })
		}, status: report.StatusRefused, msg: `job 12 belongs to "alice", not "bob"`},
		{name: "job not opted in", setup: func(f *fakeSlurm) { f.jobs["12"].Name = "train" },
			action: func(e *env) *report.Action { return e.action(report.ActionCancel, 12) }, status: report.StatusRefused, msg: "has not opted in"},
		{name: "opted in by comment", setup: func(f *fakeSlurm) { f.jobs["12"].Name, f.jobs["12"].Comment = "train", "isched lineage=x" },
			action: func(e *env) *report.Action { return e.action(report.ActionCancel, 12) }, status: report.StatusOK, calls: []string{"cancel 12"}},
		{name: "stale action", action: func(e *env) *report.Action {
			return e.action(report.ActionCancel, 12, func(a *report.Action) { a.IssuedMS = e.now.Add(-time.Hour).UnixMilli() })
		}, status: report.StatusRefused, msg: "stale action"},
		{name: "other cluster", action: func(e *env) *report.Action {
			return e.action(report.ActionCancel, 12, func(a *report.Action) { a.Cluster = "other" })
		}, status: report.StatusRefused, msg: `action for cluster "other"`},
		{name: "annotate: the verdict into AdminComment", action: func(e *env) *report.Action { return e.action(report.ActionAnnotate, 12) },
			status: report.StatusOK, msg: "wrote the AdminComment of job 12", calls: []string{"annotate 12"}},
		{name: "annotate an ended job", setup: func(f *fakeSlurm) { f.jobs["12"].State = "COMPLETED" },
			action: func(e *env) *report.Action { return e.action(report.ActionAnnotate, 12) }, status: report.StatusRefused,
			msg: "Slurm keeps no AdminComment change after a job's end"},
		{name: "annotate someone else's job", action: func(e *env) *report.Action {
			return e.action(report.ActionAnnotate, 12, func(a *report.Action) { a.User = "bob" })
		}, status: report.StatusRefused, msg: `belongs to "alice"`},
		{name: "signal to a pending job", setup: func(f *fakeSlurm) { f.jobs["12"].State = "PENDING" },
			action: func(e *env) *report.Action { return e.action(report.ActionSignal, 12) }, status: report.StatusRefused, msg: "not running"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			e := newEnv(t)
			e.slurm.addJob("12")
			if c.setup != nil {
				c.setup(e.slurm)
			}
			act := c.action(e)
			e.send(act)
			if _, err := drain(context.Background(), e.agent(nil)); err != nil {
				t.Fatal(err)
			}
			r := e.resultFor(act.ID)
			if r.Status != c.status || !strings.Contains(r.Message, c.msg) || !strings.Contains(r.Stderr, c.stderr) {
				t.Errorf("result %+v, want status %s, message ~%q, stderr ~%q", r, c.status, c.msg, c.stderr)
			}
			if got := e.slurm.cpus(); got != c.cpus {
				t.Errorf("CPUs per task given to Slurm %d, want %d", got, c.cpus)
			}
			if got := e.slurm.size(); got != c.size {
				t.Errorf("size given to Slurm %q, want %q", got, c.size)
			}
			calls := e.slurm.Calls()
			if len(calls) != len(c.calls) {
				t.Fatalf("calls %q, want %q", calls, c.calls)
			}
			for i := range calls {
				if !strings.HasPrefix(calls[i], c.calls[i]) {
					t.Errorf("calls %q, want %q", calls, c.calls)
				}
			}
			if act.Type == report.ActionSubmit && c.status == report.StatusOK && (r.NewJobID == 0 || !strings.HasSuffix(calls[0], "action="+act.ID)) {
				t.Errorf("submit: new job %d, call %q", r.NewJobID, calls[0])
			}
			if e.mr.Exists("isched:lab:agent:inflight") {
				t.Error("inflight marker left behind")
			}
		})
	}
}

func TestMalformedActions(t *testing.T) {
	e := newEnv(t)
	e.slurm.addJob("12")
	good := e.action(report.ActionCancel, 12)
	e.sendRaw([]byte(`{"v":1,"kind":"action","ts_ms":1795316400000,"action":{"id":"bad-1","type":"cancel","cluster":"lab","job_id":12,"user":"alice","issued_ms":1795316400000,"extra":1}}`))
	e.sendRaw([]byte(`not json at all`))
	e.sendRaw([]byte(`{"v":2,"kind":"action"}`))
	e.send(good)
	if _, err := drain(context.Background(), e.agent(nil)); err != nil {
		t.Fatal(err)
	}
	rs := e.results()
	if len(rs) != 2 || rs[0].ActionID != "bad-1" || rs[0].Status != report.StatusRefused || !strings.Contains(rs[0].Message, "malformed action") ||
		!strings.Contains(rs[0].Message, "extra") || rs[1].ActionID != good.ID || rs[1].Status != report.StatusOK {
		t.Errorf("results %+v", rs)
	}
	if n := e.slurm.count("cancel"); n != 1 {
		t.Errorf("%d cancels", n)
	}
}

func TestSameActionTwiceExecutesOnce(t *testing.T) {
	e := newEnv(t)
	e.slurm.addJob("12")
	act := e.action(report.ActionRequeue, 12, func(a *report.Action) { a.Partition = "gpu" })
	e.send(act)
	e.send(act)
	if _, err := drain(context.Background(), e.agent(nil)); err != nil {
		t.Fatal(err)
	}
	e.send(act) // and once more, to a new agent
	if _, err := drain(context.Background(), e.agent(nil)); err != nil {
		t.Fatal(err)
	}
	if n := e.slurm.count("move"); n != 1 {
		t.Errorf("moved %d times", n)
	}
	if rs := e.results(); len(rs) != 1 {
		t.Errorf("%d results: %+v", len(rs), rs)
	}
	if !strings.Contains(e.logs.String(), "duplicate action skipped") {
		t.Error("duplicate not logged")
	}
}

// TestCrashPoints stops the agent dead (as SIGKILL would) at every point of
// the protocol, restarts it, and checks the action ran at most once and got
// its result.
func TestCrashPoints(t *testing.T) {
	type tc struct {
		name      string
		typ       report.ActionType
		mod       func(*report.Action)
		store     string // crash after this store write ("set:inflight", "hset", "append", "del", "set:cursor")
		slurmCall string // or after this Slurm call took effect
		execs     int    // Slurm calls of the action's verb in total
		verb      string
		status    report.ResultStatus
		msg       string
		results   int // results published in total (an identical repeat is allowed after "append")
	}
	move := func(a *report.Action) { a.Partition = "gpu" }
	cases := []tc{
		{name: "cancel: before executing", typ: report.ActionCancel, store: "set:inflight", verb: "cancel", execs: 1, status: report.StatusOK, results: 1},
		{name: "cancel: after executing", typ: report.ActionCancel, slurmCall: "cancel", verb: "cancel", execs: 1, status: report.StatusOK, msg: "is CANCELLED (confirmed after an agent restart)", results: 1},
		{name: "move: before executing", typ: report.ActionRequeue, mod: move, store: "set:inflight", verb: "move", execs: 1, status: report.StatusOK, results: 1},
		{name: "move: after executing", typ: report.ActionRequeue, mod: move, slurmCall: "move", verb: "move", execs: 1, status: report.StatusOK, msg: "confirmed after an agent restart", results: 1},
		{name: "signal: before executing", typ: report.ActionSignal, store: "set:inflight", verb: "signal", execs: 0, status: report.StatusFailed, msg: "not re-sent", results: 1},
		{name: "signal: after executing", typ: report.ActionSignal, slurmCall: "signal", verb: "signal", execs: 1, status: report.StatusFailed, msg: "not re-sent", results: 1},
		{name: "update: after executing", typ: report.ActionUpdate, slurmCall: "update", verb: "update", execs: 1, status: report.StatusOK, msg: "shows the update", results: 1},
		{name: "update: before executing", typ: report.ActionUpdate, store: "set:inflight", verb: "update", execs: 1, status: report.StatusOK, results: 1},
		{name: "submit: after sbatch", typ: report.ActionSubmit, slurmCall: "submit", verb: "submit", execs: 1, status: report.StatusOK, msg: "submitted job 501", results: 1},
		{name: "submit: before sbatch", typ: report.ActionSubmit, store: "set:inflight", verb: "submit", execs: 0, status: report.StatusFailed, msg: "not resubmitted", results: 1},
		{name: "after recording the result", typ: report.ActionCancel, store: "hset", verb: "cancel", execs: 1, status: report.StatusOK, results: 1},
		{name: "after publishing the result", typ: report.ActionCancel, store: "append", verb: "cancel", execs: 1, status: report.StatusOK, results: 2},
		{name: "after clearing the marker", typ: report.ActionCancel, store: "del", verb: "cancel", execs: 1, status: report.StatusOK, results: 1},
		{name: "after advancing the cursor", typ: report.ActionCancel, store: "set:cursor", verb: "cancel", execs: 1, status: report.StatusOK, results: 1},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			e := newEnv(t)
			e.slurm.addJob("12")
			mods := []func(*report.Action){}
			if c.mod != nil {
				mods = append(mods, c.mod)
			}
			act := e.action(c.typ, 12, mods...)
			e.send(act)
			next := e.action(report.ActionCancel, 12) // the entry after: must run once too
			e.send(next)

			armed := true
			st := &hookStore{Store: e.rdb, after: func(op, key string) {
				name := op
				if op == "set" {
					name = "set:" + key[strings.LastIndexByte(key, ':')+1:]
				}
				if armed && c.store != "" && name == c.store {
					armed = false
					panic(crash{at: name})
				}
			}}
			e.slurm.after = func(call string) {
				if armed && c.slurmCall != "" && strings.HasPrefix(call, c.slurmCall) {
					armed = false
					panic(crash{at: call})
				}
			}
			at, err := drain(context.Background(), e.agent(st))
			if err != nil || at == "" {
				t.Fatalf("did not crash (%v)", err)
			}
			e.slurm.after = nil
			if _, err := drain(context.Background(), e.agent(nil)); err != nil {
				t.Fatalf("after restart: %v", err)
			}
			if n := e.slurm.count(c.verb); c.verb != "cancel" && n != c.execs {
				t.Errorf("%s ran %d times, want %d; calls %q", c.verb, n, c.execs, e.slurm.Calls())
			}
			if c.verb == "cancel" {
				// The crashed cancel and the next one (a refusal: the job has ended).
				if n := e.slurm.count("cancel"); n != c.execs {
					t.Errorf("cancel ran %d times, want %d; calls %q", n, c.execs, e.slurm.Calls())
				}
			}
			var mine []*report.Result
			for _, r := range e.results() {
				if r.ActionID == act.ID {
					mine = append(mine, r)
				}
			}
			if len(mine) != c.results {
				t.Fatalf("%d results for the action, want %d: %+v", len(mine), c.results, mine)
			}
			if len(mine) == 2 && *mine[0] != *mine[1] {
				t.Errorf("repeated result differs: %+v vs %+v", mine[0], mine[1])
			}
			if r := mine[0]; r.Status != c.status || !strings.Contains(r.Message, c.msg) {
				t.Errorf("result %+v, want %s ~%q", r, c.status, c.msg)
			}
			// The entry after the crash was handled exactly once.
			n := 0
			for _, r := range e.results() {
				if r.ActionID == next.ID {
					n++
				}
			}
			if n != 1 {
				t.Errorf("%d results for the next action", n)
			}
			if e.mr.Exists("isched:lab:agent:inflight") {
				t.Error("inflight marker left behind")
			}
		})
	}
}

// TestMoveRecoveryFinishesHeldJob: the agent died between requeuehold and
// release; the restarted agent finishes the move instead of requeueing again.
func TestMoveRecoveryFinishesHeldJob(t *testing.T) {
	e := newEnv(t)
	e.slurm.addJob("12")
	act := e.action(report.ActionRequeue, 12, func(a *report.Action) { a.Partition = "gpu"; a.Gres = "gpu:1" })
	e.send(act)
	// A Move that dies after requeuehold: the job is held, restart 1, still
	// on cpu, as Move leaves it between its steps 1 and 3.
	e.slurm.after = func(call string) {
		if strings.HasPrefix(call, "move") {
			e.slurm.mu.Lock()
			j := e.slurm.jobs["12"]
			j.State, j.Reason, j.Fields["Priority"], j.Partition = "PENDING", "job_requeued_in_held_state", "0", "cpu"
			e.slurm.mu.Unlock()
			panic(crash{at: call})
		}
	}
	if at, _ := drain(context.Background(), e.agent(nil)); at == "" {
		t.Fatal("did not crash")
	}
	e.slurm.after = nil
	if _, err := drain(context.Background(), e.agent(nil)); err != nil {
		t.Fatal(err)
	}
	calls := e.slurm.Calls()
	if !slices.Equal(calls, []string{"move 12", "update 12", "release 12"}) {
		t.Errorf("calls %q, want move, then update and release to finish it", calls)
	}
	j := e.slurm.job("12")
	if j.Partition != "gpu" || j.State != "RUNNING" || j.Restarts != 1 {
		t.Errorf("job %+v", j)
	}
	if r := e.resultFor(act.ID); r.Status != report.StatusOK || !strings.Contains(r.Message, "released") {
		t.Errorf("%+v", r)
	}
}

// TestMoveRecoveryFinishesResize: the agent died between requeuehold and
// the update of a resize; the restarted agent updates the held job to the
// new size, CPUs per node included, releases it, and a third agent that
// finds the job at that size says so without acting again.
func TestMoveRecoveryFinishesResize(t *testing.T) {
	e := newEnv(t)
	e.slurm.addJob("12", "partition=gpu")
	act := e.action(report.ActionRequeue, 12, func(a *report.Action) { a.Gres, a.Tasks, a.Nodes, a.CPUs = "gpu:2", 4, 2, 2 })
	e.send(act)
	e.slurm.after = func(call string) {
		if strings.HasPrefix(call, "move") {
			e.slurm.mu.Lock()
			j := e.slurm.jobs["12"] // held at its old size: the update never ran
			j.State, j.Reason, j.Fields["Priority"], j.Fields["NumTasks"], j.Fields["TRES"] = "PENDING", "job_requeued_in_held_state", "0", "1", "cpu=1,node=1"
			e.slurm.lastSize = ""
			e.slurm.mu.Unlock()
			panic(crash{at: call})
		}
	}
	if at, _ := drain(context.Background(), e.agent(nil)); at == "" {
		t.Fatal("did not crash")
	}
	e.slurm.after = nil
	if _, err := drain(context.Background(), e.agent(nil)); err != nil {
		t.Fatal(err)
	}
	if calls := e.slurm.Calls(); !slices.Equal(calls, []string{"move 12", "update 12", "release 12"}) {
		t.Errorf("calls %q, want move, then update and release to finish it", calls)
	}
	if j := e.slurm.job("12"); j.Tasks() != 4 || j.Nodes() != 2 || j.CPUsPerTask() != 2 || e.slurm.size() != "4/2" {
		t.Errorf("job %+v, size given %q", j, e.slurm.size())
	}
	if r := e.resultFor(act.ID); r.Status != report.StatusOK || !strings.Contains(r.Message, "4 tasks on 2 nodes, 2 CPUs per task, released") {
		t.Errorf("%+v", r)
	}
	j := e.slurm.job("12")
	m := &marker{State: "RUNNING", Restarts: 0}
	if !updated(&j, act) || requeueNeverLanded(&j, m, act) {
		t.Errorf("the resized job does not show the resize: %+v", j)
	}
	j.Fields["TRES"] = "cpu=8,node=1" // 4 tasks, but on one node
	if updated(&j, act) {
		t.Errorf("a job on 1 node shows a resize onto 2: %+v", j)
	}
}

// TestMoveRecoveryWaitsForCompletingJob: the agent died right after
// requeuehold, while the old attempt still ends (COMPLETING, restart count
// moved); the restarted agent waits for the held job and finishes the move
// instead of giving up and leaving it held for ever.
func TestMoveRecoveryWaitsForCompletingJob(t *testing.T) {
	e := newEnv(t)
	e.slurm.addJob("12")
	act := e.action(report.ActionRequeue, 12, func(a *report.Action) { a.Partition = "gpu"; a.Gres = "gpu:1" })
	e.send(act)
	e.slurm.after = func(call string) {
		if strings.HasPrefix(call, "move") {
			e.slurm.mu.Lock()
			j := e.slurm.jobs["12"]
			j.State, j.Reason, j.Partition = "COMPLETING", "None", "cpu"
			e.slurm.mu.Unlock()
			panic(crash{at: call})
		}
	}
	if at, _ := drain(context.Background(), e.agent(nil)); at == "" {
		t.Fatal("did not crash")
	}
	e.slurm.after = nil
	go func() {
		time.Sleep(1200 * time.Millisecond) // the old attempt's processes end
		e.slurm.mu.Lock()
		j := e.slurm.jobs["12"]
		j.State, j.Reason, j.Fields["Priority"] = "PENDING", "job_requeued_in_held_state", "0"
		e.slurm.mu.Unlock()
	}()
	if _, err := drain(context.Background(), e.agent(nil)); err != nil {
		t.Fatal(err)
	}
	if calls := e.slurm.Calls(); !slices.Equal(calls, []string{"move 12", "update 12", "release 12"}) {
		t.Errorf("calls %q, want move, then update and release to finish it", calls)
	}
	if j := e.slurm.job("12"); j.Partition != "gpu" || j.State != "RUNNING" || j.Restarts != 1 {
		t.Errorf("job %+v", j)
	}
	if r := e.resultFor(act.ID); r.Status != report.StatusOK || !strings.Contains(r.Message, "released") {
		t.Errorf("%+v", r)
	}
}

// TestTransientSlurmFailureRetries: a check that cannot reach slurmctld is
// retried, never answered with a result.
func TestTransientSlurmFailureRetries(t *testing.T) {
	e := newEnv(t)
	e.slurm.addJob("12")
	e.slurm.fail["show"] = &slurm.ExitError{Cmd: "scontrol", Code: 1, Stderr: "slurm_load_jobs error: Unable to contact slurm controller (connect failure)"}
	act := e.action(report.ActionCancel, 12)
	e.send(act)
	if _, err := drain(context.Background(), e.agent(nil)); !errors.Is(err, errTransient) {
		t.Fatalf("err %v, want transient", err)
	}
	if len(e.results()) != 0 {
		t.Fatal("answered while Slurm was down")
	}
	delete(e.slurm.fail, "show")
	if _, err := drain(context.Background(), e.agent(nil)); err != nil {
		t.Fatal(err)
	}
	if r := e.resultFor(act.ID); r.Status != report.StatusOK {
		t.Errorf("%+v", r)
	}
}

// TestRunStopsMidStream: an agent stopped (context cancelled) after some
// actions and a new one started later handle every action exactly once, in
// order.
func TestRunStopsMidStream(t *testing.T) {
	e := newEnv(t)
	c, _ := realState(t)
	var ids []string
	for i := 0; i < 30; i++ {
		id := 100 + i
		e.slurm.addJob(strconv.Itoa(id))
		act := e.action(report.ActionCancel, uint64(id))
		ids = append(ids, act.ID)
		e.send(act)
	}
	for round := 0; round < 3; round++ {
		a, err := New(e.config(), slurmPoller{e.slurm, c}, e.rdb)
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithCancel(context.Background())
		stopAt := 10 * (round + 1)
		e.slurm.after = func(call string) {
			if e.slurm.count("cancel") >= stopAt {
				cancel()
			}
		}
		bg := Start(ctx, a)
		deadline := time.Now().Add(10 * time.Second)
		for ctx.Err() == nil && time.Now().Before(deadline) {
			time.Sleep(5 * time.Millisecond)
		}
		if err := bg.Close(context.Background()); err != nil {
			t.Fatal(err)
		}
		cancel()
	}
	got := []string{}
	for _, r := range e.results() {
		got = append(got, r.ActionID)
		if r.Status != report.StatusOK {
			t.Errorf("%+v", r)
		}
	}
	if !slices.Equal(got, ids) {
		t.Errorf("results %v, want each of %v once, in order", got, ids)
	}
	if n := e.slurm.count("cancel"); n != 30 {
		t.Errorf("%d cancels, want 30", n)
	}
	if !e.mr.Exists("isched:lab:snapshot") {
		t.Error("Run did not publish")
	}
}

func TestMainFlags(t *testing.T) {
	var out strings.Builder
	// -h prints on stdout (daemon.HelpOut), the rest on stderr: both here
	old := daemon.HelpOut
	daemon.HelpOut = &out
	t.Cleanup(func() { daemon.HelpOut = old })
	cases := []struct {
		args []string
		code int
		want string
	}{
		{[]string{"-nope"}, ExitUsage, "flag provided but not defined"},
		{[]string{"extra"}, ExitUsage, "unexpected arguments"},
		{[]string{"-log-format", "xml"}, ExitUsage, "want json or text"},
		{[]string{"-h"}, ExitOK, "Usage of isched-agent"},
		{[]string{"-cluster", "bad name", "-once"}, ExitUsage, "cluster name"},
		{[]string{"-pprof-listen", "256.0.0.1:1", "-once"}, ExitUsage, "pprof listener"},
	}
	for _, c := range cases {
		out.Reset()
		env := map[string]string{"ISCHED_REDIS_ADDR": "127.0.0.1:1", "ISCHED_REDIS_PASSWORD_FILE": ""}
		code := Main(context.Background(), c.args, func(k string) string { return env[k] }, &out)
		if code != c.code || !strings.Contains(out.String(), c.want) {
			t.Errorf("Main(%q) = %d, %q; want %d ~%q", c.args, code, out.String(), c.code, c.want)
		}
	}
}

func TestClean(t *testing.T) {
	long := strings.Repeat("é", 5000)
	if got := clean(long, 8<<10); len(got) > 8<<10 || !strings.HasPrefix(long, got) {
		t.Errorf("cut mid-rune: %d bytes", len(got))
	}
	if got := clean("a\x00b\xff", 100); got != "ab\uFFFD" {
		t.Errorf("%q", got)
	}
}

// TestRequeueRecoveryOfEndedJob: the agent died after recording that it
// was about to requeue an ended job (Action.Ended) and before Slurm saw
// it; the job ended as it was (FAILED, same restart count), so the
// restarted agent requeues it. (A cancelled job never gets this far: the
// agent refuses to requeue it before recording anything.)
func TestRequeueRecoveryOfEndedJob(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.slurm.addJob("12", "state=FAILED")
	act := e.action(report.ActionRequeue, 12, func(a *report.Action) { a.Partition = "gpu"; a.Ended = true })
	e.send(act)
	armed := true
	st := &hookStore{Store: e.rdb, after: func(op, key string) {
		if armed && op == "set" && strings.HasSuffix(key, ":inflight") {
			armed = false
			panic(crash{at: "set:inflight"})
		}
	}}
	if at, _ := drain(context.Background(), e.agent(st)); at == "" {
		t.Fatal("did not crash")
	}
	if _, err := drain(context.Background(), e.agent(nil)); err != nil {
		t.Fatal(err)
	}
	if n := e.slurm.count("move"); n != 1 {
		t.Errorf("move ran %d times, want 1; calls %q", n, e.slurm.Calls())
	}
	if r := e.resultFor(act.ID); r.Status != report.StatusOK || !strings.Contains(r.Message, "requeued") {
		t.Errorf("result %+v, want ok ~%q", r, "requeued")
	}
}
