package coordinator

import (
	"io"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/isched/isched/internal/coordconfig"
	"github.com/isched/isched/internal/daemon"
	"github.com/isched/isched/internal/policy"
)

// writeConfig writes body to a config file and returns its path.
func writeConfig(t *testing.T, body string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "c.json")
	if err := os.WriteFile(p, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

// settingsFrom builds Settings as Main does: defaults, the file at path
// (none if ""), the command line args and environment env.
func settingsFrom(t *testing.T, path string, args []string, env map[string]string) (coordconfig.Settings, error) {
	t.Helper()
	if path != "" {
		args = append([]string{"-config", path}, args...)
	}
	o, code, ok := parseOptions(args, func(k string) string { return env[k] }, io.Discard)
	if !ok {
		t.Fatalf("parseOptions(%q): exit %d", args, code)
	}
	return o.settings()
}

// loadConfig writes body to a file and derives Config from it.
func loadConfig(t *testing.T, body string) (Config, error) {
	t.Helper()
	s, err := settingsFrom(t, writeConfig(t, body), nil, nil)
	if err != nil {
		return Config{}, err
	}
	return configOf(s)
}

// noEmpty is s with empty maps and slices nil, for comparing a file that
// writes "speed": {} with the defaults, which leave it out.
func noEmpty(s coordconfig.Settings) coordconfig.Settings {
	if len(s.Policy.Speed) == 0 {
		s.Policy.Speed = nil
	}
	if len(s.Policy.DevPartitions) == 0 {
		s.Policy.DevPartitions = nil
	}
	if len(s.Policy.DevWindows) == 0 {
		s.Policy.DevWindows = nil
	}
	if len(s.JobMetricsFrom) == 0 {
		s.JobMetricsFrom = nil
	}
	return s
}

func TestPackagedConfigs(t *testing.T) {
	t.Parallel()
	// the packaged file (/etc/isched/coordinator.json) loads and lists
	// exactly the defaults, naming no cluster and no partition
	s, err := settingsFrom(t, filepath.Join("..", "..", "systemd", "coordinator.json"), nil, nil)
	if err != nil {
		t.Fatalf("systemd/coordinator.json: %v", err)
	}
	if got, want := noEmpty(s), coordconfig.DefaultSettings(); !reflect.DeepEqual(got, want) {
		t.Errorf("systemd/coordinator.json differs from the defaults:\n got %+v\nwant %+v", got, want)
	}
	if _, err := configOf(s); err != nil {
		t.Fatal(err)
	}
	// the lab's, every field set (examples/coordinator-lab.json)
	s, err = settingsFrom(t, filepath.Join("..", "..", "examples", "coordinator-lab.json"), nil, nil)
	if err != nil {
		t.Fatalf("examples/coordinator-lab.json: %v", err)
	}
	cfg, err := configOf(s)
	if err != nil {
		t.Fatal(err)
	}
	if s.Cluster != "lab" || cfg.Tick != 2*time.Second || cfg.Policy.MinGain != 1.5 || cfg.Policy.Speed["gpu"] != 8 ||
		cfg.Policy.MaxContinuations != 20 || cfg.EndedTTL != 30*24*time.Hour || len(cfg.Policy.DevPartitions) != 2 {
		t.Errorf("lab config %+v", cfg)
	}
	// scripts/demo's and the e2e tests' files: no "v", some fields
	s, err = settingsFrom(t, writeConfig(t, `{"cluster": "demo", "tick": "1s", "policy": {"margin": "20s", "min_interval": "2m",
		"speed": {"gpu": 2, "cpu": 1}, "dev_partitions": ["dev", "gpu-dev"]}}`), nil, nil)
	if err != nil || s.V != 1 || s.Tick.D() != time.Second || s.Policy.MinInterval.D() != 2*time.Minute {
		t.Errorf("demo config: %+v %v", s, err)
	}
}

// TestSettingsOverlay: a flag beats the file, which beats the default.
func TestSettingsOverlay(t *testing.T) {
	t.Parallel()
	file := writeConfig(t, `{"cluster": "file", "metrics_listen": "127.0.0.1:1", "tick": "3s"}`)
	for _, tc := range []struct {
		name    string
		file    string
		args    []string
		env     map[string]string
		cluster string
		metrics string
		tick    time.Duration
	}{
		{name: "defaults", metrics: coordconfig.DefaultMetricsListen, tick: 2 * time.Second},
		{name: "file", file: file, cluster: "file", metrics: "127.0.0.1:1", tick: 3 * time.Second},
		{name: "flags over defaults", args: []string{"-cluster", "flag", "-metrics-listen", "", "-tick", "5s"}, cluster: "flag", tick: 5 * time.Second},
		{name: "flags over file", file: file, args: []string{"-cluster", "flag", "-metrics-listen", "127.0.0.1:2", "-tick", "5s"},
			cluster: "flag", metrics: "127.0.0.1:2", tick: 5 * time.Second},
		{name: "empty metrics flag turns it off", file: file, args: []string{"-metrics-listen", ""}, cluster: "file", tick: 3 * time.Second},
		{name: "environment over file", file: file, env: map[string]string{"ISCHED_CLUSTER": "env"}, cluster: "env", metrics: "127.0.0.1:1", tick: 3 * time.Second},
		{name: "flag over environment", file: file, args: []string{"-cluster", "flag"}, env: map[string]string{"ISCHED_CLUSTER": "env"},
			cluster: "flag", metrics: "127.0.0.1:1", tick: 3 * time.Second},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s, err := settingsFrom(t, tc.file, tc.args, tc.env)
			if err != nil {
				t.Fatal(err)
			}
			if s.Cluster != tc.cluster || s.MetricsListen != tc.metrics || s.Tick.D() != tc.tick {
				t.Errorf("cluster %q metrics %q tick %s, want %q %q %s", s.Cluster, s.MetricsListen, s.Tick, tc.cluster, tc.metrics, tc.tick)
			}
			// what Main runs with
			env := func(k string) string {
				if k == "ISCHED_REDIS_ADDR" {
					return "127.0.0.1:1"
				}
				return tc.env[k]
			}
			o, _, _ := parseOptions(append(append([]string(nil), tc.args...), configArgs(tc.file)...), env, io.Discard)
			cfg, rcfg, err := o.configure(env, nil)
			if tc.cluster == "" {
				// no built-in cluster name
				if err == nil || !strings.Contains(err.Error(), "no cluster name: set ISCHED_CLUSTER") {
					t.Errorf("configure without a cluster: err %v", err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if cfg.Tick != tc.tick || o.MetricsListen != tc.metrics || (tc.cluster != "" && rcfg.Cluster != tc.cluster) {
				t.Errorf("configure: tick %s metrics %q cluster %q", cfg.Tick, o.MetricsListen, rcfg.Cluster)
			}
		})
	}
}

func configArgs(path string) []string {
	if path == "" {
		return nil
	}
	return []string{"-config", path}
}

// TestSettingsFileErrors: a file's error names the file, the field and,
// for what the strict decoder finds, the line and column.
func TestSettingsFileErrors(t *testing.T) {
	t.Parallel()
	for body, want := range map[string]string{
		// duplicates: encoding/json would let the last win
		"{\"tick\": \"1s\",\n \"tick\": \"2s\"}":                    `:2:2: config field "tick": given twice`,
		"{\"policy\": {\n  \"speed\": {\"gpu\": 8, \"gpu\": 2}}}":   `:2:23: config field "policy.speed.gpu": key given twice`,
		"{\"policy\": {\"margin\": \"1m\",\n  \"margin\": \"2m\"}}": `:2:3: config field "policy.margin": given twice`,
		`{"tick": "1s", "tik": "2s"}`:                               `:1:16: config field "tik": unknown field`,
		`{"Tick": "1s"}`:                                            `config field "Tick": unknown field (did you mean "tick"?)`,
		`{"policy": {"margin": "1m", "margins": "2m"}}`:             `config field "policy.margins": unknown field`,
		"{\"tick\": \"1s\"\n \"stale_after\": \"5s\"}":              `:2:2: JSON syntax error`,
		`{"policy": {"margin": "1m"}} {"tick": "1s"}`:               `:1:30: data after the JSON object`,
		`{"tick": null}`:                                            `config field "tick": null is not a duration`,
		`{"policy": {"speed": null}}`:                               `:1:22: config field "policy.speed": want an object, got null`,
		`{"tick": "soon"}`:                                          `config field "tick": "soon" is not a duration like "90s"`,
		`{"tick": 5}`:                                               `config field "tick": 5 is not a duration`,
		`{"max_job_series": 1.5}`:                                   `config field "max_job_series": want an integer, got 1.5`,
		`{"policy": {"max_continuations": "many"}}`:                 `config field "policy.max_continuations": "many" is not a count (0 or more) or "unbounded"`,
		`{"v": 2, "policy": {"new_knob": 1}}`:                       `config field "v": version 2 is not supported: this program reads version 1`,
		`{"v": 0}`:                                                  `config field "v": version 0 is not supported`,
		`{"stale_after": "-5s"}`:                                    `config field "stale_after": -5s is negative`,
		`{"leader_ttl": "0s"}`:                                      `config field "leader_ttl": must be positive`,
		`{"policy": {"max_moves": 0}}`:                              `config field "policy.max_moves": 0 is not a bound`,
		`{"policy": {"dev_windows": ["8-9"]}}`:                      `config field "policy.dev_windows[0]"`,
		`{"policy": {"time_zone": "Mars/Olympus"}}`:                 `config field "policy.time_zone"`,
		`{"policy": {"speed": {"gpu": 0}}}`:                         `config field "policy.speed.gpu": must be positive`,
		`{"policy": {"min_pending": "0s"}}`:                         `config field "policy.min_pending"`,
		`{"policy": {"min_gain": 0}}`:                               `config field "policy.min_gain"`,
		`{"policy": {"ckpt_timeout_factor": -1}}`:                   `config field "policy.ckpt_timeout_factor"`,
		`{"policy": {"min_ckpt_timeout": "x"}}`:                     `config field "policy.min_ckpt_timeout"`,
		`{"ended_ttl": "a week"}`:                                   `config field "ended_ttl"`,
		`{"policy": {"margin": "a minute"}}`:                        `config field "policy.margin"`,
		`[]`:                                                        `want an object, got an array`,
	} {
		p := writeConfig(t, body)
		_, err := settingsFrom(t, p, nil, nil)
		if err == nil || !strings.HasPrefix(err.Error(), "config "+p) || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: error %v, want config %s...%s", body, err, p, want)
		}
	}
}

// TestSettingsMeaning: the values that used to be sentinels say what they
// mean, and policy.Config gets them in its own spellings.
func TestSettingsMeaning(t *testing.T) {
	t.Parallel()
	def := policy.DefaultConfig()
	for _, tc := range []struct {
		body        string
		minInterval time.Duration
		maxMoves    int
		maxCont     int
		noCont      bool
	}{
		{`{}`, def.MinInterval, def.MaxMoves, def.MaxContinuations, false},
		{`{"v": 1, "policy": {}}`, def.MinInterval, def.MaxMoves, def.MaxContinuations, false},
		// "0s": no hysteresis (negative in policy.Config, where 0 is its default)
		{`{"policy": {"min_interval": "0s"}}`, -1, def.MaxMoves, def.MaxContinuations, false},
		{`{"policy": {"min_interval": "5m"}}`, 5 * time.Minute, def.MaxMoves, def.MaxContinuations, false},
		// 0 continuations: none
		{`{"policy": {"max_continuations": 0}}`, def.MinInterval, def.MaxMoves, def.MaxContinuations, true},
		{`{"policy": {"max_continuations": 3}}`, def.MinInterval, def.MaxMoves, 3, false},
		// "unbounded", and its old spelling, a negative count
		{`{"policy": {"max_continuations": "unbounded", "max_moves": "unbounded"}}`, def.MinInterval, -1, -1, false},
		{`{"policy": {"max_continuations": -1, "max_moves": -5}}`, def.MinInterval, -1, -1, false},
	} {
		cfg, err := loadConfig(t, tc.body)
		if err != nil {
			t.Errorf("%s: %v", tc.body, err)
			continue
		}
		if p := cfg.Policy; p.MinInterval != tc.minInterval || p.MaxMoves != tc.maxMoves || p.MaxContinuations != tc.maxCont || p.NoContinuations != tc.noCont {
			t.Errorf("%s: min interval %s max moves %d max continuations %d off %v; want %s %d %d %v", tc.body,
				p.MinInterval, p.MaxMoves, p.MaxContinuations, p.NoContinuations, tc.minInterval, tc.maxMoves, tc.maxCont, tc.noCont)
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
	env := map[string]string{"ISCHED_REDIS_PASSWORD_FILE": pw, "ISCHED_REDIS_ADDR": "127.0.0.1:1", "ISCHED_CLUSTER": "c1"}
	var stderr strings.Builder
	code := Main(t.Context(), []string{"-metrics-listen", ""}, func(k string) string { return env[k] }, &stderr)
	if code != 2 || !strings.Contains(stderr.String(), "readable by others") {
		t.Fatalf("exit %d, stderr %q: want 2 and a clear refusal", code, stderr.String())
	}
}

func TestFileConfigKnobs(t *testing.T) {
	t.Parallel()
	// an empty file: the neutral defaults, no partition named
	cfg, err := loadConfig(t, `{}`)
	if err != nil {
		t.Fatal(err)
	}
	def := policy.DefaultConfig()
	if p := cfg.Policy; p.Speed != nil || len(p.DevPartitions) != 0 || p.Margin != def.Margin || p.MaxMoves != def.MaxMoves ||
		p.CkptTimeoutFactor != def.CkptTimeoutFactor || p.MinCkptTimeout != def.MinCkptTimeout || p.MinPending != def.MinPending ||
		cfg.Tick != 2*time.Second || cfg.MaxJobSeries != coordconfig.DefaultMaxJobSeries || cfg.EndedTTL != 7*24*time.Hour {
		t.Errorf("defaults: %+v", cfg)
	}
	// every knob written out reaches policy.Config
	cfg, err = loadConfig(t, `{"v": 1, "tick": "3s", "max_job_series": 7, "admin_comment": true, "policy": {"margin": "2m", "min_gain": 2, "move_cost": "20s",
		"min_interval": "1m", "max_moves": -1, "max_continuations": 4, "speed": {"fast": 3}, "dev_partitions": ["short"],
		"dev_windows": ["18:00-08:00"], "time_zone": "Europe/Berlin", "allow_extend": true, "default_ckpt": "45s",
		"ckpt_timeout_factor": 5, "min_ckpt_timeout": "90s", "min_pending": "5m"}}`)
	if err != nil {
		t.Fatal(err)
	}
	p := cfg.Policy
	if cfg.Tick != 3*time.Second || cfg.MaxJobSeries != 7 || !cfg.AdminComment || p.Margin != 2*time.Minute || p.MinGain != 2 || p.MoveCost != 20*time.Second ||
		p.MinInterval != time.Minute || p.MaxMoves != -1 || p.MaxContinuations != 4 || p.Speed["fast"] != 3 ||
		len(p.DevPartitions) != 1 || p.DevPartitions[0] != "short" || len(p.DevWindows) != 1 || p.DevWindows[0].String() != "18:00-08:00" ||
		p.Location == nil || p.Location.String() != "Europe/Berlin" || !p.AllowExtend || p.DefaultCkpt != 45*time.Second ||
		p.CkptTimeoutFactor != 5 || p.MinCkptTimeout != 90*time.Second || p.MinPending != 5*time.Minute {
		t.Errorf("knobs: %+v", cfg)
	}
}

func TestMainFlags(t *testing.T) {
	t.Parallel()
	bad := filepath.Join(t.TempDir(), "bad.json")
	if err := os.WriteFile(bad, []byte(`{"policy": {"margin": "soon"}}`), 0o600); err != nil {
		t.Fatal(err)
	}
	dup := writeConfig(t, "{\"tick\": \"1s\",\n\"tick\": \"2s\"}")
	for _, c := range []struct {
		args []string
		code int
		want string
	}{
		{[]string{"-nope"}, 2, "flag provided but not defined"},
		{[]string{"extra"}, 2, "unexpected arguments"},
		{[]string{"-log-format", "xml"}, 2, "want json or text"},
		{[]string{"-log-level", "loud"}, 2, "-log-level"},
		{[]string{"-tick", "-1s"}, 2, "-tick -1s is not positive"},
		{[]string{"-tick", "0s"}, 2, "-tick 0s is not positive"},
		{[]string{"-config", bad}, 2, `config field "policy.margin"`},
		{[]string{"-config", dup}, 2, dup + `:2:1: config field "tick": given twice`},
		{[]string{"-config", filepath.Join(t.TempDir(), "absent.json")}, 2, "no such file"},
		{[]string{"-h"}, 0, "-pprof-listen"},
	} {
		var stderr strings.Builder
		old := daemon.HelpOut
		daemon.HelpOut = &stderr // -h prints on stdout: here, beside the errors
		code := Main(t.Context(), c.args, func(string) string { return "" }, &stderr)
		daemon.HelpOut = old
		if code != c.code || !strings.Contains(stderr.String(), c.want) {
			t.Errorf("Main(%q) = %d, %q; want %d ~%q", c.args, code, stderr.String(), c.code, c.want)
		}
	}
}
