package cli

import (
	"fmt"
	"strconv"
	"strings"
	"time"
)

// Script is a batch script for one isched job.
type Script struct {
	Header      []string // comment lines after the shebang (the plan)
	JobName     string
	Partitions  []string
	Gres        string
	CPUs        int           // --cpus-per-task; 0: Slurm's default
	MemMiB      int64         // --mem; 0: Slurm's default
	TimeLimit   time.Duration // --time; 0: the partition's default
	Output      string        // --output, appended to across attempts
	Chdir       string
	Comment     string // the plan (report.Plan.FormatComment)
	Env         [][2]string
	Unset       []string
	Wrapper     string
	WrapperArgs []string
	Argv        []string
}

// WarnSeconds is how long before the time limit Slurm sends SIGUSR1 to the
// job's steps (the wrapper under srun, which turns it into a checkpoint
// request); it must cover a checkpoint.
const WarnSeconds = 120

// shellSafe are the bytes that need no quoting in a POSIX shell word.
func shellSafe(c byte) bool {
	return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || strings.IndexByte("_@%+=:,./-", c) >= 0
}

// ShellQuote quotes s as one shell word. Inside single quotes a shell
// expands nothing ($, `, \, ! and newlines are literal); a single quote is
// written as '\” (close, escaped quote, reopen).
func ShellQuote(s string) string {
	if s == "" {
		return "''"
	}
	safe := true
	for i := 0; i < len(s); i++ {
		if !shellSafe(s[i]) {
			safe = false
			break
		}
	}
	if safe {
		return s
	}
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}

// directiveValue makes s safe as the value of an #SBATCH line: sbatch reads
// these lines itself, and a newline would end the comment and turn the rest
// into shell code, so control characters and double quotes are refused;
// values with spaces are double-quoted (sbatch strips the quotes).
func directiveValue(name, s string) (string, error) {
	for _, c := range s {
		if c < 0x20 || c == 0x7f || c == '"' || c == '\\' {
			return "", fmt.Errorf("%s %q: control characters, quotes and backslashes cannot go into an #SBATCH line", name, s)
		}
	}
	if strings.ContainsAny(s, " \t'$`") {
		return `"` + s + `"`, nil
	}
	return s, nil
}

// Render writes the script. Every value that came from the user is quoted
// for the shell (the command) or checked for the #SBATCH parser.
func (s *Script) Render() ([]byte, error) {
	var b strings.Builder
	b.WriteString("#!/bin/bash\n")
	for _, h := range s.Header {
		b.WriteString("# " + strings.ReplaceAll(clean(h), "\n", " ") + "\n")
	}
	dir := func(flag, val string) error {
		v, err := directiveValue(flag, val)
		if err != nil {
			return err
		}
		b.WriteString("#SBATCH --" + flag + "=" + v + "\n")
		return nil
	}
	var errs []error
	add := func(flag, val string) {
		if val != "" {
			if err := dir(flag, val); err != nil {
				errs = append(errs, err)
			}
		}
	}
	add("job-name", s.JobName)
	add("partition", strings.Join(s.Partitions, ","))
	add("gres", s.Gres)
	b.WriteString("#SBATCH --nodes=1\n#SBATCH --ntasks=1\n")
	if s.CPUs > 0 {
		add("cpus-per-task", strconv.Itoa(s.CPUs))
	}
	if s.MemMiB > 0 {
		add("mem", strconv.FormatInt(s.MemMiB, 10)+"M")
	}
	if s.TimeLimit > 0 {
		add("time", strconv.FormatInt(int64((s.TimeLimit+time.Minute-1)/time.Minute), 10))
	}
	// Requeued attempts rerun this script from the top; the wrapper resumes
	// from the lineage's last checkpoint.
	b.WriteString("#SBATCH --requeue\n")
	// Without "B:" Slurm signals the job steps: the wrapper under srun.
	fmt.Fprintf(&b, "#SBATCH --signal=USR1@%d\n", WarnSeconds)
	b.WriteString("#SBATCH --open-mode=append\n")
	add("output", s.Output)
	add("chdir", s.Chdir)
	add("comment", s.Comment)
	if len(errs) > 0 {
		return nil, errs[0]
	}
	b.WriteString("\nset -eu\n")
	b.WriteString("# sbatch ran with --export=NONE (your login environment): let srun pass this script's on.\n")
	b.WriteString("export SLURM_EXPORT_ENV=ALL\n")
	for _, kv := range s.Env {
		if !envName(kv[0]) {
			return nil, fmt.Errorf("environment variable name %q", kv[0])
		}
		b.WriteString("export " + kv[0] + "=" + ShellQuote(kv[1]) + "\n")
	}
	if len(s.Unset) > 0 {
		for _, n := range s.Unset {
			if !envName(n) {
				return nil, fmt.Errorf("environment variable name %q", n)
			}
		}
		b.WriteString("unset " + strings.Join(s.Unset, " ") + "\n")
	}
	b.WriteString(`echo "isched: lineage $ISCHED_LINEAGE job ${SLURM_JOB_ID:-} attempt ${SLURM_RESTART_COUNT:-0} on ${SLURM_JOB_PARTITION:-}/${SLURMD_NODENAME:-} at $(date -Is)"` + "\n")
	words := []string{"exec", "srun", ShellQuote(s.Wrapper)}
	for _, a := range s.WrapperArgs {
		words = append(words, ShellQuote(a))
	}
	words = append(words, "--")
	for _, a := range s.Argv {
		if strings.IndexByte(a, 0) >= 0 {
			return nil, fmt.Errorf("command argument %q contains a NUL byte", a)
		}
		words = append(words, ShellQuote(a))
	}
	b.WriteString(strings.Join(words, " ") + "\n")
	return []byte(b.String()), nil
}

func envName(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !(c == '_' || c >= 'A' && c <= 'Z' || c >= 'a' && c <= 'z' || i > 0 && c >= '0' && c <= '9') {
			return false
		}
	}
	return true
}
