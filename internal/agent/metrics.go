package agent

import (
	"context"
	"net/http"
	"path/filepath"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/isched/isched/internal/report"
	"github.com/isched/isched/internal/slurm"
)

// Metrics are the agent's Prometheus metrics, on their own registry, all
// prefixed isched_agent_. Labels are bounded: the Slurm command's base name,
// the action type and its result status.
type Metrics struct {
	Registry *prometheus.Registry
	poll     *prometheus.HistogramVec
	commands *prometheus.CounterVec
	errors   *prometheus.CounterVec
	actions  *prometheus.CounterVec
}

// slurmCommands are the commands the agent runs: label values of the
// command counters (anything else counts as "other").
var slurmCommands = []string{"squeue", "sinfo", "scontrol", "scancel", "sbatch"}

// NewMetrics registers the agent's metrics on a fresh registry.
func NewMetrics() *Metrics {
	r := prometheus.NewRegistry()
	m := &Metrics{
		Registry: r,
		poll: prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "isched_agent_poll_duration_seconds",
			Help:    "Time to poll Slurm and publish the snapshot and job table, by result (ok, error).",
			Buckets: prometheus.ExponentialBuckets(0.01, 2, 12)}, []string{"result"}),
		commands: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "isched_agent_slurm_commands_total",
			Help: "Slurm commands run, by command."}, []string{"command"}),
		errors: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "isched_agent_slurm_command_errors_total",
			Help: "Slurm commands that failed (non-zero exit, timeout, not startable), by command."}, []string{"command"}),
		actions: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "isched_agent_actions_total",
			Help: "Actions executed, by type and result (ok, refused, failed)."}, []string{"type", "result"}),
	}
	r.MustRegister(m.poll, m.commands, m.errors, m.actions, collectors.NewGoCollector(),
		collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	for _, c := range slurmCommands {
		m.commands.WithLabelValues(c)
		m.errors.WithLabelValues(c)
	}
	for _, t := range []report.ActionType{report.ActionSignal, report.ActionRequeue, report.ActionUpdate, report.ActionCancel,
		report.ActionSubmit, report.ActionRelease, report.ActionAnnotate, report.ActionResubmit, report.ActionTwin, report.ActionHandover} {
		for _, s := range []report.ResultStatus{report.StatusOK, report.StatusRefused, report.StatusFailed} {
			m.actions.WithLabelValues(string(t), string(s))
		}
	}
	return m
}

// Describe sends the descriptions of the agent's own metrics (not the Go and
// process collectors).
func (m *Metrics) Describe(ch chan<- *prometheus.Desc) {
	for _, c := range []prometheus.Collector{m.poll, m.commands, m.errors, m.actions} {
		c.Describe(ch)
	}
}

// Handler serves /metrics.
func (m *Metrics) Handler() http.Handler {
	return promhttp.HandlerFor(m.Registry, promhttp.HandlerOpts{Registry: m.Registry})
}

// Runner wraps a Slurm command runner to count its commands and failures.
func (m *Metrics) Runner(r slurm.Runner) slurm.Runner {
	return slurm.RunnerFunc(func(ctx context.Context, name string, args []string, stdin []byte) ([]byte, error) {
		cmd := commandLabel(name)
		m.commands.WithLabelValues(cmd).Inc()
		out, err := r.Run(ctx, name, args, stdin)
		if err != nil {
			m.errors.WithLabelValues(cmd).Inc()
		}
		return out, err
	})
}

// commandLabel is a command's label: its base name when it is one the agent
// runs, else "other" (a bounded label set whatever -slurm-bin-dir says).
func commandLabel(name string) string {
	base := filepath.Base(name)
	for _, c := range slurmCommands {
		if base == c {
			return c
		}
	}
	return "other"
}

// observePoll records one poll; nil-safe.
func (m *Metrics) observePoll(d time.Duration, err error) {
	if m == nil {
		return
	}
	result := "ok"
	if err != nil {
		result = "error"
	}
	m.poll.WithLabelValues(result).Observe(d.Seconds())
}

// observeAction records one action's result; nil-safe.
func (m *Metrics) observeAction(act *report.Action, res *report.Result) {
	if m == nil || act == nil || res == nil {
		return
	}
	m.actions.WithLabelValues(string(act.Type), string(res.Status)).Inc()
}
