package coordinator

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/isched/isched/internal/policy"
)

func TestFileConfig(t *testing.T) {
	t.Parallel()
	// the packaged file (/etc/isched/coordinator.json) loads, lists the
	// defaults and names no partition: a site writes its own
	fc, err := LoadFileConfig(filepath.Join("..", "..", "systemd", "coordinator.json"))
	if err != nil {
		t.Fatalf("systemd/coordinator.json: %v", err)
	}
	if fc.Cluster != "" || len(fc.Policy.Speed) != 0 || len(fc.Policy.DevPartitions) != 0 {
		t.Errorf("systemd/coordinator.json names a cluster or partitions: %+v", fc)
	}
	dcfg := Config{Policy: policy.DefaultConfig()}
	if err := fc.apply(&dcfg); err != nil {
		t.Fatal(err)
	}
	if d := policy.DefaultConfig(); dcfg.Tick != 2*time.Second || dcfg.EndedTTL != 7*24*time.Hour ||
		dcfg.Policy.MinGain != d.MinGain || dcfg.Policy.MaxContinuations != d.MaxContinuations || dcfg.Policy.Margin != d.Margin {
		t.Errorf("systemd/coordinator.json differs from the defaults it lists: %+v", dcfg)
	}
	// the lab's, every field set (examples/coordinator-lab.json)
	fc, err = LoadFileConfig(filepath.Join("..", "..", "examples", "coordinator-lab.json"))
	if err != nil {
		t.Fatalf("examples/coordinator-lab.json: %v", err)
	}
	cfg := Config{Policy: policy.DefaultConfig()}
	if err := fc.apply(&cfg); err != nil {
		t.Fatal(err)
	}
	if cfg.Tick != 2*time.Second || cfg.Policy.MinGain != 1.5 || cfg.Policy.Speed["gpu"] != 8 || cfg.Policy.MaxContinuations != 20 ||
		cfg.EndedTTL != 30*24*time.Hour {
		t.Errorf("config %+v", cfg)
	}
	// min_interval "0s" turns hysteresis off (negative in policy.Config);
	// absent, the policy's default stays
	for body, want := range map[string]time.Duration{
		`{"policy": {"min_interval": "0s"}}`: -1, `{"policy": {"min_interval": "5m"}}`: 5 * time.Minute,
		`{"policy": {}}`: policy.DefaultConfig().MinInterval,
	} {
		p := filepath.Join(t.TempDir(), "c.json")
		_ = os.WriteFile(p, []byte(body), 0o600)
		fc, err := LoadFileConfig(p)
		if err != nil {
			t.Fatal(err)
		}
		cfg := Config{Policy: policy.DefaultConfig()}
		if err := fc.apply(&cfg); err != nil {
			t.Fatal(err)
		}
		if got := cfg.Policy.MinInterval; got != want {
			t.Errorf("%s: min interval %s, want %s", body, got, want)
		}
	}
	// max_continuations: absent keeps the default, 0 turns continuing off,
	// negative is unbounded
	for body, want := range map[string]struct {
		max int
		off bool
	}{
		`{"policy": {}}`: {policy.DefaultMaxContinuations, false}, `{"policy": {"max_continuations": 0}}`: {policy.DefaultMaxContinuations, true},
		`{"policy": {"max_continuations": 3}}`: {3, false}, `{"policy": {"max_continuations": -1}}`: {-1, false},
	} {
		p := filepath.Join(t.TempDir(), "c.json")
		_ = os.WriteFile(p, []byte(body), 0o600)
		fc, err := LoadFileConfig(p)
		if err != nil {
			t.Fatal(err)
		}
		cfg := Config{Policy: policy.DefaultConfig()}
		if err := fc.apply(&cfg); err != nil {
			t.Fatal(err)
		}
		if got := cfg.Policy; got.MaxContinuations != want.max || got.NoContinuations != want.off {
			t.Errorf("%s: max continuations %d off %v, want %d %v", body, got.MaxContinuations, got.NoContinuations, want.max, want.off)
		}
	}
	for name, body := range map[string]string{
		"unknown field":  `{"tick": "1s", "tik": "2s"}`,
		"bad duration":   `{"tick": "soon"}`,
		"bad ended_ttl":  `{"ended_ttl": "a week"}`,
		"negative speed": `{"policy": {"speed": {"gpu": -1}}}`,
		"bad window":     `{"policy": {"dev_windows": ["25:00-08:00"]}}`,
	} {
		p := filepath.Join(t.TempDir(), "c.json")
		if err := os.WriteFile(p, []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}
		fc, err := LoadFileConfig(p)
		if err == nil {
			err = fc.apply(&Config{})
		}
		if err == nil {
			t.Errorf("%s: accepted", name)
		} else if !strings.Contains(err.Error(), "tik") && name == "unknown field" {
			t.Errorf("%s: error %q does not name the field", name, err)
		}
	}
}

func TestRefusesWorldReadableCredentials(t *testing.T) {
	t.Parallel()
	pw := filepath.Join(t.TempDir(), "coordinator.pass")
	if err := os.WriteFile(pw, []byte("secret\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(pw, 0o644); err != nil {
		t.Fatal(err)
	}
	env := map[string]string{"ISCHED_REDIS_PASSWORD_FILE": pw, "ISCHED_REDIS_ADDR": "127.0.0.1:1"}
	var stderr strings.Builder
	code := Main(t.Context(), []string{"-metrics-listen", ""}, func(k string) string { return env[k] }, &stderr)
	if code != 2 || !strings.Contains(stderr.String(), "readable by others") {
		t.Fatalf("exit %d, stderr %q: want 2 and a clear refusal", code, stderr.String())
	}
}

// loadConfig writes body to a file and loads and applies it.
func loadConfig(t *testing.T, body string) (Config, error) {
	t.Helper()
	p := filepath.Join(t.TempDir(), "c.json")
	if err := os.WriteFile(p, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
	fc, err := LoadFileConfig(p)
	if err != nil {
		return Config{}, err
	}
	var cfg Config
	return cfg, fc.apply(&cfg)
}

func TestFileConfigKnobs(t *testing.T) {
	t.Parallel()
	// no file, or an empty one: the neutral defaults, no partition named
	cfg, err := loadConfig(t, `{}`)
	if err != nil {
		t.Fatal(err)
	}
	def := policy.DefaultConfig()
	if p := cfg.Policy; p.Speed != nil || len(p.DevPartitions) != 0 || p.Margin != def.Margin || p.MaxMoves != def.MaxMoves ||
		p.CkptTimeoutFactor != def.CkptTimeoutFactor || p.MinCkptTimeout != def.MinCkptTimeout || p.MinPending != def.MinPending ||
		cfg.Tick != 2*time.Second || cfg.MaxJobSeries != DefaultMaxJobSeries || cfg.EndedTTL != 7*24*time.Hour {
		t.Errorf("defaults: %+v", cfg)
	}
	// every knob written out reaches policy.Config
	cfg, err = loadConfig(t, `{"tick": "3s", "max_job_series": 7, "policy": {"margin": "2m", "min_gain": 2, "move_cost": "20s",
		"min_interval": "1m", "max_moves": -1, "max_continuations": 4, "speed": {"fast": 3}, "dev_partitions": ["short"],
		"dev_windows": ["18:00-08:00"], "time_zone": "Europe/Berlin", "allow_extend": true, "default_ckpt": "45s",
		"ckpt_timeout_factor": 5, "min_ckpt_timeout": "90s", "min_pending": "5m"}}`)
	if err != nil {
		t.Fatal(err)
	}
	p := cfg.Policy
	if cfg.Tick != 3*time.Second || cfg.MaxJobSeries != 7 || p.Margin != 2*time.Minute || p.MinGain != 2 || p.MoveCost != 20*time.Second ||
		p.MinInterval != time.Minute || p.MaxMoves != -1 || p.MaxContinuations != 4 || p.Speed["fast"] != 3 ||
		len(p.DevPartitions) != 1 || p.DevPartitions[0] != "short" || len(p.DevWindows) != 1 || p.DevWindows[0].String() != "18:00-08:00" ||
		p.Location == nil || p.Location.String() != "Europe/Berlin" || !p.AllowExtend || p.DefaultCkpt != 45*time.Second ||
		p.CkptTimeoutFactor != 5 || p.MinCkptTimeout != 90*time.Second || p.MinPending != 5*time.Minute {
		t.Errorf("knobs: %+v", cfg)
	}
	// errors name the field
	for body, field := range map[string]string{
		`{"tick": "soon"}`:                              `"tick"`,
		`{"tick": 5}`:                                   `"tick"`,
		`{"stale_after": "-5s"}`:                        `"stale_after"`,
		`{"leader_ttl": "0s"}`:                          `"leader_ttl"`,
		`{"max_job_series": 0}`:                         `"max_job_series"`,
		`{"policy": {"margin": "a minute"}}`:            `"policy.margin"`,
		`{"policy": {"min_pending": "0s"}}`:             `"policy.min_pending"`,
		`{"policy": {"min_gain": 0}}`:                   `"policy.min_gain"`,
		`{"policy": {"max_moves": 0}}`:                  `"policy.max_moves"`,
		`{"policy": {"ckpt_timeout_factor": -1}}`:       `"policy.ckpt_timeout_factor"`,
		`{"policy": {"min_ckpt_timeout": "x"}}`:         `"policy.min_ckpt_timeout"`,
		`{"policy": {"speed": {"gpu": 0}}}`:             `"policy.speed.gpu"`,
		`{"policy": {"dev_windows": ["8-9"]}}`:          `"policy.dev_windows[0]"`,
		`{"policy": {"time_zone": "Mars/Olympus"}}`:     `"policy.time_zone"`,
		`{"policy": {"max_continuations": "many"}}`:     `policy.max_continuations`,
		`{"policy": {"margin": "1m"}} {"tick": "1s"}`:   `after the JSON object`,
		`{"policy": {"margin": "1m", "margins": "2m"}}`: `"policy.margins"`,
	} {
		if _, err := loadConfig(t, body); err == nil || !strings.Contains(err.Error(), field) {
			t.Errorf("%s: error %v, want one naming %s", body, err, field)
		}
	}
}

func TestMainFlags(t *testing.T) {
	t.Parallel()
	bad := filepath.Join(t.TempDir(), "bad.json")
	if err := os.WriteFile(bad, []byte(`{"policy": {"margin": "soon"}}`), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		args []string
		code int
		want string
	}{
		{[]string{"-nope"}, 2, "flag provided but not defined"},
		{[]string{"extra"}, 2, "unexpected arguments"},
		{[]string{"-log-format", "xml"}, 2, "want json or text"},
		{[]string{"-log-level", "loud"}, 2, "-log-level"},
		{[]string{"-tick", "-1s"}, 2, "-tick -1s is negative"},
		{[]string{"-config", bad}, 2, `config field "policy.margin"`},
		{[]string{"-config", filepath.Join(t.TempDir(), "absent.json")}, 2, "no such file"},
		{[]string{"-h"}, 0, "-pprof-listen"},
	} {
		var stderr strings.Builder
		code := Main(t.Context(), c.args, func(string) string { return "" }, &stderr)
		if code != c.code || !strings.Contains(stderr.String(), c.want) {
			t.Errorf("Main(%q) = %d, %q; want %d ~%q", c.args, code, stderr.String(), c.code, c.want)
		}
	}
}
