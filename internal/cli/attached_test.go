package cli

import (
	"flag"
	"io"
	"slices"
	"testing"
)

func TestSplitAttached(t *testing.T) {
	t.Parallel()
	fs := flag.NewFlagSet("t", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	fs.String("p", "", "")
	fs.String("t", "", "")
	fs.Int("c", 0, "")
	fs.String("J", "", "")
	fs.Bool("dry-run", false, "")
	fs.Bool("x", false, "")
	fs.String("partition-ideal", "", "")
	for _, tt := range []struct{ in, want []string }{
		{[]string{"-pgpu", "-t2:00:00", "-c8", "--", "python", "-u"}, []string{"-p", "gpu", "-t", "2:00:00", "-c", "8", "--", "python", "-u"}},
		{[]string{"-p", "gpu", "-c=4"}, []string{"-p", "gpu", "-c=4"}},
		// a value given apart is never split, even one that looks like an option
		{[]string{"-J", "-pnot", "-pgpu"}, []string{"-J", "-pnot", "-p", "gpu"}},
		// whole flag names win; bool flags take no attached value
		{[]string{"--partition-ideal", "gpu", "-dry-run", "-xy"}, []string{"--partition-ideal", "gpu", "-dry-run", "-xy"}},
		// after "--" or the first positional argument nothing is touched
		{[]string{"--", "-pgpu"}, []string{"--", "-pgpu"}},
		{[]string{"train.py", "-c8"}, []string{"train.py", "-c8"}},
		{[]string{"--cpus8"}, []string{"--cpus8"}},
	} {
		if got := splitAttached(fs, tt.in); !slices.Equal(got, tt.want) {
			t.Errorf("%q: %q, want %q", tt.in, got, tt.want)
		}
	}
	if err := fs.Parse(splitAttached(fs, []string{"-pgpu", "-c8", "-t1:00"})); err != nil {
		t.Fatal(err)
	}
	if p, c := fs.Lookup("p").Value.String(), fs.Lookup("c").Value.String(); p != "gpu" || c != "8" {
		t.Errorf("parsed -p %q -c %q, want gpu and 8", p, c)
	}
}
