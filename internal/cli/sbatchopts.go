package cli

import (
	"fmt"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"

	"github.com/isched/isched/internal/slurm"
	"github.com/spf13/pflag"
)

// Site options of `isched submit`: the sbatch options a site needs
// (account, QOS, mail, constraint, task and node counts, and any other
// sbatch option through --sbatch-arg), and the user's SBATCH_* environment.
//
// Precedence (sbatch's own): command-line options beat SBATCH_* variables,
// which beat #SBATCH lines. isched writes every option it sets as an
// #SBATCH line of the script (so a requeued attempt and `--dry-run` show
// them), and removes from sbatch's environment each SBATCH_* variable that
// would override one of those lines: a value isched writes (from its flags
// or the estimate) is what Slurm gets. Every other SBATCH_* variable is
// passed to sbatch and applies as it would to a plain sbatch.

// Directive is one "#SBATCH --name[=value]" line.
type Directive struct {
	Name     string // long option name without the dashes
	Value    string
	HasValue bool
}

func (d Directive) String() string {
	if d.HasValue {
		return "--" + d.Name + "=" + d.Value
	}
	return "--" + d.Name
}

// iSchedOwned are the sbatch options --sbatch-arg may not set, with what
// to use instead: isched writes them itself (the plan, the requeue and
// signal contract, the output file), passes them on sbatch's command line,
// has a flag of its own for them, or they would break the submission
// (sbatch waiting for the job, an array, another cluster, no job id).
var iSchedOwned = map[string]string{
	"job-name": "use --job-name", "partition": "use --partition-ideal/--fallback", "gres": "use --gres",
	"gpus": "use --gpus", "gpus-per-node": "use --gpus-per-node",
	"gpus-per-socket": "isched requests GPUs with --gres", "gpus-per-task": "isched requests GPUs with --gres",
	"cpus-per-gpu": "use --cpus-per-gpu", "cpus-per-task": "use --cpus", "mem": "use --mem", "mem-per-cpu": "use --mem-per-cpu",
	"mem-per-gpu": "use --mem-per-gpu", "time": "use --time", "time-min": "isched sets and extends the time limit",
	"output": "use --output", "error": "use --error", "open-mode": "isched appends the output across attempts", "chdir": "isched runs the job in the current directory",
	"comment": "the comment carries isched's plan", "requeue": "isched always sets it", "no-requeue": "moves and continuations are requeues",
	"signal": "isched sets the time-limit warning", "export": "use --export (isched writes the environment into the script)",
	"export-file": "use --export (isched writes the environment into the script)", "get-user-env": "use --export=NONE", "uid": "use --as-user", "gid": "use --as-user",
	"parsable": "use --parsable", "test-only": "it submits nothing: use --dry-run", "wait": "isched submits and returns",
	"array": "use --array", "clusters": "isched follows one cluster", "wrap": "the command goes after --",
	"help": "not an option of a job", "usage": "not an option of a job", "version": "not an option of a job",
	"account": "use --account", "qos": "use --qos", "mail-type": "use --mail-type", "mail-user": "use --mail-user",
	"constraint": "use --constraint", "ntasks": "use --ntasks", "nodes": "use --nodes",
}

// maxSbatchValue bounds one option's value.
const maxSbatchValue = 1024

var (
	optNameRE = regexp.MustCompile(`^[a-z][a-z0-9-]*$`)
	// sbatchValueRE is what an --sbatch-arg value may hold: no whitespace,
	// quotes, backslashes, '#' (sbatch ends an #SBATCH argument there), '$',
	// '`', ';' or control characters.
	sbatchValueRE = regexp.MustCompile(`^[A-Za-z0-9._,:=/@%+*&|\[\]()!~^-]+$`)
	accountRE     = regexp.MustCompile(`^[A-Za-z0-9_][A-Za-z0-9_.-]{0,63}$`)
	mailUserRE    = regexp.MustCompile(`^[A-Za-z0-9._%+-]{1,64}(@[A-Za-z0-9.-]{1,253})?$`)
	constraintRE  = regexp.MustCompile(`^[A-Za-z0-9_.:=,&|\[\]*()!-]+$`)
	nodesRE       = regexp.MustCompile(`^([1-9][0-9]{0,5})(-([1-9][0-9]{0,5}))?$`)
)

// mailTypes are the values of sbatch --mail-type (22.05).
var mailTypes = []string{"NONE", "BEGIN", "END", "FAIL", "REQUEUE", "ALL", "INVALID_DEPEND", "STAGE_OUT",
	"TIME_LIMIT", "TIME_LIMIT_90", "TIME_LIMIT_80", "TIME_LIMIT_50", "ARRAY_TASKS"}

// siteOpts are the submit flags for the site's sbatch options.
type siteOpts struct {
	account, qos, mailType, mailUser, constraint, nodes string
	ntasks                                              int
	sbatchArgs                                          listFlag
	// scriptDirs are a batch script's options passed on (checked by
	// checkPassed); an --sbatch-arg of the same option goes over one.
	scriptDirs []Directive
}

// register adds the site options' flags to fs.
func (s *siteOpts) register(fs *pflag.FlagSet) {
	fs.StringVarP(&s.account, "account", "A", "", "charge the job to this account (sbatch --account)")
	fs.StringVarP(&s.qos, "qos", "q", "", "quality of service (sbatch --qos)")
	fs.StringVar(&s.mailType, "mail-type", "", "mail on these events, e.g. END,FAIL (sbatch --mail-type)")
	fs.StringVar(&s.mailUser, "mail-user", "", "who gets the mail (sbatch --mail-user)")
	fs.StringVarP(&s.constraint, "constraint", "C", "", "node features, e.g. a100|h100 (sbatch --constraint)")
	fs.IntVarP(&s.ntasks, "ntasks", "n", 0, "tasks (ranks) of the job; each runs a wrapper (default 1)")
	fs.StringVarP(&s.nodes, "nodes", "N", "", "nodes, N or MIN-MAX (default 1)")
	fs.StringArrayVar(s.sbatchArgs.ptr(), "sbatch-arg", nil, "any other sbatch option as --name or --name=value (repeatable), e.g. --sbatch-arg=--exclusive; options isched sets itself are refused")
}

// directives validates the site options and returns their #SBATCH
// directives, the user's flags first, then the --sbatch-arg ones in order.
func (s *siteOpts) directives() ([]Directive, error) {
	out, err := s.flagDirectives()
	if err != nil {
		return nil, err
	}
	if err := s.checkCounts(); err != nil {
		return nil, err
	}
	seen := map[string]bool{}
	for _, a := range s.sbatchArgs {
		d, err := parseSbatchArg(a)
		if err != nil {
			return nil, err
		}
		if seen[d.Name] {
			return nil, usageErr("--sbatch-arg %q: --%s given twice", a, d.Name)
		}
		seen[d.Name] = true
		out = append(out, d)
	}
	for _, d := range s.scriptDirs {
		if !seen[d.Name] {
			out = append(out, d)
		}
	}
	return out, nil
}

// flagDirectives are the directives of the site flags that become
// #SBATCH lines as given: --account, --qos, --mail-type, --mail-user,
// --constraint.
func (s *siteOpts) flagDirectives() ([]Directive, error) {
	var out []Directive
	add := func(name, val string) { out = append(out, Directive{Name: name, Value: val, HasValue: true}) }
	if s.account != "" {
		if !accountRE.MatchString(s.account) {
			return nil, usageErr("--account %q: want 1-64 of [A-Za-z0-9_.-]", s.account)
		}
		add("account", s.account)
	}
	if s.qos != "" {
		if !accountRE.MatchString(s.qos) {
			return nil, usageErr("--qos %q: want 1-64 of [A-Za-z0-9_.-]", s.qos)
		}
		add("qos", s.qos)
	}
	if s.mailType != "" {
		for _, t := range strings.Split(s.mailType, ",") {
			if !slices.Contains(mailTypes, strings.ToUpper(t)) {
				return nil, usageErr("--mail-type %q: %q is not one of %s", s.mailType, t, strings.Join(mailTypes, ","))
			}
		}
		add("mail-type", strings.ToUpper(s.mailType))
	}
	if s.mailUser != "" {
		if !mailUserRE.MatchString(s.mailUser) {
			return nil, usageErr("--mail-user %q: want a user name or an address user@host", s.mailUser)
		}
		add("mail-user", s.mailUser)
	}
	if s.constraint != "" {
		if len(s.constraint) > maxSbatchValue || !constraintRE.MatchString(s.constraint) {
			return nil, usageErr("--constraint %q: want features joined by & | , with [] () * !, no spaces", s.constraint)
		}
		add("constraint", s.constraint)
	}
	return out, nil
}

// checkCounts checks --ntasks and --nodes (the script writes them:
// Script.counts).
func (s *siteOpts) checkCounts() error {
	if s.ntasks < 0 || s.ntasks > 1_000_000 {
		return usageErr("--ntasks %d: want 1 to 1000000", s.ntasks)
	}
	if s.nodes == "" {
		return nil
	}
	m := nodesRE.FindStringSubmatch(s.nodes)
	if m == nil {
		return usageErr("--nodes %q: want N or MIN-MAX", s.nodes)
	}
	if m[3] != "" {
		lo, _ := strconv.Atoi(m[1])
		hi, _ := strconv.Atoi(m[3])
		if lo > hi {
			return usageErr("--nodes %q: the minimum is above the maximum", s.nodes)
		}
	}
	return nil
}

// parseSbatchArg checks one --sbatch-arg: a full sbatch long option
// "--name" or "--name=value" that isched does not own, with a value of
// safe characters.
func parseSbatchArg(a string) (Directive, error) {
	rest, ok := strings.CutPrefix(a, "--")
	if !ok {
		return Directive{}, usageErr("--sbatch-arg %q: want --long-option or --long-option=value (short options are not taken)", a)
	}
	name, val, hasVal := strings.Cut(rest, "=")
	if !optNameRE.MatchString(name) {
		return Directive{}, usageErr("--sbatch-arg %q: %q is not an option name", a, name)
	}
	kind, known := slurm.SbatchLongOptions[name]
	if !known {
		return Directive{}, usageErr("--sbatch-arg %q: sbatch (Slurm 22.05) has no option --%s (abbreviations are not taken: spell it out)", a, name)
	}
	if why, owned := iSchedOwned[name]; owned {
		return Directive{}, usageErr("--sbatch-arg %q: isched sets --%s itself (%s)", a, name, why)
	}
	switch {
	case hasVal && kind == slurm.ArgNone:
		return Directive{}, usageErr("--sbatch-arg %q: --%s takes no value", a, name)
	case !hasVal && kind == slurm.ArgRequired:
		return Directive{}, usageErr("--sbatch-arg %q: --%s needs a value (--%s=VALUE)", a, name, name)
	case hasVal && !safeSbatchValue(val):
		return Directive{}, usageErr("--sbatch-arg %q: the value may hold only letters, digits and ._,:=/@%%+*&|[]()!~^- (no spaces, quotes, '#', '$' or control characters)", a)
	}
	return Directive{Name: name, Value: val, HasValue: hasVal}, nil
}

// sbatchEnvOption maps an SBATCH_* variable to the long option it stands
// for where the names differ; the others are the lower-cased suffix with
// '-' for '_' (SBATCH_MAIL_TYPE is no variable of 22.05, but the rule
// would cover one).
var sbatchEnvOption = map[string]string{
	"SBATCH_TIMELIMIT": "time", "SBATCH_MEM_PER_NODE": "mem", "SBATCH_ARRAY_INX": "array", "SBATCH_DEBUG": "verbose",
	"SBATCH_REQ_SWITCH": "switches", "SBATCH_WAIT4SWITCH": "switches",
}

// envVarOption is the long option an SBATCH_* variable stands for; ok is
// false for a variable that is not SBATCH_*.
func envVarOption(k string) (opt string, ok bool) {
	name, ok := strings.CutPrefix(k, "SBATCH_")
	if !ok {
		return "", false
	}
	if opt, known := sbatchEnvOption[k]; known {
		return opt, true
	}
	return strings.ReplaceAll(strings.ToLower(name), "_", "-"), true
}

// safeSbatchValue: a value of an #SBATCH line isched writes holds only
// sbatchValueRE's characters, at most maxSbatchValue of them.
func safeSbatchValue(v string) bool {
	return len(v) <= maxSbatchValue && sbatchValueRE.MatchString(v)
}

// sbatchEnvAlso are options whose line also overrides variables of other
// names: a --mem line conflicts with SBATCH_MEM_PER_CPU, a --gres line
// with SBATCH_GPUS, --requeue with SBATCH_NO_REQUEUE.
var sbatchEnvAlso = map[string][]string{
	"mem":           {"mem-per-cpu", "mem-per-gpu"},
	"gres":          {"gpus", "gpus-per-node", "gpus-per-task", "gpus-per-socket"},
	"cpus-per-task": {"cpus-per-gpu"},
	"requeue":       {"no-requeue"},
}

// sbatchEnv splits environ's SBATCH_* variables into those passed to
// sbatch and notes on those dropped: a variable for an option the script
// sets (lines holds the script's long option names), or one isched always
// owns. A kept value with a control character is an error.
func sbatchEnv(environ []string, lines []string) (keep, dropped []string, err error) {
	covered := map[string]bool{}
	for _, n := range lines {
		covered[n] = true
		for _, o := range sbatchEnvAlso[n] {
			covered[o] = true
		}
	}
	for _, kv := range environ {
		k, v, _ := strings.Cut(kv, "=")
		opt, ok := envVarOption(k)
		if !ok {
			continue
		}
		if covered[opt] {
			dropped = append(dropped, fmt.Sprintf("%s ignored: the script sets --%s", k, opt))
			continue
		}
		if opt == "export" && !covered[opt] {
			dropped = append(dropped, fmt.Sprintf("%s=%s: taken as --export (isched writes that environment into the script)", k, v))
			continue
		}
		if envOwned[opt] {
			dropped = append(dropped, fmt.Sprintf("%s ignored: %s", k, iSchedOwned[opt]))
			continue
		}
		if strings.ContainsFunc(v, func(r rune) bool { return r < 0x20 || r == 0x7f }) {
			return nil, nil, usageErr("environment variable %s holds a control character", k)
		}
		keep = append(keep, kv)
	}
	sort.Strings(keep)
	return keep, dropped, nil
}

// envOwned are the options whose SBATCH_* variable is dropped even when
// the script has no line for them: they would break the submission or the
// plan (sbatch waiting for the job, an array, another cluster, the login
// environment, GPUs the plan did not ask for, no requeue, a shorter time).
var envOwned = map[string]bool{
	"wait": true, "array": true, "clusters": true, "export": true, "get-user-env": true, "gpus": true, "gpus-per-node": true,
	"gpus-per-task": true, "gpus-per-socket": true, "cpus-per-gpu": true, "mem-per-gpu": true, "no-requeue": true, "time-min": true,
}

// scriptOptions returns the long option names of a script's #SBATCH lines.
func scriptOptions(script []byte) []string {
	var names []string
	for _, line := range strings.Split(string(script), "\n") {
		rest, ok := strings.CutPrefix(line, "#SBATCH --")
		if !ok {
			continue
		}
		name, _, _ := strings.Cut(rest, "=")
		names = append(names, name)
	}
	return names
}
