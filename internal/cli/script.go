package cli

import (
	"fmt"
	"strconv"
	"strings"
	"time"
)

// Script is a batch script for one isched job.
type Script struct {
	Header     []string // comment lines after the shebang (the plan)
	JobName    string
	Partitions []string
	Gres       string
	CPUs       int   // --cpus-per-task; 0: Slurm's default
	MemMiB     int64 // --mem; 0: Slurm's default
	// MemPerGPUMiB is --mem-per-gpu, instead of --mem for an elastic run
	// (its memory grows with its GPUs); 0: none.
	MemPerGPUMiB int64
	TimeLimit    time.Duration // --time; 0: the partition's default
	Output       string        // --output, appended to across attempts
	Error        string        // --error, appended to likewise; "": with the output
	Chdir        string
	Comment      string      // the plan (report.Plan.FormatComment)
	Nodes        string      // --nodes, N or MIN-MAX; "" is 1
	Ntasks       int         // --ntasks; 0 is 1
	Site         []Directive // the site's options (--account, --sbatch-arg, ...), checked by siteOpts
	// UserEnv is the environment isched submit ran in, as the job gets it
	// (jobEnvOf): written before isched's own variables.
	UserEnv    [][2]string
	UserExport string // the --export it came from, for the script's comment
	Env        [][2]string
	Unset      []string
	// CkptEstimate is the lineage's measured checkpoint time (0: none
	// measured yet), for the signal lead.
	CkptEstimate time.Duration
	Wrapper      string
	WrapperArgs  []string
	Argv         []string
	// Array is --array: the script makes each element a run of its own
	// (lineage ISCHED_LINEAGE_<task>, report.ElementLineage), checkpointing
	// into ArrayCkptDir/<task> (ISCHED_CHECKPOINT_DIR, which the wrapper
	// takes as its --checkpoint-dir).
	Array        string
	ArrayCkptDir string
	// InBatchStep runs the wrapper in the batch step, not under srun: the
	// command is the user's batch script, whose own srun lines start its
	// steps (a step inside a step would wait for resources its parent
	// holds). Slurm's signal then goes to the batch shell (B:).
	InBatchStep bool
	// Elastic: the run may be resized between attempts (isched submit
	// --gpus MIN-MAX): srun starts one task per GPU of the attempt's
	// allocation, not the --ntasks sbatch froze into the job's
	// environment at submission (internal/slurm/testdata/README.md).
	Elastic bool
}

// Signal lead: Slurm sends SIGUSR1 to the job's steps (the wrapper under
// srun, which turns it into a checkpoint request) "lead" seconds before the
// time limit, but its timer has a one-minute resolution: the signal may come
// up to a minute earlier than asked.
const (
	slurmSignalResolution = time.Minute
	// defaultCkpt is the checkpoint time assumed before one was measured.
	defaultCkpt = time.Minute
	// signalNotBefore: the signal never comes in an allocation's first
	// minute (a checkpoint there ends a short run before it did anything).
	signalNotBefore = time.Minute
	maxSignalLead   = 65535 // seconds: Slurm's maximum
)

// SignalLead is the lead of `--signal=USR1@lead`, in seconds, for a job
// with time limit limit (0: the partition's default, not known here) whose
// checkpoints take ckpt (0: not measured yet, defaultCkpt assumed). The
// lead covers the checkpoint with a quarter to spare (at least 10 s) plus
// Slurm's one-minute resolution, so the checkpoint is done before the
// limit however early in that minute the signal comes. It is capped so
// that the earliest delivery (a minute before the lead) is not in the
// first minute of the allocation; ok is false when the limit is too short
// for any signal (2 minutes or less): the coordinator's own checkpoint
// request is then the only one.
func SignalLead(limit, ckpt time.Duration) (lead int, ok bool) {
	if ckpt <= 0 {
		ckpt = defaultCkpt
	}
	want := slurmSignalResolution + ckpt + max(ckpt/4, 10*time.Second)
	secs := int64((want + time.Second - 1) / time.Second)
	if limit > 0 {
		// earliest delivery: limit - lead - resolution >= signalNotBefore
		capSecs := int64((limit - slurmSignalResolution - signalNotBefore) / time.Second)
		if capSecs <= 0 {
			return 0, false
		}
		secs = min(secs, capSecs)
	}
	return int(min(secs, maxSignalLead)), true
}

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
	if err := s.directives(&b); err != nil {
		return nil, err
	}
	b.WriteString("\nset -eu\n")
	if err := s.environment(&b); err != nil {
		return nil, err
	}
	if s.Array != "" {
		s.element(&b)
	}
	if s.Elastic && !s.InBatchStep {
		b.WriteString("# An elastic run: one task per GPU of this attempt's allocation, whatever size isched gave it.\n")
		b.WriteString(`ISCHED_GPUS_PER_NODE="${SLURM_GPUS_ON_NODE:-1}"` + "\n")
	}
	b.WriteString(`echo "isched: lineage $ISCHED_LINEAGE job ${SLURM_JOB_ID:-} attempt ${SLURM_RESTART_COUNT:-0} on ${SLURM_JOB_PARTITION:-}/${SLURMD_NODENAME:-} at $(date -Is)"` + "\n")
	cmd, err := s.command()
	if err != nil {
		return nil, err
	}
	b.WriteString(cmd + "\n")
	return []byte(b.String()), nil
}

// element writes what makes an array's element a run of its own: its
// lineage and checkpoint directory, by its task id (set -u: a script run
// outside an array fails here, before anything runs).
func (s *Script) element(b *strings.Builder) {
	b.WriteString("# An array: each element is a run of its own, lineage " + clean(s.lineageOf()) + "_<task id>, checkpoints in <dir>/<task id>.\n")
	b.WriteString(`export ISCHED_LINEAGE="${ISCHED_LINEAGE}_${SLURM_ARRAY_TASK_ID}"` + "\n")
	b.WriteString("export ISCHED_CHECKPOINT_DIR=" + ShellQuote(s.ArrayCkptDir) + `/"${SLURM_ARRAY_TASK_ID}"` + "\n")
	b.WriteString(`mkdir -p -- "$ISCHED_CHECKPOINT_DIR"` + "\n")
}

// lineageOf is the ISCHED_LINEAGE the script exports.
func (s *Script) lineageOf() string {
	for _, kv := range s.Env {
		if kv[0] == "ISCHED_LINEAGE" {
			return kv[1]
		}
	}
	return ""
}

// directives writes the #SBATCH lines; the first value the parser would
// misread is the error.
func (s *Script) directives(b *strings.Builder) error {
	var errs []error
	add := func(flag, val string) {
		if val == "" {
			return
		}
		v, err := directiveValue(flag, val)
		if err != nil {
			errs = append(errs, err)
			return
		}
		b.WriteString("#SBATCH --" + flag + "=" + v + "\n")
	}
	add("job-name", s.JobName)
	add("array", s.Array)
	add("partition", strings.Join(s.Partitions, ","))
	add("gres", s.Gres)
	nodes, ntasks := s.counts()
	add("nodes", nodes)
	add("ntasks", ntasks)
	if s.CPUs > 0 {
		add("cpus-per-task", strconv.Itoa(s.CPUs))
	}
	if s.MemMiB > 0 {
		add("mem", strconv.FormatInt(s.MemMiB, 10)+"M")
	}
	if s.MemPerGPUMiB > 0 {
		add("mem-per-gpu", strconv.FormatInt(s.MemPerGPUMiB, 10)+"M")
	}
	if s.TimeLimit > 0 {
		add("time", strconv.FormatInt(int64((s.TimeLimit+time.Minute-1)/time.Minute), 10))
	}
	// Requeued attempts rerun this script from the top; the wrapper resumes
	// from the lineage's last checkpoint.
	b.WriteString("#SBATCH --requeue\n")
	// Without "B:" Slurm signals the job steps: the wrapper under srun.
	limit := time.Duration((s.TimeLimit+time.Minute-1)/time.Minute) * time.Minute // as --time says it
	if lead, ok := SignalLead(limit, s.CkptEstimate); ok {
		batch := ""
		if s.InBatchStep {
			batch = "B:"
		}
		fmt.Fprintf(b, "#SBATCH --signal=%sUSR1@%d\n", batch, lead)
	}
	b.WriteString("#SBATCH --open-mode=append\n")
	add("output", s.Output)
	add("error", s.Error)
	add("chdir", s.Chdir)
	add("comment", s.Comment)
	if err := s.siteLines(b); err != nil {
		errs = append(errs, err)
	}
	if len(errs) > 0 {
		return errs[0]
	}
	return nil
}

// environment writes the job's environment: the user's (--export), then
// isched's, less the variables the job must not have.
func (s *Script) environment(b *strings.Builder) error {
	if len(s.UserEnv) > 0 {
		b.WriteString("# The environment `isched submit` ran in (--export=" + s.UserExport + "), for every attempt of the run.\n")
		if err := writeExports(b, s.UserEnv); err != nil {
			return err
		}
	}
	b.WriteString("# sbatch ran with --export=NONE (your login environment): let srun pass this script's on.\n")
	b.WriteString("export SLURM_EXPORT_ENV=ALL\n")
	if err := writeExports(b, s.Env); err != nil {
		return err
	}
	if len(s.Unset) > 0 {
		for _, n := range s.Unset {
			if !envName(n) {
				return fmt.Errorf("environment variable name %q", n)
			}
		}
		b.WriteString("unset " + strings.Join(s.Unset, " ") + "\n")
	}
	return nil
}

// command is the srun line: the wrapper, its arguments, then the
// training command, each word quoted.
func (s *Script) command() (string, error) {
	words := []string{"exec", "srun"}
	switch {
	case s.InBatchStep:
		words = words[:1]
	case s.Elastic:
		words = append(words, `--ntasks="$(( ISCHED_GPUS_PER_NODE * ${SLURM_JOB_NUM_NODES:-1} ))"`,
			`--ntasks-per-node="$ISCHED_GPUS_PER_NODE"`)
	}
	if s.Wrapper != "" { // no wrapper: isched's own short jobs (site probe)
		words = append(words, ShellQuote(s.Wrapper))
		for _, a := range s.WrapperArgs {
			words = append(words, ShellQuote(a))
		}
		words = append(words, "--")
	}
	for _, a := range s.Argv {
		if strings.IndexByte(a, 0) >= 0 {
			return "", fmt.Errorf("command argument %q contains a NUL byte", a)
		}
		words = append(words, ShellQuote(a))
	}
	return strings.Join(words, " "), nil
}

// writeExports writes one export line per variable, its value quoted.
func writeExports(b *strings.Builder, env [][2]string) error {
	for _, kv := range env {
		if !envName(kv[0]) {
			return fmt.Errorf("environment variable name %q", kv[0])
		}
		if strings.IndexByte(kv[1], 0) >= 0 {
			return fmt.Errorf("environment variable %s contains a NUL byte", kv[0])
		}
		b.WriteString("export " + kv[0] + "=" + ShellQuote(kv[1]) + "\n")
	}
	return nil
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

// counts are the --nodes and --ntasks values: 1 and 1 unless the user
// asked for more (isched submit --nodes, --ntasks).
func (s *Script) counts() (nodes, ntasks string) {
	nodes, ntasks = s.Nodes, strconv.Itoa(s.Ntasks)
	if nodes == "" {
		nodes = "1"
	}
	if s.Ntasks <= 0 {
		ntasks = "1"
	}
	return nodes, ntasks
}

// siteLines writes the site's #SBATCH lines (account, QOS, mail,
// constraint, --sbatch-arg), after isched's own. Their values were checked
// by siteOpts; the #SBATCH parser's rules are checked here again.
func (s *Script) siteLines(b *strings.Builder) error {
	for _, d := range s.Site {
		if !optNameRE.MatchString(d.Name) {
			return fmt.Errorf("sbatch option name %q", d.Name)
		}
		if !d.HasValue {
			b.WriteString("#SBATCH --" + d.Name + "\n")
			continue
		}
		v, err := directiveValue(d.Name, d.Value)
		if err != nil {
			return err
		}
		if strings.ContainsRune(v, '#') {
			return fmt.Errorf("%s %q: '#' ends an #SBATCH argument", d.Name, d.Value)
		}
		b.WriteString("#SBATCH --" + d.Name + "=" + v + "\n")
	}
	return nil
}
