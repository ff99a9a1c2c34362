package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/isched/isched/internal/cli"
)

// a flag.PrintDefaults listing as isched-agent prints it (captured)
const agentHelp = `Usage of isched-agent:
  -cluster string
    	cluster name in every Redis key (default: $ISCHED_CLUSTER, else Slurm's ClusterName)
  -once
    	publish one snapshot and exit (no actions)
  -poll duration
    	how often to publish the cluster snapshot (default 5s)
  -x	a one-letter flag keeps its usage on the line
  -version
    	print the version and exit
`

func TestParseDefaults(t *testing.T) {
	got := ParseDefaults(agentHelp)
	want := []Flag{
		{"cluster", "string", "cluster name in every Redis key (default: $ISCHED_CLUSTER, else Slurm's ClusterName)"},
		{"once", "", "publish one snapshot and exit (no actions)"},
		{"poll", "duration", "how often to publish the cluster snapshot (default 5s)"},
		{"x", "", "a one-letter flag keeps its usage on the line"},
		{"version", "", "print the version and exit"},
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("got %+v\nwant %+v", got, want)
	}
}

// TestEveryCommandDocumented: the man page and the completions cover every
// command isched has (simulate was missing from both).
func TestEveryCommandDocumented(t *testing.T) {
	for _, c := range cli.CommandNames() {
		if c == "help" || c == "version" {
			continue // no flags of their own
		}
		if !slices.ContainsFunc(Commands, func(d string) bool { return d == c || strings.HasPrefix(d, c+" ") }) {
			t.Errorf("isched %s is missing from genman's Commands: no man page section, no completion", c)
		}
	}
}

func TestRoffEscapes(t *testing.T) {
	p := Program{Name: "isched-agent", Section: "8", Summary: "s", Description: ".starts with a dot\n\n'quote and back\\slash",
		Commands: []Command{{Flags: []Flag{{"log-level", "string", `.x \fB bold`}}}}}
	page := Roff(p, "1.0", "2026-11-25")
	for _, want := range []string{".TH ISCHED-AGENT 8", `\&.starts with a dot`, `\&'quote and back\eslash`, `.B \-\-log\-level \fIstring\fR`, `\&.x \efB bold`} {
		if !strings.Contains(page, want) {
			t.Errorf("page lacks %q:\n%s", want, page)
		}
	}
}

// bashComplete sources a bash completion file and returns what _isched
// offers for words with the cursor on the last one.
func bashComplete(t *testing.T, file string, words ...string) string {
	t.Helper()
	script := `source "$1"; shift; COMP_WORDS=("$@"); COMP_CWORD=$(($# - 1)); _isched; printf '%s\n' "${COMPREPLY[@]}"`
	got, err := exec.Command("bash", append([]string{"-c", script, "bash", file}, words...)...).CombinedOutput()
	if err != nil {
		t.Fatalf("bash completion of %q: %v\n%s", words, err, got)
	}
	return strings.TrimSpace(string(got))
}

// TestBashTwoWordCommands: a two-word command completes its first word,
// then its second, then its own flags; one-word commands are unchanged.
func TestBashTwoWordCommands(t *testing.T) {
	p := Program{Name: "isched", Commands: []Command{
		{Name: "submit", Flags: []Flag{{"account", "string", ""}}},
		{Name: "site probe", Flags: []Flag{{"node-type", "string", ""}, {"local", "", ""}}},
		{Name: "site show", Flags: []Flag{{"json", "", ""}}},
		{Name: "stop"},
	}}
	file := filepath.Join(t.TempDir(), "isched")
	if err := os.WriteFile(file, []byte(Bash([]Program{p})), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct {
		words []string
		want  string
	}{
		{[]string{"isched", "s"}, "submit\nsite\nstop"},
		{[]string{"isched", "site", ""}, "probe\nshow"},
		{[]string{"isched", "site", "p"}, "probe"},
		{[]string{"isched", "site", "probe", "--no"}, "--node-type"},
		{[]string{"isched", "site", "probe", "--l"}, "--local"},
		{[]string{"isched", "site", "show", "--"}, "--json"},
		{[]string{"isched", "submit", "--a"}, "--account"},
		{[]string{"isched", "stop", "--"}, ""},
		{[]string{"isched", "site", "nosuch", "--"}, ""},
		{[]string{"isched", "help", "s"}, "submit\nsite\nstop"},
		{[]string{"isched", "help", "stop", ""}, ""},
	} {
		if got := bashComplete(t, file, tt.words...); got != tt.want {
			t.Errorf("bash completion of %q: %q, want %q", tt.words, got, tt.want)
		}
	}
	z := Zsh([]Program{p})
	for _, want := range []string{`local -a cmds=("submit" "site" "stop" help version)`, `local -a subs=("probe" "show" )`, `"site probe")`, "shift words", `local -a helpcmds=("submit" "site" "stop" )`} {
		if !strings.Contains(z, want) {
			t.Errorf("zsh completion lacks %q:\n%s", want, z)
		}
	}
}

// TestGenerateFromBinaries builds the five binaries, generates the pages
// and completions, and checks them with man and bash: every flag of the
// build is in its page, and the completion offers it.
func TestGenerateFromBinaries(t *testing.T) {
	if testing.Short() {
		t.Skip("builds five binaries")
	}
	dir := t.TempDir()
	bin := filepath.Join(dir, "bin")
	for _, p := range []string{"wrapper", "agent", "coordinator", "relay", "isched"} {
		name := map[string]string{"wrapper": "isched-wrapper", "agent": "isched-agent", "coordinator": "isched-coordinator", "relay": "isched-relay", "isched": "isched"}[p]
		if out, err := exec.Command("go", "build", "-o", filepath.Join(bin, name), "../../"+p).CombinedOutput(); err != nil {
			t.Fatalf("build %s: %v\n%s", p, err, out)
		}
	}
	out := filepath.Join(dir, "share")
	if err := run(bin, out, "9.9.9", "2026-11-25"); err != nil {
		t.Fatal(err)
	}
	page, err := os.ReadFile(filepath.Join(out, "man", "man1", "isched.1"))
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{`.B \-\-account \fIstring\fR`, `.B \-\-sbatch\-arg \fIvalue\fR`, ".SH COMMAND: SUBMIT", ".SH COMMAND: STATUS", ".SH COMMAND: SITE PROBE", ".SH COMMAND: STOP", `.B \-\-node\-type \fIstring\fR`, `isched 9.9.9`} {
		if !strings.Contains(string(page), want) {
			t.Errorf("isched.1 lacks %q", want)
		}
	}
	if _, err := exec.LookPath("man"); err == nil {
		cmd := exec.Command("man", "-l", filepath.Join(out, "man", "man8", "isched-agent.8"))
		cmd.Env = append(os.Environ(), "MANPAGER=cat", "MANWIDTH=100")
		text, err := cmd.CombinedOutput()
		if err != nil || !strings.Contains(string(text), "--pprof-listen") || !strings.Contains(string(text), "--version") {
			t.Errorf("man -l isched-agent.8: %v\n%s", err, text)
		}
	}
	// bash: source the completion and ask it for every kind of command
	bashFile := filepath.Join(out, "bash-completion", "isched")
	for _, tt := range [][]string{
		{"--account", "isched", "submit", "--acc"},
		{"site", "isched", "sit"},
		{"probe", "isched", "site", "pr"},
		{"--node-type", "isched", "site", "probe", "--node"},
		{"stop", "isched", "sto"},
		{"status", "isched", "help", "stat"},
		{"ideal", "isched", "submit", "--policy", "id"},
		{"bf16", "isched", "estimate", "--precision", "b"},
	} {
		if got := bashComplete(t, bashFile, tt[1:]...); got != tt[0] {
			t.Errorf("bash completion of %q: %q, want %q", tt[1:], got, tt[0])
		}
	}
	fish, err := os.ReadFile(filepath.Join(out, "fish", "isched.fish"))
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		"complete -c isched -f -n '__fish_use_subcommand' -a '",
		"complete -c isched -f -n '__fish_seen_subcommand_from site; and not __fish_seen_subcommand_from probe' -a 'probe'",
		"complete -c isched -n '__fish_seen_subcommand_from submit' -l policy -d ",
		"-x -a 'auto immediate ideal cheapest deadline'",
		"complete -c isched -n '__fish_seen_subcommand_from submit' -o p -d ",
		"-x -a '(sinfo -h -o %R 2>/dev/null)'",
		"complete -c isched -n '__fish_seen_subcommand_from site; and __fish_seen_subcommand_from probe' -l node-type -d ",
		"complete -c isched-agent -l pprof-listen -d ",
	} {
		if !strings.Contains(string(fish), want) {
			t.Errorf("isched.fish lacks %q", want)
		}
	}
	if fishBin := shell(t, "fish"); fishBin != "" {
		if out, err := exec.Command(fishBin, "--no-execute", filepath.Join(out, "fish", "isched.fish")).CombinedOutput(); err != nil {
			t.Errorf("fish --no-execute: %v\n%s", err, out)
		}
	}
	if zsh := shell(t, "zsh"); zsh != "" {
		if out, err := exec.Command(zsh, "-n", filepath.Join(out, "zsh", "_isched")).CombinedOutput(); err != nil {
			t.Errorf("zsh -n: %v\n%s", err, out)
		}
	}
}

// shell finds a shell to check a completion file's syntax with; "" where
// it is not installed, which fails the test under CI (make deps installs
// fish and zsh: issue 45 found the zsh check never ran there).
func shell(t *testing.T, name string) string {
	t.Helper()
	p, err := exec.LookPath(name)
	if err != nil && os.Getenv("CI") != "" {
		t.Fatalf("%s is not installed (make deps installs it): its completion file goes unchecked", name)
	}
	return p
}
