package wrapper

import (
	"errors"
	"strings"
	"testing"
)

// TestHelpIsNotAnError: --help and -h give the usage as *ErrHelp (main
// prints it on stdout and exits 0), with nothing on stderr; a bad flag
// is still a usage error with its message and the usage on stderr.
func TestHelpIsNotAnError(t *testing.T) {
	none := func(string) string { return "" }
	for _, arg := range []string{"--help", "-h", "-help"} {
		var stderr strings.Builder
		_, err := ParseArgs([]string{arg}, none, &stderr)
		var help *ErrHelp
		if !errors.As(err, &help) || !strings.HasPrefix(help.Usage, "usage: isched-wrapper [flags] -- command") || !strings.Contains(help.Usage, "-checkpoint-dir") {
			t.Errorf("%s: %v, want the usage as ErrHelp", arg, err)
		}
		if errors.Is(err, ErrUsage) || stderr.Len() != 0 {
			t.Errorf("%s: a usage error, or stderr %q", arg, stderr.String())
		}
	}
	var stderr strings.Builder
	_, err := ParseArgs([]string{"--nosuch"}, none, &stderr)
	if !errors.Is(err, ErrUsage) || !strings.HasPrefix(stderr.String(), "flag provided but not defined: -nosuch\nusage: isched-wrapper") {
		t.Errorf("bad flag: %v, stderr %q", err, stderr.String())
	}
}
