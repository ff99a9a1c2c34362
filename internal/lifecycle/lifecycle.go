// Package lifecycle is the protocol of a lineage (one training run, over
// all of its Slurm jobs and attempts) as an explicit state machine: the
// states a run is in while isched moves, continues or ends it, the events
// that change them, and the one table of legal transitions. The
// coordinator and the replay (internal/sim) both change a run's state only
// through Next, so the replay follows the protocol the coordinator does,
// and a transition the table does not list is refused with an error
// instead of silently leaving a run in a state nothing will leave.
//
// A state says what isched has under way for the run, not what Slurm says
// of its job (RUNNING, PENDING, ...: the job table's word, kept apart).
// Whether an action's result is still awaited is kept apart too (the
// coordinator's pending action): a result changes the state only through
// the events below.
package lifecycle

import (
	"fmt"
	"slices"
	"strings"
)

// State is what isched has under way for a run. The values are persisted
// with the coordinator's lineage state: they never change spelling.
type State string

const (
	// Idle: the run is queued or running and nothing of isched's is under
	// way (an update of its pending job or time limit may be in flight:
	// it changes nothing that must be waited for).
	Idle State = ""
	// AwaitingCheckpoint: isched asked the run for a checkpoint before a
	// requeue (a move, a longer time limit) and waits for it.
	AwaitingCheckpoint State = "awaiting-checkpoint"
	// RequeueIssued: a requeue or a resubmission is out (a move, a
	// continuation after the attempt ended); the next attempt's start
	// settles it.
	RequeueIssued State = "requeue-issued"
	// Yielding: the run was checkpointed and requeued held so that a
	// shorter run of isched's starts in its place (rule 8, preemption);
	// isched releases it once that run has started.
	Yielding State = "yielding"
	// TwinPending: the run runs off its ideal partition and a twin job
	// waits on the ideal one (rule 10, keep the place): same owner and
	// lineage, the plan's ideal request, aging in that queue as the run
	// would have. Slurm starting the twin starts the handover.
	TwinPending State = "twin-pending"
	// HandingOver: the twin started; the running attempt checkpoints and
	// ends, and the twin resumes from that checkpoint. The twin's nodes
	// idle meanwhile.
	HandingOver State = "handing-over"
	// Ended: the run is over (its work done, or nothing can continue it).
	// A new job of the same lineage (its user submitted it again) or a
	// late start report brings it back.
	Ended State = "ended"
)

// States lists every state, in the diagram's order.
var States = []State{Idle, AwaitingCheckpoint, RequeueIssued, Yielding, TwinPending, HandingOver, Ended}

// String names the state ("idle" for Idle, whose persisted spelling is
// empty).
func (s State) String() string {
	if s == Idle {
		return "idle"
	}
	return string(s)
}

// Live says whether the run is not over.
func (s State) Live() bool { return s != Ended }

// Event is what happens to a run.
type Event string

const (
	// CheckpointAsked: isched asked the run for a checkpoint before a requeue.
	CheckpointAsked Event = "checkpoint-asked"
	// RequeueSent: isched issued a requeue (a move after the checkpoint, a
	// longer time limit, a continuation) or a resubmission.
	RequeueSent Event = "requeue-sent"
	// MoveAbandoned: the move waiting for its checkpoint was given up (the
	// checkpoint did not come in time, the target filled, the job is no
	// longer running).
	MoveAbandoned Event = "move-abandoned"
	// UpdateDone: the agent changed the job in place (a pending job moved,
	// a time limit raised).
	UpdateDone Event = "update-done"
	// ActionFailed: the agent could not carry out an action that leaves
	// the job where it was (isched tries again later).
	ActionFailed Event = "action-failed"
	// AttemptStarted: an attempt of the run started (its start report):
	// the requeue under way, if any, landed.
	AttemptStarted Event = "attempt-started"
	// RequeueSlow: the requeued job did not start again within the
	// coordinator's RequeueWait: isched stops waiting for it.
	RequeueSlow Event = "requeue-slow"
	// CancelledBeforeRestart: the job isched requeued or resubmitted was
	// cancelled before its next attempt started (isched stop, scancel).
	CancelledBeforeRestart Event = "cancelled-before-restart"
	// Adopted: a queued job naming the lineage was taken up from the job
	// table (a job submitted again under a run's name).
	Adopted Event = "adopted"
	// Finished: the run ended (its work done, or it ended with nothing to
	// continue it from, or its continuation could not be done).
	Finished Event = "finished"
	// Yielded: the agent requeued the run held, yielding its place.
	Yielded Event = "yielded"
	// Released: the agent released the held run (the run it yielded to
	// has started, or isched stopped waiting for it).
	Released Event = "released"
	// TwinSubmitted: isched submitted the run's twin onto its ideal
	// partition (rule 10).
	TwinSubmitted Event = "twin-submitted"
	// TwinStarted: Slurm started the twin: the handover begins.
	TwinStarted Event = "twin-started"
	// TwinCancelled: the twin is gone (isched cancelled it, or someone
	// else did): the run goes on where it runs.
	TwinCancelled Event = "twin-cancelled"
	// HandedOver: the handover's checkpoint landed and the old attempt
	// ended: the twin resumes from it.
	HandedOver Event = "handed-over"
)

// Events lists every event, in the table's order.
var Events = []Event{CheckpointAsked, RequeueSent, MoveAbandoned, UpdateDone, ActionFailed, AttemptStarted,
	RequeueSlow, CancelledBeforeRestart, Adopted, Finished, Yielded, Released, TwinSubmitted, TwinStarted, TwinCancelled, HandedOver}

// transition is one row of the table.
type transition struct {
	from State
	on   Event
	to   State
	why  string // what the row means: the diagram's label and the docs'
}

// table is every legal transition; anything else is refused. A row whose
// to is its from is legal and changes nothing (an action's late result,
// a start report of another rank).
var table = []transition{
	{Idle, CheckpointAsked, AwaitingCheckpoint, "a move or a longer limit needs a fresh checkpoint"},
	{Idle, RequeueSent, RequeueIssued, "continue an ended attempt, or requeue at once"},
	{AwaitingCheckpoint, RequeueSent, RequeueIssued, "the checkpoint landed: requeue onto the target"},
	{AwaitingCheckpoint, MoveAbandoned, Idle, "no checkpoint in time, no room any more, or the job stopped running"},
	{Idle, UpdateDone, Idle, "a pending job moved or a time limit raised in place"},
	{Ended, UpdateDone, Ended, "a late result of an update issued before the end"},
	{Idle, ActionFailed, Idle, "an update refused: tried again later"},
	{AwaitingCheckpoint, ActionFailed, Idle, "the checkpoint signal not delivered: the move is off"},
	{RequeueIssued, ActionFailed, Idle, "a move's requeue refused: the job stays where it was"},
	{Ended, ActionFailed, Ended, "a late result of an action issued before the end"},
	{Idle, AttemptStarted, Idle, "an attempt Slurm started on its own (first start, Slurm's requeue)"},
	{AwaitingCheckpoint, AttemptStarted, AwaitingCheckpoint, "another rank's start, or Slurm's own requeue: the policy re-judges"},
	{RequeueIssued, AttemptStarted, Idle, "the requeue landed: a move or a continuation counted"},
	{Ended, AttemptStarted, Idle, "a start after the end was recorded (its user requeued the job)"},
	{RequeueIssued, RequeueSlow, Idle, "the requeued job did not start within RequeueWait"},
	{RequeueIssued, CancelledBeforeRestart, Idle, "cancelled before the next attempt: the end is settled next"},
	{Idle, Adopted, Idle, "its queued job taken up from the job table"},
	{AwaitingCheckpoint, Adopted, AwaitingCheckpoint, "another queued job of the run taken up"},
	{RequeueIssued, Adopted, RequeueIssued, "the resubmitted job listed before the agent's result"},
	{Ended, Adopted, Idle, "submitted again under the run's name: the run goes on"},
	{Idle, Finished, Ended, "work done, or nothing to continue from"},
	{AwaitingCheckpoint, Finished, Ended, "the run reached its total while its checkpoint was awaited"},
	{RequeueIssued, Finished, Ended, "the continuation could not be done"},
	{RequeueIssued, Yielded, Yielding, "rule 8's requeue done: held until the run it yields to starts"},
	{Yielding, Released, RequeueIssued, "released: its next attempt's start settles the requeue"},
	{Yielding, ActionFailed, Yielding, "the release refused: tried again"},
	{Yielding, AttemptStarted, Idle, "released by someone else, and started"},
	{Yielding, CancelledBeforeRestart, Idle, "cancelled while held: the end is settled next"},
	{Yielding, Adopted, Yielding, "its held job taken up from the job table"},
	{Yielding, Finished, Ended, "ended while held"},
	{Idle, TwinSubmitted, TwinPending, "running off its ideal partition: a twin keeps its place in the ideal queue"},
	{TwinPending, AttemptStarted, TwinPending, "another rank's start, or Slurm's own requeue elsewhere: the twin stays"},
	{TwinPending, UpdateDone, TwinPending, "the running attempt's time limit changed in place"},
	{TwinPending, ActionFailed, Idle, "the twin's submission refused: the run goes on without one"},
	{TwinPending, Adopted, TwinPending, "its queued twin or job taken up from the job table"},
	{TwinPending, TwinStarted, HandingOver, "Slurm started the twin: checkpoint the running attempt"},
	{TwinPending, TwinCancelled, Idle, "the twin cancelled (by isched: no longer pays, or before another action; or by anyone)"},
	{TwinPending, Finished, Ended, "the run ended elsewhere: its twin is cancelled"},
	{HandingOver, CheckpointAsked, HandingOver, "the running attempt asked for the handover's checkpoint"},
	{HandingOver, HandedOver, RequeueIssued, "the checkpoint landed, the old attempt ended: the twin's start from it settles it"},
	{HandingOver, MoveAbandoned, Idle, "no checkpoint in time, or the run stopped: the twin is cancelled, the run stays"},
	{HandingOver, ActionFailed, Idle, "the checkpoint signal not delivered: the twin is cancelled, the run stays"},
	{HandingOver, TwinCancelled, Idle, "the twin cancelled (no longer pays, or by anyone): the run stays"},
	{HandingOver, AttemptStarted, HandingOver, "another rank's start report: the policy re-judges"},
	{HandingOver, Adopted, HandingOver, "its running twin taken up from the job table"},
	{HandingOver, Finished, Ended, "the run reached its total during the handover: its twin is cancelled"},
	{Idle, TwinCancelled, Idle, "a late report of a twin already given up"},
	{Ended, TwinCancelled, Ended, "the twin of an ended run cancelled"},
}

// TransitionError is a transition the table does not list.
type TransitionError struct {
	From State
	On   Event
}

func (e *TransitionError) Error() string {
	return fmt.Sprintf("lifecycle: no transition from %s on %s", e.From, e.On)
}

// Next is the state a run in from goes to on ev; an event the table does
// not list for from is refused with a *TransitionError and from is
// returned unchanged.
func Next(from State, ev Event) (State, error) {
	for _, t := range table {
		if t.from == from && t.on == ev {
			return t.to, nil
		}
	}
	return from, &TransitionError{From: from, On: ev}
}

// Valid says whether s is one of the states (a persisted state is checked
// when it is read back).
func (s State) Valid() bool { return slices.Contains(States, s) }

// Mermaid is the state diagram of the table (the transitions that change
// the state), as docs/design.md shows it; a test keeps the two the same.
func Mermaid() string {
	var b strings.Builder
	b.WriteString("stateDiagram-v2\n    [*] --> idle: submitted (isched submit)\n")
	for _, t := range table {
		if t.from != t.to {
			fmt.Fprintf(&b, "    %s --> %s: %s\n", mermaidID(t.from), mermaidID(t.to), t.on)
		}
	}
	return b.String()
}

func mermaidID(s State) string { return strings.ReplaceAll(s.String(), "-", "_") }

// Markdown is the whole table, one row per transition with what it
// means, as docs/design.md shows it.
func Markdown() string {
	var b strings.Builder
	b.WriteString("| from | event | to | when |\n| --- | --- | --- | --- |\n")
	for _, t := range table {
		fmt.Fprintf(&b, "| %s | %s | %s | %s |\n", t.from, t.on, t.to, t.why)
	}
	return b.String()
}
