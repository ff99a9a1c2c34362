package coordinator

import (
	"testing"

	"github.com/isched/isched/internal/policy"
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
