package relay

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/isched/isched/internal/daemon"
)

// TestMainRefusesBadConfiguration: configuration errors exit 2 (systemd
// does not restart on them) and name what is wrong; the reporter password
// must be private unless -allow-readable-password.
func TestMainRefusesBadConfiguration(t *testing.T) {
	pw := filepath.Join(t.TempDir(), "reporter.pass")
	if err := os.WriteFile(pw, []byte("secret\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	env := map[string]string{"ISCHED_REDIS_PASSWORD_FILE": pw, "ISCHED_REDIS_ADDR": "127.0.0.1:1", "ISCHED_CLUSTER": "c1"}
	getenv := func(k string) string { return env[k] }
	for _, tc := range []struct {
		name string
		args []string
		want string
	}{
		{"unknown flag", []string{"-frobnicate"}, "flag provided but not defined"},
		{"bad cluster", []string{"-cluster", "a b", "-listen", "127.0.0.1:0"}, "cluster name"},
		{"bad ration", []string{"-uid-entries-per-sec", "0", "-listen", "127.0.0.1:0"}, "rates must be > 0"},
		{"in-flight budget below a frame", []string{"-uid-in-flight-bytes", "1000", "-listen", "127.0.0.1:0"}, "the largest frame"},
		{"no unauthenticated connection per source", []string{"-source-max-unauthenticated", "0", "-listen", "127.0.0.1:0"}, "MaxUnauthenticatedPerSource"},
		{"stream fraction", []string{"-stream-memory-fraction", "1", "-listen", "127.0.0.1:0"}, "stream memory fraction"},
		{"readable password", []string{"-listen", "127.0.0.1:0"}, "readable by others"},
		{"arguments", []string{"extra"}, "unexpected arguments"},
		{"no cluster name", []string{"-cluster", "", "-listen", "127.0.0.1:0"}, "no cluster name: set -cluster or ISCHED_CLUSTER"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var errb bytes.Buffer
			if code := Main(context.Background(), tc.args, getenv, &errb); code != daemon.ExitUsage {
				t.Fatalf("exit %d, want %d; %s", code, daemon.ExitUsage, errb.String())
			}
			if !strings.Contains(errb.String(), tc.want) {
				t.Errorf("stderr %q does not name %q", errb.String(), tc.want)
			}
		})
	}
}
