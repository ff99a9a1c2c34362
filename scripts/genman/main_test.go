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
		{Name: "cluster", Type: "string", Usage: "cluster name in every Redis key (default: $ISCHED_CLUSTER, else Slurm's ClusterName)"},
		{Name: "once", Usage: "publish one snapshot and exit (no actions)"},
		{Name: "poll", Type: "duration", Usage: "how often to publish the cluster snapshot (default 5s)"},
		{Name: "x", Usage: "a one-letter flag keeps its usage on the line"},
		{Name: "version", Usage: "print the version and exit"},
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("got %+v\nwant %+v", got, want)
	}
}

// TestEveryCommandDocumented: the man page covers every command of
// isched's tree (simulate was once missing), each with its synopsis and
// flags, sbatch's one-letter spellings as the flags' shorthands.
func TestEveryCommandDocumented(t *testing.T) {
	cmds := ischedCommands(cli.Tree())
	var names []string
	for _, c := range cmds {
		names = append(names, c.Name)
		if c.Synopsis == "" || len(c.Flags) == 0 {
			t.Errorf("isched %s: synopsis %q, %d flags", c.Name, c.Synopsis, len(c.Flags))
		}
		if c.Name == "submit" && !slices.Contains(c.Flags, Flag{Name: "partition-ideal", Short: "p", Type: "string", Usage: "ideal partition (default: from the estimate, else the default partition)"}) {
			t.Errorf("isched submit: no -p, --partition-ideal in %+v", c.Flags)
		}
	}
	want := []string{"estimate", "plan", "submit", "profile", "status", "report", "stop", "simulate", "site probe", "config"}
	if !reflect.DeepEqual(names, want) {
		t.Errorf("commands %q, want %q", names, want)
	}
}

func TestRoffEscapes(t *testing.T) {
	p := Program{Name: "isched-agent", Section: "8", Summary: "s", Description: ".starts with a dot\n\n'quote and back\\slash",
		Commands: []Command{{Flags: []Flag{{Name: "log-level", Type: "string", Usage: `.x \fB bold`}}}}}
	page := Roff(p, "1.0", "2026-11-25")
	for _, want := range []string{".TH ISCHED-AGENT 8", `\&.starts with a dot`, `\&'quote and back\eslash`, `.B \-\-log\-level \fIstring\fR`, `\&.x \efB bold`} {
		if !strings.Contains(page, want) {
			t.Errorf("page lacks %q:\n%s", want, page)
		}
	}
}

// bashComplete sources bash-completion and a completion file, and returns
// what fn offers for words with the cursor on the last one; bin is put
// first in PATH (cobra's script asks isched __complete).
func bashComplete(t *testing.T, file, bin, fn string, words ...string) string {
	t.Helper()
	const lib = "/usr/share/bash-completion/bash_completion"
	if _, err := os.Stat(lib); err != nil {
		t.Fatalf("%s: %v (make deps installs bash-completion)", lib, err)
	}
	script := `source ` + lib + `; source "$1"; fn=$2; shift 2; COMP_WORDS=("$@"); COMP_CWORD=$(($# - 1)); COMP_LINE="$*"; COMP_POINT=${#COMP_LINE}; "$fn"; printf '%s\n' "${COMPREPLY[@]}"`
	cmd := exec.Command("bash", append([]string{"-c", script, "bash", file, fn}, words...)...)
	cmd.Env = append(os.Environ(), "PATH="+bin+":/usr/bin:/bin", "ISCHED_SITE=../../examples/site-lab.json")
	var errOut strings.Builder
	cmd.Stderr = &errOut // compopt says it runs outside a completion
	got, err := cmd.Output()
	if err != nil {
		t.Fatalf("bash completion of %q: %v\n%s%s", words, err, got, errOut.String())
	}
	return strings.TrimSpace(string(got))
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
	for _, want := range []string{`.B \-A, \-\-account \fIstring\fR`, `.B \-\-sbatch\-arg \fIstringArray\fR`, ".SH COMMAND: SUBMIT", ".SH COMMAND: STATUS",
		".SH COMMAND: SITE PROBE", ".SH COMMAND: STOP", `.B \-\-node\-type \fIstring\fR`, `isched 9.9.9`, "Options are GNU's"} {
		if !strings.Contains(string(page), want) {
			t.Errorf("isched.1 lacks %q", want)
		}
	}
	if _, err := exec.LookPath("man"); err == nil {
		// lintian's groff check (deb-test): a word too long to break, for one
		for _, page := range []string{"man1/isched.1", "man1/isched-wrapper.1", "man8/isched-agent.8", "man8/isched-coordinator.8", "man8/isched-relay.8"} {
			cmd := exec.Command("man", "--warnings", "-l", filepath.Join(out, "man", page))
			cmd.Env = append(os.Environ(), "MANPAGER=cat", "MANWIDTH=80", "LC_ALL=C.UTF-8")
			var warn strings.Builder
			cmd.Stderr = &warn
			if err := cmd.Run(); err != nil || warn.Len() > 0 {
				t.Errorf("man --warnings %s: %v\n%s", page, err, warn.String())
			}
		}
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
		{"gpu-dev", "isched", "submit", "-p", "gpu-"},                  // the site catalogue's partitions without Slurm
		{`dev\,gpu-dev`, "isched", "submit", "--fallback", "dev,gpu-"}, // bash inserts it quoted
	} {
		if got := bashComplete(t, bashFile, bin, "__start_isched", tt[1:]...); got != tt[0] {
			t.Errorf("bash completion of %q: %q, want %q", tt[1:], got, tt[0])
		}
	}
	if got := bashComplete(t, bashFile, bin, "_isched_agent", "isched-agent", "--pprof-l"); got != "--pprof-listen" {
		t.Errorf("bash completion of isched-agent --pprof-l: %q", got)
	}
	for file, wants := range map[string][]string{
		"isched.fish":         {"complete -c isched -n 'not __isched_requires_order_preservation && __isched_prepare_completions' -f -a '$__isched_comp_results'"},
		"isched-daemons.fish": {"complete -c isched-agent -l pprof-listen -d "},
	} {
		text, err := os.ReadFile(filepath.Join(out, "fish", file))
		if err != nil {
			t.Fatal(err)
		}
		for _, want := range wants {
			if !strings.Contains(string(text), want) {
				t.Errorf("%s lacks %q", file, want)
			}
		}
		if fishBin := shell(t, "fish"); fishBin != "" {
			if out, err := exec.Command(fishBin, "--no-execute", filepath.Join(out, "fish", file)).CombinedOutput(); err != nil {
				t.Errorf("fish --no-execute %s: %v\n%s", file, err, out)
			}
		}
	}
	for _, file := range []string{"_isched", "_isched_daemons"} {
		if zsh := shell(t, "zsh"); zsh != "" {
			if out, err := exec.Command(zsh, "-n", filepath.Join(out, "zsh", file)).CombinedOutput(); err != nil {
				t.Errorf("zsh -n %s: %v\n%s", file, err, out)
			}
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
