package agent

import (
	"fmt"

	"github.com/isched/isched/internal/report"
	"github.com/isched/isched/internal/slurm"
)

// precondition is what an action type asks of Slurm's view of its job
// before the agent runs it. A check returns "" when the action may go on,
// else why it is refused; checks see a job that exists (the action's
// decoding requires job_id for every type that is not pc.replaces).
type precondition struct {
	// replaces: the action makes a new job, so the job it names may be
	// gone (submit, resubmit).
	replaces bool
	// settles: with act.Ended, wait for a COMPLETING job to settle first.
	settles bool
	// ended checks the job's state against its being over; nil allows any.
	ended func(act *report.Action, j *slurm.JobInfo) string
	// state checks the state of a job known to be the user's and opted
	// in; nil allows any.
	state func(act *report.Action, j *slurm.JobInfo) string
	// asUser: the action runs a script as act.User, so root needs
	// Config.AllowRootSubmit.
	asUser bool
}

// preconditions by action type. A type missing here (none is: decoding
// refuses unknown types) gets unknownPrecondition, and run refuses it.
var preconditions = map[report.ActionType]precondition{
	report.ActionSignal:   {ended: nothingToDo, state: only(slurm.StateRunning, "not running: nothing to signal")},
	report.ActionRequeue:  {settles: true, ended: requeueEnded, state: requeueState},
	report.ActionUpdate:   {ended: nothingToDo, state: resizeFits},
	report.ActionCancel:   {ended: nothingToDo},
	report.ActionRelease:  {ended: nothingToDo, state: only(slurm.StatePending, "not pending: nothing to release")},
	report.ActionAnnotate: {ended: annotateEnded},
	report.ActionResubmit: {replaces: true, ended: resubmitHeld},
	report.ActionSubmit:   {replaces: true, asUser: true},
	report.ActionTwin:     {ended: nothingToDo, state: only(slurm.StateRunning, "not running: a twin keeps the place of a running job"), asUser: true},
	// a handover ends an attempt that may have ended of itself after its
	// checkpoint: any state (handover checks the twin)
	report.ActionHandover: {},
}

var unknownPrecondition = precondition{ended: nothingToDo}

func preconditionOf(t report.ActionType) precondition {
	if pc, ok := preconditions[t]; ok {
		return pc
	}
	return unknownPrecondition
}

// refusal checks act against j (nil when there is no job to check) and
// says why the action is refused, or "".
func (pc precondition) refusal(act *report.Action, j *slurm.JobInfo, allowRoot bool) string {
	if j != nil {
		if msg := check(pc.ended, act, j); msg != "" {
			return msg
		}
		if j.User == "" || j.User != act.User {
			return fmt.Sprintf("job %d belongs to %q, not %q", act.JobID, j.User, act.User)
		}
		if !OptedIn(j.Name, j.Comment) {
			return fmt.Sprintf("job %d has not opted in to isched (its name must start with \"isched\" or its comment contain \"isched\")", act.JobID)
		}
		if msg := check(pc.state, act, j); msg != "" {
			return msg
		}
	}
	if pc.asUser && isRoot(act.User) && !allowRoot {
		return "submit as root refused (Config.AllowRootSubmit is off)"
	}
	return ""
}

func check(f func(*report.Action, *slurm.JobInfo) string, act *report.Action, j *slurm.JobInfo) string {
	if f == nil {
		return ""
	}
	return f(act, j)
}

// only allows the one state s; else "job N is STATE, <why>".
func only(s slurm.JobState, why string) func(*report.Action, *slurm.JobInfo) string {
	return func(act *report.Action, j *slurm.JobInfo) string {
		if slurm.JobState(j.State) != s {
			return fmt.Sprintf("job %d is %s, %s", act.JobID, j.State, why)
		}
		return ""
	}
}

// nothingToDo refuses an ended job.
func nothingToDo(act *report.Action, j *slurm.JobInfo) string {
	if j.Ended() {
		return fmt.Sprintf("job %d already ended (%s): nothing to %s", act.JobID, j.State, act.Type)
	}
	return ""
}

func annotateEnded(act *report.Action, j *slurm.JobInfo) string {
	if j.Ended() {
		return fmt.Sprintf("job %d already ended (%s): Slurm keeps no AdminComment change after a job's end", act.JobID, j.State)
	}
	return ""
}

// resubmitHeld refuses a job slurmctld still holds: only an ended job that
// was not cancelled is resubmitted.
func resubmitHeld(act *report.Action, j *slurm.JobInfo) string {
	if !j.Ended() || j.State == slurm.StateCancelled {
		return fmt.Sprintf("job %d is %s and slurmctld still holds it: not resubmitted (a requeue continues it, a cancelled one is over)", act.JobID, j.State)
	}
	return ""
}

// requeueEnded allows an ended job only when the action asks to requeue
// an ended attempt (act.Ended) that was not cancelled.
func requeueEnded(act *report.Action, j *slurm.JobInfo) string {
	if act.Ended && j.State != slurm.StateCancelled {
		return ""
	}
	return nothingToDo(act, j)
}

// requeueState needs a running job (or an ended one, see requeueEnded), or
// a pending one and a new placement.
func requeueState(act *report.Action, j *slurm.JobInfo) string {
	if msg := resizeFits(act, j); msg != "" {
		return msg
	}
	placement := act.Partition != "" || act.Gres != "" || act.TimeLimitMin != 0 || act.CPUs != 0 || act.Tasks != 0
	if act.Ended && j.State == slurm.StatePending && !placement {
		// the job is queued again already (it requeued itself after
		// saving, or Slurm did): requeueing it too would be a double action
		return fmt.Sprintf("job %d is PENDING (restart %d): requeued already, by the job itself or by Slurm; nothing to do", act.JobID, j.Restarts)
	}
	if j.State != slurm.StateRunning && !j.Ended() && !(j.State == slurm.StatePending && placement) {
		return fmt.Sprintf("job %d is %s: requeue needs a running job (or a pending one and a new partition, gres or time limit)", act.JobID, j.State)
	}
	return ""
}

// resizeFits refuses a resize whose GRES does not give each rank its GPU:
// Tasks/Nodes ranks on a node need as many GPUs there (an elastic run is
// one task per GPU, report.Plan.Elastic).
func resizeFits(act *report.Action, _ *slurm.JobInfo) string {
	if act.Tasks == 0 {
		return ""
	}
	perNode := act.Tasks / max(act.Nodes, 1)
	gpus, err := slurm.GPUs(slurm.JobGres(act.Gres, ""))
	n := 0
	for _, c := range gpus {
		n += c
	}
	if err != nil || n != perNode {
		return fmt.Sprintf("resize of job %d to %d tasks on %d nodes with gres %s: want %d GPUs per node, one per task", act.JobID, act.Tasks, max(act.Nodes, 1), act.Gres, perNode)
	}
	return ""
}
