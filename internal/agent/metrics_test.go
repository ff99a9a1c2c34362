package agent

import (
	"context"
	"errors"
	"io"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/isched/isched/internal/report"
	"github.com/isched/isched/internal/slurm"
)

// TestMetrics: Slurm commands and their failures are counted by command
// (bounded: an unknown binary is "other"), polls by result, actions by type
// and result, and /metrics serves them.
func TestMetrics(t *testing.T) {
	t.Parallel()
	m := NewMetrics()
	r := m.Runner(slurm.RunnerFunc(func(_ context.Context, name string, _ []string, _ []byte) ([]byte, error) {
		if strings.HasSuffix(name, "scontrol") {
			return nil, errors.New("exit status 1")
		}
		return []byte("ok"), nil
	}))
	for _, name := range []string{"/usr/bin/squeue", "squeue", "/opt/slurm/bin/scontrol", "/tmp/evil-name"} {
		_, _ = r.Run(context.Background(), name, nil, nil)
	}
	m.observePoll(120*time.Millisecond, nil)
	m.observePoll(3*time.Second, errors.New("squeue down"))
	m.observeAction(&report.Action{Type: report.ActionRequeue}, &report.Result{Status: report.StatusOK})
	m.observeAction(&report.Action{Type: report.ActionSignal}, &report.Result{Status: report.StatusRefused})
	var nilM *Metrics
	nilM.observePoll(time.Second, nil) // an agent without metrics
	nilM.observeAction(&report.Action{}, &report.Result{})

	rec := httptest.NewRecorder()
	m.Handler().ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
	body, _ := io.ReadAll(rec.Body)
	got := string(body)
	for _, want := range []string{
		`isched_agent_slurm_commands_total{command="squeue"} 2`,
		`isched_agent_slurm_commands_total{command="other"} 1`,
		`isched_agent_slurm_command_errors_total{command="scontrol"} 1`,
		`isched_agent_slurm_command_errors_total{command="squeue"} 0`,
		`isched_agent_poll_duration_seconds_count{result="ok"} 1`,
		`isched_agent_poll_duration_seconds_count{result="error"} 1`,
		`isched_agent_actions_total{result="ok",type="requeue"} 1`,
		`isched_agent_actions_total{result="refused",type="signal"} 1`,
	} {
		if !strings.Contains(got, want) {
			t.Errorf("/metrics lacks %s", want)
		}
	}
	if strings.Contains(got, "evil") {
		t.Error("a command path reached a label")
	}
}
