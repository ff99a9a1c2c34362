//go:build integration

package agent_test

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/isched/isched/internal/agent"
	"github.com/isched/isched/internal/report"
	"github.com/isched/isched/internal/slurm"
	"github.com/isched/isched/internal/stream"
	"github.com/isched/isched/internal/testutil"
)

// TestMain lets the test binary be isched-agent itself, so the kill test
// can SIGKILL a real agent process (Nomad's testtask pattern).
func TestMain(m *testing.M) {
	if os.Getenv("ISCHED_AGENT_TEST_MAIN") == "1" {
		ctx, stop := signalContext()
		code := agent.Main(ctx, strings.Fields(os.Getenv("ISCHED_AGENT_TEST_ARGS")), os.Getenv, os.Stderr)
		stop()
		os.Exit(code)
	}
	os.Exit(m.Run())
}

// cluster is one test's key space: a cluster name of its own, so the test
// neither sees nor disturbs the dev cluster's real "lab" keys.
type cluster struct {
	name  string
	admin *stream.Client // coordinator's role: writes actions, reads results
	keys  stream.Keys
}

func newCluster(t *testing.T) *cluster {
	t.Helper()
	r := testutil.NeedRedis(t)
	testutil.NeedSlurm(t)
	name := fmt.Sprintf("itest-agent-%d", time.Now().UnixNano()%1_000_000_000)
	admin, err := stream.Open(context.Background(), stream.Config{Addrs: []string{r.Addr}, User: "admin", PasswordFile: r.PasswordFile("admin"), Cluster: name})
	if err != nil {
		t.Fatal(err)
	}
	c := &cluster{name: name, admin: admin, keys: admin.Keys()}
	t.Cleanup(func() {
		k := c.keys
		_ = admin.Del(context.Background(), k.Actions(), k.Results(), k.Snapshot(), k.Jobs(), k.AgentCursor(), k.AgentDone(), k.AgentInflight())
		admin.Close()
	})
	return c
}

// agentClient opens Redis as the agent ACL user.
func (c *cluster) agentClient(t *testing.T) *stream.Client {
	t.Helper()
	r := testutil.NeedRedis(t)
	cl, err := stream.Open(context.Background(), stream.Config{Addrs: []string{r.Addr}, User: "agent", PasswordFile: r.PasswordFile("agent"), Private: true, Cluster: c.name})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cl.Close() })
	return cl
}

func (c *cluster) send(t *testing.T, a *report.Action) {
	t.Helper()
	env := report.NewEnvelope(report.KindAction, time.Now())
	env.Action = a
	b, err := report.Encode(env)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.admin.Append(context.Background(), c.keys.Actions(), b, "", 1000); err != nil {
		t.Fatal(err)
	}
}

func (c *cluster) results(t *testing.T) map[string][]*report.Result {
	t.Helper()
	entries, err := c.admin.Range(context.Background(), c.keys.Results(), "-", "+", 10000)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string][]*report.Result{}
	for _, e := range entries {
		env, err := report.Decode(e.Payload)
		if err != nil {
			t.Fatalf("result %s: %v", e.ID, err)
		}
		out[env.Result.ActionID] = append(out[env.Result.ActionID], env.Result)
	}
	return out
}

func (c *cluster) waitResult(t *testing.T, id string, timeout time.Duration) *report.Result {
	t.Helper()
	var r *report.Result
	testutil.Eventually(t, timeout, 100*time.Millisecond, "result of action "+id, func() bool {
		if rs := c.results(t)[id]; len(rs) > 0 {
			r = rs[0]
			return true
		}
		return false
	})
	return r
}

func action(cl string, typ report.ActionType, id string, job string, user string, mod ...func(*report.Action)) *report.Action {
	n, _ := strconv.ParseUint(job, 10, 64)
	a := &report.Action{ID: id, Type: typ, Cluster: cl, JobID: n, User: user, IssuedMS: time.Now().UnixMilli(), Reason: "integration test"}
	for _, m := range mod {
		m(a)
	}
	return a
}

func submit(t *testing.T, sc *slurm.Client, script, user string) string {
	t.Helper()
	testutil.UseLab(t, "cpu", "dev")
	id, err := sc.SubmitWith(context.Background(), []byte(script), slurm.SubmitSpec{User: user})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sc.Cancel(context.Background(), id) })
	return id
}

func waitJob(t *testing.T, sc *slurm.Client, id string, what string, cond func(j *slurm.JobInfo) bool) *slurm.JobInfo {
	t.Helper()
	for deadline := time.Now().Add(90 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		j, err := sc.ShowJob(context.Background(), id)
		if err == nil && cond(j) {
			return j
		}
		if time.Now().After(deadline) {
			t.Fatalf("timed out after 90s waiting for job %s %s (last: %+v, %v)\n%s", id, what, j, err, testutil.SlurmQueue(""))
		}
	}
}

func fileLines(path string) []string {
	b, err := os.ReadFile(path)
	if err != nil || len(strings.TrimSpace(string(b))) == 0 {
		return nil
	}
	return strings.Split(strings.TrimSpace(string(b)), "\n")
}

const moveScript = `#!/bin/sh
#SBATCH -J isched-slurm-test-agent-move
#SBATCH -p cpu -t 30 -o /dev/null --chdir=/tmp --requeue
echo "${SLURM_RESTART_COUNT:-0} $SLURMD_NODENAME ${CUDA_VISIBLE_DEVICES:-none}" >> %s
exec sleep 600
`

// TestIntegrationAgentMoveOnceRefuseEnded: the acceptance path on the real
// cluster and Redis. A requeue action moving alice's running cpu job to gpu
// with gres gpu:1, delivered twice, runs once; an action for a job that has
// ended is refused; the agent publishes the snapshot for this cluster name.
func TestIntegrationAgentMoveOnceRefuseEnded(t *testing.T) {
	c := newCluster(t)
	sc := &slurm.Client{}
	a, err := agent.New(agent.Config{Cluster: c.name, PollInterval: time.Second}, sc, c.agentClient(t))
	if err != nil {
		t.Fatal(err)
	}
	bg := agent.Start(context.Background(), a)
	t.Cleanup(func() { _ = bg.Close(context.Background()) })

	dir := testutil.WorkDir(t, "isched-slurm-test-agent-")
	out := filepath.Join(dir, "runs")
	job := submit(t, sc, fmt.Sprintf(moveScript, out), "alice")
	testutil.Eventually(t, 60*time.Second, 100*time.Millisecond, "first run", func() bool { return len(fileLines(out)) == 1 })

	move := action(c.name, report.ActionRequeue, "move-"+job, job, "alice", func(a *report.Action) { a.Partition, a.Gres = "gpu", "gpu:1" })
	start := time.Now()
	c.send(t, move)
	c.send(t, move) // delivered twice
	r := c.waitResult(t, move.ID, 60*time.Second)
	if r.Status != report.StatusOK {
		t.Fatalf("move result %+v", r)
	}
	waitJob(t, sc, job, "running on gpu", func(j *slurm.JobInfo) bool { return j.State == "RUNNING" && j.Partition == "gpu" })
	testutil.Eventually(t, 30*time.Second, 100*time.Millisecond, "second run", func() bool { return len(fileLines(out)) >= 2 })
	t.Logf("move of job %s: result %q after %s; runs %q", job, r.Message, time.Since(start).Round(time.Millisecond), fileLines(out))
	// Give a second execution every chance to show up.
	time.Sleep(4 * time.Second)
	runs := fileLines(out)
	j, _ := sc.ShowJob(context.Background(), job)
	if len(runs) != 2 || j.Restarts != 1 || !strings.HasPrefix(runs[1], "1 gpu") || strings.HasSuffix(runs[1], " none") {
		t.Errorf("after the move: runs %q, restarts %d; want exactly one restart on a gpu node with a GPU", runs, j.Restarts)
	}
	if rs := c.results(t)[move.ID]; len(rs) != 1 {
		t.Errorf("%d results for the twice-delivered action", len(rs))
	}

	// An ended job.
	ended := submit(t, sc, "#!/bin/sh\n#SBATCH -J isched-slurm-test-agent-ended -p dev -t 1 -o /dev/null --chdir=/tmp\ntrue\n", "alice")
	waitJob(t, sc, ended, "completed", func(j *slurm.JobInfo) bool { return j.State == "COMPLETED" })
	for _, typ := range []report.ActionType{report.ActionSignal, report.ActionRequeue, report.ActionCancel} {
		act := action(c.name, typ, fmt.Sprintf("ended-%s-%s", typ, ended), ended, "alice", func(a *report.Action) {
			if a.Type == report.ActionSignal {
				a.Signal = "SIGUSR1"
			}
		})
		c.send(t, act)
		r := c.waitResult(t, act.ID, 30*time.Second)
		if r.Status != report.StatusRefused || !strings.Contains(r.Message, "already ended (COMPLETED)") {
			t.Errorf("%s of an ended job: %+v", typ, r)
		}
	}
	// A job id Slurm no longer knows: refused with Slurm's own words.
	gone := action(c.name, report.ActionCancel, "gone-1", "4000000000", "alice")
	c.send(t, gone)
	if r := c.waitResult(t, gone.ID, 30*time.Second); r.Status != report.StatusRefused || !strings.Contains(r.Stderr, "Invalid job id") {
		t.Errorf("unknown job: %+v", r)
	}
	// Someone else's job and a job that did not opt in.
	other := submit(t, sc, "#!/bin/sh\n#SBATCH -J plain-slurm-test -p cpu -t 5 -o /dev/null --chdir=/tmp\nsleep 600\n", "bob")
	for _, act := range []*report.Action{
		action(c.name, report.ActionCancel, "not-owner-"+job, job, "bob"),
		action(c.name, report.ActionCancel, "not-opted-"+other, other, "bob"),
	} {
		c.send(t, act)
		if r := c.waitResult(t, act.ID, 30*time.Second); r.Status != report.StatusRefused {
			t.Errorf("%s: %+v", act.ID, r)
		}
	}
	if j, _ := sc.ShowJob(context.Background(), other); j.State == "CANCELLED" {
		t.Error("the agent cancelled a job that did not opt in")
	}

	// The snapshot for this cluster name is there and fresh.
	b, err := c.admin.Get(context.Background(), c.keys.Snapshot())
	if err != nil {
		t.Fatal(err)
	}
	env, err := report.DecodeTable(b)
	if err != nil || env.Snapshot.Cluster != c.name || time.Since(env.Time()) > 10*time.Second {
		t.Errorf("snapshot: %v %+v", err, env)
	}
}

const trapScript = `#!/bin/bash
#SBATCH -J isched-slurm-test-agent-kill
#SBATCH -p %s -t 30 -o /dev/null --chdir=/tmp
trap 'echo USR1 >> %s' USR1
echo ready >> %s
while true; do sleep 0.2; done
`

// TestIntegrationAgentKilledMidStream: a real isched-agent process is
// SIGKILLed twice while it works through a stream of actions and started
// again each time. Every action gets its result, no action runs twice.
func TestIntegrationAgentKilledMidStream(t *testing.T) {
	c := newCluster(t)
	sc := &slurm.Client{}
	dir := testutil.WorkDir(t, "isched-slurm-test-agent-")
	const jobs = 6
	ids := make([]string, jobs)
	files := make([]string, jobs)
	for i := range ids {
		files[i] = filepath.Join(dir, fmt.Sprintf("sig%d", i))
		part := []string{"cpu", "gpu", "dev"}[i%3]
		ids[i] = submit(t, sc, fmt.Sprintf(trapScript, part, files[i], files[i]), "alice")
	}
	for i := range ids {
		testutil.Eventually(t, 90*time.Second, 100*time.Millisecond, "job "+ids[i]+" ready", func() bool { return len(fileLines(files[i])) >= 1 })
	}

	var order []string
	for i, id := range ids {
		u := action(c.name, report.ActionUpdate, "kill-update-"+id, id, "alice", func(a *report.Action) { a.TimeLimitMin = int64(20 + i) })
		s := action(c.name, report.ActionSignal, "kill-signal-"+id, id, "alice", func(a *report.Action) { a.Signal = "SIGUSR1" })
		c.send(t, u)
		c.send(t, s)
		order = append(order, u.ID, s.ID)
	}

	r := testutil.NeedRedis(t)
	start := func() *exec.Cmd {
		cmd := exec.Command(os.Args[0], "-test.run=^$")
		cmd.Env = append(os.Environ(),
			"ISCHED_AGENT_TEST_MAIN=1",
			"ISCHED_AGENT_TEST_ARGS=-poll 1s -log-format text",
			"ISCHED_CLUSTER="+c.name,
			"ISCHED_REDIS_ADDR="+r.Addr,
			"ISCHED_REDIS_USER=agent",
			"ISCHED_REDIS_PASSWORD_FILE="+r.PasswordFile("agent"),
		)
		cmd.Stderr = &prefixWriter{t: t}
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		return cmd
	}
	total := func() int {
		n := 0
		for _, rs := range c.results(t) {
			n += len(rs)
		}
		return n
	}
	for _, killAt := range []int{2, 6} {
		cmd := start()
		testutil.Eventually(t, 60*time.Second, 20*time.Millisecond, fmt.Sprintf("%d results", killAt), func() bool { return total() >= killAt })
		_ = cmd.Process.Signal(syscall.SIGKILL)
		_ = cmd.Wait()
		t.Logf("SIGKILLed the agent after %d results", total())
	}
	cmd := start()
	stopped := false
	t.Cleanup(func() {
		if !stopped {
			_ = cmd.Process.Signal(syscall.SIGKILL)
			_ = cmd.Wait()
		}
	})
	testutil.Eventually(t, 120*time.Second, 100*time.Millisecond, "a result for every action", func() bool {
		rs := c.results(t)
		for _, id := range order {
			if len(rs[id]) == 0 {
				return false
			}
		}
		return true
	})
	time.Sleep(2 * time.Second) // let any stray second signal arrive
	// SIGTERM is a graceful stop: exit 0, promptly.
	_ = cmd.Process.Signal(syscall.SIGTERM)
	waited := make(chan error, 1)
	go func() { waited <- cmd.Wait() }()
	select {
	case err := <-waited:
		stopped = true
		if err != nil {
			t.Errorf("agent after SIGTERM: %v, want exit 0", err)
		}
	case <-time.After(20 * time.Second):
		t.Error("agent did not stop within 20 s of SIGTERM")
	}
	rs := c.results(t)
	for i, id := range ids {
		u, s := rs["kill-update-"+id], rs["kill-signal-"+id]
		for _, group := range [][]*report.Result{u, s} {
			for _, x := range group[1:] {
				if *x != *group[0] {
					t.Errorf("different results for one action: %+v vs %+v", group[0], x)
				}
			}
		}
		if u[0].Status != report.StatusOK {
			t.Errorf("update %s: %+v", id, u[0])
		}
		j, err := sc.ShowJob(context.Background(), id)
		if err != nil || j.TimeLimit == nil || *j.TimeLimit != time.Duration(20+i)*time.Minute {
			t.Errorf("job %s time limit after the update: %v %v", id, j.TimeLimit, err)
		}
		got := 0
		for _, l := range fileLines(files[i]) {
			if l == "USR1" {
				got++
			}
		}
		switch {
		case got > 1:
			t.Errorf("job %s got USR1 %d times: a signal action ran twice", id, got)
		case s[0].Status == report.StatusOK && got != 1:
			t.Errorf("signal %s reported ok but the job got USR1 %d times", id, got)
		case s[0].Status != report.StatusOK:
			t.Logf("signal %s: %s (%s), job saw USR1 %d times", id, s[0].Status, s[0].Message, got)
		}
	}
}

type prefixWriter struct{ t *testing.T }

func (w *prefixWriter) Write(p []byte) (int, error) {
	for _, l := range strings.Split(strings.TrimRight(string(p), "\n"), "\n") {
		w.t.Log("agent: " + l)
	}
	return len(p), nil
}
