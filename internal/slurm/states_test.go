package slurm

import "testing"

func TestJobStateEnded(t *testing.T) {
	t.Parallel()
	ended := map[JobState]bool{
		StateCompleted: true, StateCancelled: true, StateFailed: true, StateTimeout: true,
		StateNodeFail: true, StatePreempted: true, StateBootFail: true, StateDeadline: true,
		StateOutOfMemory: true, StateSpecialExit: true,
	}
	for _, s := range []JobState{
		StatePending, StateRunning, StateSuspended, StateCompleting, StateCompleted, StateCancelled,
		StateFailed, StateTimeout, StateNodeFail, StatePreempted, StateBootFail, StateDeadline,
		StateOutOfMemory, StateRequeued, StateRequeueHold, StateRequeueFed, StateResizing, StateRevoked,
		StateSignaling, StateSpecialExit, StateStageOut, StateStopped, StateConfiguring, StateResvDelHold,
	} {
		if got := s.Ended(); got != ended[s] {
			t.Errorf("%s.Ended() = %v, want %v", s, got, ended[s])
		}
		if got := Ended(string(s)); got != ended[s] {
			t.Errorf("Ended(%q) = %v, want %v", s, got, ended[s])
		}
	}
	if !JobState(StatePending).In(StateRunning, StatePending) || JobState(StatePending).In(StateRunning) || JobState(StatePending).In() {
		t.Error("In: wrong membership")
	}
}
