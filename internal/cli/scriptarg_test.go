package cli

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestCheckScriptArg(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "train.py"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(filepath.Join(dir, "pkg.py"), 0o755); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		argv []string
		dir  string
		want string // "" accepted
	}{
		{[]string{"python3", "train.py", "--epochs", "3"}, dir, ""},
		{[]string{"python3", "nosuch.py"}, dir, "the command's script nosuch.py: not found in " + dir},
		{[]string{"/opt/venv/bin/python3.11", "-u", "nosuch.py"}, dir, "nosuch.py: not found"},
		{[]string{"torchrun", "--nproc-per-node", "4", "nosuch.py"}, dir, "nosuch.py: not found"},
		{[]string{"bash", "run.sh"}, dir, "run.sh: not found"},
		{[]string{"python3", filepath.Join(dir, "train.py")}, dir, ""},
		{[]string{"python3", "pkg.py"}, dir, "is a directory"},
		{[]string{"python3", "-m", "mypkg.train", "x.py"}, dir, ""},
		{[]string{"python3", "-c", "print(1)"}, dir, ""},
		{[]string{"./train", "nosuch.py"}, dir, ""},                     // not a launcher: its arguments are its own
		{[]string{"python3", "nosuch.py"}, "/nonexistent/host/dir", ""}, // not judged where dir is not here
	} {
		err := checkScriptArg(tc.argv, tc.dir, os.Stat)
		if (tc.want == "") != (err == nil) || (err != nil && !strings.Contains(err.Error(), tc.want)) {
			t.Errorf("%q in %s: %v, want %q", tc.argv, tc.dir, err, tc.want)
		}
	}
}

// TestSubmitRefusesAMissingScript: `isched submit -- python3 nosuch.py`
// was accepted (exit 0) and the job would have failed after its wait.
func TestSubmitRefusesAMissingScript(t *testing.T) {
	h := newHarness(t)
	h.labState()
	dir := t.TempDir()
	app := h.app()
	app.Getwd = func() (string, error) { return dir, nil }
	var out, errb strings.Builder
	code := app.Run(t.Context(), []string{"submit", "--dry-run", "--partition-ideal", "cpu", "--time", "30", "--wrapper", "/opt/isched/bin/isched-wrapper",
		"--", "/usr/bin/python3", "nosuch.py"}, &out, &errb)
	if code != ExitUsage || !strings.Contains(errb.String(), "the command's script nosuch.py: not found in "+dir) {
		t.Errorf("exit %d, stderr %q; want a usage error naming nosuch.py", code, errb.String())
	}
}
