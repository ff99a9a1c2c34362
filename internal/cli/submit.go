package cli

import (
	"cmp"
	"context"
	"encoding/hex"
	"errors"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"

	"github.com/isched/isched/internal/clientconfig"
	"github.com/isched/isched/internal/plan"
	"github.com/isched/isched/internal/policy"
	"github.com/isched/isched/internal/report"
	"github.com/isched/isched/internal/slurm"
	"github.com/isched/isched/internal/stream"
	"github.com/spf13/pflag"
)

// forwardEnv are the variables of the submitter's environment (and
// isched.conf) the job's wrapper needs whichever way it reports.
var forwardEnv = []string{"ISCHED_COORDINATOR_UID", "ISCHED_ITER_PATTERN", "ISCHED_HELPER_DIR"}

// relayEnv are those that find isched-relay, the default path: the job
// then holds no Redis password. directEnv are those that find Redis, for
// the opt-in (--report-direct). The Redis user and password file are
// never forwarded: a direct wrapper reports as `reporter`, and a login
// environment that sets ISCHED_REDIS_USER for the CLI is unset in the
// script.
var (
	relayEnv  = []string{"ISCHED_RELAY_ADDR", "ISCHED_RELAY_UID"}
	directEnv = []string{"ISCHED_REDIS_ADDR", "ISCHED_REDIS_MASTER", "ISCHED_REDIS_CA", "ISCHED_REDIS_PASSWORD_DIR"}
)

// dryRunCluster names the cluster in a dry run where none is known.
const dryRunCluster = "no-cluster"

// errNoRelay: isched submit knows no relay and was not told to report
// straight to Redis; the job would run unreported.
var errNoRelay = errors.New("no isched-relay configured for the job's reports (relay_addr in " +
	"/etc/isched/isched.conf or ~/.config/isched/isched.conf, or ISCHED_RELAY_ADDR; `isched config` shows what is set): " +
	"without it isched could neither follow nor continue the run. A site that lets jobs write to Redis themselves " +
	"gives --report-direct (or report_direct = 1), docs/deployment.md")

// reportEnv are the variables that tell the job's wrapper where to report:
// the relay's, or with direct (the opt-in) Redis's and
// ISCHED_REPORT_DIRECT=1. Neither: errNoRelay.
func reportEnv(getenv func(string) string, direct bool) ([][2]string, error) {
	keys := relayEnv
	if direct {
		keys = directEnv
	} else if getenv("ISCHED_RELAY_ADDR") == "" {
		return nil, errNoRelay
	}
	var env [][2]string
	for _, k := range append(slices.Clone(forwardEnv), keys...) {
		if v := getenv(k); v != "" {
			env = append(env, [2]string{k, v})
		}
	}
	if direct {
		env = append(env, [2]string{"ISCHED_REPORT_DIRECT", "1"})
	}
	return env, nil
}

// listFlag is a repeatable flag's values, in order (pflag's
// StringArray: a comma is part of a value).
type listFlag []string

func (l *listFlag) ptr() *[]string { return (*[]string)(l) }

var (
	memRE  = regexp.MustCompile(`^[0-9]{1,9}[KMGT]?$`)
	gresRE = regexp.MustCompile(`^[A-Za-z0-9_.-]+(:[A-Za-z0-9_.-]+){0,2}$`)
)

// submitOpts are the flags of isched submit: the request. The placement
// decided from them is a submission (place).
type submitOpts struct {
	in          inputs
	req         placeRequest // the flags that bear on the placement
	ckptDir     string
	name        string
	output      string
	errPath     string // --error: the job's stderr apart; "": with the output
	wrapper     string
	wrapperArgs listFlag
	lineage     string
	lineageMade bool // lineage is newLineage's, not the user's --lineage
	// array is --array (sbatch's spelling, "0-15%4"): each element a run
	// of its own, lineage <lineage>_<task> (report.ElementLineage), with
	// its own checkpoint directory <ckptDir>/<task>; arraySpec is it read.
	array     string
	arraySpec slurm.ArraySpec
	dryRun    bool
	asJSON    bool // --json: say where the job went as JSON (submitJSON)
	parsable  bool // --parsable: the job id (and ;cluster) alone, as sbatch
	asUser    string
	argv      []string
	site      siteOpts
	siteDirs  []Directive
	env       [][2]string // more variables for the job (isched profile's ISCHED_BATCH)
	export    string      // --export: the environment the job gets (ALL, NONE, NAME,...)
	// perGPU are the sbatch options given on the command line that
	// count GPUs or memory per GPU or CPU (--gpus [type:]N,
	// --gpus-per-node, --mem-per-gpu, --mem-per-cpu, --cpus-per-gpu):
	// taken as a batch script's lines are, over them.
	perGPU map[string]*string
	// elasticFlag is --elastic MIN-MAX (or --gpus MIN-MAX); elastic is
	// the range read (takeElastic), nil for a run of fixed size.
	elasticFlag string
	elastic     *report.Elastic
	elasticNote string       // why it starts at the size it does (startElastic)
	batch       *batchScript // the command is this batch script, taken as the request
	// missing is what a dry run went without (a cluster name, a relay):
	// said after the script
	missing []string
	// reportDirect: --report-direct, or report_direct in isched.conf
	reportDirect bool
	// noReport: the job's wrapper runs with --no-report (isched profile's
	// jobs): no variable says where to report
	noReport bool
}

// submitCmd is `isched submit`: it parses the flags into a request,
// places the submission (decide: load, then place), writes the script and
// only then submits it.
type submitCmd struct {
	app *App
	o   submitOpts
	fs  *pflag.FlagSet
}

func (c *submitCmd) leaf() leaf {
	return leaf{
		use:     "submit [flags] -- COMMAND [ARGS...], or [flags] BATCH_SCRIPT [ARGS...] (its #SBATCH lines are the request)",
		short:   "generate the batch script (--dry-run shows it) and submit it: isched submit [flags] -- CMD ARGS..., or isched submit job.sbatch",
		ordered: true,
		flags: func(fs *pflag.FlagSet) {
			c.fs = fs
			c.o.register(fs)
			sbatchAliases(fs)
			// the site's or the user's report_direct is the flag's default
			c.o.reportDirect, _ = clientconfig.ParseBool(c.app.Getenv("ISCHED_REPORT_DIRECT")) // not a yes: the default, no
		},
		run: c.run,
	}
}

func (c *submitCmd) run(ctx context.Context, pos []string) error {
	a, o, fs := c.app, &c.o, c.fs
	o.argv = pos
	if len(o.argv) == 0 {
		return usageErr("no training command: isched submit [flags] -- python train.py ... (or a batch script: isched submit job.sbatch)")
	}
	if o.dryRun && (o.asJSON || o.parsable) {
		return usageErr("--json and --parsable say where a submitted job went: a --dry-run submits nothing")
	}
	if o.asJSON && o.parsable {
		return usageErr("--json or --parsable, not both")
	}
	if err := o.in.checkCounts(); err != nil {
		return err
	}
	if err := o.takeElastic(); err != nil {
		return err
	}
	if err := a.takeRequest(o, flagsSet(fs)); err != nil {
		return err
	}
	if err := a.needCluster(ctx, o); err != nil {
		return err // before a lineage is named after it
	}
	sub, err := a.decide(ctx, o)
	if err != nil {
		return err
	}
	script, comment, err := a.buildScript(o, &sub)
	if err != nil {
		return err
	}
	if o.elasticNote != "" {
		fmt.Fprintf(a.stderr, "isched submit: %s\n", o.elasticNote)
	}
	env, dropped, err := sbatchEnv(a.Environ(), scriptOptions(script))
	if err != nil {
		return err
	}
	for _, d := range dropped {
		if o.batch.tookEnv(d) {
			continue // taken into the request (takeBatchScript said so)
		}
		fmt.Fprintf(a.stderr, "isched submit: %s\n", d)
	}
	if o.dryRun {
		a.showDryRun(o, sub.cluster, script, comment, env)
		return nil
	}
	return a.send(ctx, o, &sub, script, slurm.SubmitSpec{User: o.asUser, Comment: comment, Env: env, Cluster: sub.cluster})
}

// needCluster checks that the cluster has a name. A dry run goes on
// without one, to show the script without the stack, and says below it
// what a real submission needs.
func (a *App) needCluster(ctx context.Context, o *submitOpts) error {
	_, err := a.clusterName(ctx)
	if err == nil || !o.dryRun {
		return err
	}
	o.missing = append(o.missing, err.Error())
	a.slurmCluster.asked, a.slurmCluster.name, a.slurmCluster.err = true, dryRunCluster, nil
	return nil
}

// showDryRun prints the script (secrets masked), the sbatch command it
// would run, and what a real submission still needs.
func (a *App) showDryRun(o *submitOpts, cluster string, script []byte, comment string, env []string) {
	fmt.Fprintf(a.stdout, "%s", maskScript(script))
	with := ""
	if len(env) > 0 {
		with = ", with " + strings.Join(maskEnv(env), " ") + " from your environment"
	}
	clusters := ""
	if cluster != "" {
		clusters = " --clusters=" + cluster
	}
	fmt.Fprintf(a.stderr, "isched submit: dry run, not submitted (would run: sbatch --parsable --export=NONE%s --comment=%s < script%s)\n", clusters, ShellQuote(comment), with)
	for _, m := range o.missing {
		fmt.Fprintf(a.stderr, "isched submit: a real submission needs: %s\n", m)
	}
}

// submitJSON is `isched submit --json`: where the job went, for a program
// that follows it (the Python Job reads its output files from here).
type submitJSON struct {
	JobID         uint64   `json:"job_id"`
	Cluster       string   `json:"cluster"`
	Lineage       string   `json:"lineage"`
	Partitions    []string `json:"partitions"` // in the order the job may start on them
	Ideal         string   `json:"ideal"`
	Output        string   `json:"output"`         // Slurm's --output, as given to it (%j and the like unexpanded)
	Error         *string  `json:"error"`          // --error; null: stderr goes to the output
	CheckpointDir string   `json:"checkpoint_dir"` // --checkpoint-dir
	// Array is --array, Elements its count: element <task> is lineage
	// <lineage>_<task>, checkpointing in <checkpoint_dir>/<task>.
	Array    string `json:"array,omitempty"`
	Elements int    `json:"elements,omitempty"`
	// Tasks are the elements' task ids (absent beyond
	// slurm.MaxListedTasks).
	Tasks []int `json:"tasks,omitempty"`
}

// saySubmitted prints the job id on stdout: sbatch's line, the id alone
// (--parsable) or where the job went (--json).
func (a *App) saySubmitted(o *submitOpts, sub *submission, id string) error {
	switch {
	case o.asJSON:
		n, err := strconv.ParseUint(id, 10, 64)
		if err != nil {
			return fmt.Errorf("sbatch printed job id %q: %w", id, err)
		}
		v := submitJSON{JobID: n, Cluster: cmp.Or(sub.cluster, a.cluster()), Lineage: o.lineage, Partitions: sub.partitions,
			Ideal: sub.ideal, Output: o.output, CheckpointDir: o.ckptDir, Array: o.array, Elements: o.arraySpec.Count, Tasks: o.arraySpec.Tasks}
		if o.errPath != "" {
			v.Error = &o.errPath
		}
		return writeJSON(a.stdout, v)
	case o.parsable && sub.cluster != "":
		fmt.Fprintf(a.stdout, "%s;%s\n", id, sub.cluster)
	case o.parsable:
		fmt.Fprintln(a.stdout, id)
	case sub.cluster != "":
		fmt.Fprintf(a.stdout, "Submitted batch job %s on cluster %s\n", id, sub.cluster)
	default:
		fmt.Fprintf(a.stdout, "Submitted batch job %s\n", id)
	}
	return nil
}

// send makes the checkpoint directory, submits the script and says where
// the job went.
func (a *App) send(ctx context.Context, o *submitOpts, sub *submission, script []byte, spec slurm.SubmitSpec) error {
	if err := a.MakeJobDir(o.ckptDir); err != nil {
		return fmt.Errorf("checkpoint directory: %w", err)
	}
	if o.asUser == "" { // root making another user's directory owns it
		if err := checkOwnDir(a.Lstat, o.ckptDir, os.Geteuid()); err != nil {
			return fmt.Errorf("checkpoint directory: %w", err)
		}
	}
	id, err := a.Slurm.SubmitWith(ctx, script, spec)
	if err != nil {
		return err
	}
	if err := a.saySubmitted(o, sub, id); err != nil {
		return err
	}
	if err := a.remember(sub.cluster, id, o.lineage, o.array); err != nil {
		fmt.Fprintf(a.stderr, "isched: warning: submission history: %v\n", err)
	}
	if o.array != "" {
		fmt.Fprintf(a.stderr, "isched: array %s of %d runs, lineages %s_<task>, on %s", o.array, o.arraySpec.Count, o.lineage, strings.Join(sub.partitions, ","))
	} else {
		fmt.Fprintf(a.stderr, "isched: lineage %s on %s", o.lineage, strings.Join(sub.partitions, ","))
	}
	if sub.cluster != "" {
		fmt.Fprintf(a.stderr, " of cluster %s", sub.cluster)
	}
	if sub.moves() {
		fmt.Fprintf(a.stderr, ", moving to %s when it frees", sub.ideal)
	}
	follow := id
	if sub.cluster != "" {
		follow = o.lineage // job ids are per cluster; the lineage names its cluster
	}
	fmt.Fprintf(a.stderr, "; follow it with: isched status %s\n", follow)
	if sub.reason != "" {
		fmt.Fprintf(a.stderr, "isched: why: %s (policy %s)\n", sub.reason, o.req.policy)
	}
	return nil
}

// register adds isched submit's flags to fs, sbatch's one-letter
// spellings as their shorthands (the long ones: sbatchAliases).
func (o *submitOpts) register(fs *pflag.FlagSet) {
	o.in.register(fs, "batch size of the run (one), for the estimate")
	fs.StringVar(&o.req.policy, "policy", plan.PolicyAuto, "auto (the recommendation), immediate, ideal, cheapest or deadline=TIME (RFC 3339, 2006-01-02T15:04 or +6h)")
	fs.StringVar(&o.ckptDir, "checkpoint-dir", "", "directory the training writes checkpoints to (default ./checkpoints/<lineage>)")
	fs.StringVarP(&o.req.ideal, "partition-ideal", "p", "", "ideal partition (default: from the estimate, else the default partition)")
	fs.StringVar(&o.req.fallback, "fallback", "", "comma-separated partitions the job may run on meanwhile (default: from the estimate)")
	fs.StringVar(&o.req.gres, "gres", "", "GRES of the submission, e.g. gpu:1 (default: from the estimate)")
	fs.StringVarP(&o.req.time, "time", "t", "", "time limit, Slurm spelling (default: estimate + 25% + 10 min, capped at MaxTime)")
	fs.StringVar(&o.req.mem, "mem", "", "memory per node, Slurm spelling such as 4G (default: estimate + 25%)")
	fs.IntVarP(&o.req.cpus, "cpus", "c", 0, "CPUs per task (default: the node type's share)")
	fs.StringVarP(&o.name, "job-name", "J", "", "job name (default: the training script's name)")
	fs.StringVarP(&o.output, "output", "o", "", "output file, appended to across attempts (default ./isched-<lineage>.out)")
	fs.StringVarP(&o.errPath, "error", "e", "", "file for the job's stderr, appended to across attempts (default: with the output)")
	fs.StringVar(&o.wrapper, "wrapper", "", "isched-wrapper path (default: beside this program, else in PATH)")
	fs.StringArrayVar(o.wrapperArgs.ptr(), "wrapper-arg", nil, "extra isched-wrapper argument (repeatable), e.g. --wrapper-arg=--iter-pattern=tqdm")
	fs.StringVar(&o.lineage, "lineage", "", "lineage id (default <cluster>-u<uid>-<name>-<random>)")
	fs.StringVarP(&o.array, "array", "a", "", "an array of runs, as sbatch --array (0-15, 1,3,5-9:2, 0-99%10): each element is a run of its own, lineage <lineage>_<task>, checkpoints in <checkpoint-dir>/<task>, output <lineage>_<task>.out; SLURM_ARRAY_TASK_ID tells the command which it is")
	fs.Int64Var(&o.req.totalIters, "total-iters", 0, "total iterations (default: from --samples, --epochs and --batch)")
	fs.BoolVar(&o.dryRun, "dry-run", false, "print the batch script and do not submit")
	fs.BoolVar(&o.asJSON, "json", false, "print where the job went as JSON: job id, cluster, lineage, partitions, output and error files, checkpoint directory (docs/json.md)")
	fs.BoolVar(&o.parsable, "parsable", false, "print only the job id, and ;cluster when one was named, as sbatch --parsable")
	fs.BoolVar(&o.reportDirect, "report-direct", false, "the job reports straight to Redis with the reporter password, not through isched-relay (default: report_direct in isched.conf; an opt-in for sites that give every job user that password, docs/threat-model.md)")
	fs.BoolVar(&o.req.noMigrate, "no-migrate", false, "never move the job (the coordinator may still checkpoint and continue it)")
	fs.StringVar(&o.elasticFlag, "elastic", "", "an elastic run of MIN-MAX GPUs, one task (rank) each, as --gpus MIN-MAX: it starts at MIN and the coordinator grows it onto idle GPUs and shrinks it back when others wait, by checkpoint and requeue (docs/elastic.md)")
	fs.StringVar(&o.asUser, "as-user", "", "submit as this user (root only: sbatch --uid/--gid)")
	fs.StringVar(&o.export, "export", "", "the environment the job gets, as sbatch --export: ALL (the default with no --as-user: this shell's, its venv, conda env and modules), NONE (your login environment), or [ALL,]NAME[=value],...")
	o.site.register(fs)
	o.perGPU = map[string]*string{}
	for _, f := range []struct{ name, short, usage string }{
		{"gpus", "G", "GPUs, [type:]N, as sbatch --gpus on one node: the same as --gres=gpu[:type]:N; MIN-MAX: an elastic run (--elastic)"},
		{"gpus-per-node", "", "GPUs per node, [type:]N (sbatch --gpus-per-node)"},
		{"mem-per-gpu", "", "memory per GPU, such as 40G: --mem is that times the GPUs"},
		{"mem-per-cpu", "", "memory per CPU, such as 4G: --mem is that times the CPUs of a node's tasks"},
		{"cpus-per-gpu", "", "CPUs per GPU: --cpus is that times the GPUs"},
	} {
		o.perGPU[f.name] = fs.StringP(f.name, f.short, "", f.usage)
	}
}

// sbatchLong are sbatch's long spellings of isched submit flags that
// isched names otherwise, as the flag they mean. sbatch's one-letter
// spellings (-p gpu -t 2:00:00 -c 8 -N 1 -J name ...) are the flags'
// shorthands, given where each is registered.
var sbatchLong = map[string]string{"partition": "partition-ideal", "cpus-per-task": "cpus"}

// sbatchAliases makes fs take sbatchLong's spellings as the isched flag
// they mean: pflag normalizes the name, so the flag's own name is the
// one set (flagsSet).
func sbatchAliases(fs *pflag.FlagSet) {
	fs.SetNormalizeFunc(func(_ *pflag.FlagSet, name string) pflag.NormalizedName {
		if n, ok := sbatchLong[name]; ok {
			return pflag.NormalizedName(n)
		}
		return pflag.NormalizedName(name)
	})
}

// perGPUOptions are the --gpus, --gpus-per-node, --mem-per-* and
// --cpus-per-gpu flags given, as options of the request (line -1: the
// command line); one that says what --gres or --mem says too is an error.
func (o *submitOpts) perGPUOptions() ([]slurm.ScriptOption, error) {
	var out []slurm.ScriptOption
	for _, name := range slices.Sorted(maps.Keys(o.perGPU)) {
		v := *o.perGPU[name]
		if v == "" {
			continue
		}
		switch {
		case strings.HasPrefix(name, "gpus") && o.req.gres != "":
			return nil, usageErr("--%s and --gres both given: use one", name)
		case strings.HasPrefix(name, "mem-") && o.req.mem != "":
			return nil, usageErr("--%s and --mem both given: use one", name)
		}
		out = append(out, slurm.ScriptOption{Line: -1, Name: name, Value: v, HasValue: true, Written: "--" + name + "=" + v})
	}
	return out, nil
}

// decide checks the request, loads what the placement rests on (the
// estimate, with --model) and places the submission.
func (a *App) decide(ctx context.Context, o *submitOpts) (submission, error) {
	now := a.Now()
	pol, err := plan.ParsePolicy(o.req.policy, now)
	if err != nil {
		return submission{}, usageErr("--policy: %v", err)
	}
	o.req.pol = pol
	if err := a.nameJob(o); err != nil {
		return submission{}, err
	}
	if o.siteDirs, err = o.site.directives(); err != nil {
		return submission{}, err
	}
	if o.req.totalIters < 0 || o.req.cpus < 0 {
		return submission{}, usageErr("--total-iters and --cpus must not be negative")
	}
	var est *placeEstimate
	if o.in.model != "" {
		if est, err = a.loadEstimate(ctx, o); err != nil {
			return submission{}, err
		}
	}
	cl := placeCluster{defaultPartition: func() (string, error) { return a.defaultPartition(ctx) }}
	if _, err := a.otherClusters(); err != nil {
		return submission{}, err
	}
	cl.others = a.otherNames()
	sub, err := place(o.req, est, cl, now)
	if err == nil && est != nil && o.elastic != nil {
		st := est.state
		if st.Snapshot == nil && o.in.state != "none" { // --policy ideal reads no waits
			v, _ := a.loadState(ctx, o.in.state)
			st = v.state
		}
		err = o.startElastic(&sub, st)
	}
	if err == nil && sub.cluster != "" && o.lineageMade {
		o.lineage = a.newLineageIn(sub.cluster, o.name, o.elementRoom()) // the coordinator there reserves its own namespace
	}
	return sub, err
}

// nameJob checks or makes the job's name and lineage.
func (a *App) nameJob(o *submitOpts) error {
	if err := o.readArray(); err != nil {
		return err
	}
	if o.name == "" {
		o.name = jobName(o.argv)
	} else if !stream.ValidName(o.name) {
		return usageErr("--job-name %q: want 1-64 of [A-Za-z0-9._-]", o.name)
	}
	if o.lineage == "" {
		o.lineage, o.lineageMade = a.newLineageIn(a.cluster(), o.name, o.elementRoom()), true
	} else if !stream.ValidName(o.lineage) {
		return usageErr("--lineage %q: want 1-64 of [A-Za-z0-9._-]", o.lineage)
	} else if room := o.elementRoom(); len(o.lineage)+room > 64 {
		return usageErr("--lineage %q: an element's lineage (%s) would be over 64 characters: want at most %d for --array %s",
			o.lineage, report.ElementLineage(o.lineage, o.arraySpec.MaxTask), 64-room, o.array)
	} else if ns := a.lineageNamespace(); !strings.HasPrefix(o.lineage, ns) {
		// free-form names are first come, first served (docs/threat-model.md)
		fmt.Fprintf(a.stderr, "isched: warning: lineage %q is not in your namespace (%s…): another user who learns the name before your job's first report can claim it; use --lineage %s%s\n",
			o.lineage, ns, ns, o.lineage)
	}
	return nil
}

// readArray checks --array (or the script's): sbatch's syntax, task
// ids Slurm takes.
func (o *submitOpts) readArray() error {
	if o.array == "" {
		return nil
	}
	spec, err := slurm.ParseArraySpec(o.array)
	if err != nil {
		return usageErr("--array: %v", err)
	}
	o.arraySpec = spec
	return nil
}

// elementRoom is what an array's elements add to its lineage: "_" and
// the highest task id; 0 without --array.
func (o *submitOpts) elementRoom() int {
	if o.array == "" {
		return 0
	}
	return 1 + len(strconv.Itoa(o.arraySpec.MaxTask))
}

// loadEstimate loads the estimate of a submission with --model: its one
// batch size's plans, with the cluster state unless the policy ignores
// waits.
func (a *App) loadEstimate(ctx context.Context, o *submitOpts) (*placeEstimate, error) {
	o.in.user, o.in.qos, o.in.account = o.asUser, o.site.qos, o.site.account // the job's owner, QOS and account: their limits hold it
	if o.in.script == "" {
		o.in.script = pythonScript(o.argv) // its imports count in the static memory
	}
	if o.in.python == "" && len(o.argv) > 0 && isPython(o.argv[0]) {
		// the command's own interpreter, where it is found here (the job
		// may resolve it in another environment: jobEnv says so)
		if cwd, err := a.Getwd(); err == nil {
			if p, err := lookProgram(o.argv[0], a.Getenv("PATH"), cwd, a.Stat); err == nil {
				o.in.python = p
			}
		}
	}
	k := o.req.pol.Kind
	l, err := a.load(ctx, &o.in, k != plan.PolicyIdeal && k != plan.PolicyCheapest)
	if err != nil {
		return nil, err
	}
	if len(l.req.Batches) != 1 {
		return nil, usageErr("--batch: submit runs one batch size, got %d", len(l.req.Batches))
	}
	return &placeEstimate{plans: l.plans()[0], sitePath: l.sitePath, modelKey: plan.ConfigKey(l.model, l.req.Training), stateSource: l.view.source,
		state: l.view.state}, nil
}

func (a *App) defaultPartition(ctx context.Context) (string, error) {
	if p := a.Getenv("ISCHED_SITE"); p != "" {
		if s, err := loadSite(p); err == nil {
			for _, ps := range s.Partitions {
				if ps.Default {
					return ps.Name, nil
				}
			}
		}
	}
	st, err := a.Slurm.Poll(ctx)
	if err != nil {
		return "", err
	}
	for _, p := range st.Partitions {
		if p.Default {
			return p.Name, nil
		}
	}
	return "", fmt.Errorf("Slurm has no default partition")
}

func (a *App) buildScript(o *submitOpts, sub *submission) ([]byte, string, error) {
	cwd, err := a.Getwd()
	if err != nil {
		return nil, "", err
	}
	if err := a.jobPaths(o, cwd); err != nil {
		return nil, "", err
	}
	wrapper, err := a.wrapperFor(o)
	if err != nil {
		return nil, "", err
	}
	cluster := sub.cluster
	if cluster == "" {
		if cluster, err = a.clusterName(context.Background()); err != nil {
			return nil, "", err
		}
	}
	p := sub.plan(o.lineage, cluster)
	p.Elastic = o.elastic
	comment := p.FormatComment()
	if _, _, err := report.ParsePlanComment(comment); err != nil {
		return nil, "", fmt.Errorf("plan comment %q: %w", comment, err)
	}
	s := Script{
		JobName: o.name, Partitions: sub.partitions, Gres: sub.gres, CPUs: sub.cpus, MemMiB: sub.memMiB, TimeLimit: sub.timeLimit,
		Output: o.output, Error: o.errPath, Chdir: cwd, Comment: comment, Wrapper: wrapper, Argv: o.argv,
		Unset: []string{"ISCHED_REDIS_USER", "ISCHED_REDIS_PASSWORD_FILE"},
		Nodes: o.site.nodes, Ntasks: o.site.ntasks, Site: o.siteDirs, InBatchStep: o.batch != nil,
	}
	if err := o.elasticScript(&s); err != nil {
		return nil, "", err
	}
	s.CkptEstimate = a.measuredCkpt(o.lineage)
	if err := a.jobEnv(o, &s, cwd); err != nil {
		return nil, "", err
	}
	s.Env = append(s.Env, [2]string{"ISCHED_LINEAGE", o.lineage}, [2]string{"ISCHED_CLUSTER", cluster})
	s.Env = append(s.Env, o.env...)
	if !o.noReport {
		via, err := a.reportVia(o, sub.cluster)
		if err != nil {
			return nil, "", err
		}
		s.Env = append(s.Env, via...)
	}
	if dir := a.helperDir(); dir != "" && (o.noReport || a.Getenv("ISCHED_HELPER_DIR") == "") {
		s.Env = append(s.Env, [2]string{"ISCHED_HELPER_DIR", dir})
	}
	o.wrapperArgsOf(&s, sub)
	s.Header = append([]string{"Generated by `isched submit`; lineage " + o.lineage + "."}, sub.header(p.Fallbacks, o.req.policy)...)
	if o.elasticNote != "" {
		s.Header = append(s.Header, o.elasticNote)
	}
	b, err := s.Render()
	return b, comment, err
}

// wrapperFor finds the wrapper the job runs; a dry run without one goes
// on with the name and says so.
func (a *App) wrapperFor(o *submitOpts) (string, error) {
	wrapper, err := a.findWrapper(o.wrapper)
	if err != nil && o.dryRun {
		o.missing = append(o.missing, strings.TrimPrefix(err.Error(), errUsage.Error()+": "))
		return "isched-wrapper", nil
	}
	return wrapper, err
}

// reportVia is the job's variables that say where it reports (the relay,
// or Redis with --report-direct); a dry run without a relay goes on with a
// placeholder and says so.
func (a *App) reportVia(o *submitOpts, cluster string) ([][2]string, error) {
	via, err := reportEnv(a.jobGetenv(cluster), o.reportDirect)
	if errors.Is(err, errNoRelay) && cluster != "" {
		err = fmt.Errorf("cluster %s: its isched.conf (the clusters setting) sets no relay_addr, and a relay takes its own cluster's reports only: %w", cluster, err)
	}
	if errors.Is(err, errNoRelay) && o.dryRun {
		o.missing = append(o.missing, err.Error())
		return [][2]string{{"ISCHED_RELAY_ADDR", "none-configured"}}, nil
	}
	return via, err
}

// jobEnv records the environment the job gets (--export) in the script
// and checks that the command's program resolves in it, as the job will
// resolve it: a program that is not there fails the job with exit 127
// after its wait in the queue.
func (a *App) jobEnv(o *submitOpts, s *Script, cwd string) error {
	flagValue := o.export
	if flagValue == "" {
		flagValue = a.Getenv("SBATCH_EXPORT") // as sbatch: the flag beats the variable
	}
	spec, err := parseExport(flagValue)
	if err != nil {
		return err
	}
	if flagValue == "" && o.asUser != "" {
		spec = exportSpec{none: true} // never this (root's) shell's environment in another user's job
	}
	var note string
	s.UserEnv, note = jobEnvOf(a.Environ(), spec)
	s.UserExport = spec.String()
	if note != "" {
		fmt.Fprintf(a.stderr, "isched: environment: %s\n", note)
	}
	path, known := envValue(s.UserEnv, "PATH")
	if !known {
		path = a.Getenv("PATH") // the login environment's is not known here
	}
	found, err := lookProgram(o.argv[0], path, cwd, a.Stat)
	switch {
	case err == nil:
		fmt.Fprintf(a.stderr, "isched: %s → %s\n", o.argv[0], found)
	case known:
		return fmt.Errorf("%w: the command's program: %w (the job would fail at once with exit 127; give its full path, or activate its environment before isched submit)", errUsage, err)
	default:
		fmt.Fprintf(a.stderr, "isched: warning: the command's program: %v here; the job resolves it in your login environment (--export=%s)\n", err, spec)
	}
	return checkScriptArg(o.argv, cwd, a.Stat)
}

func orNone(s string) string {
	if s == "" {
		return "no GRES"
	}
	return s
}

// findWrapper returns an absolute isched-wrapper path: the flag, else the
// one beside this program, else the first in PATH. The job runs it on a
// compute node, so the path must be valid there too (a shared or
// installed path).
func (a *App) findWrapper(flagValue string) (string, error) {
	if flagValue != "" {
		abs, err := filepath.Abs(flagValue)
		if err != nil {
			return "", err
		}
		return abs, nil
	}
	if exe, err := a.Executable(); err == nil {
		p := filepath.Join(filepath.Dir(exe), "isched-wrapper")
		if fi, err := os.Stat(p); err == nil && fi.Mode().IsRegular() {
			return p, nil
		}
	}
	for _, dir := range filepath.SplitList(a.Getenv("PATH")) {
		if dir == "" || !filepath.IsAbs(dir) {
			continue
		}
		p := filepath.Join(dir, "isched-wrapper")
		if fi, err := os.Stat(p); err == nil && fi.Mode().IsRegular() && fi.Mode().Perm()&0o111 != 0 {
			return p, nil
		}
	}
	return "", usageErr("isched-wrapper not found beside isched or in PATH: pass --wrapper PATH")
}

// helperDir is where the job's training script finds the isched Python
// package (ISCHED_HELPER_DIR, which the examples and the conventions'
// scripts read): helper_dir from isched.conf or the environment, else the
// installed share/isched beside this program (the package's
// /usr/share/isched for /usr/bin/isched), else "".
func (a *App) helperDir() string {
	if d := a.Getenv("ISCHED_HELPER_DIR"); d != "" {
		return d
	}
	exe, err := a.Executable()
	if err != nil {
		return ""
	}
	dir := filepath.Clean(filepath.Join(filepath.Dir(exe), "..", "share", "isched"))
	for _, p := range []string{filepath.Join(dir, "isched", "__init__.py"), filepath.Join(dir, "isched.py")} {
		if fi, err := a.Stat(p); err == nil && fi.Mode().IsRegular() {
			return dir
		}
	}
	return ""
}

// jobName is the training script's name: the first argument ending in .py
// (or the command's base name), cut to the safe characters.
func jobName(argv []string) string {
	name := filepath.Base(argv[0])
	for _, a := range argv {
		if strings.HasSuffix(a, ".py") || strings.HasSuffix(a, ".sh") {
			name = strings.TrimSuffix(strings.TrimSuffix(filepath.Base(a), ".py"), ".sh")
			break
		}
	}
	var b strings.Builder
	for _, c := range name {
		if b.Len() >= 40 {
			break
		}
		if c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '.' || c == '_' || c == '-' {
			b.WriteRune(c)
		} else {
			b.WriteByte('_')
		}
	}
	if s := strings.Trim(b.String(), "._-"); s != "" {
		return s
	}
	return "isched-job"
}

// newLineage makes <cluster>-u<uid>-<name>-<8 hex>, at most 64
// characters. The coordinator reserves a name of this form for that uid,
// so another user who reads it in squeue cannot claim it first.
func (a *App) newLineage(name string) string {
	return a.newLineageIn(a.cluster(), name, 0)
}

// newLineageIn is newLineage for a job on cluster, room characters
// shorter (an array's elements add "_<task>").
func (a *App) newLineageIn(cluster, name string, room int) string {
	suffix := hex.EncodeToString(a.Random(4))
	prefix := cluster + "-u" + strconv.Itoa(a.UID()) + "-" + name
	if len(prefix) > 64-9-room {
		prefix = prefix[:64-9-room]
	}
	return prefix + "-" + suffix
}

func memMiB(s string) int64 {
	unit := int64(1)
	switch s[len(s)-1] {
	case 'K':
		unit, s = -1024, s[:len(s)-1]
	case 'M':
		s = s[:len(s)-1]
	case 'G':
		unit, s = 1024, s[:len(s)-1]
	case 'T':
		unit, s = 1024*1024, s[:len(s)-1]
	}
	n, _ := strconv.ParseInt(s, 10, 64)
	if unit < 0 {
		return max(1, (n+1023)/1024)
	}
	return n * unit
}

// takeElastic reads an elastic run's range from --elastic MIN-MAX or
// --gpus MIN-MAX: the run starts at MIN GPUs, one task each (--gpus and
// --ntasks say MIN), and the plan carries the range for rule 9.
func (o *submitOpts) takeElastic() error {
	gpus := o.perGPU["gpus"]
	spec, from := o.elasticFlag, "--elastic"
	if lo, _, ranged := strings.Cut(*gpus, "-"); ranged && !strings.Contains(lo, ":") {
		if spec != "" {
			return usageErr("--gpus %s and --elastic %s both give a range: use one", *gpus, spec)
		}
		spec, from, *gpus = *gpus, "--gpus", ""
	}
	if spec == "" {
		return nil
	}
	e, err := report.ParseElastic(spec)
	switch {
	case err != nil:
		return usageErr("%s %v", from, err)
	case e == nil:
		return usageErr("%s %s: MIN equals MAX, a run of fixed size: give --gpus %s", from, spec, strings.Split(spec, "-")[0])
	case *gpus != "" && *gpus != strconv.Itoa(e.Min):
		return usageErr("--gpus %s with --elastic %s: an elastic run starts at its MIN, %d GPUs", *gpus, spec, e.Min)
	case o.site.ntasks != 0 && o.site.ntasks != e.Min:
		return usageErr("--ntasks %d with %s %s: an elastic run has one task per GPU, %d to start", o.site.ntasks, from, spec, e.Min)
	case o.req.gres != "" || o.array != "":
		return usageErr("%s %s with --gres or --array: an elastic run asks its GPUs with the range alone", from, spec)
	}
	*gpus, o.site.ntasks, o.elastic = strconv.Itoa(e.Min), e.Min, e
	return nil
}

// startElastic sizes an elastic run as rule 9 would grow it
// (policy.StartSize): at more than its MIN when the one partition it goes
// to has that many GPUs idle on one node now, no job waits there, its
// owner's limits allow it and the run predicted is long enough to gain.
// It asks for them from the start (a growth would cost a checkpoint and a
// restart); the coordinator shrinks it back when jobs come to wait.
func (o *submitOpts) startElastic(sub *submission, st plan.ClusterState) error {
	e := o.elastic
	if st.Snapshot == nil || len(sub.partitions) != 1 || sub.cluster != "" {
		o.elasticNote = "elastic: no cluster state of its one partition here: it starts at its base"
		return nil
	}
	part := sub.partitions[0]
	jobs := slices.Values([]report.Job(nil))
	if st.Jobs != nil {
		jobs = slices.Values(st.Jobs.Jobs)
	}
	room := policy.StartRoom{Queue: policy.QueueRooms(st.Snapshot, jobs, nil)[part], PerNode: policy.GPUsPerNode(st.Snapshot, part),
		LimitRoom: policy.GPULimitRoom(st.Snapshot, o.in.user, o.site.qos, o.site.account, part), Run: sub.run}
	size, why := policy.StartSize(policy.Config{Elastic: true}, *e, room)
	o.elasticNote = "elastic: " + strings.TrimPrefix(why, "elastic: ")
	if size == e.Min {
		return nil
	}
	kind, ok := cutCount(sub.gres)
	if !ok {
		return fmt.Errorf("elastic run: GRES %q has no GPU count", sub.gres)
	}
	sub.gres, o.site.ntasks = kind+strconv.Itoa(size), size
	var err error
	o.siteDirs, err = o.site.directives()
	return err
}

// cutCount is a GRES request "gpu[:type]:N" up to N ("gpu[:type]:"); ok
// is false when it ends in no count.
func cutCount(gres string) (kind string, ok bool) {
	i := strings.LastIndex(gres, ":")
	if i < 0 {
		return "", false
	}
	n, err := strconv.Atoi(gres[i+1:])
	return gres[:i+1], err == nil && n > 0
}

// elasticScript makes the script of an elastic run start one task per GPU
// of each attempt, and ask its memory per GPU (it grows and shrinks with
// the run).
func (o *submitOpts) elasticScript(s *Script) error {
	e := o.elastic
	if e == nil {
		return nil
	}
	if o.batch != nil {
		return usageErr("--gpus %s with a batch script: an elastic run's tasks are started by isched's own srun line; give the training command instead", e)
	}
	s.Elastic = true
	if s.MemMiB > 0 {
		s.MemPerGPUMiB, s.MemMiB = (s.MemMiB+int64(e.Min)-1)/int64(e.Min), 0
	}
	return nil
}

// wrapperArgsOf sets the wrapper's arguments and, for an array, the
// element's checkpoint directory the script gives each.
func (o *submitOpts) wrapperArgsOf(s *Script, sub *submission) {
	if o.array != "" { // the script gives each element its own (Script.Array)
		s.Array, s.ArrayCkptDir = o.array, o.ckptDir
	} else {
		s.WrapperArgs = []string{"--checkpoint-dir", o.ckptDir}
	}
	s.WrapperArgs = append(s.WrapperArgs, "--checkpoint-signal", "file")
	if sub.totalIters > 0 {
		s.WrapperArgs = append(s.WrapperArgs, "--total-iters", strconv.FormatInt(sub.totalIters, 10))
	}
	s.WrapperArgs = append(s.WrapperArgs, o.wrapperArgs...)
}
