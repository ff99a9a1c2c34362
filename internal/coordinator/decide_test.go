package coordinator

import (
	"testing"

	"github.com/isched/isched/internal/lifecycle"
	"github.com/isched/isched/internal/policy"
	"github.com/isched/isched/internal/report"
)

func TestOutcome(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name     string
		ckptDone bool
		d        policy.Decision
		want     decisionOutcome
	}{
		{"nothing to do", false, policy.Decision{Kind: policy.None}, noAction},
		{"a move", false, policy.Decision{Kind: policy.MovePending}, issueAction},
		{"gave up waiting for the checkpoint", false, policy.Decision{Kind: policy.None, Abandoned: true}, abandonMove},
		{"an action is issued even when marked abandoned", false, policy.Decision{Kind: policy.Requeue, Abandoned: true}, issueAction},
		{"after the checkpoint: the move", true, policy.Decision{Kind: policy.Requeue}, issueAction},
		{"after the checkpoint: no move is an abandon", true, policy.Decision{Kind: policy.None}, abandonMove},
		{"after the checkpoint: abandoned", true, policy.Decision{Kind: policy.None, Abandoned: true}, abandonMove},
		{"after the checkpoint: an abandoned action is not issued", true, policy.Decision{Kind: policy.Requeue, Abandoned: true}, abandonMove},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			if got := outcome(tt.ckptDone, tt.d); got != tt.want {
				t.Errorf("outcome(%v, %+v) = %d, want %d", tt.ckptDone, tt.d, got, tt.want)
			}
		})
	}
}

func TestSlurmDone(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name                     string
		state                    string
		listed, after, graceOver bool
		wantState                string
		wantDone                 bool
	}{
		{"ended, in a table younger than the end report", "FAILED", true, true, false, "FAILED", true},
		{"ended, in an older table", "FAILED", true, false, true, "", false},
		{"still running", "RUNNING", true, true, true, "", false},
		{"preempted, within the grace", "PREEMPTED", true, true, false, "", false},
		{"preempted and not requeued", "PREEMPTED", true, true, true, "PREEMPTED", true},
		{"preempted, in an older table", "PREEMPTED", true, false, true, "", false},
		{"forgotten by slurmctld, within the grace", "", false, true, false, "", false},
		{"forgotten by slurmctld", "", false, false, true, "", true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			state, done := slurmDone(report.Job{JobID: 7, State: tt.state}, tt.listed, tt.after, tt.graceOver)
			if state != tt.wantState || done != tt.wantDone {
				t.Errorf("slurmDone = %q, %v; want %q, %v", state, done, tt.wantState, tt.wantDone)
			}
		})
	}
}

func TestEndStateOf(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name  string
		state string
		end   attemptEnd
		total int64
		want  string
	}{
		{"the job forgotten", "", attemptEnd{ExitCode: 1, Signal: "SIGKILL"}, 100, "ENDED"},
		{"exit 0, no total", "COMPLETED", attemptEnd{}, 0, "ENDED"},
		{"exit 0 short of the total: Slurm's word", "COMPLETED", attemptEnd{}, 100, "COMPLETED"},
		{"a failure of its own", "FAILED", attemptEnd{ExitCode: 2}, 100, "ENDED"},
		{"killed by a signal", "TIMEOUT", attemptEnd{ExitCode: 143, Signal: "SIGTERM"}, 100, "TIMEOUT"},
		{"killed by a signal, no total", "CANCELLED", attemptEnd{ExitCode: 143, Signal: "SIGTERM"}, 0, "CANCELLED"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			if got := endStateOf(tt.state, &tt.end, tt.total); got != tt.want {
				t.Errorf("endStateOf(%q, %+v, %d) = %q, want %q", tt.state, tt.end, tt.total, got, tt.want)
			}
		})
	}
}

func TestCancelledBeforeRestart(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name    string
		state   string
		phase   lifecycle.State
		pending bool
		want    bool
	}{
		{"cancelled while requeued", "CANCELLED", lifecycle.RequeueIssued, false, true},
		{"cancelled while the requeue is still pending", "CANCELLED", lifecycle.RequeueIssued, true, false},
		{"cancelled, no requeue of ours", "CANCELLED", lifecycle.Idle, false, false},
		{"requeued, pending", "PENDING", lifecycle.RequeueIssued, false, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			l := &lineage{Phase: tt.phase}
			if tt.pending {
				l.Pending = &pending{ID: "x:0:1"}
			}
			if got := cancelledBeforeRestart(l, report.Job{State: tt.state}); got != tt.want {
				t.Errorf("cancelledBeforeRestart = %v, want %v", got, tt.want)
			}
		})
	}
}

func TestEndedUnreported(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name  string
		state string
		l     lineage
		want  bool
	}{
		{"failed, idle", "NODE_FAIL", lineage{}, true},
		{"completed: settleCompleted waits for its report", "COMPLETED", lineage{}, false},
		{"still running", "RUNNING", lineage{}, false},
		{"an action of ours under way", "CANCELLED", lineage{Phase: lifecycle.RequeueIssued}, false},
		{"already ended", "FAILED", lineage{Phase: lifecycle.Ended}, false},
		{"its end report came", "FAILED", lineage{End: &attemptEnd{}}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			if got := endedUnreported(&tt.l, report.Job{State: tt.state}); got != tt.want {
				t.Errorf("endedUnreported = %v, want %v", got, tt.want)
			}
		})
	}
}

func TestResultText(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		r    report.Result
		want string
	}{
		{"no message", report.Result{Status: report.StatusOK}, "ok"},
		{"with a message", report.Result{Status: report.StatusFailed, Message: "scontrol: invalid partition"}, "failed: scontrol: invalid partition"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			if got := resultText(&tt.r); got != tt.want {
				t.Errorf("resultText = %q, want %q", got, tt.want)
			}
		})
	}
}
