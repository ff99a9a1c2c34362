package daemon

import (
	"bytes"
	"flag"
	"strings"
	"testing"
)

// TestParseHelpOnStdout: -h prints the usage on HelpOut (stdout) and
// exits 0; a bad flag prints its error and the usage on the flag set's
// output (stderr) and exits 2.
func TestParseHelpOnStdout(t *testing.T) {
	var help bytes.Buffer
	old := HelpOut
	HelpOut = &help
	t.Cleanup(func() { HelpOut = old })
	for _, tc := range []struct {
		args           []string
		code           int
		stdout, stderr string
	}{
		{[]string{"-h"}, ExitOK, "Usage of isched-x:\n  -tick", ""},
		{[]string{"--help"}, ExitOK, "Usage of isched-x:\n  -tick", ""},
		{[]string{"-nosuch"}, ExitUsage, "", "flag provided but not defined: -nosuch\nUsage of isched-x:"},
	} {
		help.Reset()
		var stderr bytes.Buffer
		fs := flag.NewFlagSet("isched-x", flag.ContinueOnError)
		fs.SetOutput(&stderr)
		fs.Duration("tick", 0, "how often")
		code, ok := Parse(fs, tc.args)
		if ok || code != tc.code || !strings.HasPrefix(help.String(), tc.stdout) || !strings.HasPrefix(stderr.String(), tc.stderr) ||
			(tc.stdout == "") != (help.Len() == 0) || (tc.stderr == "") != (stderr.Len() == 0) {
			t.Errorf("%v: code %d ok %v, stdout %q, stderr %q", tc.args, code, ok, help.String(), stderr.String())
		}
	}
}
