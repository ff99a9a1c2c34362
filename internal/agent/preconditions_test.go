package agent

import (
	"fmt"
	"testing"

	"github.com/isched/isched/internal/report"
	"github.com/isched/isched/internal/slurm"
)

// TestPreconditionsByState checks every action type against jobs in each
// state, owned by the action's user and opted in.
func TestPreconditionsByState(t *testing.T) {
	t.Parallel()
	states := []slurm.JobState{slurm.StatePending, slurm.StateRunning, slurm.StateSuspended, slurm.StateCompleting,
		slurm.StateCompleted, slurm.StateCancelled, slurm.StateTimeout}
	notState := func(why string) func(slurm.JobState) string {
		return func(s slurm.JobState) string { return fmt.Sprintf("job 7 is %s, %s", s, why) }
	}
	endedNothingTo := func(t report.ActionType) func(slurm.JobState) string {
		return func(s slurm.JobState) string { return fmt.Sprintf("job 7 already ended (%s): nothing to %s", s, t) }
	}
	allowed := func(slurm.JobState) string { return "" }
	type rule struct{ live, ended func(slurm.JobState) string }
	// only refuses every live state but s.
	only := func(s slurm.JobState, why string) func(slurm.JobState) string {
		return func(got slurm.JobState) string {
			if got == s {
				return ""
			}
			return notState(why)(got)
		}
	}
	want := map[report.ActionType]rule{
		report.ActionSignal: {only(slurm.StateRunning, "not running: nothing to signal"), endedNothingTo(report.ActionSignal)},
		report.ActionRequeue: {
			func(s slurm.JobState) string {
				if s == slurm.StateRunning {
					return ""
				}
				return fmt.Sprintf("job 7 is %s: requeue needs a running job (or a pending one and a new partition, gres or time limit)", s)
			},
			endedNothingTo(report.ActionRequeue),
		},
		report.ActionUpdate:  {allowed, endedNothingTo(report.ActionUpdate)},
		report.ActionCancel:  {allowed, endedNothingTo(report.ActionCancel)},
		report.ActionRelease: {only(slurm.StatePending, "not pending: nothing to release"), endedNothingTo(report.ActionRelease)},
		report.ActionAnnotate: {allowed, func(s slurm.JobState) string {
			return fmt.Sprintf("job 7 already ended (%s): Slurm keeps no AdminComment change after a job's end", s)
		}},
		report.ActionResubmit: {
			func(s slurm.JobState) string {
				return fmt.Sprintf("job 7 is %s and slurmctld still holds it: not resubmitted (a requeue continues it, a cancelled one is over)", s)
			},
			func(s slurm.JobState) string {
				if s == slurm.StateCancelled {
					return fmt.Sprintf("job 7 is %s and slurmctld still holds it: not resubmitted (a requeue continues it, a cancelled one is over)", s)
				}
				return ""
			},
		},
		report.ActionSubmit:   {allowed, allowed},
		report.ActionTwin:     {only(slurm.StateRunning, "not running: a twin keeps the place of a running job"), endedNothingTo(report.ActionTwin)},
		report.ActionHandover: {allowed, allowed},
	}
	for typ, r := range want {
		for _, s := range states {
			wantMsg := r.live(s)
			if s.Ended() {
				wantMsg = r.ended(s)
			}
			t.Run(string(typ)+"/"+string(s), func(t *testing.T) {
				t.Parallel()
				act := &report.Action{Type: typ, JobID: 7, User: "alice"}
				j := &slurm.JobInfo{JobID: "7", Name: "isched-train", User: "alice", State: string(s), Restarts: 2}
				if got := preconditionOf(typ).refusal(act, j, false); got != wantMsg {
					t.Errorf("refusal = %q, want %q", got, wantMsg)
				}
			})
		}
	}
	if len(want) != len(preconditions) {
		t.Errorf("the test covers %d action types, the table has %d", len(want), len(preconditions))
	}
}

// TestPreconditionCases checks what the state alone does not decide: the
// requeue's flags, ownership, opt-in, the order of the checks, root.
func TestPreconditionCases(t *testing.T) {
	t.Parallel()
	job := func(state slurm.JobState, user, name string) *slurm.JobInfo {
		return &slurm.JobInfo{JobID: "7", Name: name, User: user, State: string(state), Restarts: 2}
	}
	mine := func(state slurm.JobState) *slurm.JobInfo { return job(state, "alice", "isched-train") }
	action := func(typ report.ActionType, edit func(*report.Action)) *report.Action {
		a := &report.Action{Type: typ, JobID: 7, User: "alice"}
		if edit != nil {
			edit(a)
		}
		return a
	}
	ended := func(a *report.Action) { a.Ended = true }
	moved := func(a *report.Action) { a.Partition = "gpu" }
	tests := []struct {
		name      string
		act       *report.Action
		j         *slurm.JobInfo
		allowRoot bool
		want      string
	}{
		{"requeue ended completed", action(report.ActionRequeue, ended), mine(slurm.StateCompleted), false, ""},
		{"requeue ended timeout", action(report.ActionRequeue, ended), mine(slurm.StateTimeout), false, ""},
		{"requeue ended cancelled", action(report.ActionRequeue, ended), mine(slurm.StateCancelled), false,
			"job 7 already ended (CANCELLED): nothing to requeue"},
		{"requeue ended running", action(report.ActionRequeue, ended), mine(slurm.StateRunning), false, ""},
		{"requeue ended pending", action(report.ActionRequeue, ended), mine(slurm.StatePending), false,
			"job 7 is PENDING (restart 2): requeued already, by the job itself or by Slurm; nothing to do"},
		{"requeue ended pending moved", action(report.ActionRequeue, func(a *report.Action) { ended(a); moved(a) }), mine(slurm.StatePending), false, ""},
		{"requeue pending moved", action(report.ActionRequeue, moved), mine(slurm.StatePending), false, ""},
		{"requeue pending new time limit", action(report.ActionRequeue, func(a *report.Action) { a.TimeLimitMin = 30 }), mine(slurm.StatePending), false, ""},
		{"requeue pending new gres", action(report.ActionRequeue, func(a *report.Action) { a.Gres = "gpu:1" }), mine(slurm.StatePending), false, ""},
		{"requeue suspended moved", action(report.ActionRequeue, moved), mine(slurm.StateSuspended), false,
			"job 7 is SUSPENDED: requeue needs a running job (or a pending one and a new partition, gres or time limit)"},
		{"other user", action(report.ActionSignal, nil), job(slurm.StateRunning, "bob", "isched-train"), false,
			`job 7 belongs to "bob", not "alice"`},
		{"no user", action(report.ActionCancel, nil), job(slurm.StateRunning, "", "isched-train"), false,
			`job 7 belongs to "", not "alice"`},
		{"owner before state", action(report.ActionSignal, nil), job(slurm.StatePending, "bob", "isched-train"), false,
			`job 7 belongs to "bob", not "alice"`},
		{"ended before owner", action(report.ActionSignal, nil), job(slurm.StateCompleted, "bob", "isched-train"), false,
			"job 7 already ended (COMPLETED): nothing to signal"},
		{"not opted in", action(report.ActionUpdate, nil), job(slurm.StateRunning, "alice", "train"), false,
			`job 7 has not opted in to isched (its name must start with "isched" or its comment contain "isched")`},
		{"opted in by comment", action(report.ActionUpdate, nil), &slurm.JobInfo{Name: "train", Comment: "isched lineage=x", User: "alice", State: slurm.StateRunning}, false, ""},
		{"opt-in before state", action(report.ActionRelease, nil), job(slurm.StateRunning, "alice", "train"), false,
			`job 7 has not opted in to isched (its name must start with "isched" or its comment contain "isched")`},
		{"submit without a job", &report.Action{Type: report.ActionSubmit, User: "alice"}, nil, false, ""},
		{"submit as root", &report.Action{Type: report.ActionSubmit, User: "root"}, nil, false,
			"submit as root refused (Config.AllowRootSubmit is off)"},
		{"submit as root allowed", &report.Action{Type: report.ActionSubmit, User: "root"}, nil, true, ""},
		{"submit as root, job owner checked first", action(report.ActionSubmit, func(a *report.Action) { a.User = "root" }), mine(slurm.StateRunning), false,
			`job 7 belongs to "alice", not "root"`},
		{"resubmit as root", action(report.ActionResubmit, func(a *report.Action) { a.User = "root" }), nil, false, ""},
		{"resubmit of a forgotten job", action(report.ActionResubmit, nil), nil, false, ""},
		{"unknown type running", action("frob", nil), mine(slurm.StateRunning), false, ""},
		{"unknown type ended", action("frob", nil), mine(slurm.StateFailed), false, "job 7 already ended (FAILED): nothing to frob"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			if got := preconditionOf(tt.act.Type).refusal(tt.act, tt.j, tt.allowRoot); got != tt.want {
				t.Errorf("refusal = %q, want %q", got, tt.want)
			}
		})
	}
}

// TestPreconditionFlags pins which types replace their job (a job Slurm
// forgot is no refusal) and which wait for a COMPLETING job to settle.
func TestPreconditionFlags(t *testing.T) {
	t.Parallel()
	for typ, pc := range preconditions {
		replaces := typ == report.ActionSubmit || typ == report.ActionResubmit
		if pc.replaces != replaces {
			t.Errorf("%s: replaces = %v, want %v", typ, pc.replaces, replaces)
		}
		if settles := typ == report.ActionRequeue; pc.settles != settles {
			t.Errorf("%s: settles = %v, want %v", typ, pc.settles, settles)
		}
	}
}
