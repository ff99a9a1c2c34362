package slurm

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/isched/isched/internal/report"
)

// call is one expected command and what the fake answers.
type call struct {
	argv   string // name and args joined by spaces
	stdout string
	stderr string // non-empty with code != 0: an *ExitError
	code   int
}

// script is a fake Runner that expects exactly the calls given, in order.
type script struct {
	t     *testing.T
	mu    sync.Mutex
	calls []call
	got   []string
	stdin [][]byte
}

func (s *script) Run(ctx context.Context, name string, args []string, stdin []byte) ([]byte, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, ok := ctx.Deadline(); !ok {
		s.t.Errorf("%s run without a deadline", name)
	}
	argv := strings.Join(append([]string{name}, args...), " ")
	s.got = append(s.got, argv)
	s.stdin = append(s.stdin, stdin)
	if len(s.calls) == 0 {
		s.t.Errorf("unexpected command %q", argv)
		return nil, errors.New("unexpected command")
	}
	c := s.calls[0]
	s.calls = s.calls[1:]
	if c.argv != argv {
		s.t.Errorf("command %q, want %q", argv, c.argv)
	}
	if c.code != 0 {
		return []byte(c.stdout), &ExitError{Cmd: name, Args: args, Code: c.code, Stderr: c.stderr}
	}
	return []byte(c.stdout), nil
}

func (s *script) done() {
	s.t.Helper()
	if len(s.calls) != 0 {
		s.t.Errorf("commands not run: %v", s.calls)
	}
}

func newScript(t *testing.T, calls ...call) (*Client, *script) {
	s := &script{t: t, calls: calls}
	return &Client{Runner: s, PollEvery: time.Millisecond}, s
}

func showLine(id, state, extra string) string {
	return "JobId=" + id + " JobName=isched-x UserId=alice(1001) GroupId=alice(1001) Priority=100 JobState=" + state +
		" Reason=None Requeue=1 Restarts=0 BatchFlag=1 TimeLimit=00:30:00 Partition=cpu " + extra + "\n"
}

func TestActionsArgv(t *testing.T) {
	ctx := context.Background()
	cases := []struct {
		name string
		do   func(c *Client) error
		want string
	}{
		{"signal batch", func(c *Client) error { return c.Signal(ctx, "12", "SIGUSR1", true) }, "scancel --signal=USR1 --batch 12"},
		{"signal all", func(c *Client) error { return c.Signal(ctx, "12_3", "usr2", false) }, "scancel --signal=USR2 --full 12_3"},
		{"cancel", func(c *Client) error { return c.Cancel(ctx, "12") }, "scancel 12"},
		{"requeue", func(c *Client) error { return c.Requeue(ctx, "12", false) }, "scontrol requeue 12"},
		{"requeuehold", func(c *Client) error { return c.Requeue(ctx, "12", true) }, "scontrol requeuehold 12"},
		{"release", func(c *Client) error { return c.Release(ctx, "12") }, "scontrol release 12"},
		{"update all", func(c *Client) error {
			return c.Update(ctx, "12", UpdateSpec{Partition: "gpu", Gres: "gres:gpu:1", TimeLimit: 90*time.Minute + time.Second, StartIn: 2 * time.Second})
		}, "scontrol update JobId=12 Partition=gpu Gres=gpu:1 TimeLimit=91 StartTime=now+2"},
		{"update start time", func(c *Client) error {
			return c.Update(ctx, "12", UpdateSpec{StartTime: time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)})
		}, "scontrol update JobId=12 StartTime=2026-01-02T03:04:05"},
		{"update nice only", func(c *Client) error {
			n := int64(-1000)
			return c.Update(ctx, "12", UpdateSpec{Nice: &n})
		}, "scontrol update JobId=12 Nice=-1000"},
		{"update a resize onto one node", func(c *Client) error {
			return c.Update(ctx, "12", UpdateSpec{Gres: "gpu:2", Tasks: 2, CPUsPerTask: 3})
		}, "scontrol update JobId=12 Gres=gpu:2 NumNodes=1-1 NumTasks=2 CPUsPerTask=3 MinCPUsNode=6"},
		{"update a resize past one node", func(c *Client) error {
			return c.Update(ctx, "12", UpdateSpec{Partition: "gpu", Gres: "gpu:2", Tasks: 4, Nodes: 2, CPUsPerTask: 2, StartIn: 2 * time.Second})
		}, "scontrol update JobId=12 Partition=gpu Gres=gpu:2 NumNodes=2-2 NumTasks=4 CPUsPerTask=2 MinCPUsNode=4 StartTime=now+2"},
		{"update a size without CPUs", func(c *Client) error {
			return c.Update(ctx, "12", UpdateSpec{Gres: "gpu:1", Tasks: 1, Nodes: 1})
		}, "scontrol update JobId=12 Gres=gpu:1 NumNodes=1-1 NumTasks=1"},
		{"custom binary", func(c *Client) error { c.Scontrol = "/opt/slurm/bin/scontrol"; return c.Release(ctx, "7") }, "/opt/slurm/bin/scontrol release 7"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			c, s := newScript(t, call{argv: tc.want})
			if err := tc.do(c); err != nil {
				t.Fatal(err)
			}
			s.done()
		})
	}
}

// TestRefusedBeforeRunning: hostile ids and values never reach a command.
func TestRefusedBeforeRunning(t *testing.T) {
	ctx := context.Background()
	bad := []struct {
		name string
		do   func(c *Client) error
	}{
		{"id with shell", func(c *Client) error { return c.Cancel(ctx, "12;rm -rf /") }},
		{"id flag", func(c *Client) error { return c.Cancel(ctx, "--user=bob") }},
		{"id list", func(c *Client) error { return c.Requeue(ctx, "12,13", false) }},
		{"id empty", func(c *Client) error { return c.Release(ctx, "") }},
		{"id zero", func(c *Client) error { return c.Release(ctx, "0") }},
		{"id array range", func(c *Client) error { return c.Release(ctx, "12_[1-3]") }},
		{"show id", func(c *Client) error { _, err := c.ShowJob(ctx, "$(id)"); return err }},
		{"signal name", func(c *Client) error { return c.Signal(ctx, "12", "USR1 --full", true) }},
		{"partition smuggles a key", func(c *Client) error { return c.Update(ctx, "12", UpdateSpec{Partition: "gpu TimeLimit=9999"}) }},
		{"gres smuggles a key", func(c *Client) error { return c.Update(ctx, "12", UpdateSpec{Gres: "gpu:1=TimeLimit"}) }},
		{"empty update", func(c *Client) error { return c.Update(ctx, "12", UpdateSpec{}) }},
		{"negative time", func(c *Client) error { return c.Update(ctx, "12", UpdateSpec{TimeLimit: -time.Minute}) }},
		{"nice past Slurm's range", func(c *Client) error { n := int64(maxNice + 1); return c.Update(ctx, "12", UpdateSpec{Nice: &n}) }},
		{"submit user", func(c *Client) error {
			_, err := c.SubmitWith(ctx, []byte("#!/bin/sh\n"), SubmitSpec{User: "--uid=0"})
			return err
		}},
		{"submit no shebang", func(c *Client) error { _, err := c.SubmitWith(ctx, []byte("echo hi\n"), SubmitSpec{}); return err }},
		{"move bad partition", func(c *Client) error { _, err := c.Move(ctx, "12", MoveSpec{Partition: "a b"}); return err }},
		{"negative tasks", func(c *Client) error { return c.Update(ctx, "12", UpdateSpec{Tasks: -1}) }},
		{"tasks past MaxElastic", func(c *Client) error { return c.Update(ctx, "12", UpdateSpec{Tasks: report.MaxElastic + 1}) }},
		{"nodes without tasks", func(c *Client) error { return c.Update(ctx, "12", UpdateSpec{Nodes: 2}) }},
		{"negative nodes", func(c *Client) error { return c.Update(ctx, "12", UpdateSpec{Tasks: 2, Nodes: -2}) }},
		{"tasks uneven on nodes", func(c *Client) error { return c.Update(ctx, "12", UpdateSpec{Tasks: 3, Nodes: 2}) }},
		{"CPUs per node past the bound", func(c *Client) error {
			return c.Update(ctx, "12", UpdateSpec{Tasks: 8, CPUsPerTask: maxCPUs / 4})
		}},
		{"huge CPUs per task", func(c *Client) error { return c.Update(ctx, "12", UpdateSpec{Tasks: 2, CPUsPerTask: 1 << 62}) }},
		{"move bad size", func(c *Client) error { _, err := c.Move(ctx, "12", MoveSpec{Tasks: 4, Nodes: 3}); return err }},
	}
	for _, tc := range bad {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			c, s := newScript(t) // no command may run
			if err := tc.do(c); !errors.Is(err, ErrInvalid) {
				t.Errorf("error %v, want ErrInvalid", err)
			}
			s.done()
		})
	}
}

func TestExitErrors(t *testing.T) {
	ctx := context.Background()
	c, s := newScript(t,
		call{argv: "scontrol show job --oneliner 99", code: 1, stderr: "slurm_load_jobs error: Invalid job id specified\n"},
		call{argv: "scontrol update JobId=12 Partition=nope", code: 1, stderr: "Invalid partition name specified for job 12\n"},
	)
	_, err := c.ShowJob(ctx, "99")
	var ee *ExitError
	if !errors.Is(err, ErrNotFound) || !errors.As(err, &ee) || ee.Code != 1 || !strings.Contains(ee.Stderr, "Invalid job id") {
		t.Errorf("show unknown job: %v", err)
	}
	err = c.Update(ctx, "12", UpdateSpec{Partition: "nope"})
	if !errors.As(err, &ee) || errors.Is(err, ErrNotFound) || ee.Cmd != "scontrol" || !slices.Equal(ee.Args, []string{"update", "JobId=12", "Partition=nope"}) {
		t.Errorf("update: %v", err)
	}
	if want := "scontrol update JobId=12 Partition=nope: exit status 1: Invalid partition name specified for job 12"; err.Error() != want {
		t.Errorf("message %q, want %q", err, want)
	}
	s.done()
}

func TestShowJobPicksArrayTask(t *testing.T) {
	out := showLine("15", "RUNNING", "ArrayJobId=11 ArrayTaskId=0") + showLine("16", "RUNNING", "ArrayJobId=11 ArrayTaskId=1") + showLine("11", "PENDING", "ArrayJobId=11 ArrayTaskId=2-3%2")
	for _, tc := range []struct{ id, want string }{{"11_1", "16"}, {"11", "11"}, {"15", "15"}} {
		c, _ := newScript(t, call{argv: "scontrol show job --oneliner " + tc.id, stdout: out})
		j, err := c.ShowJob(context.Background(), tc.id)
		if err != nil || j.JobID != tc.want {
			t.Errorf("ShowJob(%s) = %+v, %v; want job %s", tc.id, j, err, tc.want)
		}
	}
}

func TestSubmit(t *testing.T) {
	script := []byte("#!/bin/sh\n#SBATCH -J isched-x\necho '$(touch /tmp/pwned)'\n")
	c, s := newScript(t, call{argv: "sbatch --parsable --export=NONE --uid=alice --gid=1001", stdout: "123;lab\n"})
	c.LookupGroup = func(u string) (string, error) { return map[string]string{"alice": "1001"}[u], nil }
	id, err := c.SubmitWith(context.Background(), script, SubmitSpec{User: "alice"})
	if err != nil || id != "123" {
		t.Fatalf("Submit = %q, %v", id, err)
	}
	if string(s.stdin[0]) != string(script) {
		t.Errorf("script on stdin %q", s.stdin[0])
	}
	c, _ = newScript(t)
	c.LookupGroup = func(u string) (string, error) { return "", errors.New("unknown user") }
	if _, err := c.SubmitWith(context.Background(), script, SubmitSpec{User: "mallory"}); !errors.Is(err, ErrInvalid) {
		t.Errorf("unknown user: %v", err)
	}
	c, _ = newScript(t, call{argv: "sbatch --parsable --export=NONE", stdout: "Submitted batch job 5\n"})
	if _, err := c.SubmitWith(context.Background(), script, SubmitSpec{}); err == nil {
		t.Error("accepted non-parsable sbatch output")
	}
}

func TestMove(t *testing.T) {
	ctx := context.Background()
	t.Run("running job: requeuehold, wait, one update, release", func(t *testing.T) {
		c, s := newScript(t,
			call{argv: "scontrol show job --oneliner 12", stdout: showLine("12", "RUNNING", "")},
			call{argv: "scontrol requeuehold 12"},
			call{argv: "scontrol show job --oneliner 12", stdout: showLine("12", "COMPLETING", "")},
			call{argv: "scontrol show job --oneliner 12", stdout: strings.Replace(showLine("12", "PENDING", ""), "Restarts=0", "Restarts=1", 1)},
			call{argv: "scontrol update JobId=12 Partition=gpu Gres=gpu:1 TimeLimit=60 StartTime=now+2"},
			call{argv: "scontrol release 12"},
		)
		res, err := c.Move(ctx, "12", MoveSpec{Partition: "gpu", Gres: "gpu:1", TimeLimit: time.Hour})
		if err != nil {
			t.Fatal(err)
		}
		if !res.Requeued || !res.Released || res.Restarts != 1 || res.From != "cpu" || res.To != "gpu" {
			t.Errorf("%+v", res)
		}
		s.done()
	})
	t.Run("with CPUs per task: a one-task job gets them", func(t *testing.T) {
		c, s := newScript(t,
			call{argv: "scontrol show job --oneliner 12", stdout: showLine("12", "RUNNING", "NumTasks=1 CPUs/Task=4")},
			call{argv: "scontrol requeuehold 12"},
			call{argv: "scontrol show job --oneliner 12", stdout: showLine("12", "PENDING", "NumTasks=1 CPUs/Task=4")},
			call{argv: "scontrol update JobId=12 Partition=gpu Gres=gpu:1 CPUsPerTask=2 MinCPUsNode=2 StartTime=now+2"},
			call{argv: "scontrol release 12"},
		)
		res, err := c.Move(ctx, "12", MoveSpec{Partition: "gpu", Gres: "gpu:1", CPUsPerTask: 2})
		if err != nil || res.CPUsKept {
			t.Fatalf("%+v %v", res, err)
		}
		s.done()
	})
	t.Run("with CPUs per task: a job of several tasks keeps its CPUs", func(t *testing.T) {
		c, s := newScript(t,
			call{argv: "scontrol show job --oneliner 12", stdout: showLine("12", "RUNNING", "NumTasks=4 CPUs/Task=1")},
			call{argv: "scontrol requeuehold 12"},
			call{argv: "scontrol show job --oneliner 12", stdout: showLine("12", "PENDING", "NumTasks=4 CPUs/Task=1")},
			call{argv: "scontrol update JobId=12 Partition=gpu StartTime=now+2"},
			call{argv: "scontrol release 12"},
		)
		res, err := c.Move(ctx, "12", MoveSpec{Partition: "gpu", CPUsPerTask: 2})
		if err != nil || !res.CPUsKept {
			t.Fatalf("%+v %v", res, err)
		}
		s.done()
	})
	t.Run("resize: size, GRES and CPUs per node in one update", func(t *testing.T) {
		c, s := newScript(t,
			call{argv: "scontrol show job --oneliner 12", stdout: showLine("12", "RUNNING", "NumTasks=1 CPUs/Task=2")},
			call{argv: "scontrol requeuehold 12"},
			call{argv: "scontrol show job --oneliner 12", stdout: showLine("12", "PENDING", "NumTasks=1 CPUs/Task=2")},
			call{argv: "scontrol update JobId=12 Gres=gpu:2 NumNodes=2-2 NumTasks=4 CPUsPerTask=2 MinCPUsNode=4 StartTime=now+2"},
			call{argv: "scontrol release 12"},
		)
		// no CPUs asked: the job's own 2 per task, times 2 tasks per node
		res, err := c.Move(ctx, "12", MoveSpec{Gres: "gpu:2", Tasks: 4, Nodes: 2})
		if err != nil || res.CPUsKept || res.CPUsPerTask != 2 || !res.Released {
			t.Fatalf("%+v %v", res, err)
		}
		s.done()
	})
	t.Run("resize: a job of several tasks shrinks with the CPUs asked", func(t *testing.T) {
		c, s := newScript(t,
			call{argv: "scontrol show job --oneliner 12", stdout: showLine("12", "RUNNING", "NumTasks=4 CPUs/Task=1")},
			call{argv: "scontrol requeuehold 12"},
			call{argv: "scontrol show job --oneliner 12", stdout: showLine("12", "PENDING", "NumTasks=4 CPUs/Task=1")},
			call{argv: "scontrol update JobId=12 Gres=gpu:1 NumNodes=1-1 NumTasks=1 CPUsPerTask=3 MinCPUsNode=3 StartTime=now+2"},
			call{argv: "scontrol release 12"},
		)
		res, err := c.Move(ctx, "12", MoveSpec{Gres: "gpu:1", Tasks: 1, CPUsPerTask: 3})
		if err != nil || res.CPUsKept || res.CPUsPerTask != 3 {
			t.Fatalf("%+v %v", res, err)
		}
		s.done()
	})
	t.Run("bad CPUs per task", func(t *testing.T) {
		c, s := newScript(t)
		if _, err := c.Move(ctx, "12", MoveSpec{Partition: "gpu", CPUsPerTask: -1}); !errors.Is(err, ErrInvalid) {
			t.Fatalf("%v", err)
		}
		s.done()
	})
	t.Run("hold and slow start", func(t *testing.T) {
		c, s := newScript(t,
			call{argv: "scontrol show job --oneliner 12", stdout: showLine("12", "RUNNING", "")},
			call{argv: "scontrol requeuehold 12"},
			call{argv: "scontrol show job --oneliner 12", stdout: showLine("12", "PENDING", "")},
			call{argv: "scontrol update JobId=12 Partition=dev TimeLimit=90"},
		)
		res, err := c.Move(ctx, "12", MoveSpec{Partition: "dev", TimeLimit: 90 * time.Minute, Hold: true, SlowStart: true})
		if err != nil || res.Released {
			t.Fatalf("%+v %v", res, err)
		}
		s.done()
	})
	t.Run("pending job is held for the update", func(t *testing.T) {
		c, s := newScript(t,
			call{argv: "scontrol show job --oneliner 12", stdout: showLine("12", "PENDING", "")},
			call{argv: "scontrol hold 12"},
			call{argv: "scontrol update JobId=12 Partition=gpu StartTime=now+2"},
			call{argv: "scontrol release 12"},
		)
		if res, err := c.Move(ctx, "12", MoveSpec{Partition: "gpu"}); err != nil || res.Requeued {
			t.Fatalf("%+v %v", res, err)
		}
		s.done()
	})
	t.Run("a job held by its user stays held", func(t *testing.T) {
		c, s := newScript(t,
			call{argv: "scontrol show job --oneliner 12", stdout: strings.Replace(showLine("12", "PENDING", ""), "Reason=None", "Reason=JobHeldUser", 1)},
			call{argv: "scontrol update JobId=12 Partition=gpu StartTime=now+2"},
		)
		if res, err := c.Move(ctx, "12", MoveSpec{Partition: "gpu"}); err != nil || res.Released {
			t.Fatalf("%+v %v", res, err)
		}
		s.done()
	})
	t.Run("failed update releases the job unchanged", func(t *testing.T) {
		c, s := newScript(t,
			call{argv: "scontrol show job --oneliner 12", stdout: showLine("12", "RUNNING", "")},
			call{argv: "scontrol requeuehold 12"},
			call{argv: "scontrol show job --oneliner 12", stdout: showLine("12", "PENDING", "")},
			call{argv: "scontrol update JobId=12 Partition=nope StartTime=now+2", code: 1, stderr: "Invalid partition name specified for job 12"},
			call{argv: "scontrol update JobId=12 StartTime=now+2"},
			call{argv: "scontrol release 12"},
		)
		res, err := c.Move(ctx, "12", MoveSpec{Partition: "nope"})
		var ee *ExitError
		if !errors.As(err, &ee) || !res.Released || res.UpdateErr == nil || !strings.Contains(ee.Stderr, "Invalid partition") {
			t.Fatalf("%+v %v", res, err)
		}
		s.done()
	})
	t.Run("failed resize restores the old size, then releases", func(t *testing.T) {
		old := "NumTasks=1 NumNodes=1 CPUs/Task=2 TRES=cpu=2,node=1,gres/gpu=1 TresPerNode=gres:gpu:1"
		c, s := newScript(t,
			call{argv: "scontrol show job --oneliner 12", stdout: showLine("12", "RUNNING", old)},
			call{argv: "scontrol requeuehold 12"},
			call{argv: "scontrol show job --oneliner 12", stdout: showLine("12", "PENDING", old)},
			call{argv: "scontrol update JobId=12 Gres=gpu:2 NumNodes=1-1 NumTasks=2 CPUsPerTask=2 MinCPUsNode=4 StartTime=now+2", code: 1,
				stderr: "Requested node configuration is not available"},
			call{argv: "scontrol update JobId=12 Gres=gpu:1 NumNodes=1-1 NumTasks=1 CPUsPerTask=2 MinCPUsNode=2"},
			call{argv: "scontrol update JobId=12 StartTime=now+2"},
			call{argv: "scontrol release 12"},
		)
		res, err := c.Move(ctx, "12", MoveSpec{Gres: "gpu:2", Tasks: 2, Nodes: 1})
		if err == nil || !res.Restored || !res.Released || res.UpdateErr == nil || res.FromTasks != 1 {
			t.Fatalf("%+v %v", res, err)
		}
		s.done()
	})
	t.Run("a restore that fails too is said", func(t *testing.T) {
		old := "NumTasks=1 NumNodes=1 CPUs/Task=2 TresPerNode=gres:gpu:1"
		c, s := newScript(t,
			call{argv: "scontrol show job --oneliner 12", stdout: showLine("12", "PENDING", old)},
			call{argv: "scontrol hold 12"},
			call{argv: "scontrol update JobId=12 Gres=gpu:2 NumNodes=1-1 NumTasks=2 CPUsPerTask=2 MinCPUsNode=4 StartTime=now+2", code: 1, stderr: "refused"},
			call{argv: "scontrol update JobId=12 Gres=gpu:1 NumNodes=1-1 NumTasks=1 CPUsPerTask=2 MinCPUsNode=2", code: 1, stderr: "refused again"},
			call{argv: "scontrol release 12"},
		)
		res, err := c.Move(ctx, "12", MoveSpec{Gres: "gpu:2", Tasks: 2, Nodes: 1})
		if err == nil || res.Restored || !res.Released || !strings.Contains(err.Error(), "restoring its size after the failed update") {
			t.Fatalf("%+v %v", res, err)
		}
		s.done()
	})
	t.Run("plain fast requeue", func(t *testing.T) {
		c, s := newScript(t,
			call{argv: "scontrol show job --oneliner 12", stdout: showLine("12", "RUNNING", "")},
			call{argv: "scontrol requeuehold 12"},
			call{argv: "scontrol show job --oneliner 12", stdout: showLine("12", "PENDING", "")},
			call{argv: "scontrol update JobId=12 StartTime=now+2"},
			call{argv: "scontrol release 12"},
		)
		if res, err := c.Move(ctx, "12", MoveSpec{}); err != nil || !res.Released || res.To != "cpu" {
			t.Fatalf("%+v %v", res, err)
		}
		s.done()
	})
	t.Run("plain requeue of a pending job", func(t *testing.T) {
		c, s := newScript(t, call{argv: "scontrol show job --oneliner 12", stdout: showLine("12", "PENDING", "")})
		if _, err := c.Move(ctx, "12", MoveSpec{}); !errors.Is(err, ErrState) {
			t.Fatalf("%v", err)
		}
		s.done()
	})
	t.Run("ended job", func(t *testing.T) {
		c, s := newScript(t, call{argv: "scontrol show job --oneliner 12", stdout: showLine("12", "COMPLETED", "")})
		if _, err := c.Move(ctx, "12", MoveSpec{Partition: "gpu"}); !errors.Is(err, ErrState) {
			t.Fatalf("%v", err)
		}
		s.done()
	})
	t.Run("ended job with Ended: requeued from its final state (a continuation)", func(t *testing.T) {
		c, s := newScript(t,
			call{argv: "scontrol show job --oneliner 12", stdout: showLine("12", "COMPLETED", "")},
			call{argv: "scontrol requeuehold 12"},
			call{argv: "scontrol show job --oneliner 12", stdout: strings.Replace(showLine("12", "PENDING", ""), "Restarts=0", "Restarts=1", 1)},
			call{argv: "scontrol update JobId=12 TimeLimit=3 StartTime=now+2"},
			call{argv: "scontrol release 12"},
		)
		res, err := c.Move(ctx, "12", MoveSpec{TimeLimit: 3 * time.Minute, Ended: true})
		if err != nil || !res.Requeued || !res.Released || res.Restarts != 1 {
			t.Fatalf("%+v %v", res, err)
		}
		s.done()
	})
	t.Run("cancelled job is never requeued, even with Ended", func(t *testing.T) {
		c, s := newScript(t, call{argv: "scontrol show job --oneliner 12", stdout: showLine("12", "CANCELLED", "")})
		if _, err := c.Move(ctx, "12", MoveSpec{Ended: true}); !errors.Is(err, ErrState) {
			t.Fatalf("%v", err)
		}
		s.done()
	})
	t.Run("job ends while completing", func(t *testing.T) {
		c, s := newScript(t,
			call{argv: "scontrol show job --oneliner 12", stdout: showLine("12", "RUNNING", "")},
			call{argv: "scontrol requeuehold 12"},
			call{argv: "scontrol show job --oneliner 12", stdout: showLine("12", "CANCELLED", "")},
		)
		if _, err := c.Move(ctx, "12", MoveSpec{Partition: "gpu"}); !errors.Is(err, ErrState) {
			t.Fatalf("%v", err)
		}
		s.done()
	})
}

func TestPoll(t *testing.T) {
	c, s := newScript(t,
		call{argv: "scontrol --all show partition --oneliner", stdout: string(readFile(t, "partitions.txt"))},
		call{argv: "sinfo --all --json", stdout: string(readFile(t, "sinfo.json"))},
		call{argv: "squeue --all --json", stdout: string(readFile(t, "squeue.json"))},
		call{argv: "squeue --all --start --noheader --format=%i %S", stdout: string(readFile(t, "start.txt"))},
	)
	st, err := c.Poll(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if len(st.Partitions) != 5 || len(st.Nodes) != 6 || len(st.Jobs) != 19 || len(st.Starts) != 1 {
		t.Errorf("poll: %d partitions, %d nodes, %d jobs, %d starts", len(st.Partitions), len(st.Nodes), len(st.Jobs), len(st.Starts))
	}
	s.done()
	c, s = newScript(t,
		call{argv: "scontrol --all show partition --oneliner", stdout: string(readFile(t, "partitions.txt"))},
		call{argv: "sinfo --all --json", code: 1, stderr: "slurm_load_node: Unable to contact slurm controller (connect failure)"},
	)
	if _, err := c.Poll(context.Background()); err == nil || !strings.Contains(err.Error(), "Unable to contact") {
		t.Errorf("poll with controller down: %v", err)
	}
	s.done()
}

// The exec runner, with real binaries from the base system.

func TestExecRunner(t *testing.T) {
	ctx := context.Background()
	r := ExecRunner{}
	out, err := r.Run(ctx, "cat", nil, []byte("on stdin"))
	if err != nil || string(out) != "on stdin" {
		t.Errorf("cat: %q %v", out, err)
	}
	_, err = r.Run(ctx, "ls", []string{"/nonexistent-isched"}, nil)
	var ee *ExitError
	if !errors.As(err, &ee) || ee.Code != 2 || !strings.Contains(ee.Stderr, "nonexistent-isched") {
		t.Errorf("ls: %#v", err)
	}
	// Cut at the deadline, not run out: the error alone does not tell (the
	// runner reports the context's error either way), the time against the
	// child's own length does, with room for any machine.
	const sleepFor = 60 * time.Second
	tctx, cancel := context.WithTimeout(ctx, 100*time.Millisecond)
	defer cancel()
	start := time.Now()
	_, err = r.Run(tctx, "sleep", []string{strconv.Itoa(int(sleepFor.Seconds()))}, nil)
	if took := time.Since(start); !errors.As(err, &ee) || ee.Code != -1 || !errors.Is(err, context.DeadlineExceeded) || took > sleepFor/2 {
		t.Errorf("sleep %s past a 100 ms deadline: %v after %s, want DeadlineExceeded within half the sleep", sleepFor, err, took)
	}
	if _, err := r.Run(ctx, "isched-no-such-binary", nil, nil); err == nil || errors.As(err, &ee) {
		t.Errorf("missing binary: %v", err)
	}
	// An argument full of shell syntax is one argv element: nothing runs it.
	dir := t.TempDir()
	marker := filepath.Join(dir, "pwned")
	arg := "$(touch " + marker + ");`touch " + marker + "`"
	out, err = r.Run(ctx, "echo", []string{arg}, nil)
	if err != nil || strings.TrimSpace(string(out)) != arg {
		t.Errorf("echo: %q %v", out, err)
	}
	if _, err := os.Stat(marker); err == nil {
		t.Error("shell syntax in an argument was executed")
	}
}

// TestClientTimeout: the command's context carries Client.Timeout. The
// deadline was set between the call and the runner's start, so it lies
// within Timeout of both: no wall-clock budget that a slow machine could
// miss.
func TestClientTimeout(t *testing.T) {
	c := &Client{Squeue: "sleep", Timeout: 50 * time.Millisecond}
	var deadline, entered time.Time
	// "sleep --all --json" fails fast; use a runner that blocks instead.
	c.Runner = RunnerFunc(func(ctx context.Context, name string, args []string, stdin []byte) ([]byte, error) {
		entered = time.Now()
		deadline, _ = ctx.Deadline()
		<-ctx.Done()
		return nil, &ExitError{Cmd: name, Args: args, Code: -1, Err: ctx.Err()}
	})
	called := time.Now()
	_, err := c.SqueueJSON(context.Background())
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("SqueueJSON: %v, want DeadlineExceeded", err)
	}
	if deadline.Before(called.Add(c.Timeout)) || deadline.After(entered.Add(c.Timeout)) {
		t.Errorf("the command's deadline is %s after the call and %s after the runner started, want %s from a moment between",
			deadline.Sub(called), deadline.Sub(entered), c.Timeout)
	}
}

func TestCommandEnv(t *testing.T) {
	got := CommandEnv([]string{"PATH=/bin", "SLURM_CONF=/etc/x.conf", "SQUEUE_FORMAT=%i", "SBATCH_PARTITION=gpu", "SLURM_JOB_ID=5", "TZ=Europe/Paris", "HOME=/root", "SLURM_TIME_FORMAT=relative"})
	want := []string{"PATH=/bin", "SLURM_CONF=/etc/x.conf", "HOME=/root", "TZ=UTC", "SLURM_TIME_FORMAT=standard"}
	if !slices.Equal(got, want) {
		t.Errorf("CommandEnv = %v, want %v", got, want)
	}
}

func TestSubmitWith(t *testing.T) {
	c, _ := newScript(t, call{argv: "sbatch --parsable --export=NONE --uid=bob --gid=1002 --partition=gpu --gres=gpu:1 --time=61 --hold --comment=isched lineage=L1 action=a-1", stdout: "77\n"})
	c.LookupGroup = func(string) (string, error) { return "1002", nil }
	id, err := c.SubmitWith(context.Background(), []byte("#!/bin/sh\ntrue\n"), SubmitSpec{
		User: "bob", Partition: "gpu", Gres: "gres:gpu:1", TimeLimit: time.Hour + time.Second, Hold: true, Comment: "isched lineage=L1 action=a-1",
	})
	if err != nil || id != "77" {
		t.Fatalf("%q %v", id, err)
	}
	c, _ = newScript(t, call{argv: "sbatch --parsable --export=NONE --ignore-pbs --chdir=/home/alice/run 1", stdout: "78\n"})
	if id, err := c.SubmitWith(context.Background(), []byte("#!/bin/sh\ntrue\n"), SubmitSpec{Chdir: "/home/alice/run 1", IgnorePBS: true}); err != nil || id != "78" {
		t.Fatalf("with --chdir: %q %v", id, err)
	}
	// a twin on the ideal partition: the plan's CPUs per task there
	c, _ = newScript(t, call{argv: "sbatch --parsable --export=NONE --partition=gpu --gres=gpu:1 --cpus-per-task=4", stdout: "81\n"})
	if id, err := c.SubmitWith(context.Background(), []byte("#!/bin/sh\ntrue\n"), SubmitSpec{Partition: "gpu", Gres: "gpu:1", CPUsPerTask: 4}); err != nil || id != "81" {
		t.Fatalf("with --cpus-per-task: %q %v", id, err)
	}
	// an array element submitted again: that one task of an array
	three := 3
	c, _ = newScript(t, call{argv: "sbatch --parsable --export=NONE --array=3", stdout: "80\n"})
	if id, err := c.SubmitWith(context.Background(), []byte("#!/bin/sh\ntrue\n"), SubmitSpec{ArrayTask: &three}); err != nil || id != "80" {
		t.Fatalf("with --array: %q %v", id, err)
	}
	// another cluster of the same slurmdbd: sbatch --clusters, whose
	// --parsable answer is "id;cluster"
	c, _ = newScript(t, call{argv: "sbatch --parsable --export=NONE --partition=gpu --clusters=lab2", stdout: "79;lab2\n"})
	if id, err := c.SubmitWith(context.Background(), []byte("#!/bin/sh\ntrue\n"), SubmitSpec{Partition: "gpu", Cluster: "lab2"}); err != nil || id != "79" {
		t.Fatalf("with --clusters: %q %v", id, err)
	}
	for _, bad := range []SubmitSpec{{Partition: "a;b"}, {Gres: "gpu:1 --uid=0"}, {Comment: "a\nb"}, {TimeLimit: -1}, {Chdir: "run"}, {Chdir: "/a\nb"},
		{Cluster: "lab,lab2"}, {Cluster: "-M"}, {Cluster: "a b"}} {
		c, _ := newScript(t)
		if _, err := c.SubmitWith(context.Background(), []byte("#!/bin/sh\n"), bad); !errors.Is(err, ErrInvalid) {
			t.Errorf("%+v: %v", bad, err)
		}
	}
}

// TestSubmitWithInvalid: each invalid field is refused with an error that
// names it, the first in sbatchArgs' order when several are.
func TestSubmitWithInvalid(t *testing.T) {
	long := "/" + strings.Repeat("d", 4096)
	for _, c := range []struct {
		spec SubmitSpec
		want string
	}{
		{SubmitSpec{User: "a b"}, `user "a b"`},
		{SubmitSpec{Partition: "a;b"}, `partition "a;b"`},
		{SubmitSpec{Gres: "gpu:1 --uid=0"}, `gres "gpu:1 --uid=0"`},
		{SubmitSpec{Gres: "gpu=1"}, `gres "gpu=1"`},
		{SubmitSpec{TimeLimit: -time.Second}, `time limit -1s`},
		{SubmitSpec{CPUsPerTask: -2}, `cpus per task -2`},
		{SubmitSpec{Cluster: "-M"}, `cluster "-M"`},
		{SubmitSpec{ArrayTask: new(int(-1))}, `array task -1`},
		{SubmitSpec{Comment: "a\x00b"}, `comment "a\x00b"`},
		{SubmitSpec{Comment: strings.Repeat("c", 1025)}, `comment "` + strings.Repeat("c", 1025) + `"`},
		{SubmitSpec{Chdir: "run"}, `working directory "run": want an absolute path without control characters`},
		{SubmitSpec{Chdir: "/a\x7fb"}, `working directory "/a\x7fb": want an absolute path without control characters`},
		{SubmitSpec{Chdir: long}, fmt.Sprintf("working directory %q: want an absolute path without control characters", long)},
		{SubmitSpec{Env: []string{"SBATCH_X=\t"}}, `sbatch environment "SBATCH_X=\t": want SBATCH_NAME=value without control characters`},
		{SubmitSpec{Partition: "a b", Cluster: "-M", Chdir: "run"}, `partition "a b"`},
		{SubmitSpec{Hold: true, IgnorePBS: true, Comment: "\n", Env: []string{"X"}}, `comment "\n"`},
	} {
		c0, _ := newScript(t)
		_, err := c0.SubmitWith(context.Background(), []byte("#!/bin/sh\n"), c.spec)
		if want := ErrInvalid.Error() + ": " + c.want; err == nil || !errors.Is(err, ErrInvalid) || err.Error() != want {
			t.Errorf("%+v: %v, want %s", c.spec, err, want)
		}
	}
	// a comment of 1024 bytes and a working directory of 4096 pass
	c, _ := newScript(t, call{argv: "sbatch --parsable --export=NONE --comment=" + strings.Repeat("c", 1024) + " --chdir=" + long[:4096], stdout: "80\n"})
	if id, err := c.SubmitWith(context.Background(), []byte("#!/bin/sh\n"), SubmitSpec{Comment: strings.Repeat("c", 1024), Chdir: long[:4096]}); err != nil || id != "80" {
		t.Errorf("at the limits: %q %v", id, err)
	}
}

func TestClusterName(t *testing.T) {
	c, _ := newScript(t, call{argv: "scontrol show config", stdout: "Configuration data as of 2026-11-22T03:00:00\nAccountingStorageBackupHost = (null)\nClusterName             = lab\nSlurmUser = slurm(64030)\n"})
	if name, err := c.ClusterName(context.Background()); err != nil || name != "lab" {
		t.Errorf("%q %v", name, err)
	}
}

// TestSubmitWithEnv runs a fake sbatch through the real ExecRunner: the
// spec's SBATCH_* variables reach it, our own process's are still removed.
func TestSubmitWithEnv(t *testing.T) {
	t.Setenv("SBATCH_PARTITION", "gpu") // ours: never passed on
	dir := t.TempDir()
	record := filepath.Join(dir, "env")
	fake := filepath.Join(dir, "sbatch")
	if err := os.WriteFile(fake, []byte("#!/bin/sh\nenv | grep '^SBATCH_' | sort > '"+record+"'\necho 9\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	c := &Client{Sbatch: fake}
	id, err := c.SubmitWith(context.Background(), []byte("#!/bin/sh\n"), SubmitSpec{Env: []string{"SBATCH_ACCOUNT=physics", "SBATCH_RESERVATION=r 1"}})
	if err != nil || id != "9" {
		t.Fatalf("%q %v", id, err)
	}
	got, err := os.ReadFile(record)
	if err != nil {
		t.Fatal(err)
	}
	if want := "SBATCH_ACCOUNT=physics\nSBATCH_RESERVATION=r 1\n"; string(got) != want {
		t.Errorf("sbatch saw %q, want %q", got, want)
	}
	for _, bad := range [][]string{{"SLURM_CONF=/tmp/x"}, {"SBATCH_ACCOUNT"}, {"SBATCH_ACCOUNT=a\nb"}, {"sbatch_account=a"}} {
		if _, err := c.SubmitWith(context.Background(), []byte("#!/bin/sh\n"), SubmitSpec{Env: bad}); !errors.Is(err, ErrInvalid) {
			t.Errorf("%q: %v", bad, err)
		}
	}
	// a runner that cannot pass an environment refuses rather than drop it
	c.Runner = RunnerFunc(func(context.Context, string, []string, []byte) ([]byte, error) { return []byte("1\n"), nil })
	if _, err := c.SubmitWith(context.Background(), []byte("#!/bin/sh\n"), SubmitSpec{Env: []string{"SBATCH_ACCOUNT=a"}}); err == nil {
		t.Error("env dropped silently by a plain Runner")
	}
}

// TestSetAdminComment: the text is one argument of scontrol update, never
// split or run through a shell; more than one line is refused.
func TestSetAdminComment(t *testing.T) {
	t.Parallel()
	var got [][]string
	c := &Client{Runner: RunnerFunc(func(_ context.Context, name string, args []string, _ []byte) ([]byte, error) {
		got = append(got, append([]string{name}, args...))
		return nil, nil
	})}
	text := "isched: asked 32 GiB, used 6.1 GiB peak: ask --mem=8G next time; $(reboot) JobId=1"
	if err := c.SetAdminComment(context.Background(), "42", text); err != nil {
		t.Fatal(err)
	}
	want := []string{"scontrol", "update", "JobId=42", "AdminComment=" + text}
	if len(got) != 1 || strings.Join(got[0], "\x00") != strings.Join(want, "\x00") {
		t.Errorf("ran %q, want %q", got, want)
	}
	for _, bad := range []struct{ id, text string }{{"42", "a\nb"}, {"42", strings.Repeat("x", 1025)}, {"4 2", "x"}} {
		if err := c.SetAdminComment(context.Background(), bad.id, bad.text); !errors.Is(err, ErrInvalid) {
			t.Errorf("SetAdminComment(%q, %.20q) = %v, want ErrInvalid", bad.id, bad.text, err)
		}
	}
	if len(got) != 1 {
		t.Errorf("refused input reached scontrol: %q", got[1:])
	}
}

// TestBatchScript: `scontrol write batch_script <id> -` as Slurm 22.05
// answers it (captured on the dev cluster).
func TestBatchScript(t *testing.T) {
	script := "#!/bin/sh\n#SBATCH --time=1\necho hi\n"
	c, _ := newScript(t, call{argv: "scontrol write batch_script 790 -", stdout: script})
	if b, err := c.BatchScript(context.Background(), "790"); err != nil || string(b) != script {
		t.Errorf("BatchScript = %q, %v", b, err)
	}
	c, _ = newScript(t, call{argv: "scontrol write batch_script 999999 -", stderr: "job script retrieval failed: Invalid job id specified", code: 1})
	if _, err := c.BatchScript(context.Background(), "999999"); !errors.Is(err, ErrNotFound) {
		t.Errorf("a job slurmctld forgot: %v, want ErrNotFound", err)
	}
	c, _ = newScript(t, call{argv: "scontrol write batch_script 791 -", stdout: "\n"})
	if _, err := c.BatchScript(context.Background(), "791"); !errors.Is(err, ErrInvalid) {
		t.Errorf("no script: %v, want ErrInvalid", err)
	}
	if _, err := c.BatchScript(context.Background(), "7 1"); !errors.Is(err, ErrInvalid) {
		t.Errorf("a bad job id: %v", err)
	}
}

func TestCPUsFor(t *testing.T) {
	one, four := &JobInfo{Fields: map[string]string{"NumTasks": "1", "CPUs/Task": "3"}}, &JobInfo{Fields: map[string]string{"NumTasks": "4"}}
	for _, tc := range []struct {
		name        string
		j           *JobInfo
		cpus, tasks int
		want        int
		kept        bool
	}{
		{"one-task job", one, 2, 0, 2, false},
		{"nothing asked", one, 0, 0, 0, false},
		{"several tasks, no resize: kept", four, 2, 0, 0, true},
		{"several tasks, nothing asked", four, 0, 0, 0, false},
		{"resize with CPUs", four, 2, 2, 2, false},
		{"resize keeps the job's own", one, 0, 4, 3, false},
		{"resize, job without CPUs/Task", four, 0, 2, 1, false},
		{"unknown job", nil, 2, 0, 2, false},
		{"unknown job resized", nil, 0, 2, 0, false},
	} {
		if n, kept := CPUsFor(tc.j, tc.cpus, tc.tasks); n != tc.want || kept != tc.kept {
			t.Errorf("%s: CPUsFor = %d, %v; want %d, %v", tc.name, n, kept, tc.want, tc.kept)
		}
	}
}
