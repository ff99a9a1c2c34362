package cli

// The command tree: spf13/cobra parses the command line (pflag: GNU and
// POSIX options, attached short values such as -pgpu, flags after
// positional arguments), finds the command, prints help and generates the
// shell completions; each command's own type registers its flags and runs.

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/isched/isched/internal/version"
)

func init() {
	cobra.EnableCommandSorting = false // the usage's order, not the alphabet's
}

// leaf is one command of the tree: its name and synopsis (Use), one line
// for the command list, its flags and what it does with the positional
// arguments left after them.
type leaf struct {
	use, short string
	// ordered: options end at the first positional argument, which with
	// the rest is the training command or the batch script's arguments
	// (submit, profile), as sbatch takes them
	ordered bool
	flags   func(fs *pflag.FlagSet)
	run     func(ctx context.Context, pos []string) error
	// args completes the positional arguments (nil: files)
	args cobra.CompletionFunc
}

// command makes l a cobra command whose flags complete what they name.
func (a *App) command(l leaf) *cobra.Command {
	cmd := &cobra.Command{
		Use: l.use, Short: l.short,
		RunE:              func(cmd *cobra.Command, pos []string) error { return l.run(cmd.Context(), pos) },
		ValidArgsFunction: l.args,
	}
	if l.flags != nil {
		l.flags(cmd.Flags())
	}
	cmd.Flags().SetInterspersed(!l.ordered)
	a.completeFlags(cmd)
	return cmd
}

// root builds the command tree of one run: each command's flags are
// fresh, so an App may run again.
func (a *App) root() *cobra.Command {
	root := &cobra.Command{
		Use: "isched", Short: "estimate, plan, submit and follow DNN training jobs on Slurm",
		SilenceErrors: true, SilenceUsage: true,
		Version:           version.String("isched"),
		PersistentPreRunE: a.checkConfig,
	}
	root.SetVersionTemplate("{{.Version}}\n")
	if a.stdout != nil { // Tree: cobra's own, os.Stdout and os.Stderr
		root.SetOut(a.stdout)
		root.SetErr(a.stderr)
	}
	root.SetFlagErrorFunc(func(cmd *cobra.Command, err error) error { return &flagError{cmd: cmd, err: err} })
	root.SetHelpFunc(a.help)
	for _, l := range a.leaves() {
		root.AddCommand(a.command(l))
	}
	site := &cobra.Command{Use: "site probe|...", Short: "site administrators' commands: isched site probe", Args: cobra.ArbitraryArgs,
		RunE: func(cmd *cobra.Command, pos []string) error { return unknownSub(cmd, pos) }}
	site.AddCommand(a.command((&siteProbeCmd{app: a}).leaf()))
	root.AddCommand(site)
	cfg := a.command((&configCmd{app: a}).leaf())
	root.AddCommand(cfg, &cobra.Command{Use: "version", Short: "print the version (also --version)", Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			fmt.Fprintln(cmd.OutOrStdout(), version.String("isched"))
			return nil
		}})
	root.InitDefaultHelpCmd()
	root.InitDefaultCompletionCmd()
	for _, c := range root.Commands() {
		switch c.Name() {
		case "help": // cobra's, which completes the commands; a mistyped one is a usage error here
			c.Use, c.Short, c.Long, c.RunE = "help [COMMAND]", "a command's usage and flags (also COMMAND --help)", "", a.helpCmd
		case "completion":
			c.Short = "print the shell completion script: source <(isched completion bash), or zsh, fish (isched completion bash --help says where to keep it)"
		}
	}
	return root
}

// leaves are the commands in the usage's order, but site (a group), config,
// version and help.
func (a *App) leaves() []leaf {
	return []leaf{
		(&estimateCmd{app: a}).leaf(),
		(&planCmd{app: a}).leaf(),
		(&submitCmd{app: a}).leaf(),
		(&profileCmd{app: a}).leaf(),
		(&statusCmd{app: a}).leaf(),
		(&reportCmd{app: a}).leaf(),
		(&stopCmd{app: a}).leaf(),
		(&simulateCmd{app: a}).leaf(),
	}
}

// Tree is isched's command tree with the real dependencies, for
// scripts/genman (man page and completions from the commands' own flags).
func Tree() *cobra.Command {
	a := &App{Getenv: func(string) string { return "" }}
	a.defaults()
	return a.root()
}

// checkConfig stops every command but help, version and the completions
// on a configuration file that could not be read.
func (a *App) checkConfig(cmd *cobra.Command, _ []string) error {
	if a.ConfigErr == nil {
		return nil
	}
	for c := cmd; c != nil; c = c.Parent() {
		switch c.Name() {
		case "help", "version", "completion", cobra.ShellCompRequestCmd, cobra.ShellCompNoDescRequestCmd:
			return nil
		}
	}
	return &configError{a.ConfigErr}
}

// configError is a configuration file that could not be read: a usage
// error of isched itself, not of a command.
type configError struct{ err error }

func (e *configError) Error() string { return e.err.Error() }
func (e *configError) Unwrap() error { return e.err }

// flagError is pflag's error for a command's flags: unknown, without its
// value, or a value that does not parse.
type flagError struct {
	cmd *cobra.Command
	err error
}

func (e *flagError) Error() string { return e.err.Error() }
func (e *flagError) Unwrap() error { return e.err }
func (e *flagError) Is(target error) bool {
	return target == errUsage
}

// unknownSub is a group's answer to a word that is none of its commands.
func unknownSub(cmd *cobra.Command, pos []string) error {
	var names []string
	for _, c := range cmd.Commands() {
		names = append(names, c.Name())
	}
	if len(pos) == 0 {
		return usageErr("want a command: %s %s", cmd.CommandPath(), strings.Join(names, "|"))
	}
	return usageErr("unknown command %q%s; '%s --help' lists the commands", pos[0], didYouMean(cmd.SuggestionsFor(pos[0]), quote), cmd.CommandPath())
}

func quote(s string) string { return fmt.Sprintf("%q", s) }

// helpCmd is `isched help [COMMAND...]`: the command's help, or a usage
// error for one that does not exist.
func (a *App) helpCmd(cmd *cobra.Command, args []string) error {
	root := cmd.Root()
	target, rest, err := root.Find(args)
	if err != nil || len(rest) > 0 || (target == root && len(args) > 0) {
		name := args[0]
		if len(rest) > 0 {
			name = rest[0]
		}
		return &commandError{name: name, suggestions: target.SuggestionsFor(name)}
	}
	a.help(target, nil)
	return nil
}

// commandError is a command that isched does not have.
type commandError struct {
	name        string
	suggestions []string
}

func (e *commandError) Error() string {
	return fmt.Sprintf("unknown command %q%s; 'isched help' lists the commands", e.name, didYouMean(e.suggestions, quote))
}

func (e *commandError) Is(target error) bool { return target == errUsage }

// help prints a command's usage, its commands and its flags on its
// output (stdout).
func (a *App) help(cmd *cobra.Command, _ []string) {
	w := cmd.OutOrStdout()
	if !cmd.HasParent() {
		writeRootUsage(w, cmd)
		return
	}
	fmt.Fprintf(w, "usage: %s\n", useLine(cmd))
	if cmd.Long != "" {
		fmt.Fprintf(w, "\n%s\n", strings.TrimSpace(cmd.Long))
	}
	if cmd.HasAvailableSubCommands() {
		fmt.Fprint(w, "\ncommands:\n")
		writeCommands(w, cmd)
	}
	if fs := cmd.LocalFlags(); fs.HasAvailableFlags() {
		fmt.Fprintf(w, "\nflags:\n%s", fs.FlagUsagesWrapped(100))
	}
}

// useLine is "isched CMD SYNOPSIS".
func useLine(cmd *cobra.Command) string {
	return strings.TrimSpace(cmd.CommandPath() + " " + Synopsis(cmd))
}

// Synopsis is a command's synopsis: its usage line without "isched CMD"
// (scripts/genman).
func Synopsis(cmd *cobra.Command) string {
	_, syn, _ := strings.Cut(cmd.Use, " ")
	return syn
}

const rootFooter = `'isched <command> --help' lists a command's flags. Settings come from /etc/isched/isched.conf, then
~/.config/isched/isched.conf, then the environment (ISCHED_CLUSTER, ISCHED_RELAY_ADDR,
ISCHED_REDIS_ADDR, ISCHED_SITE, ...), then flags: isched config shows them.
`

// writeRootUsage is isched's usage: its commands, then where settings
// come from.
func writeRootUsage(w io.Writer, root *cobra.Command) {
	fmt.Fprint(w, "usage: isched <command> [flags]\n\ncommands:\n")
	writeCommands(w, root)
	fmt.Fprint(w, "\n"+rootFooter)
}

// writeCommands lists cmd's commands with their one line, wrapped at 100
// columns under the descriptions.
func writeCommands(w io.Writer, cmd *cobra.Command) {
	for _, c := range cmd.Commands() {
		if !c.IsAvailableCommand() && c.Name() != "help" {
			continue
		}
		lines := wrapWords(c.Short, 100-13)
		fmt.Fprintf(w, "  %-10s %s\n", c.Name(), lines[0])
		for _, l := range lines[1:] {
			fmt.Fprintf(w, "  %-10s %s\n", "", l)
		}
	}
}

// wrapWords breaks s into lines of at most width runes at spaces.
func wrapWords(s string, width int) []string {
	var lines []string
	line := ""
	for _, word := range strings.Fields(s) {
		if line != "" && len([]rune(line))+1+len([]rune(word)) > width {
			lines = append(lines, line)
			line = ""
		}
		if line != "" {
			line += " "
		}
		line += word
	}
	return append(lines, line)
}

// execute runs the tree on args and maps what it returned to an exit
// code: help on stdout with ExitOK; a usage mistake on stderr with
// ExitUsage (for a flag: the mistake, a suggestion, then one short usage
// line); a failure with ExitError.
func (a *App) execute(ctx context.Context, args []string) int {
	root := a.root()
	root.SetArgs(args)
	if _, _, err := root.Find(args); err != nil && !strings.HasPrefix(args[0], "-") && !strings.HasPrefix(args[0], "__") {
		return a.exitCode(root, &commandError{name: args[0], suggestions: root.SuggestionsFor(args[0])})
	}
	cmd, err := root.ExecuteContextC(ctx)
	return a.exitCode(cmd, err)
}

// exitCode prints what a command's error means and returns the exit code.
func (a *App) exitCode(cmd *cobra.Command, err error) int {
	var fe *flagError
	var ce *commandError
	var cfg *configError
	switch {
	case err == nil:
		return ExitOK
	case errors.As(err, &cfg), errors.As(err, &ce): // isched's own, not a command's
		fmt.Fprintf(a.stderr, "isched: %v\n", err)
		return ExitUsage
	case errors.As(err, &fe):
		fmt.Fprintf(a.stderr, "%s: %v%s\n", fe.cmd.CommandPath(), fe.err, flagSuggestion(fe.cmd, fe.err))
		fmt.Fprintf(a.stderr, "usage: %s (%s --help lists the flags)\n", useLine(fe.cmd), fe.cmd.CommandPath())
		return ExitUsage
	case errors.Is(err, errUsage):
		if msg := strings.TrimPrefix(err.Error(), errUsage.Error()+": "); msg != errUsage.Error() {
			fmt.Fprintf(a.stderr, "%s: %s\n", cmd.CommandPath(), msg)
		}
		return ExitUsage
	}
	fmt.Fprintf(a.stderr, "%s: %v\n", cmd.CommandPath(), err)
	return ExitError
}

// noArgs completes nothing for a command that takes no arguments.
func noArgs(*cobra.Command, []string, string) ([]cobra.Completion, cobra.ShellCompDirective) {
	return nil, cobra.ShellCompDirectiveNoFileComp
}
