package agent

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os/exec"
	"os/user"
	"regexp"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/isched/isched/internal/report"
	"github.com/isched/isched/internal/slurm"
	"github.com/isched/isched/internal/stream"
)

// Private keys (isched:<cluster>:agent:*).
const (
	keyCursor   = "cursor"   // id of the last actions entry fully handled
	keyDone     = "done"     // hash: action id -> result envelope
	keyInflight = "inflight" // the action being executed (one at a time)
)

// OptedIn reports whether a job opted in to isched: its comment contains
// "isched" or its name starts with "isched".
func OptedIn(name, comment string) bool {
	return strings.HasPrefix(name, "isched") || strings.Contains(comment, "isched")
}

// errTransient marks a failure that says nothing about the action (Redis or
// slurmctld unreachable): the entry is retried after a backoff, never
// answered with a result.
var errTransient = errors.New("transient")

type transientError struct{ err error }

func (e *transientError) Error() string        { return e.err.Error() }
func (e *transientError) Unwrap() error        { return e.err }
func (e *transientError) Is(target error) bool { return target == errTransient }

func transient(err error) error {
	if err == nil {
		return nil
	}
	return &transientError{err}
}

// slurmDown reports whether a Slurm command failed because the controller
// did not answer, rather than because it refused.
func slurmDown(err error) bool {
	if errors.Is(err, context.DeadlineExceeded) {
		return true
	}
	if errors.Is(err, exec.ErrNotFound) || errors.Is(err, fs.ErrNotExist) {
		return true // the Slurm client is missing: an operator must fix it, then we go on
	}
	var ee *slurm.ExitError
	if !errors.As(err, &ee) {
		return false
	}
	for _, s := range []string{"Unable to contact slurm controller", "Socket timed out", "Zero Bytes were transmitted", "Connection refused", "Communication connection failure"} {
		if strings.Contains(ee.Stderr, s) {
			return true
		}
	}
	return false
}

// marker is the inflight record: the action and the job as it was before
// the agent acted.
type marker struct {
	Entry     string          `json:"entry"`
	Payload   json.RawMessage `json:"payload"` // the actions entry, verbatim
	State     string          `json:"state,omitempty"`
	Restarts  int             `json:"restarts"`
	Partition string          `json:"partition,omitempty"`
	Held      bool            `json:"held,omitempty"`
	StartedMS int64           `json:"started_ms"`
}

func (a *Agent) actionLoop(ctx context.Context) error {
	b := a.backoff("actions")
	cursor, ready := "", false
	for ctx.Err() == nil {
		if !ready {
			c, err := a.resume(ctx)
			if err != nil {
				if ctx.Err() != nil {
					return nil
				}
				sleep(ctx, b.Failed(err))
				continue
			}
			cursor, ready = c, true
		}
		entries, err := a.store.ReadAfter(ctx, a.keys.Actions(), cursor, 16, a.cfg.ActionBlock)
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			sleep(ctx, b.Failed(err))
			continue
		}
		for _, e := range entries {
			if err := a.handle(ctx, e); err != nil {
				// Retry this entry; resume first (an inflight marker may exist).
				ready = false
				sleep(ctx, b.Failed(err))
				break
			}
			b.OK()
			cursor = e.ID
			if ctx.Err() != nil {
				return nil
			}
		}
	}
	return nil
}

// resume finishes an action a previous agent left inflight and returns the
// cursor to read after.
func (a *Agent) resume(ctx context.Context) (string, error) {
	b, err := a.store.Get(ctx, a.keys.Agent(keyInflight))
	switch {
	case errors.Is(err, stream.ErrNotFound):
	case err != nil:
		return "", err
	default:
		if err := a.recoverInflight(ctx, b); err != nil {
			return "", err
		}
	}
	c, err := a.store.Get(ctx, a.keys.Agent(keyCursor))
	if errors.Is(err, stream.ErrNotFound) {
		return "0", nil
	}
	if err != nil {
		return "", err
	}
	return string(c), nil
}

func (a *Agent) recoverInflight(ctx context.Context, b []byte) error {
	var m marker
	if err := json.Unmarshal(b, &m); err != nil {
		a.log.Error("unreadable inflight marker dropped", "err", err)
		return a.store.Del(ctx, a.keys.Agent(keyInflight))
	}
	env, err := report.Decode(m.Payload)
	if err != nil || env.Action == nil {
		a.log.Error("inflight marker holds no valid action; dropped", "entry", m.Entry, "err", err)
		return a.store.Del(ctx, a.keys.Agent(keyInflight))
	}
	act := env.Action
	log := a.log.With("action", act.ID, "type", string(act.Type), "job", act.JobID, "entry", m.Entry)
	stored, err := a.store.HGet(ctx, a.keys.Agent(keyDone), act.ID)
	switch {
	case err == nil:
		// Died after recording the result: publish it (again, identical).
		log.Warn("resuming: result recorded but maybe not published; publishing it")
		return a.publish(ctx, m.Entry, []byte(stored))
	case !errors.Is(err, stream.ErrNotFound):
		return err
	}
	log.Warn("resuming an action interrupted by an agent stop; checking the job before anything else")
	ctx, cancel := a.actionContext(ctx)
	defer cancel()
	res, err := a.recover(ctx, &m, act)
	if err != nil {
		return err
	}
	return a.finish(ctx, m.Entry, act, res)
}

// actionContext outlives the agent's own context: an action that started
// finishes even when the agent is asked to stop.
func (a *Agent) actionContext(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.WithoutCancel(ctx), a.cfg.ActionTimeout)
}

// handle processes one actions entry. It returns an error only when the
// entry must be retried (Redis or Slurm unreachable).
func (a *Agent) handle(ctx context.Context, e stream.Entry) error {
	env, err := report.Decode(e.Payload)
	if err == nil && env.Kind != report.KindAction {
		err = fmt.Errorf("kind %q is not an action", env.Kind)
	}
	if err != nil {
		id := looseID(e.Payload)
		a.log.Warn("malformed action refused", "entry", e.ID, "action", id, "err", err)
		if id == "" {
			return a.setCursor(ctx, e.ID)
		}
		if dup, err := a.isDone(ctx, id); err != nil || dup {
			if err != nil {
				return err
			}
			return a.setCursor(ctx, e.ID)
		}
		// Not recorded as done: the id may yet come in a well-formed action.
		renv := report.NewEnvelope(report.KindResult, a.cfg.Now())
		renv.Result = a.result(id, report.StatusRefused, "malformed action: "+err.Error(), nil)
		b, err := report.Encode(renv)
		if err != nil {
			return a.setCursor(ctx, e.ID)
		}
		return a.publish(ctx, e.ID, b)
	}
	act := env.Action
	log := a.log.With("action", act.ID, "type", string(act.Type), "job", act.JobID, "entry", e.ID)
	if dup, err := a.isDone(ctx, act.ID); err != nil {
		return err
	} else if dup {
		log.Info("duplicate action skipped: already executed")
		return a.setCursor(ctx, e.ID)
	}
	actx, cancel := a.actionContext(ctx)
	defer cancel()
	res, err := a.execute(actx, e, act)
	if err != nil {
		return err
	}
	log.Info("action done", "status", string(res.Status), "message", res.Message)
	return a.finish(actx, e.ID, act, res)
}

var idRE = regexp.MustCompile(`^[A-Za-z0-9._:-]{1,128}$`)

// looseID reads action.id from an entry that failed strict decoding, so the
// refusal can be addressed; "" when there is no usable id.
func looseID(b []byte) string {
	var v struct {
		Action struct {
			ID string `json:"id"`
		} `json:"action"`
	}
	if json.Unmarshal(b, &v) != nil || !idRE.MatchString(v.Action.ID) {
		return ""
	}
	return v.Action.ID
}

func (a *Agent) isDone(ctx context.Context, id string) (bool, error) {
	_, err := a.store.HGet(ctx, a.keys.Agent(keyDone), id)
	switch {
	case err == nil:
		return true, nil
	case errors.Is(err, stream.ErrNotFound):
		return false, nil
	}
	return false, err
}

func (a *Agent) setCursor(ctx context.Context, id string) error {
	return a.store.Set(ctx, a.keys.Agent(keyCursor), []byte(id), 0)
}

// finish records and publishes a result, clears the inflight marker and
// advances the cursor, in that order (see the package doc).
func (a *Agent) finish(ctx context.Context, entry string, act *report.Action, res *report.Result) error {
	a.cfg.Metrics.observeAction(act, res)
	env := report.NewEnvelope(report.KindResult, a.cfg.Now())
	env.Result = res
	b, err := report.Encode(env)
	if err != nil {
		// Our own result does not validate: say so in a minimal one.
		a.log.Error("result does not encode; sending a minimal one", "action", act.ID, "err", err)
		env.Result = a.result(act.ID, report.StatusFailed, "agent could not encode its result: "+clean(err.Error(), 1024), nil)
		if b, err = report.Encode(env); err != nil {
			return err
		}
	}
	if err := a.store.HSet(ctx, a.keys.Agent(keyDone), act.ID, string(b)); err != nil {
		return err
	}
	return a.publish(ctx, entry, b)
}

func (a *Agent) publish(ctx context.Context, entry string, result []byte) error {
	if _, err := a.store.Append(ctx, a.keys.Results(), result, "", a.cfg.ResultsMaxLen); err != nil {
		return err
	}
	if err := a.store.Del(ctx, a.keys.Agent(keyInflight)); err != nil {
		return err
	}
	return a.setCursor(ctx, entry)
}

func (a *Agent) result(id string, status report.ResultStatus, msg string, err error) *report.Result {
	r := &report.Result{ActionID: id, Status: status, Message: clean(msg, 4000), DoneMS: a.cfg.Now().UnixMilli()}
	var ee *slurm.ExitError
	if errors.As(err, &ee) {
		r.Stderr = clean(ee.Stderr, 8<<10)
	}
	return r
}

// clean makes s valid for a result text field: valid UTF-8, no NUL, at
// most n bytes (cut on a rune boundary).
func clean(s string, n int) string {
	s = strings.ToValidUTF8(s, "\uFFFD")
	s = strings.ReplaceAll(s, "\x00", "")
	s = strings.TrimSpace(s)
	if len(s) <= n {
		return s
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n]
}

func jobID(act *report.Action) string { return strconv.FormatUint(act.JobID, 10) }

// execute checks an action against Slurm's current view of its job, marks
// it inflight and runs it: look up the action type's preconditions, check
// them, perform. A returned error means "retry the entry".
func (a *Agent) execute(ctx context.Context, e stream.Entry, act *report.Action) (*report.Result, error) {
	if msg := a.misaddressed(act); msg != "" {
		return a.result(act.ID, report.StatusRefused, msg, nil), nil
	}
	pc := preconditionOf(act.Type)
	j, res, err := a.currentJob(ctx, act, pc)
	if res != nil || err != nil {
		return res, err
	}
	if msg := pc.refusal(act, j, a.cfg.AllowRootSubmit); msg != "" {
		return a.result(act.ID, report.StatusRefused, msg, nil), nil
	}
	if err := a.markInflight(ctx, e, j); err != nil {
		return nil, err
	}
	return a.run(ctx, act, j)
}

// misaddressed says why an action is not this agent's to run now (another
// cluster's, or too old), or "".
func (a *Agent) misaddressed(act *report.Action) string {
	if act.Cluster != a.cfg.Cluster {
		return fmt.Sprintf("action for cluster %q sent to the agent of %q", act.Cluster, a.cfg.Cluster)
	}
	if age := a.cfg.Now().Sub(time.UnixMilli(act.IssuedMS)); age > a.cfg.MaxActionAge {
		return fmt.Sprintf("stale action: issued %s ago (max %s); not executed", age.Round(time.Second), a.cfg.MaxActionAge)
	}
	return ""
}

// currentJob is Slurm's view of the action's job right now: nil when the
// action names none, or when pc.replaces and Slurm has forgotten it. A
// result answers the action there; an error means "retry the entry".
func (a *Agent) currentJob(ctx context.Context, act *report.Action, pc precondition) (*slurm.JobInfo, *report.Result, error) {
	if act.JobID == 0 {
		return nil, nil, nil
	}
	j, err := a.slurm.ShowJob(ctx, jobID(act))
	switch {
	case errors.Is(err, slurm.ErrNotFound) && pc.replaces:
		return nil, nil, nil // the replaced job is long gone; nothing to check it against (resubmit: its saved record is)
	case errors.Is(err, slurm.ErrNotFound):
		return nil, a.result(act.ID, report.StatusRefused, fmt.Sprintf("job %d not found: it ended more than MinJobAge ago or never existed", act.JobID), err), nil
	case err != nil && slurmDown(err):
		return nil, nil, transient(fmt.Errorf("check job %d: %w", act.JobID, err))
	case err != nil:
		return nil, a.result(act.ID, report.StatusFailed, fmt.Sprintf("check job %d: %v", act.JobID, err), err), nil
	}
	if !pc.settles || !act.Ended || j.State != slurm.StateCompleting {
		return j, nil, nil
	}
	// the attempt is ending (it exited after saving, or requeued itself):
	// Slurm's next state says what there is to do
	if j, err = a.awaitSettled(ctx, jobID(act), j); err != nil {
		if errors.Is(err, slurm.ErrNotFound) {
			return nil, a.result(act.ID, report.StatusRefused, fmt.Sprintf("job %d is gone", act.JobID), err), nil
		}
		return nil, nil, transient(err)
	}
	return j, nil, nil
}

// markInflight records the action and the job as it is before the agent
// acts (see the package doc).
func (a *Agent) markInflight(ctx context.Context, e stream.Entry, j *slurm.JobInfo) error {
	m := marker{Entry: e.ID, Payload: json.RawMessage(e.Payload), StartedMS: a.cfg.Now().UnixMilli()}
	if j != nil {
		m.State, m.Restarts, m.Partition, m.Held = j.State, j.Restarts, j.Partition, j.Held()
	}
	mb, err := json.Marshal(m)
	if err != nil {
		return err
	}
	return a.store.Set(ctx, a.keys.Agent(keyInflight), mb, 0)
}

func isRoot(name string) bool {
	if name == "root" {
		return true
	}
	u, err := user.Lookup(name)
	return err == nil && u.Uid == "0"
}

func placementSpec(act *report.Action) slurm.MoveSpec {
	return slurm.MoveSpec{Partition: act.Partition, Gres: act.Gres, TimeLimit: time.Duration(act.TimeLimitMin) * time.Minute, CPUsPerTask: act.CPUs,
		Tasks: act.Tasks, Nodes: act.Nodes, Hold: act.Hold, Ended: act.Ended}
}

// updateSpec is the scontrol update of an update action on job j, or of a
// move finished after an agent restart.
func updateSpec(act *report.Action, j *slurm.JobInfo) slurm.UpdateSpec {
	return slurm.UpdateSpec{Partition: act.Partition, Gres: act.Gres, TimeLimit: time.Duration(act.TimeLimitMin) * time.Minute,
		CPUsPerTask: cpusFor(act, j), Tasks: act.Tasks, Nodes: act.Nodes, Nice: act.Nice}
}

// run executes a checked action; j is the job as checked (nil for a submit
// without a known job).
func (a *Agent) run(ctx context.Context, act *report.Action, j *slurm.JobInfo) (*report.Result, error) {
	id := jobID(act)
	switch act.Type {
	case report.ActionSignal:
		batchOnly := act.Steps != report.StepsAll
		err := a.slurm.Signal(ctx, id, act.Signal, batchOnly)
		scope := "the batch step"
		if !batchOnly {
			scope = "all steps"
		}
		return a.outcome(act, err, fmt.Sprintf("sent %s to %s of job %s", act.Signal, scope, id))
	case report.ActionRequeue:
		return a.move(ctx, act)
	case report.ActionUpdate:
		return a.outcome(act, a.slurm.Update(ctx, id, updateSpec(act, j)), fmt.Sprintf("updated job %s (%s)", id, describe(act)))
	case report.ActionCancel:
		return a.outcome(act, a.slurm.Cancel(ctx, id), "cancelled job "+id)
	case report.ActionRelease:
		return a.outcome(act, a.slurm.Release(ctx, id), "released job "+id)
	case report.ActionAnnotate:
		return a.outcome(act, a.slurm.SetAdminComment(ctx, id, act.AdminComment), "wrote the AdminComment of job "+id)
	case report.ActionResubmit:
		return a.resubmit(ctx, act)
	case report.ActionTwin:
		return a.twin(ctx, act)
	case report.ActionHandover:
		return a.handover(ctx, act, j)
	case report.ActionSubmit:
		return a.submit(ctx, act)
	}
	return a.result(act.ID, report.StatusRefused, fmt.Sprintf("unknown action type %q", act.Type), nil), nil
}

// outcome is the result of a Slurm command run for act: ok with okMsg, or
// why it failed; an error when Slurm did not answer.
func (a *Agent) outcome(act *report.Action, err error, okMsg string) (*report.Result, error) {
	if err == nil {
		return a.result(act.ID, report.StatusOK, okMsg, nil), nil
	}
	if slurmDown(err) {
		// Leave the marker: resume decides from the job's state.
		return nil, transient(err)
	}
	status := report.StatusFailed
	if errors.Is(err, slurm.ErrState) || errors.Is(err, slurm.ErrInvalid) || errors.Is(err, slurm.ErrNotFound) {
		status = report.StatusRefused
	}
	return a.result(act.ID, status, fmt.Sprintf("%s job %s: %v", act.Type, jobID(act), err), err), nil
}

// move runs a requeue action.
func (a *Agent) move(ctx context.Context, act *report.Action) (*report.Result, error) {
	id := jobID(act)
	res, err := a.slurm.Move(ctx, id, placementSpec(act))
	if err != nil {
		r, terr := a.outcome(act, err, "")
		switch {
		case r == nil || res.UpdateErr == nil || !res.Released:
		case act.Tasks != 0 && res.Restored:
			r.Message += fmt.Sprintf("; the job was set back to its old size (%s), released, and restarts where it was", sizeOf(res.FromTasks, res.FromNodes))
		case act.Tasks != 0:
			// slurmctld keeps the keys it took before the one it refused
			r.Message += fmt.Sprintf("; the job was released, but its old size (%s) could not be set again: Slurm may have kept part of the update", sizeOf(res.FromTasks, res.FromNodes))
		default:
			r.Message += "; the job was released unchanged and restarts where it was"
		}
		return r, terr
	}
	return a.outcome(act, nil, moveMessage(id, act, res))
}

// submit runs a submit action.
func (a *Agent) submit(ctx context.Context, act *report.Action) (*report.Result, error) {
	newID, err := a.slurm.SubmitWith(ctx, []byte(act.Script), a.submitSpec(act))
	if err != nil {
		return a.outcome(act, err, "")
	}
	r := a.result(act.ID, report.StatusOK, fmt.Sprintf("submitted job %s as %s", newID, act.User), nil)
	if n, perr := strconv.ParseUint(newID, 10, 32); perr == nil {
		r.NewJobID = n
	}
	return r, nil
}

func (a *Agent) submitSpec(act *report.Action) slurm.SubmitSpec {
	comment := "isched"
	if act.Lineage != "" {
		comment += " lineage=" + act.Lineage
	}
	comment += " action=" + act.ID
	return slurm.SubmitSpec{
		User: act.User, Partition: act.Partition, Gres: act.Gres,
		TimeLimit: time.Duration(act.TimeLimitMin) * time.Minute, Hold: act.Hold, Comment: comment,
	}
}

// cpusFor is the CPUs per task an action sets on job j (slurm.CPUsFor):
// a resize sets them always, the action's or the job's own, so that the
// CPUs per node follow the new tasks per node; a job of several tasks
// that is not resized keeps its CPUs (Slurm splits them between its tasks).
func cpusFor(act *report.Action, j *slurm.JobInfo) int {
	n, _ := slurm.CPUsFor(j, act.CPUs, act.Tasks)
	return n
}

// sizeOf says a size: "2 tasks on 1 node".
func sizeOf(tasks, nodes int) string {
	s := fmt.Sprintf("%d tasks on %d nodes", tasks, nodes)
	if tasks == 1 {
		s = strings.Replace(s, "tasks", "task", 1)
	}
	if nodes == 1 {
		s = strings.Replace(s, "nodes", "node", 1)
	}
	return s
}

func describe(act *report.Action) string {
	var parts []string
	if act.Partition != "" {
		parts = append(parts, "partition "+act.Partition)
	}
	if act.Gres != "" {
		parts = append(parts, "gres "+act.Gres)
	}
	if act.Tasks != 0 {
		parts = append(parts, sizeOf(act.Tasks, max(act.Nodes, 1)))
	}
	if act.CPUs != 0 {
		parts = append(parts, fmt.Sprintf("%d CPUs per task", act.CPUs))
	}
	if act.TimeLimitMin != 0 {
		parts = append(parts, fmt.Sprintf("time limit %d min", act.TimeLimitMin))
	}
	if act.Nice != nil {
		parts = append(parts, fmt.Sprintf("nice %d", *act.Nice))
	}
	if len(parts) == 0 {
		return "no change"
	}
	return strings.Join(parts, ", ")
}

func moveMessage(id string, act *report.Action, res slurm.MoveResult) string {
	var b strings.Builder
	if res.Requeued {
		fmt.Fprintf(&b, "requeued job %s (restart %d)", id, res.Restarts)
	} else {
		fmt.Fprintf(&b, "re-placed pending job %s", id)
	}
	if d := describe(act); d != "no change" {
		fmt.Fprintf(&b, " to %s", d)
	}
	if res.CPUsKept {
		b.WriteString(" (its CPUs kept: the job has several tasks)")
	}
	if act.Tasks != 0 && act.CPUs == 0 && res.CPUsPerTask != 0 {
		fmt.Fprintf(&b, " (its own CPUs per task, %d: %d per node)", res.CPUsPerTask, res.CPUsPerTask*act.Tasks/max(act.Nodes, 1))
	}
	if act.Tasks != 0 && res.FromTasks != 0 {
		fmt.Fprintf(&b, ", from %s", sizeOf(res.FromTasks, res.FromNodes))
	}
	if res.Released {
		b.WriteString(", released")
	} else if act.Hold {
		b.WriteString(", kept held")
	}
	fmt.Fprintf(&b, " in %s", res.Total.Round(time.Millisecond))
	return b.String()
}

// recover decides what to do with an action a previous agent started but
// did not finish, from the job's state now (see the package doc). Nothing
// is executed twice.
func (a *Agent) recover(ctx context.Context, m *marker, act *report.Action) (*report.Result, error) {
	rc := &recovery{a: a, ctx: ctx, m: m, act: act, id: jobID(act)}
	id := rc.id
	if act.Type == report.ActionResubmit || act.Type == report.ActionTwin {
		return a.recoverResubmit(ctx, act)
	}
	if act.Type == report.ActionSubmit {
		return rc.submit()
	}
	j, err := a.slurm.ShowJob(ctx, id)
	if err != nil {
		if errors.Is(err, slurm.ErrNotFound) {
			if act.Type == report.ActionCancel {
				return rc.ok("job " + id + " is gone")
			}
			return rc.failed("the agent stopped during this action and job " + id + " is gone: not retried")
		}
		return nil, transient(err)
	}
	rc.j, rc.stale = j, a.cfg.Now().Sub(time.UnixMilli(act.IssuedMS)) > a.cfg.MaxActionAge
	switch act.Type {
	case report.ActionSignal:
		return rc.failed("the agent stopped while signalling job " + id + "; delivery cannot be checked, so the signal was not re-sent (at most once)")
	case report.ActionCancel, report.ActionHandover:
		if j.Ended() || j.State == slurm.StateCompleting {
			return rc.ok("job " + id + " is " + j.State)
		}
		return rc.retry()
	case report.ActionRelease:
		if !j.Held() {
			return rc.ok("job " + id + " is not held (" + j.State + ")")
		}
		return rc.retry()
	case report.ActionAnnotate:
		if j.Ended() {
			return rc.failed("the agent stopped while writing job " + id + "'s AdminComment and the job has ended")
		}
		return rc.retry() // writing it again is harmless
	case report.ActionUpdate:
		if updated(j, act) {
			return rc.ok("job " + id + " shows the update (" + describe(act) + ")")
		}
		if j.Ended() {
			return rc.failed("the agent stopped during this update and job " + id + " has ended")
		}
		return rc.retry()
	case report.ActionRequeue:
		return rc.requeue()
	}
	return rc.failed("the agent stopped during this action: not retried")
}

// recovery is one action a previous agent left unfinished.
type recovery struct {
	a     *Agent
	ctx   context.Context
	m     *marker // the job as the previous agent saw it
	act   *report.Action
	id    string
	j     *slurm.JobInfo // the job now
	stale bool           // issued longer ago than MaxActionAge
}

func (rc *recovery) ok(msg string) (*report.Result, error) {
	return rc.a.result(rc.act.ID, report.StatusOK, msg+" (confirmed after an agent restart)", nil), nil
}

func (rc *recovery) failed(msg string) (*report.Result, error) {
	return rc.a.result(rc.act.ID, report.StatusFailed, msg, nil), nil
}

// retry runs the action again, unless it is stale.
func (rc *recovery) retry() (*report.Result, error) {
	if rc.stale {
		return rc.failed(fmt.Sprintf("the agent stopped during this action; job %s shows no effect and the action is stale now: not retried", rc.id))
	}
	return rc.a.run(rc.ctx, rc.act, rc.j)
}

// submit: a job carrying the action's id was submitted; none is never
// resubmitted (at most once).
func (rc *recovery) submit() (*report.Result, error) {
	jobs, err := rc.a.slurm.Jobs(rc.ctx)
	if err != nil {
		return nil, transient(err)
	}
	id := rc.act.ID
	for _, j := range jobs {
		if strings.Contains(j.Comment, "action="+id) && (j.Comment == "action="+id || strings.HasSuffix(j.Comment, " action="+id)) {
			r, _ := rc.ok(fmt.Sprintf("submitted job %d as %s", j.JobID, j.User))
			r.NewJobID = j.JobID
			return r, nil
		}
	}
	return rc.failed("the agent stopped during sbatch and no job carries this action's id: not resubmitted (at most once)")
}

// requeue finds how far the move got. Died right after requeuehold: the
// old attempt is still ending and the job shows COMPLETING (restart count
// already moved) for up to KillWait. Wait until it settles (held PENDING,
// or ended), or the move is left half-done with the job held for ever.
func (rc *recovery) requeue() (*report.Result, error) {
	id, m, act := rc.id, rc.m, rc.act
	j, err := rc.a.awaitSettled(rc.ctx, id, rc.j)
	if err != nil {
		if errors.Is(err, slurm.ErrNotFound) {
			return rc.failed("the agent stopped during this requeue and job " + id + " is gone: not retried")
		}
		return nil, transient(err)
	}
	rc.j = j
	switch {
	case requeueNeverLanded(j, m, act):
		return rc.retry()
	case j.Ended():
		return rc.failed(fmt.Sprintf("the agent stopped during this requeue and job %s has ended (%s)", id, j.State))
	case j.State == slurm.StatePending && j.Held() && !m.Held:
		return rc.finishMove()
	case updated(j, act) && (j.Restarts > m.Restarts || m.State == slurm.StatePending):
		return rc.ok(fmt.Sprintf("requeued job %s (restart %d), now %s in %s", id, j.Restarts, j.State, j.Partition))
	case j.State == slurm.StatePending && m.State == slurm.StatePending:
		return rc.retry() // a pending job's move did not land yet; moving it again is harmless
	}
	return rc.failed(fmt.Sprintf("the agent stopped during this requeue; job %s is now %s in %s with restart count %d (was %d): not retried", id, j.State, j.Partition, j.Restarts, m.Restarts))
}

// requeueNeverLanded: the job j is as the marker m saw it before the
// requeue — still running, or (for an action on an ended job) ended the
// same way, not cancelled — so the requeue never reached Slurm.
func requeueNeverLanded(j *slurm.JobInfo, m *marker, act *report.Action) bool {
	if j.Restarts != m.Restarts || j.State != m.State {
		return false
	}
	return j.State == slurm.StateRunning || act.Ended && j.Ended() && j.State != slurm.StateCancelled
}

// finishMove: died between requeuehold (or hold) and release; update and
// release are idempotent.
func (rc *recovery) finishMove() (*report.Result, error) {
	a, id, act, j := rc.a, rc.id, rc.act, rc.j
	u := updateSpec(act, j)
	u.StartIn = 2 * time.Second
	if err := a.slurm.Update(rc.ctx, id, u); err != nil {
		if slurmDown(err) {
			return nil, transient(err)
		}
		if !act.Hold {
			_ = a.slurm.Release(rc.ctx, id)
		}
		return a.result(act.ID, report.StatusFailed, fmt.Sprintf("requeue job %s: finishing after an agent restart: %v; released unchanged", id, err), err), nil
	}
	if act.Hold {
		return rc.ok(fmt.Sprintf("requeued job %s (restart %d) to %s, kept held", id, j.Restarts, describe(act)))
	}
	if err := a.slurm.Release(rc.ctx, id); err != nil {
		if slurmDown(err) {
			return nil, transient(err)
		}
		return a.result(act.ID, report.StatusFailed, fmt.Sprintf("requeue job %s: release after an agent restart: %v", id, err), err), nil
	}
	return rc.ok(fmt.Sprintf("requeued job %s (restart %d) to %s, released", id, j.Restarts, describe(act)))
}

// awaitSettled polls a COMPLETING job (j) until Slurm settles it (pending
// again, or ended), for at most ActionTimeout; an error matching
// slurm.ErrNotFound when the job is gone.
func (a *Agent) awaitSettled(ctx context.Context, id string, j *slurm.JobInfo) (*slurm.JobInfo, error) {
	var err error
	for start := time.Now(); j.State == slurm.StateCompleting; {
		if time.Since(start) > a.cfg.ActionTimeout {
			return nil, fmt.Errorf("job %s: still COMPLETING after %s", id, time.Since(start).Round(time.Second))
		}
		if !sleep(ctx, 500*time.Millisecond) {
			return nil, ctx.Err()
		}
		if j, err = a.slurm.ShowJob(ctx, id); err != nil {
			return nil, err
		}
	}
	return j, nil
}

// updated reports whether the job shows every change of an update action.
func updated(j *slurm.JobInfo, act *report.Action) bool {
	if act.Partition != "" && j.Partition != act.Partition {
		return false
	}
	if act.TimeLimitMin != 0 && (j.TimeLimit == nil || *j.TimeLimit != time.Duration(act.TimeLimitMin)*time.Minute) {
		return false
	}
	if act.Gres != "" && slurm.JobGres(j.TresPerNode, j.TresPerJob) != slurm.JobGres(act.Gres, "") {
		return false
	}
	if n := cpusFor(act, j); n != 0 && j.CPUsPerTask() != n {
		return false
	}
	if act.Tasks != 0 && (j.Tasks() != act.Tasks || j.Nodes() != max(act.Nodes, 1)) {
		return false
	}
	return true
}
