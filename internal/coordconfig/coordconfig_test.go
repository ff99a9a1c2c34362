package coordconfig

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/isched/isched/internal/daemon"
	"github.com/isched/isched/internal/policy"
)

// writeFile writes body to a config file and returns its path.
func writeFile(t *testing.T, body string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "c.json")
	if err := os.WriteFile(p, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

// TestSettingsValidate: every error names its field.
func TestSettingsValidate(t *testing.T) {
	t.Parallel()
	if err := DefaultSettings().Validate(); err != nil {
		t.Fatalf("defaults: %v", err)
	}
	for _, tc := range []struct {
		field string
		set   func(*Settings)
	}{
		{"v", func(s *Settings) { s.V = 0 }},
		{"tick", func(s *Settings) { s.Tick = 0 }},
		{"stale_after", func(s *Settings) { s.StaleAfter = -1 }},
		{"leader_ttl", func(s *Settings) { s.LeaderTTL = 0 }},
		{"end_grace", func(s *Settings) { s.EndGrace = 0 }},
		{"ended_ttl", func(s *Settings) { s.EndedTTL = -1 }},
		{"max_job_series", func(s *Settings) { s.MaxJobSeries = 0 }},
		{"policy.margin", func(s *Settings) { s.Policy.Margin = 0 }},
		{"policy.min_gain", func(s *Settings) { s.Policy.MinGain = 0 }},
		{"policy.move_cost", func(s *Settings) { s.Policy.MoveCost = -1 }},
		{"policy.min_interval", func(s *Settings) { s.Policy.MinInterval = -1 }},
		{"policy.max_moves", func(s *Settings) { s.Policy.MaxMoves = daemon.Limit(0) }},
		{"policy.speed.gpu", func(s *Settings) { s.Policy.Speed = map[string]float64{"gpu": 0} }},
		{"policy.dev_windows[1]", func(s *Settings) { s.Policy.DevWindows = []string{"18:00-08:00", "8-9"} }},
		{"policy.time_zone", func(s *Settings) { s.Policy.TimeZone = "Mars/Olympus" }},
		{"policy.default_ckpt", func(s *Settings) { s.Policy.DefaultCkpt = 0 }},
		{"policy.ckpt_timeout_factor", func(s *Settings) { s.Policy.CkptTimeoutFactor = -1 }},
		{"policy.min_ckpt_timeout", func(s *Settings) { s.Policy.MinCkptTimeout = 0 }},
		{"policy.min_pending", func(s *Settings) { s.Policy.MinPending = 0 }},
		{"policy.trim_min", func(s *Settings) { s.Policy.TrimMin = 0 }},
		{"policy.order_max_wait", func(s *Settings) { s.Policy.OrderMaxWait = 0 }},
		{"policy.max_preemptions", func(s *Settings) { s.Policy.MaxPreemptions = 0 }},
		{"policy.max_resizes", func(s *Settings) { s.Policy.MaxResizes = 0 }},
		{"policy.scaling_efficiency", func(s *Settings) { s.Policy.ScalingEfficiency = 1.5 }},
	} {
		t.Run(tc.field, func(t *testing.T) {
			t.Parallel()
			s := DefaultSettings()
			tc.set(&s)
			err := s.Validate()
			if fe := (*daemon.FieldError)(nil); err == nil || !errors.As(err, &fe) || fe.Field != tc.field {
				t.Errorf("error %v, want one naming %s", err, tc.field)
			}
		})
	}
	// these are settings, not mistakes
	s := DefaultSettings()
	s.Policy.MinInterval, s.Policy.MaxMoves, s.Policy.MaxContinuations = 0, daemon.Unbounded(), daemon.Limit(0)
	if err := s.Validate(); err != nil {
		t.Error(err)
	}
}

// TestLoadPolicy: a simulation of the site decides with what the
// coordinator would: the file's policy over the defaults, in policy.Config's
// spellings, and the file's errors by name.
func TestLoadPolicy(t *testing.T) {
	t.Parallel()
	p := writeFile(t, `{"tick": "1s", "policy": {"speed": {"gpu": 4, "cpu": 1}, "min_interval": "0s", "margin": "15s"}}`)
	pol, err := LoadPolicy(p)
	if err != nil {
		t.Fatal(err)
	}
	def := policy.DefaultConfig()
	if pol.Speed["gpu"] != 4 || pol.Speed["cpu"] != 1 || pol.MinInterval != -1 || pol.Margin != 15*time.Second || pol.MoveCost != def.MoveCost {
		t.Errorf("policy %+v", pol)
	}
	if pol.KeepPlace {
		t.Error("keep_place on by default")
	}
	if kp, err := LoadPolicy(writeFile(t, `{"policy": {"keep_place": true}}`)); err != nil || !kp.KeepPlace {
		t.Errorf("keep_place true: %+v, %v", kp, err)
	}
	bad := writeFile(t, `{"policy": {"speed": {"gpu": 0}}}`)
	if _, err := LoadPolicy(bad); err == nil || !strings.Contains(err.Error(), bad) || !strings.Contains(err.Error(), "policy.speed.gpu") {
		t.Errorf("bad speed: %v", err)
	}
}

func TestParseJobMetricsFrom(t *testing.T) {
	t.Parallel()
	for _, bad := range []string{"", "10.77.0.0/33", "host.example.org", "10.77.0.0/24,10.0.0.1"} {
		if _, err := ParseJobMetricsFrom([]string{bad}); err == nil {
			t.Errorf("%q accepted", bad)
		}
	}
	s := DefaultSettings()
	s.JobMetricsFrom = []string{"10.77.0.0/24", "nope"}
	if err := s.Validate(); err == nil || !strings.Contains(err.Error(), "job_metrics_from") {
		t.Errorf("Validate: %v, want an error naming job_metrics_from", err)
	}
	got, err := ParseJobMetricsFrom([]string{"10.77.0.7/24", "::1"})
	if err != nil || len(got) != 2 || got[0].String() != "10.77.0.0/24" || got[1].String() != "::1/128" {
		t.Errorf("got %v %v", got, err)
	}
}
