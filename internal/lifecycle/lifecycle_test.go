package lifecycle

import (
	"errors"
	"os"
	"strings"
	"testing"
)

// TestEveryTransition walks every (state, event) pair: the legal ones
// go where the protocol says, every other one is refused and leaves the
// state as it was. The expectations are written out here, not read from
// the table, so a row added, dropped or changed there fails this test.
func TestEveryTransition(t *testing.T) {
	const refused = State("refused")
	want := map[State]map[Event]State{
		Idle: {
			CheckpointAsked: AwaitingCheckpoint, RequeueSent: RequeueIssued, MoveAbandoned: refused,
			UpdateDone: Idle, ActionFailed: Idle, AttemptStarted: Idle, RequeueSlow: refused,
			CancelledBeforeRestart: refused, Adopted: Idle, Finished: Ended, Yielded: refused, Released: refused,
			TwinSubmitted: TwinPending, TwinStarted: refused, TwinCancelled: Idle, HandedOver: refused,
		},
		AwaitingCheckpoint: {
			CheckpointAsked: refused, RequeueSent: RequeueIssued, MoveAbandoned: Idle,
			UpdateDone: refused, ActionFailed: Idle, AttemptStarted: AwaitingCheckpoint, RequeueSlow: refused,
			CancelledBeforeRestart: refused, Adopted: AwaitingCheckpoint, Finished: Ended, Yielded: refused, Released: refused,
			TwinSubmitted: refused, TwinStarted: refused, TwinCancelled: refused, HandedOver: refused,
		},
		RequeueIssued: {
			CheckpointAsked: refused, RequeueSent: refused, MoveAbandoned: refused,
			UpdateDone: refused, ActionFailed: Idle, AttemptStarted: Idle, RequeueSlow: Idle,
			CancelledBeforeRestart: Idle, Adopted: RequeueIssued, Finished: Ended, Yielded: Yielding, Released: refused,
			TwinSubmitted: refused, TwinStarted: refused, TwinCancelled: refused, HandedOver: refused,
		},
		Yielding: {
			CheckpointAsked: refused, RequeueSent: refused, MoveAbandoned: refused,
			UpdateDone: refused, ActionFailed: Yielding, AttemptStarted: Idle, RequeueSlow: refused,
			CancelledBeforeRestart: Idle, Adopted: Yielding, Finished: Ended, Yielded: refused, Released: RequeueIssued,
			TwinSubmitted: refused, TwinStarted: refused, TwinCancelled: refused, HandedOver: refused,
		},
		TwinPending: {
			CheckpointAsked: refused, RequeueSent: refused, MoveAbandoned: refused,
			UpdateDone: TwinPending, ActionFailed: Idle, AttemptStarted: TwinPending, RequeueSlow: refused,
			CancelledBeforeRestart: refused, Adopted: TwinPending, Finished: Ended, Yielded: refused, Released: refused,
			TwinSubmitted: refused, TwinStarted: HandingOver, TwinCancelled: Idle, HandedOver: refused,
		},
		HandingOver: {
			CheckpointAsked: HandingOver, RequeueSent: refused, MoveAbandoned: Idle,
			UpdateDone: refused, ActionFailed: Idle, AttemptStarted: HandingOver, RequeueSlow: refused,
			CancelledBeforeRestart: refused, Adopted: HandingOver, Finished: Ended, Yielded: refused, Released: refused,
			TwinSubmitted: refused, TwinStarted: refused, TwinCancelled: Idle, HandedOver: RequeueIssued,
		},
		Ended: {
			CheckpointAsked: refused, RequeueSent: refused, MoveAbandoned: refused,
			UpdateDone: Ended, ActionFailed: Ended, AttemptStarted: Idle, RequeueSlow: refused,
			CancelledBeforeRestart: refused, Adopted: Idle, Finished: refused, Yielded: refused, Released: refused,
			TwinSubmitted: refused, TwinStarted: refused, TwinCancelled: Ended, HandedOver: refused,
		},
	}
	if len(want) != len(States) {
		t.Fatalf("the test covers %d states, the package has %d", len(want), len(States))
	}
	for _, from := range States {
		if len(want[from]) != len(Events) {
			t.Fatalf("%s: the test covers %d events, the package has %d", from, len(want[from]), len(Events))
		}
		for _, ev := range Events {
			got, err := Next(from, ev)
			switch exp := want[from][ev]; {
			case exp == refused:
				var te *TransitionError
				if !errors.As(err, &te) || te.From != from || te.On != ev || got != from {
					t.Errorf("%s on %s: got %s, %v; want refused, state unchanged", from, ev, got, err)
				}
			case err != nil || got != exp:
				t.Errorf("%s on %s: got %s, %v; want %s", from, ev, got, err, exp)
			}
		}
	}
}

// TestTableWellFormed: one row per (state, event), each explained, over
// the listed states and events only.
func TestTableWellFormed(t *testing.T) {
	seen := map[[2]string]bool{}
	for _, r := range table {
		k := [2]string{string(r.from), string(r.on)}
		if seen[k] {
			t.Errorf("two rows for %s on %s", r.from, r.on)
		}
		seen[k] = true
		if !r.from.Valid() || !r.to.Valid() || r.why == "" {
			t.Errorf("row %+v: unknown state or no explanation", r)
		}
	}
	if State("paused").Valid() {
		t.Error("an unknown state is valid")
	}
}

// TestUnknownStateRefused: a state read back from a newer or damaged
// save is refused on every event, not treated as idle.
func TestUnknownStateRefused(t *testing.T) {
	for _, ev := range Events {
		if got, err := Next("paused", ev); err == nil || got != "paused" {
			t.Errorf("unknown state on %s: %s, %v", ev, got, err)
		}
	}
	if err := (&TransitionError{From: Idle, On: RequeueSlow}); !strings.Contains(err.Error(), "from idle on requeue-slow") {
		t.Errorf("error text: %v", err)
	}
}

// TestDesignDocShowsTheTable: docs/design.md carries the diagram and the
// table as this package renders them, so the doc cannot drift from the
// code.
func TestDesignDocShowsTheTable(t *testing.T) {
	b, err := os.ReadFile("../../docs/design.md")
	if err != nil {
		t.Fatal(err)
	}
	doc := string(b)
	for name, want := range map[string]string{"mermaid diagram": "```mermaid\n" + Mermaid() + "```\n", "table": Markdown()} {
		if !strings.Contains(doc, want) {
			t.Errorf("docs/design.md lacks the lifecycle %s; it should contain:\n%s", name, want)
		}
	}
}
