package cli

import (
	"fmt"
	"io/fs"
	"path/filepath"
	"slices"
	"sort"
	"strings"
)

// The job's environment (docs/training-scripts.md, "Your environment in
// the job").
//
// `isched submit` records the environment it runs in (an activated venv or
// conda env, `module load`ed modules, PATH, LD_LIBRARY_PATH, PYTHONPATH,
// CUDA variables) as export lines of the batch script, as sbatch's own
// default (--export=ALL) would pass it, and submits the script with
// --export=NONE. The script, not sbatch's command line, carries the
// environment, so every attempt of the run gets the same one: the first,
// each requeue (a move, a continuation), and a resubmission by the agent
// after slurmctld forgot the job (it has only the saved script).
//
// Left out: isched's own variables (the script sets the ones the job needs;
// the CLI's Redis login and password file never reach a job), Slurm's
// variables (of the allocation the CLI may run in, not of the job), what
// describes the login session and means nothing on a compute node (the
// terminal, the SSH connection, the X display, the working directory), the
// shell's read-only and internal variables, which an `export` line cannot
// set, and exported shell functions (BASH_FUNC_module%%): the job runs its
// command without a shell.

// exportSpec is `isched submit --export`, in sbatch's syntax: ALL (the
// default), NONE, or [ALL,]NAME[=value],...
type exportSpec struct {
	all  bool     // the whole environment
	none bool     // nothing: the job gets the user's login environment
	vars []string // NAME: from the environment
	set  [][2]string
}

// parseExport reads an --export value.
func parseExport(s string) (exportSpec, error) {
	switch s {
	case "", "ALL":
		return exportSpec{all: true}, nil
	case "NONE":
		return exportSpec{none: true}, nil
	}
	var e exportSpec
	for _, item := range strings.Split(s, ",") {
		name, value, hasValue := strings.Cut(item, "=")
		switch {
		case item == "ALL":
			e.all = true
		case item == "NONE":
			return exportSpec{}, usageErr("--export %q: NONE cannot be combined with other names", s)
		case !envName(name):
			return exportSpec{}, usageErr("--export %q: %q is not a variable name", s, name)
		case strings.HasPrefix(name, "ISCHED_") || name == "REDISCLI_AUTH":
			return exportSpec{}, usageErr("--export %q: %s is isched's own; the script sets what the job needs", s, name)
		case hasValue:
			e.set = append(e.set, [2]string{name, value})
		default:
			e.vars = append(e.vars, name)
		}
	}
	return e, nil
}

// String is the spec as --export would take it.
func (e exportSpec) String() string {
	if e.none {
		return "NONE"
	}
	var parts []string
	if e.all {
		parts = append(parts, "ALL")
	}
	parts = append(parts, e.vars...)
	for _, kv := range e.set {
		parts = append(parts, kv[0]+"="+kv[1])
	}
	return strings.Join(parts, ",")
}

// sessionEnv are variables of the login session, not of the software
// environment: meaningless (or wrong) on a compute node; and who the user
// is, which Slurm sets for the job's own user (measured on 22.05: a job
// submitted with --export=NONE has HOME, USER, LOGNAME, SHELL and a login
// PATH from the user's login environment).
var sessionEnv = []string{
	"HOME", "USER", "LOGNAME", "SHELL",
	"_", "PWD", "OLDPWD", "SHLVL", "HOSTNAME", "HOST", "TERM", "COLORTERM", "DISPLAY", "XAUTHORITY", "WINDOWID",
	"SSH_CLIENT", "SSH_CONNECTION", "SSH_TTY", "SSH_AUTH_SOCK", "SSH_AGENT_PID", "SSH_ASKPASS", "SSH_ORIGINAL_COMMAND",
	"XDG_RUNTIME_DIR", "XDG_SESSION_ID", "XDG_SESSION_TYPE", "XDG_SESSION_CLASS", "XDG_SEAT", "XDG_VTNR",
	"DBUS_SESSION_BUS_ADDRESS", "TMUX", "TMUX_PANE", "STY", "WINDOW", "MAIL", "PROMPT_COMMAND",
	"LS_COLORS", "LESSOPEN", "LESSCLOSE",
}

// shellEnv are bash's read-only and internal variables: `export NAME=...`
// fails on the read-only ones (and `set -e` ends the script there), and
// the others would change how the script itself runs.
var shellEnv = []string{
	"SHELLOPTS", "BASHOPTS", "BASH_VERSINFO", "EUID", "UID", "PPID", "GROUPS", "IFS", "BASH_ENV", "ENV", "CDPATH",
	"BASH_ARGV0", "BASH_EXECUTION_STRING", "BASH_SUBSHELL", "BASHPID", "FUNCNAME", "RANDOM", "SECONDS", "LINENO",
	"POSIXLY_CORRECT", "SHELL_SESSION_ID",
}

// slurmEnvPrefixes are Slurm's own variables: from an allocation the CLI
// runs in (salloc, an interactive srun), they would name another job.
var slurmEnvPrefixes = []string{"SLURM_", "SBATCH_", "SALLOC_", "SRUN_", "SLURMD_"}

// jobEnvOf returns the variables of environ the job gets under spec, sorted
// by name, and one line for the user about what was left out.
func jobEnvOf(environ []string, spec exportSpec) (env [][2]string, note string) {
	if spec.none {
		return nil, ""
	}
	var funcs, dropped []string
	for _, kv := range environ {
		name, value, ok := strings.Cut(kv, "=")
		if !ok {
			continue
		}
		if !spec.all && !slices.Contains(spec.vars, name) {
			continue
		}
		switch {
		case strings.HasPrefix(name, "BASH_FUNC_"):
			funcs = append(funcs, strings.TrimSuffix(strings.TrimPrefix(name, "BASH_FUNC_"), "%%"))
		case !envName(name) || strings.HasPrefix(name, "ISCHED_") || name == "REDISCLI_AUTH":
			// isched's own (the script sets what the job needs; the CLI's
			// Redis login never reaches a job), or not a shell name
		case slices.Contains(sessionEnv, name) || slices.Contains(shellEnv, name) || hasAnyPrefix(name, slurmEnvPrefixes):
			if !spec.all {
				dropped = append(dropped, name)
			}
		default:
			env = append(env, [2]string{name, value})
		}
	}
	for _, kv := range spec.set {
		env = slices.DeleteFunc(env, func(e [2]string) bool { return e[0] == kv[0] })
		env = append(env, kv)
	}
	sort.SliceStable(env, func(i, j int) bool { return env[i][0] < env[j][0] })
	var notes []string
	if len(funcs) > 0 {
		sort.Strings(funcs)
		notes = append(notes, fmt.Sprintf("shell functions not passed (%s): the job runs its command without a shell", strings.Join(funcs, ", ")))
	}
	if len(dropped) > 0 {
		notes = append(notes, fmt.Sprintf("not passed (Slurm's, the shell's or the login session's own): %s", strings.Join(dropped, ", ")))
	}
	return env, strings.Join(notes, "; ")
}

func hasAnyPrefix(s string, prefixes []string) bool {
	for _, p := range prefixes {
		if strings.HasPrefix(s, p) {
			return true
		}
	}
	return false
}

// envValue is the value of name in env ("" when absent).
func envValue(env [][2]string, name string) (string, bool) {
	for _, kv := range env {
		if kv[0] == name {
			return kv[1], true
		}
	}
	return "", false
}

// errNotExecutable is a program that is not an executable file.
var errNotExecutable = fmt.Errorf("not an executable file")

// lookProgram finds the program of a command as the job will: a name with
// a slash relative to dir (the job's working directory), any other name in
// the directories of path, with stat (os.Stat).
func lookProgram(program, path, dir string, stat func(string) (fs.FileInfo, error)) (string, error) {
	executable := func(p string) error {
		fi, err := stat(p)
		if err != nil {
			return err
		}
		if !fi.Mode().IsRegular() || fi.Mode().Perm()&0o111 == 0 {
			return errNotExecutable
		}
		return nil
	}
	if strings.Contains(program, "/") {
		p := program
		if !filepath.IsAbs(p) {
			p = filepath.Join(dir, p)
		}
		if err := executable(p); err != nil {
			return "", fmt.Errorf("%s: %w", p, err)
		}
		return p, nil
	}
	for _, d := range filepath.SplitList(path) {
		if d == "" || !filepath.IsAbs(d) {
			continue // the job's working directory is not a place to look for programs
		}
		p := filepath.Join(d, program)
		if executable(p) == nil {
			return p, nil
		}
	}
	return "", fmt.Errorf("%q not found in PATH %s", program, path)
}
