package cli

import (
	"slices"
	"strconv"
	"testing"

	"github.com/spf13/cobra"
)

func TestEditDistance(t *testing.T) {
	t.Parallel()
	cases := []struct {
		a, b string
		want int
	}{
		{"", "", 0},
		{"", "stop", 4},
		{"status", "status", 0},
		{"stauts", "status", 1}, // a swap
		{"sttaus", "status", 1},
		{"sutats", "status", 2},
		{"stop", "stp", 1},
		{"parition-ideal", "partition-ideal", 1},
		{"wiat", "wait", 1},
		{"ca", "abc", 3}, // optimal string alignment, not full Damerau (2)
		{"épreuve", "epreuve", 1},
	}
	for _, c := range cases {
		if got := editDistance(c.a, c.b); got != c.want {
			t.Errorf("editDistance(%q, %q) = %d, want %d", c.a, c.b, got, c.want)
		}
		if got := editDistance(c.b, c.a); got != c.want {
			t.Errorf("editDistance(%q, %q) = %d, want %d (symmetric)", c.b, c.a, got, c.want)
		}
	}
}

func TestSuggest(t *testing.T) {
	t.Parallel()
	commandNames := []string{"estimate", "plan", "submit", "profile", "status", "report", "stop", "simulate", "site", "config", "version", "help"}
	flags := []string{"cpus", "dry-run", "fallback", "gres", "job-name", "mem", "partition-ideal", "time", "wrapper", "wrapper-arg"}
	cases := []struct {
		name  string
		known []string
		want  []string
	}{
		{"stauts", commandNames, []string{"status"}},
		{"sumbit", commandNames, []string{"submit"}},
		{"plna", commandNames, []string{"plan"}},
		{"stp", commandNames, []string{"stop"}},
		{"reprot", commandNames, []string{"report"}},
		{"stat", commandNames, []string{"status"}},       // a prefix before two edits (stop)
		{"estim", commandNames, []string{"estimate"}},    // a prefix
		{"sit", commandNames, []string{"site"}},          // one edit (an insertion)
		{"sotp", commandNames, []string{"stop"}},         // a swap
		{"repotr", commandNames, []string{"report"}},     // a swap
		{"stup", commandNames, []string{"stop"}},         // one edit
		{"stoo", commandNames, []string{"stop"}},         // one edit
		{"sta", commandNames, []string{"status"}},        // a prefix
		{"sbumit", commandNames, []string{"submit"}},     // a swap
		{"satus", commandNames, []string{"status"}},      // a deletion
		{"sites", commandNames, []string{"site"}},        // an insertion
		{"stet", commandNames, []string{"stop", "site"}}, // two edits from both: both
		{"sttus", commandNames, []string{"status"}},      // a deletion
		{"frobnicate", commandNames, nil},
		{"x", commandNames, nil},
		{"status", commandNames, nil}, // known: nothing to suggest
		{"parition-ideal", flags, []string{"partition-ideal"}},
		{"partition", flags, []string{"partition-ideal"}}, // sbatch's name: a prefix
		{"wrap", flags, []string{"wrapper", "wrapper-arg"}},
		{"dryrun", flags, []string{"dry-run"}},
		{"me", flags, []string{"mem"}},
		{"account", flags, nil},
	}
	for _, c := range cases {
		if got := suggest(c.name, c.known); !slices.Equal(got, c.want) {
			t.Errorf("suggest(%q) = %q, want %q", c.name, got, c.want)
		}
	}
}

func TestDidYouMean(t *testing.T) {
	t.Parallel()
	cases := []struct {
		names []string
		want  string
	}{
		{nil, ""},
		{[]string{"status"}, ` (did you mean "status"?)`},
		{[]string{"stop", "site"}, ` (did you mean "stop" or "site"?)`},
		{[]string{"a", "b", "c"}, ` (did you mean "a", "b" or "c"?)`},
	}
	for _, c := range cases {
		if got := didYouMean(c.names, strconv.Quote); got != c.want {
			t.Errorf("didYouMean(%q) = %q, want %q", c.names, got, c.want)
		}
	}
}

// TestUnknownFlagError checks the suggestion for pflag's errors, as cobra
// hands them to the command: a mistyped long flag, a long flag given with
// one dash (as Go's flag package took it), none for a bad value.
func TestUnknownFlagError(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"--dryrun"}, " (did you mean --dry-run?)"},
		{[]string{"--wiat=3s"}, " (did you mean --wait?)"},
		{[]string{"-wait=3s"}, " (did you mean --wait?)"},
		{[]string{"-dry-run"}, " (did you mean --dry-run?)"},
		{[]string{"-z"}, ""},
		{[]string{"--account", "a"}, ""},
		{[]string{"--wait", "soon"}, ""}, // a bad value: no suggestion
	} {
		cmd := &cobra.Command{Use: "x"}
		cmd.Flags().Bool("dry-run", false, "")
		cmd.Flags().Duration("wait", 0, "")
		err := cmd.Flags().Parse(c.args)
		if err == nil {
			t.Fatalf("%q: parsed", c.args)
		}
		if got := flagSuggestion(cmd, err); got != c.want {
			t.Errorf("%q (%v): %q, want %q", c.args, err, got, c.want)
		}
	}
}
