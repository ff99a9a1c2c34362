package report

import "strings"

// ActionType is what the coordinator asks the agent to do.
type ActionType string

// Action types and the Slurm command the agent runs for each.
const (
	ActionSignal  ActionType = "signal"  // scancel --signal (ask for a checkpoint)
	ActionRequeue ActionType = "requeue" // scontrol requeue[hold], after optional updates
	ActionUpdate  ActionType = "update"  // scontrol update (time limit, partition, gres)
	ActionCancel  ActionType = "cancel"  // scancel
	ActionSubmit  ActionType = "submit"  // sbatch (migration to a new job)
	ActionRelease ActionType = "release" // scontrol release
	// ActionAnnotate writes the job's AdminComment (scontrol update
	// AdminComment=...), e.g. the end-of-job efficiency verdict, where the
	// site lets the agent (root or a Slurm operator) do so.
	ActionAnnotate ActionType = "annotate"
	// ActionResubmit submits again, as its owner, the batch script the
	// agent saved when it first saw the job (JobID), with the same lineage:
	// the continuation of a run whose job slurmctld no longer holds.
	ActionResubmit ActionType = "resubmit"
	// ActionTwin submits, as its owner, the saved batch script of the
	// running job JobID once more, pending on Partition with Gres, CPUs
	// and TimeLimitMin, under the same lineage: its twin, which keeps the
	// run's place in its ideal partition's queue (policy rule 10). The
	// result's NewJobID is the twin.
	ActionTwin ActionType = "twin"
	// ActionHandover ends job JobID (scancel), whose checkpoint has
	// landed, so that its running twin TwinJobID resumes from it; refused
	// unless the twin is running, its owner's and of the same lineage (an
	// attempt is never ended for a twin that cannot take over).
	ActionHandover ActionType = "handover"
)

// MaxNice bounds an update's nice value: Slurm takes
// -2147483645..2147483645 (NICE_OFFSET - 3).
const MaxNice = 2147483645

// MaxAdminComment bounds an annotate action's text.
const MaxAdminComment = 1024

// Signal steps.
const (
	StepsBatch = "batch" // the batch step only, where the wrapper runs (default)
	StepsAll   = "all"   // every step of the job
)

// Action is an order from the coordinator. The agent re-checks everything
// against Slurm before acting (User must still own JobID); validation here
// only guarantees the order is well-formed and that every value passed to a
// Slurm command is from a narrow character set.
type Action struct {
	ID      string     `json:"id"` // unique, the agent executes each id at most once
	Type    ActionType `json:"type"`
	Cluster string     `json:"cluster"`
	JobID   uint64     `json:"job_id,omitempty"` // required except for submit (there: the job replaced)
	Lineage string     `json:"lineage,omitempty"`
	User    string     `json:"user"` // the job owner as the coordinator believes it

	Signal string `json:"signal,omitempty"` // signal only: SIGUSR1, SIGUSR2, SIGTERM, SIGINT, SIGHUP, SIGCONT (SIG optional)
	Steps  string `json:"steps,omitempty"`  // signal only: StepsBatch (default) or StepsAll

	// requeue, update, submit.
	Partition    string `json:"partition,omitempty"`
	Gres         string `json:"gres,omitempty"`
	TimeLimitMin int64  `json:"time_limit_min,omitempty"`
	// CPUs (requeue, update): CPUs per task on the new partition, for a
	// one-task job or a resize (then per task, times the tasks per node);
	// 0: leave the job's request unchanged (a resize keeps the job's own).
	CPUs int `json:"cpus,omitempty"`
	// Tasks and Nodes (requeue, update): the job's new size, an elastic
	// run's resize (issue 42): Tasks ranks, one per GPU, on Nodes nodes
	// (0: one node), Tasks/Nodes on each, so Gres (required with Tasks)
	// is that many GPUs per node. 0: the size is left as it is.
	Tasks int `json:"tasks,omitempty"`
	Nodes int `json:"nodes,omitempty"`
	// Nice (update only): the job's new nice value (scontrol update
	// Nice=), rule 7's exchange of priorities among isched's pending jobs.
	Nice *int64 `json:"nice,omitempty"`

	Hold bool `json:"hold,omitempty"` // requeue, submit: keep the job held
	// Ended (requeue only): the job may have ended by the time the agent
	// acts (a script that saves on a checkpoint request and exits, Slurm's
	// TIMEOUT or NODE_FAIL): requeue it from its final state too, while
	// slurmctld still holds it (MinJobAge). Never a CANCELLED job (the
	// user's word), nor one already pending again (it requeued itself).
	Ended bool `json:"ended,omitempty"`
	// AdminComment is the annotate action's text: one line, printable.
	AdminComment string `json:"admin_comment,omitempty"`
	Script       string `json:"script,omitempty"` // submit only: the batch script, starting with "#!"
	// TwinJobID (handover only): the running twin that takes over.
	TwinJobID uint64 `json:"twin_job_id,omitempty"`

	Reason   string `json:"reason,omitempty"` // for the audit trail and the user
	IssuedMS int64  `json:"issued_ms"`
}

// actionRule lists what each action type requires and permits; a field not
// permitted must be empty, so an order never carries a value its executor
// would silently ignore.
type actionRule struct {
	jobID     bool // required
	signal    bool // required
	steps     bool // permitted
	placement bool // partition, gres, time_limit_min permitted
	cpus      bool // permitted
	size      bool // tasks, nodes permitted
	hold      bool // permitted
	script    bool // required
	ended     bool // permitted
	comment   bool // admin_comment required
	nice      bool // permitted
	twin      bool // twin_job_id required
}

var actionRules = map[ActionType]actionRule{
	ActionSignal:   {jobID: true, signal: true, steps: true},
	ActionRequeue:  {jobID: true, placement: true, cpus: true, size: true, hold: true, ended: true},
	ActionUpdate:   {jobID: true, placement: true, cpus: true, size: true, nice: true},
	ActionCancel:   {jobID: true},
	ActionSubmit:   {placement: true, hold: true, script: true},
	ActionRelease:  {jobID: true},
	ActionAnnotate: {jobID: true, comment: true},
	ActionResubmit: {jobID: true, placement: true},
	ActionTwin:     {jobID: true, placement: true, cpus: true},
	ActionHandover: {jobID: true, twin: true},
}

// actionSignals are the signals the coordinator may send. SIGKILL and
// SIGSTOP are left out on purpose: cancel is the way to end a job, and a
// stopped job holds its resources without making progress.
var actionSignals = []string{"SIGUSR1", "SIGUSR2", "SIGTERM", "SIGINT", "SIGHUP", "SIGCONT"}

// Validate checks the action, including the per-type rules.
func (a *Action) Validate() error {
	if a == nil {
		return fail("", "missing")
	}
	if err := first(
		token("id", a.ID, maxActionID, true, setID),
		oneOf("type", a.Type, ActionSignal, ActionRequeue, ActionUpdate, ActionCancel, ActionSubmit, ActionRelease, ActionAnnotate, ActionResubmit, ActionTwin, ActionHandover),
		clusterName("cluster", a.Cluster),
		slurmID("job_id", a.JobID, actionRules[a.Type].jobID),
		slurmID("twin_job_id", a.TwinJobID, actionRules[a.Type].twin),
		lineage("lineage", a.Lineage, false),
		printable("user", a.User, maxName, true),
		token("partition", a.Partition, maxName, false, setPartArg),
		token("gres", a.Gres, 256, false, setGresArg),
		text("reason", a.Reason, MaxText, false),
		unixMS("issued_ms", a.IssuedMS, true),
	); err != nil {
		return err
	}
	if err := a.validateRanges(); err != nil {
		return err
	}
	if err := a.validatePermitted(); err != nil {
		return err
	}
	if err := a.validateSize(); err != nil {
		return err
	}
	return a.validateType()
}

// validateRanges checks the numbers an action carries.
func (a *Action) validateRanges() error {
	if a.TimeLimitMin < 0 || a.TimeLimitMin > maxTimeLimit {
		return fail("time_limit_min", "must be within [1, %d] when set (got %d)", maxTimeLimit, a.TimeLimitMin)
	}
	if a.CPUs < 0 || a.CPUs > MaxCPUs {
		return fail("cpus", "must be within [1, %d] when set (got %d)", MaxCPUs, a.CPUs)
	}
	if a.Nice != nil && (*a.Nice > MaxNice || *a.Nice < -MaxNice) {
		return fail("nice", "must be within [%d, %d] (Slurm's range; got %d)", -MaxNice, MaxNice, *a.Nice)
	}
	return nil
}

// validateSize checks a resize: Tasks ranks in 1..MaxElastic, on Nodes
// nodes (0: one) that share them evenly, and the GRES per node that gives
// each rank its GPU.
func (a *Action) validateSize() error {
	switch {
	case a.Tasks < 0 || a.Tasks > MaxElastic:
		return fail("tasks", "must be within [1, %d] when set (got %d)", MaxElastic, a.Tasks)
	case a.Nodes < 0 || a.Nodes > MaxElastic:
		return fail("nodes", "must be within [1, %d] when set (got %d)", MaxElastic, a.Nodes)
	case a.Nodes != 0 && a.Tasks == 0:
		return fail("nodes", "needs tasks (a node count alone is no size)")
	case a.Tasks == 0:
		return nil
	case a.Tasks%max(a.Nodes, 1) != 0:
		return fail("tasks", "must be a multiple of nodes, the same ranks on every node (got %d tasks on %d nodes)", a.Tasks, a.Nodes)
	case a.Gres == "":
		return fail("gres", "required with tasks: the GPUs per node of the new size")
	}
	return nil
}

// validatePermitted checks that a field the action's type does not
// permit is empty.
func (a *Action) validatePermitted() error {
	rule := actionRules[a.Type]
	absent := func(field string, set, permitted bool) error {
		if set && !permitted {
			return fail(field, "must be absent for type %q", a.Type)
		}
		return nil
	}
	return first(
		absent("signal", a.Signal != "", rule.signal),
		absent("steps", a.Steps != "", rule.steps),
		absent("partition", a.Partition != "", rule.placement),
		absent("gres", a.Gres != "", rule.placement),
		absent("time_limit_min", a.TimeLimitMin != 0, rule.placement),
		absent("cpus", a.CPUs != 0, rule.cpus),
		absent("tasks", a.Tasks != 0, rule.size),
		absent("nodes", a.Nodes != 0, rule.size),
		absent("hold", a.Hold, rule.hold),
		absent("ended", a.Ended, rule.ended),
		absent("script", a.Script != "", rule.script),
		absent("admin_comment", a.AdminComment != "", rule.comment),
		absent("nice", a.Nice != nil, rule.nice),
		absent("twin_job_id", a.TwinJobID != 0, rule.twin),
	)
}

// validateTwin checks rule 10's actions: a twin waits on a partition, a
// handover goes to another job.
func (a *Action) validateTwin() error {
	switch {
	case a.Type == ActionTwin && a.Partition == "":
		return fail("partition", "required for type %q: the ideal partition the twin waits on", a.Type)
	case a.Type == ActionHandover && a.TwinJobID == a.JobID:
		return fail("twin_job_id", "must differ from job_id (got %d for both)", a.JobID)
	}
	return nil
}

// validateType checks what each type requires of its fields.
func (a *Action) validateType() error {
	switch a.Type {
	case ActionSignal:
		name := a.Signal
		if !strings.HasPrefix(name, "SIG") {
			name = "SIG" + name
		}
		if err := oneOf("signal", name, actionSignals...); err != nil {
			if a.Signal == "" {
				return fail("signal", "required for type %q", a.Type)
			}
			return fail("signal", "must be one of %s, SIG optional (got %s)", list(actionSignals), quote(a.Signal))
		}
		if a.Steps != "" {
			return oneOf("steps", a.Steps, StepsBatch, StepsAll)
		}
	case ActionUpdate:
		if a.Partition == "" && a.Gres == "" && a.TimeLimitMin == 0 && a.CPUs == 0 && a.Nice == nil && a.Tasks == 0 {
			return fail("time_limit_min", "update needs time_limit_min, partition, gres, cpus, tasks or nice")
		}
	case ActionTwin, ActionHandover:
		return a.validateTwin()
	case ActionAnnotate:
		// one argv element of scontrol: printable, one line
		return printable("admin_comment", a.AdminComment, MaxAdminComment, true)
	case ActionSubmit:
		if err := text("script", a.Script, MaxScript, true); err != nil {
			return err
		}
		// sbatch refuses a script without an interpreter line; catch it here,
		// where the error still names the field.
		if !strings.HasPrefix(a.Script, "#!") {
			return fail("script", "must start with #!")
		}
	}
	return nil
}

// ResultStatus is the outcome of an action.
type ResultStatus string

// Result statuses.
const (
	StatusOK      ResultStatus = "ok"
	StatusRefused ResultStatus = "refused" // the agent's own checks said no (owner changed, job gone, ...)
	StatusFailed  ResultStatus = "failed"  // the Slurm command failed
)

// Result is the agent's answer to one action.
type Result struct {
	ActionID string       `json:"action_id"`
	Status   ResultStatus `json:"status"`
	Message  string       `json:"message"`
	Stderr   string       `json:"stderr,omitempty"` // of the failed command, truncated to 8 KiB valid UTF-8
	NewJobID uint64       `json:"new_job_id,omitempty"`
	DoneMS   int64        `json:"done_ms"`
}

// Validate checks the result body.
func (r *Result) Validate() error {
	if r == nil {
		return fail("", "missing")
	}
	if err := first(
		token("action_id", r.ActionID, maxActionID, true, setID),
		oneOf("status", r.Status, StatusOK, StatusRefused, StatusFailed),
		text("message", r.Message, MaxMessage, false),
		text("stderr", r.Stderr, MaxStderr, false),
		slurmID("new_job_id", r.NewJobID, false),
		unixMS("done_ms", r.DoneMS, true),
	); err != nil {
		return err
	}
	if r.NewJobID != 0 && r.Status != StatusOK {
		return fail("new_job_id", "must be absent for status %q", r.Status)
	}
	return nil
}
