package agent

import (
	"context"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/isched/isched/internal/report"
)

const twinLineage = "lab-u1001-train-ab12"

// twinEnv is scriptEnv with job 12 running on cpu (off its ideal gpu).
func twinEnv(t *testing.T) (*env, *Agent) {
	t.Helper()
	e := newEnv(t)
	j := e.slurm.addJob("12", "comment="+planComment, "state=RUNNING", "partition=cpu")
	j.Fields["WorkDir"] = "/home/alice/run 1"
	a, _ := scriptAgent(t, e)
	return e, a
}

func (e *env) twinAction(mod ...func(*report.Action)) *report.Action {
	return e.action(report.ActionTwin, 12, append([]func(*report.Action){func(a *report.Action) {
		a.Lineage, a.Partition, a.Gres, a.CPUs, a.TimeLimitMin = twinLineage, "gpu", "gpu:1", 4, 90
	}}, mod...)...)
}

// run sends act, lets the agent run it and returns its result.
func (e *env) run(t *testing.T, a *Agent, act *report.Action) report.Result {
	t.Helper()
	e.send(act)
	if _, err := drain(context.Background(), a); err != nil {
		t.Fatal(err)
	}
	return *e.resultFor(act.ID)
}

// TestTwinSubmitsTheRunningJobsScript: a twin action submits the saved
// script of running job 12 once more as alice, pending on gpu with the
// action's GRES, CPUs per task and time limit, with the job's comment (its
// lineage); job 12 runs on.
func TestTwinSubmitsTheRunningJobsScript(t *testing.T) {
	e, a := twinEnv(t)
	script, _ := e.slurm.BatchScript(context.Background(), "12")
	r := e.run(t, a, e.twinAction())
	if r.Status != report.StatusOK || r.NewJobID != 501 || !strings.Contains(r.Message, "submitted job 12's twin as job 501 (alice, in /home/alice/run 1)") {
		t.Fatalf("result %+v", r)
	}
	e.slurm.mu.Lock()
	spec, got := e.slurm.lastSubmit, e.slurm.lastScript
	e.slurm.mu.Unlock()
	if spec.User != "alice" || spec.Partition != "gpu" || spec.Gres != "gpu:1" || spec.CPUsPerTask != 4 || spec.TimeLimit != 90*time.Minute ||
		spec.Comment != planComment || spec.Chdir != "/home/alice/run 1" || spec.Hold {
		t.Errorf("submitted with %+v", spec)
	}
	if got != string(script) {
		t.Errorf("submitted script %q, want the saved %q", got, script)
	}
	if s := e.slurm.job("12").State; s != "RUNNING" {
		t.Errorf("job 12 is %s after its twin's submission, want RUNNING", s)
	}
}

// TestTwinRefusals: no twin for a job that is not running, another user's,
// another lineage's, or without a saved script; sbatch never runs.
func TestTwinRefusals(t *testing.T) {
	cases := []struct {
		name  string
		setup func(e *env, a *Agent)
		mod   func(*report.Action)
		msg   string
	}{
		{"pending", func(e *env, _ *Agent) { e.slurm.jobs["12"].State = "PENDING" }, nil, "job 12 is PENDING, not running: a twin keeps the place of a running job"},
		{"ended", func(e *env, _ *Agent) { e.slurm.jobs["12"].State = "COMPLETED" }, nil, "job 12 already ended (COMPLETED): nothing to twin"},
		{"bob asks for alice's job", nil, func(a *report.Action) { a.User = "bob" }, `job 12 belongs to "alice", not "bob"`},
		{"another lineage", nil, func(a *report.Action) { a.Lineage = "lab-u1001-other-cd34" }, `it was of lineage "lab-u1001-train-ab12"`},
		{"no saved script", func(_ *env, a *Agent) { os.Remove(a.scripts.path(12)) }, nil, "job 12 cannot be given a twin: the agent has no saved batch script of it"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			e, a := twinEnv(t)
			if c.setup != nil {
				e.slurm.mu.Lock()
				c.setup(e, a)
				e.slurm.mu.Unlock()
			}
			var mods []func(*report.Action)
			if c.mod != nil {
				mods = append(mods, c.mod)
			}
			r := e.run(t, a, e.twinAction(mods...))
			if r.Status != report.StatusRefused || !strings.Contains(r.Message, c.msg) {
				t.Errorf("result %+v, want refused ~%q", r, c.msg)
			}
			if n := e.slurm.count("submit"); n != 0 {
				t.Errorf("sbatch ran %d times", n)
			}
		})
	}
}

// TestTwinRecoveredAfterRestart: the agent stopped during the twin's
// sbatch; the next one finds the queued twin (a job of alice's lineage
// after job 12) and does not submit another.
func TestTwinRecoveredAfterRestart(t *testing.T) {
	e, a := twinEnv(t)
	e.slurm.addJob("30", "comment="+planComment, "state=CANCELLED", "partition=gpu") // an earlier twin, gone
	e.slurm.addJob("31", "comment="+planComment, "state=PENDING", "partition=gpu")
	act := e.twinAction()
	r, err := a.recoverResubmit(context.Background(), act)
	if err != nil || r.Status != report.StatusOK || r.NewJobID != 31 || !strings.Contains(r.Message, "submitted job 12's twin as job 31") {
		t.Fatalf("recovered %+v, %v; want job 31", r, err)
	}
	if n := e.slurm.count("submit"); n != 0 {
		t.Errorf("sbatch ran %d times", n)
	}
}

func (e *env) handoverAction(mod ...func(*report.Action)) *report.Action {
	return e.action(report.ActionHandover, 12, append([]func(*report.Action){func(a *report.Action) {
		a.Lineage, a.TwinJobID = twinLineage, 31
	}}, mod...)...)
}

// TestHandover: job 12 is cancelled once its twin 31 runs; an attempt that
// ended of itself is handed over as it is; a twin that is not running, is
// gone, is another user's or names another lineage refuses the handover,
// and job 12 goes on.
func TestHandover(t *testing.T) {
	cases := []struct {
		name      string
		job, twin []string // addJob's extras; twin nil: no job 31
		status    report.ResultStatus
		msg       string
		cancelled bool
	}{
		{"twin running", nil, []string{"state=RUNNING"}, report.StatusOK, "cancelled job 12: its twin 31 takes over from its checkpoint", true},
		{"attempt ended after saving", []string{"state=COMPLETED"}, []string{"state=RUNNING"}, report.StatusOK, "job 12 is COMPLETED already: its twin 31 takes over", false},
		{"twin pending", nil, []string{"state=PENDING"}, report.StatusRefused, "twin job 31 is PENDING, not running: job 12 goes on", false},
		{"twin gone", nil, nil, report.StatusRefused, "twin job 31 is gone: job 12 goes on", false},
		{"twin is bob's", nil, []string{"state=RUNNING", "user=bob"}, report.StatusRefused, `twin job 31 belongs to "bob", not "alice"`, false},
		{"twin of another lineage", nil, []string{"state=RUNNING", "comment=isched:v1 lineage=lab-u1001-other-cd34 ideal=gpu"}, report.StatusRefused,
			`twin job 31 does not name lineage "lab-u1001-train-ab12"`, false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			e := newEnv(t)
			e.slurm.addJob("12", append([]string{"comment=" + planComment, "state=RUNNING"}, c.job...)...)
			if c.twin != nil {
				e.slurm.addJob("31", append([]string{"comment=" + planComment, "partition=gpu"}, c.twin...)...)
			}
			r := e.run(t, e.agent(nil), e.handoverAction())
			if r.Status != c.status || !strings.Contains(r.Message, c.msg) {
				t.Errorf("result %+v, want %s ~%q", r, c.status, c.msg)
			}
			if got := e.slurm.count("cancel 12"); got != map[bool]int{true: 1}[c.cancelled] {
				t.Errorf("job 12 cancelled %d times", got)
			}
			if n := e.slurm.count("cancel 31"); n != 0 {
				t.Errorf("the twin was cancelled")
			}
		})
	}
}
