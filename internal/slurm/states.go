package slurm

// JobState is a job's base state as Slurm prints it (squeue's job_state,
// scontrol's JobState, sacct's State without "by <uid>"): the names of
// slurm.h's JOB_STATE_BASE and the flag states Slurm shows in their place.
type JobState string

// The states Slurm prints. The constants are untyped on purpose: the State
// fields of [JobInfo], [AcctJob] and report.Job are plain strings that the
// coordinator and the CLI read, and an untyped constant compares with both
// a string and a JobState without a conversion. They become typed when
// those fields do.
const (
	StatePending     = "PENDING"
	StateRunning     = "RUNNING"
	StateSuspended   = "SUSPENDED"
	StateCompleting  = "COMPLETING"
	StateCompleted   = "COMPLETED"
	StateCancelled   = "CANCELLED"
	StateFailed      = "FAILED"
	StateTimeout     = "TIMEOUT"
	StateNodeFail    = "NODE_FAIL"
	StatePreempted   = "PREEMPTED"
	StateBootFail    = "BOOT_FAIL"
	StateDeadline    = "DEADLINE"
	StateOutOfMemory = "OUT_OF_MEMORY"
	StateRequeued    = "REQUEUED"
	StateRequeueHold = "REQUEUE_HOLD"
	StateRequeueFed  = "REQUEUE_FED"
	StateResizing    = "RESIZING"
	StateRevoked     = "REVOKED"
	StateSignaling   = "SIGNALING"
	StateSpecialExit = "SPECIAL_EXIT"
	StateStageOut    = "STAGE_OUT"
	StateStopped     = "STOPPED"
	StateConfiguring = "CONFIGURING"
	StateResvDelHold = "RESV_DEL_HOLD"
)

// Ended reports whether s is final: the job will never run again unless
// requeued by an operator.
func (s JobState) Ended() bool {
	switch s {
	case StateCompleted, StateCancelled, StateFailed, StateTimeout, StateNodeFail, StatePreempted,
		StateBootFail, StateDeadline, StateOutOfMemory, StateSpecialExit:
		return true
	}
	return false
}

// In reports whether s is one of states.
func (s JobState) In(states ...JobState) bool {
	for _, t := range states {
		if s == t {
			return true
		}
	}
	return false
}
