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
	// the documented example must load
	fc, err := LoadFileConfig(filepath.Join("..", "..", "systemd", "coordinator.json"))
	if err != nil {
		t.Fatalf("systemd/coordinator.json: %v", err)
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
