package agent

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/isched/isched/internal/report"
	"github.com/isched/isched/internal/slurm"
)

const planComment = "isched:v1 lineage=lab-u1001-train-ab12 ideal=cpu total=3000"

// scriptEnv is an agent with a script store over a fake Slurm holding job
// 12 of alice, an isched job with a plan, whose script the agent saved at
// its first sight.
func scriptEnv(t *testing.T) (*env, *Agent, string) {
	t.Helper()
	e := newEnv(t)
	j := e.slurm.addJob("12", "comment="+planComment, "state=COMPLETED")
	j.Fields["WorkDir"] = "/home/alice/run 1"
	a, dir := scriptAgent(t, e)
	return e, a, dir
}

// scriptAgent is an agent of e with a script store (its directory
// returned) that has seen the fake Slurm's jobs once.
func scriptAgent(t *testing.T, e *env) (*Agent, string) {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "scripts")
	cfg := e.config()
	cfg.ScriptDir = dir
	a, err := New(cfg, e.slurm, e.rdb)
	if err != nil {
		t.Fatal(err)
	}
	if a.scripts == nil {
		t.Fatal("script store not opened")
	}
	jobs, _ := e.slurm.Jobs(context.Background())
	a.saveNew(context.Background(), jobs)
	return a, dir
}

func (e *env) resubmitAction(mod ...func(*report.Action)) *report.Action {
	return e.action(report.ActionResubmit, 12, append([]func(*report.Action){func(a *report.Action) {
		a.Lineage, a.Partition, a.TimeLimitMin = "lab-u1001-train-ab12", "cpu", 20
	}}, mod...)...)
}

// TestResubmitForgottenJob: once slurmctld forgot job 12, a resubmit
// action submits its saved script again as alice, in its working
// directory, with its comment (the lineage) and the action's partition
// and time limit.
func TestResubmitForgottenJob(t *testing.T) {
	e, a, dir := scriptEnv(t)
	saved := e.slurm.count("batch_script 12")
	fi, err := os.Stat(filepath.Join(dir, "job-12.json"))
	if err != nil || saved != 1 || fi.Mode().Perm() != 0o600 {
		t.Fatalf("saved script: %v (mode %v), batch_script calls %d", err, fi, saved)
	}
	jobs, _ := e.slurm.Jobs(context.Background())
	a.saveNew(context.Background(), jobs) // seen: not fetched again
	if n := e.slurm.count("batch_script"); n != 1 {
		t.Errorf("batch_script called %d times for one job", n)
	}
	script, _ := e.slurm.BatchScript(context.Background(), "12")
	e.slurm.mu.Lock()
	delete(e.slurm.jobs, "12") // MinJobAge passed
	e.slurm.mu.Unlock()

	act := e.resubmitAction()
	e.send(act)
	if _, err := drain(context.Background(), a); err != nil {
		t.Fatal(err)
	}
	r := e.resultFor(act.ID)
	if r.Status != report.StatusOK || r.NewJobID != 501 || !strings.Contains(r.Message, "resubmitted job 12 as job 501 (alice, in /home/alice/run 1)") {
		t.Fatalf("result %+v", r)
	}
	e.slurm.mu.Lock()
	spec, got := e.slurm.lastSubmit, e.slurm.lastScript
	e.slurm.mu.Unlock()
	if spec.User != "alice" || spec.Chdir != "/home/alice/run 1" || spec.Comment != planComment || spec.Partition != "cpu" || spec.TimeLimit != 20*time.Minute || !spec.IgnorePBS {
		t.Errorf("submitted with %+v", spec)
	}
	if got != string(script) {
		t.Errorf("submitted script %q, want the saved %q", got, script)
	}
}

// resubmitted sends act to the agent, checks that it succeeded and returns
// the sbatch submission it made.
func resubmitted(t *testing.T, e *env, a *Agent, act *report.Action) slurm.SubmitSpec {
	t.Helper()
	e.send(act)
	if _, err := drain(context.Background(), a); err != nil {
		t.Fatal(err)
	}
	if r := e.resultFor(act.ID); r.Status != report.StatusOK {
		t.Fatalf("result %+v", r)
	}
	e.slurm.mu.Lock()
	defer e.slurm.mu.Unlock()
	return e.slurm.lastSubmit
}

// A script from Torque keeps its #PBS resources when resubmitted (no
// --ignore-pbs); its privileged #PBS lines are refused (TestResubmitRefusals).
func TestResubmitKeepsPBSResources(t *testing.T) {
	e, a, dir := scriptEnv(t)
	savedScript("#!/bin/bash\n#PBS -l walltime=1:00:00,nice=5 -p 10\nexec srun train\n")(t, e, dir)
	if resubmitted(t, e, a, e.resubmitAction()).IgnorePBS {
		t.Errorf("submitted with --ignore-pbs: the script's #PBS resources would be lost")
	}
}

func TestResubmitRefusals(t *testing.T) {
	cases := []struct {
		name  string
		setup func(t *testing.T, e *env, dir string)
		mod   func(*report.Action)
		msg   string
	}{
		{"another user's forgotten job", func(t *testing.T, e *env, dir string) {
			e.slurm.mu.Lock()
			delete(e.slurm.jobs, "12")
			e.slurm.mu.Unlock()
		},
			func(a *report.Action) { a.User = "bob" }, `belongs to "alice", not "bob"`},
		{"another user's ended job", nil, func(a *report.Action) { a.User = "bob" }, `belongs to "alice", not "bob"`},
		{"another lineage", func(t *testing.T, e *env, dir string) {
			e.slurm.mu.Lock()
			delete(e.slurm.jobs, "12")
			e.slurm.mu.Unlock()
		},
			func(a *report.Action) { a.Lineage = "lab-u1001-other-cd34" }, `was of lineage "lab-u1001-train-ab12"`},
		{"still running: a requeue continues it", func(t *testing.T, e *env, dir string) { e.slurm.jobs["12"].State = "RUNNING" }, nil,
			"is RUNNING and slurmctld still holds it"},
		{"cancelled", func(t *testing.T, e *env, dir string) { e.slurm.jobs["12"].State = "CANCELLED" }, nil, "is CANCELLED"},
		{"no saved script", func(t *testing.T, e *env, dir string) {
			e.slurm.mu.Lock()
			delete(e.slurm.jobs, "12")
			e.slurm.mu.Unlock()
			if err := os.Remove(filepath.Join(dir, "job-12.json")); err != nil {
				t.Fatal(err)
			}
		}, nil, "has no saved batch script"},
		{"a script with lines only a privileged user may use", savedScript("#!/bin/bash\n#SBATCH --nice=-10000\n#SBATCH --prio=4000000\nexec srun train\n"), nil,
			"only a privileged user may (line 2: --nice=-10000; line 3: --prio=4000000)"},
		{"a quoted priority", savedScript("#!/bin/bash\n#SBATCH \"--priority=4000000\"\nexec srun train\n"), nil, "(line 2: --priority=4000000)"},
		{"an escaped priority", savedScript("#!/bin/bash\n#SBATCH --pr\\iority=3000000\nexec srun train\n"), nil, "(line 2: --priority=3000000)"},
		{"a #PBS priority", savedScript("#!/bin/bash\n#PBS -p -10000\nexec srun train\n"), nil, "(line 2: #PBS -p -10000)"},
		{"an unmatched quote", savedScript("#!/bin/bash\n#SBATCH '--nice=-5\nexec srun train\n"), nil, "line 2: unmatched '"},
		{"a saved file others may read is not trusted", func(t *testing.T, e *env, dir string) {
			if err := os.Chmod(filepath.Join(dir, "job-12.json"), 0o644); err != nil {
				t.Fatal(err)
			}
		}, nil, "not the agent's own private file"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			e, a, dir := scriptEnv(t)
			if c.setup != nil {
				c.setup(t, e, dir)
			}
			var mods []func(*report.Action)
			if c.mod != nil {
				mods = append(mods, c.mod)
			}
			act := e.resubmitAction(mods...)
			e.send(act)
			if _, err := drain(context.Background(), a); err != nil {
				t.Fatal(err)
			}
			r := e.resultFor(act.ID)
			if r.Status != report.StatusRefused || !strings.Contains(r.Message, c.msg) {
				t.Errorf("result %+v, want refused ~%q", r, c.msg)
			}
			if n := e.slurm.count("submit"); n != 0 {
				t.Errorf("sbatch ran %d times", n)
			}
		})
	}
}

// savedScript replaces the saved script of job 12 (which slurmctld has
// forgotten).
func savedScript(script string) func(t *testing.T, e *env, dir string) {
	return func(t *testing.T, e *env, dir string) {
		e.slurm.mu.Lock()
		delete(e.slurm.jobs, "12")
		e.slurm.mu.Unlock()
		p := filepath.Join(dir, "job-12.json")
		b, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		var rec map[string]any
		if err := json.Unmarshal(b, &rec); err != nil {
			t.Fatal(err)
		}
		rec["script"] = script
		b, _ = json.Marshal(rec)
		if err := os.WriteFile(p, b, 0o600); err != nil {
			t.Fatal(err)
		}
	}
}

// Without a script directory nothing is saved and resubmits are refused.
func TestResubmitOff(t *testing.T) {
	e := newEnv(t)
	e.slurm.addJob("12", "comment="+planComment, "state=COMPLETED")
	a := e.agent(nil)
	jobs, _ := e.slurm.Jobs(context.Background())
	a.saveNew(context.Background(), jobs)
	act := e.resubmitAction()
	e.send(act)
	if _, err := drain(context.Background(), a); err != nil {
		t.Fatal(err)
	}
	if r := e.resultFor(act.ID); r.Status != report.StatusRefused || !strings.Contains(r.Message, "saves no batch scripts") {
		t.Errorf("result %+v", r)
	}
	if n := e.slurm.count("batch_script"); n != 0 {
		t.Errorf("batch_script called %d times with no store", n)
	}
}

func TestScriptStoreChecks(t *testing.T) {
	open := t.TempDir()
	if err := os.Chmod(open, 0o755); err != nil {
		t.Fatal(err)
	}
	if _, err := openScriptStore(open, 0); err == nil || !strings.Contains(err.Error(), "chmod 0700") {
		t.Errorf("a directory others may read: %v", err)
	}
	if _, err := openScriptStore("rel/dir", 0); err == nil {
		t.Error("a relative directory accepted")
	}
	// jobs without a plan are not saved: they cannot name their lineage
	e := newEnv(t)
	e.slurm.addJob("13", "comment=isched")
	scriptAgent(t, e)
	if n := e.slurm.count("batch_script"); n != 0 {
		t.Errorf("a job without a plan: batch_script called %d times", n)
	}
}

// TestScriptStoreSweep: a saved script goes once the TTL passed since the
// last sweep that saw its job in the job table; a job listed for longer
// than the TTL (a long run) keeps it.
func TestScriptStoreSweep(t *testing.T) {
	_, a, dir := scriptEnv(t)
	p := filepath.Join(dir, "job-12.json")
	now := time.Now()
	if err := a.scripts.sweep(now, nil); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(p); err != nil {
		t.Fatalf("a fresh script swept: %v", err)
	}
	// listed at each sweep for two TTLs: kept
	listed := map[uint64]bool{12: true}
	at := now
	for range 4 {
		at = at.Add(DefaultScriptTTL / 2)
		if err := a.scripts.sweep(at, listed); err != nil {
			t.Fatal(err)
		}
		if _, err := os.Stat(p); err != nil {
			t.Fatalf("the script of a job still listed swept at +%s: %v", at.Sub(now), err)
		}
	}
	// the job left the table: the TTL counts from the last sweep that saw it
	if err := a.scripts.sweep(at.Add(DefaultScriptTTL-time.Hour), nil); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(p); err != nil {
		t.Fatalf("swept before the TTL passed since the job was last listed: %v", err)
	}
	if err := a.scripts.sweep(at.Add(DefaultScriptTTL+time.Hour), map[uint64]bool{13: true}); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(p); !os.IsNotExist(err) {
		t.Errorf("a script older than the TTL kept: %v", err)
	}
}

// An agent stopped during sbatch finds the resubmission by the lineage's
// comment on a newer job of the same user, or says it is not done again.
func TestRecoverResubmit(t *testing.T) {
	e, a, _ := scriptEnv(t)
	act := e.resubmitAction()
	if r, err := a.recoverResubmit(context.Background(), act); err != nil || r.Status != report.StatusFailed {
		t.Fatalf("no new job: %+v, %v", r, err)
	}
	e.slurm.addJob("40", "comment="+planComment, "state=PENDING")
	r, err := a.recoverResubmit(context.Background(), act)
	if err != nil || r.Status != report.StatusOK || r.NewJobID != 40 {
		t.Errorf("new job 40: %+v, %v", r, err)
	}
}

// TestResubmitArrayElement: an element of `isched submit --array` is a
// lineage of its own ("_<task>"); submitted again, it is that one task of
// an array (--array=3), so its script gives the wrapper the same lineage
// and checkpoint directory. After an agent restart, the resubmission is
// the new job of that element, not another element's with the same
// comment.
func TestResubmitArrayElement(t *testing.T) {
	e := newEnv(t)
	e.slurm.addJob("14", "comment="+planComment, "state=COMPLETED", "array=11_3")
	a, _ := scriptAgent(t, e)
	act := e.action(report.ActionResubmit, 14, func(a *report.Action) {
		a.Lineage, a.Partition, a.TimeLimitMin = "lab-u1001-train-ab12_3", "cpu", 20
	})
	e.slurm.addJob("40", "comment="+planComment, "state=PENDING", "array=40_4") // another element's
	if r, err := a.recoverResubmit(context.Background(), act); err != nil || r.Status != report.StatusFailed {
		t.Errorf("element 4's job taken for element 3's resubmission: %+v, %v", r, err)
	}
	spec := resubmitted(t, e, a, act)
	if spec.ArrayTask == nil || *spec.ArrayTask != 3 || spec.Comment != planComment {
		t.Errorf("submitted with array task %v, comment %q; want task 3 and the array's comment", spec.ArrayTask, spec.Comment)
	}
	// Slurm 22.05 lists the new job, until it starts, as a pending rest of
	// one task ("41_[3]" in squeue): that is element 3's resubmission
	e.slurm.addJob("41", "comment="+planComment, "state=PENDING", "rest=3")
	if r, err := a.recoverResubmit(context.Background(), act); err != nil || r.Status != report.StatusOK || r.NewJobID != 41 {
		t.Errorf("the pending rest [3] not taken for element 3's resubmission: %+v, %v", r, err)
	}
}

// TestResubmitLastElement: an element Slurm still lists as the array's
// pending rest of one task (the last element keeps the array's job id) is
// saved as that element, so it goes again as --array=<task>, not as the
// script's whole #SBATCH --array.
func TestResubmitLastElement(t *testing.T) {
	e := newEnv(t)
	e.slurm.addJob("11", "comment="+planComment, "state=PENDING", "rest=3")
	a, _ := scriptAgent(t, e)
	e.slurm.mu.Lock()
	delete(e.slurm.jobs, "11") // it ran, ended and slurmctld forgot it
	e.slurm.mu.Unlock()
	act := e.action(report.ActionResubmit, 11, func(a *report.Action) {
		a.Lineage, a.Partition, a.TimeLimitMin = "lab-u1001-train-ab12_3", "cpu", 20
	})
	spec := resubmitted(t, e, a, act)
	if spec.ArrayTask == nil || *spec.ArrayTask != 3 {
		t.Errorf("submitted with array task %v, want 3", spec.ArrayTask)
	}
}
