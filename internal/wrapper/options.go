package wrapper

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/isched/isched/internal/clientconfig"
	"github.com/isched/isched/internal/report"
)

// Options are the wrapper's flags.
type Options struct {
	Interval           time.Duration
	ReportInterval     time.Duration
	IterPattern        string
	ProgressFile       string
	CheckpointDir      string
	CheckpointGlob     string
	CheckpointDebounce time.Duration
	CheckpointQuiesce  time.Duration
	SignalMap          string
	CheckpointSignal   string
	Grace              time.Duration
	SummaryJSON        string
	NoReport           bool
	Lineage            string
	CoordinatorUID     int
	// Relay is isched-relay's address: reports go through it, and the job
	// holds no Redis password (the default path, docs/deployment.md).
	Relay    string
	RelayUID int
	// ReportDirect opts in to reporting straight to Redis with the
	// reporter password (--report-direct, ISCHED_REPORT_DIRECT): only for
	// a site that trusts every job user with that password.
	ReportDirect bool
	TotalIters   int64
	SpoolDir     string
	QueueMax     int
	LogLevel     string
	// ResumeArg are the words appended to the command on an attempt that
	// resumes ("{path}" in a word is replaced by the resume path); from
	// --resume-arg, split on white space.
	ResumeArg []string
	// SendSpools: no command; send this user's leftover spool files and
	// exit (for a Slurm TaskEpilog, a login or a cron job).
	SendSpools bool
	// ProfileWindow > 0: `isched profile` measures the run: once
	// ProfileWarmup iterations are done, the iterations of this window are
	// measured and the child is stopped (SIGTERM to its group, --grace,
	// SIGKILL); the summary's iteration times leave the warm-up out.
	ProfileWindow time.Duration
	ProfileWarmup int64
	// HandoverWait is how long the command waits for another running job
	// of its lineage to end before it starts (handover.go); 0: it does
	// not wait.
	HandoverWait time.Duration
	handoverPoll time.Duration // 0: handoverPoll (tests shorten it)
	Version      bool          // --version: print it and exit
	Argv         []string
}

// ErrUsage marks a command-line error (exit status 2).
var ErrUsage = errors.New("usage")

// ErrHelp: -h or --help was given; the error's text is the usage, which
// main prints on stdout and exits 0 (as isched --help and every GNU tool
// do).
type ErrHelp struct{ Usage string }

func (e *ErrHelp) Error() string { return e.Usage }

// ParseArgs parses `isched-wrapper [flags] -- command args...`.
func ParseArgs(args []string, getenv func(string) string, stderr io.Writer) (Options, error) {
	var o Options
	fs := flag.NewFlagSet("isched-wrapper", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprintln(fs.Output(), "usage: isched-wrapper [flags] -- command [args...]")
		fs.PrintDefaults()
	}
	resumeArg, err := o.flags(fs, getenv)
	if err != nil {
		return o, err
	}
	if err := parseFlags(fs, args, stderr); err != nil {
		return o, err
	}
	if o.RelayUID < 0 {
		o.RelayUID = o.CoordinatorUID
	}
	if *resumeArg != "" {
		o.ResumeArg = strings.Fields(*resumeArg)
		if len(o.ResumeArg) == 0 {
			return o, fmt.Errorf("%w: --resume-arg %q: no words", ErrUsage, *resumeArg)
		}
	}
	o.Argv = fs.Args()
	if o.Version {
		return o, nil
	}
	if o.SendSpools {
		if len(o.Argv) > 0 {
			return o, fmt.Errorf("%w: --send-spools runs no command, got %q", ErrUsage, o.Argv[0])
		}
		return o, nil
	}
	if len(o.Argv) == 0 {
		fs.Usage()
		return o, fmt.Errorf("%w: no command given after --", ErrUsage)
	}
	return o, o.check()
}

// flags defines the wrapper's flags on fs, into o, with their defaults
// from getenv; resumeArg is --resume-arg's unsplit value.
func (o *Options) flags(fs *flag.FlagSet, getenv func(string) string) (resumeArg *string, err error) {
	fs.DurationVar(&o.Interval, "interval", time.Second, "sampling interval of memory, CPU and GPU")
	fs.DurationVar(&o.ReportInterval, "report-interval", 5*time.Second, "how often samples are sent (events are sent at once)")
	fs.StringVar(&o.IterPattern, "iter-pattern", getenv("ISCHED_ITER_PATTERN"), "iteration lines on stdout/stderr: a preset (tqdm, hf, lightning, isched; comma-separated) or a Go regexp with a (?P<step>...) group")
	fs.StringVar(&o.ProgressFile, "progress-file", getenv("ISCHED_PROGRESS_FILE"), "progress file the training loop appends to (default: one in the job's tmp dir, exported as ISCHED_PROGRESS_FILE)")
	fs.StringVar(&o.CheckpointDir, "checkpoint-dir", getenv("ISCHED_CHECKPOINT_DIR"), "directory the training loop writes checkpoints to (watched)")
	fs.StringVar(&o.CheckpointGlob, "checkpoint-glob", "*", "checkpoint file names to watch")
	fs.DurationVar(&o.CheckpointDebounce, "checkpoint-debounce", 2*time.Second, "a checkpoint is complete when unchanged this long")
	fs.DurationVar(&o.CheckpointQuiesce, "checkpoint-quiesce", 30*time.Second, "a checkpoint directory of no known layout (not Hugging Face, torch.distributed.checkpoint or DeepSpeed, whose last-written file marks them complete) is complete when its whole tree is unchanged this long")
	fs.StringVar(&o.SignalMap, "signal-map", getenv("ISCHED_SIGNAL_MAP"), "how received signals reach the child, e.g. USR1=TERM or USR1=file:/path")
	fs.StringVar(&o.CheckpointSignal, "checkpoint-signal", "", "shorthand: 'file' delivers SIGUSR1 as the control file ISCHED_CONTROL_FILE (for loops where NCCL swallows USR1), or a signal name")
	fs.DurationVar(&o.Grace, "grace", 20*time.Second, "stop grace period before SIGKILL of the child's group (keep below Slurm's KillWait)")
	fs.StringVar(&o.SummaryJSON, "summary-json", "", "also write the end-of-job summary to this file")
	fs.BoolVar(&o.NoReport, "no-report", false, "do not report to Redis (the summary is still printed)")
	fs.StringVar(&o.Lineage, "lineage", getenv("ISCHED_LINEAGE"), "lineage id that survives requeues (default <cluster>-<job id>)")
	uid, err := envUID(getenv, "ISCHED_COORDINATOR_UID", 0)
	if err != nil {
		return nil, err
	}
	fs.IntVar(&o.CoordinatorUID, "coordinator-uid", uid, "uid of the coordinator (only it can open the report credential)")
	fs.StringVar(&o.Relay, "relay", getenv("ISCHED_RELAY_ADDR"), "host:port of isched-relay: reports go through it instead of straight to Redis, and the job needs no Redis password (recommended; docs/deployment.md)")
	relayUID, err := envUID(getenv, "ISCHED_RELAY_UID", -1)
	if err != nil {
		return nil, err
	}
	direct, err := envBool(getenv, "ISCHED_REPORT_DIRECT")
	if err != nil {
		return nil, err
	}
	fs.BoolVar(&o.ReportDirect, "report-direct", direct, "report straight to Redis with the reporter password instead of through isched-relay (env ISCHED_REPORT_DIRECT=1): an opt-in for sites that trust every job user with that password (docs/threat-model.md); without it and without --relay nothing is reported")
	fs.IntVar(&o.RelayUID, "relay-uid", relayUID, "uid isched-relay runs as (only it can open the connection's credential; default --coordinator-uid)")
	fs.Int64Var(&o.TotalIters, "total-iters", 0, "total iterations of the run, when the loop does not say")
	fs.StringVar(&o.SpoolDir, "spool-dir", getenv("ISCHED_SPOOL_DIR"), "where undelivered reports are spooled; the next wrapper of the same user on the node sends what a job left there (default: the job's tmp dir)")
	fs.IntVar(&o.QueueMax, "queue-max", 20000, "reports held while Redis is unreachable; past it the oldest samples are dropped (events never are)")
	fs.StringVar(&o.LogLevel, "log-level", "info", "debug, info, warn or error")
	fs.BoolVar(&o.SendSpools, "send-spools", false, "run no command: send the reports this user's ended wrappers left undelivered (in --spool-dir, else under $TMPDIR) and exit 0 when none is left; for a TaskEpilog, a login or cron")
	resumeArg = fs.String("resume-arg", getenv("ISCHED_RESUME_ARG"), "arguments appended to the command on an attempt that resumes, {path} replaced by the checkpoint, e.g. '--resume_from_checkpoint {path}' (split on white space, no shell, no quoting; ISCHED_RESUME_FROM is set either way)")
	fs.DurationVar(&o.ProfileWindow, "profile-window", 0, "measure this long after the warm-up iterations, then stop the child (SIGTERM, --grace, SIGKILL); the summary's iteration times leave the warm-up out (isched profile)")
	fs.Int64Var(&o.ProfileWarmup, "profile-warmup", 5, "with --profile-window: iterations not measured at the start (data loader start, allocator growth, first-iteration set-up)")
	fs.DurationVar(&o.HandoverWait, "handover-wait", 15*time.Minute, "before the command starts, wait at most this long for another running job of the same lineage (of this user) to end, so that two attempts never write one checkpoint directory; still running then: exit 75 without starting (0: do not check)")
	fs.BoolVar(&o.Version, "version", false, "print the version and exit")
	return resumeArg, nil
}

// check checks the options of a wrapper that runs a command, and makes
// the checkpoint directory absolute.
func (o *Options) check() error {
	if o.Interval < 100*time.Millisecond {
		return fmt.Errorf("%w: --interval %s: must be at least 100ms", ErrUsage, o.Interval)
	}
	if o.ReportInterval < o.Interval {
		return fmt.Errorf("%w: --report-interval %s: must be at least --interval", ErrUsage, o.ReportInterval)
	}
	if o.ProfileWindow < 0 || o.ProfileWarmup < 0 {
		return fmt.Errorf("%w: --profile-window and --profile-warmup must not be negative", ErrUsage)
	}
	if o.HandoverWait < 0 {
		return fmt.Errorf("%w: --handover-wait %s: must not be negative", ErrUsage, o.HandoverWait)
	}
	if o.QueueMax < 1 {
		return fmt.Errorf("%w: --queue-max %d: must be at least 1", ErrUsage, o.QueueMax)
	}
	if o.Lineage != "" && !validLineage(o.Lineage) {
		return fmt.Errorf("%w: --lineage %q: want 1-64 of [A-Za-z0-9._-]", ErrUsage, o.Lineage)
	}
	if o.CheckpointDir != "" {
		abs, err := filepath.Abs(o.CheckpointDir)
		if err != nil {
			return fmt.Errorf("%w: --checkpoint-dir: %w", ErrUsage, err)
		}
		o.CheckpointDir = abs
	}
	return nil
}

func validLineage(s string) bool {
	if len(s) == 0 || len(s) > 64 {
		return false
	}
	for _, c := range s {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '.' || c == '_' || c == '-') {
			return false
		}
	}
	return true
}

// clusterName is the cluster reports go to: ISCHED_CLUSTER (or cluster
// in isched.conf, ConfigEnv), else Slurm's cluster name; "" with
// neither (no built-in name).
func clusterName(getenv func(string) string) string {
	if c := getenv("ISCHED_CLUSTER"); c != "" {
		return c
	}
	return getenv("SLURM_CLUSTER_NAME")
}

// errNoCluster says how to name the cluster when nothing did.
var errNoCluster = errors.New("no cluster name: ISCHED_CLUSTER and SLURM_CLUSTER_NAME are unset (cluster in isched.conf sets it)")

// identity reads the job's identity from Slurm's environment. ok is false
// outside Slurm (no SLURM_JOB_ID): the wrapper then runs standalone.
func identity(getenv func(string) string, lineage string) (report.JobRef, bool, error) {
	idStr := getenv("SLURM_JOB_ID")
	if idStr == "" {
		return report.JobRef{}, false, nil
	}
	id, err := strconv.ParseUint(idStr, 10, 64)
	if err != nil || id == 0 {
		return report.JobRef{}, false, fmt.Errorf("SLURM_JOB_ID=%q: not a job id", idStr)
	}
	if clusterName(getenv) == "" {
		return report.JobRef{}, false, errNoCluster
	}
	j := report.JobRef{
		Cluster:   clusterName(getenv),
		JobID:     id,
		StepID:    getenv("SLURM_STEP_ID"),
		User:      getenv("SLURM_JOB_USER"),
		Partition: getenv("SLURM_JOB_PARTITION"),
		Node:      getenv("SLURMD_NODENAME"),
	}
	if j.User == "" {
		j.User = getenv("USER")
	}
	if err := jobNumbers(&j, getenv); err != nil {
		return j, false, err
	}
	j.Lineage = lineage
	if j.Lineage == "" {
		// the job id survives requeues, so it names the lineage unless
		// `isched submit` chose one (resubmissions get new job ids)
		j.Lineage = j.Cluster + "-" + strconv.FormatUint(id, 10)
		if j.ArrayTaskID != nil {
			j.Lineage = j.Cluster + "-" + strconv.FormatUint(j.ArrayJobID, 10) + "_" + strconv.Itoa(*j.ArrayTaskID)
		}
	}
	if !validLineage(j.Lineage) {
		return j, false, fmt.Errorf("lineage %q: want 1-64 of [A-Za-z0-9._-]", j.Lineage)
	}
	j.Node = strings.TrimSpace(j.Node)
	return j, true, nil
}

// jobNumbers reads the job's uid (ours when Slurm does not say), attempt,
// rank, ranks and array job and task into j.
func jobNumbers(j *report.JobRef, getenv func(string) string) error {
	var err error
	if j.UID, err = envCount(getenv, "SLURM_JOB_UID", false); err != nil {
		return err
	}
	if getenv("SLURM_JOB_UID") == "" {
		j.UID = os.Getuid()
	}
	if j.Attempt, err = envCount(getenv, "SLURM_RESTART_COUNT", false); err != nil {
		return err
	}
	if j.Rank, err = envCount(getenv, "SLURM_PROCID", false); err != nil {
		return err
	}
	if j.NRanks, err = envCount(getenv, "SLURM_NTASKS", false); err != nil {
		return err
	}
	if s := getenv("SLURM_ARRAY_JOB_ID"); s != "" {
		aj, err := strconv.ParseUint(s, 10, 64)
		if err != nil {
			return fmt.Errorf("SLURM_ARRAY_JOB_ID=%q: not a job id", s)
		}
		task, err := envCount(getenv, "SLURM_ARRAY_TASK_ID", true)
		if err != nil {
			return err
		}
		j.ArrayJobID, j.ArrayTaskID = aj, &task
	}
	return nil
}

// envCount reads the non-negative number in the environment variable
// name (0 when unset and not required).
func envCount(getenv func(string) string, name string, required bool) (int, error) {
	s := getenv(name)
	if s == "" {
		if required {
			return 0, fmt.Errorf("%s missing", name)
		}
		return 0, nil
	}
	n, err := strconv.Atoi(s)
	if err != nil || n < 0 {
		return 0, fmt.Errorf("%s=%q: not a non-negative number", name, s)
	}
	return n, nil
}

// resumeArgv is the command of an attempt: argv, and when the attempt
// resumes from path, the --resume-arg words with "{path}" replaced (inside
// a word, so "--resume={path}" works too). The path stays one word
// whatever it contains: nothing is split after the replacement.
func resumeArgv(argv, words []string, path string) []string {
	if path == "" || len(words) == 0 {
		return argv
	}
	out := slices.Clip(argv)
	for _, w := range words {
		out = append(out, strings.ReplaceAll(w, "{path}", path))
	}
	return out
}

// envUID reads a uid from the environment variable name; def when unset.
// envBool reads a yes/no variable: empty is false, else
// clientconfig.ParseBool's spellings; anything else is a usage error.
func envBool(getenv func(string) string, name string) (bool, error) {
	v := getenv(name)
	if v == "" {
		return false, nil
	}
	b, err := clientconfig.ParseBool(v)
	if err != nil {
		return false, fmt.Errorf("%w: %s=%q: %w", ErrUsage, name, v, err)
	}
	return b, nil
}

func envUID(getenv func(string) string, name string, def int) (int, error) {
	s := getenv(name)
	if s == "" {
		return def, nil
	}
	n, err := strconv.Atoi(s)
	if err != nil || n < 0 {
		return 0, fmt.Errorf("%w: %s=%q: want a uid", ErrUsage, name, s)
	}
	return n, nil
}

// parseFlags parses args into fs. What the flag package writes (a bad
// flag's error and the usage) goes to stderr, except the usage asked for
// with -h or --help: that is returned as *ErrHelp.
func parseFlags(fs *flag.FlagSet, args []string, stderr io.Writer) error {
	var out strings.Builder
	fs.SetOutput(&out)
	err := fs.Parse(args)
	fs.SetOutput(stderr)
	switch {
	case errors.Is(err, flag.ErrHelp):
		return &ErrHelp{Usage: out.String()}
	case err != nil:
		_, _ = io.WriteString(orDiscard(stderr), out.String())
		return fmt.Errorf("%w: %w", ErrUsage, err)
	}
	return nil
}

// orDiscard is w, or io.Discard for nil.
func orDiscard(w io.Writer) io.Writer {
	if w == nil {
		return io.Discard
	}
	return w
}
