package coordinator

import (
	"testing"

	"github.com/isched/isched/internal/report"
)

func TestLastPartition(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		st   report.JobStatus
		want string
	}{
		{"no history: the status's", report.JobStatus{Partition: "cpu"}, "cpu"},
		{"the last attempt's", report.JobStatus{Partition: "gpu", History: []report.Span{{Partition: "a100"}, {Partition: "cpu"}}}, "cpu"},
		{"a last attempt with none: the status's", report.JobStatus{Partition: "gpu", History: []report.Span{{Partition: "cpu"}, {}}}, "gpu"},
		{"nothing known", report.JobStatus{}, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			if got := lastPartition(&tt.st); got != tt.want {
				t.Errorf("lastPartition = %q, want %q", got, tt.want)
			}
		})
	}
}

func TestResumeStep(t *testing.T) {
	t.Parallel()
	step := int64(1200)
	tests := []struct {
		name       string
		last       *report.Checkpoint
		resumeFrom string
		want       int64
	}{
		{"no checkpoint", nil, "/ckpt/a.pt", 0},
		{"given the last checkpoint", &report.Checkpoint{Path: "/ckpt/a.pt", Step: &step}, "/ckpt/a.pt", 1200},
		{"given another file", &report.Checkpoint{Path: "/ckpt/a.pt", Step: &step}, "/ckpt/b.pt", 0},
		{"not resumed", &report.Checkpoint{Path: "/ckpt/a.pt", Step: &step}, "", 0},
		{"the checkpoint's step unknown", &report.Checkpoint{Path: "/ckpt/a.pt"}, "/ckpt/a.pt", 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			if got := resumeStep(tt.last, tt.resumeFrom); got != tt.want {
				t.Errorf("resumeStep = %d, want %d", got, tt.want)
			}
		})
	}
}
