package cli

import (
	"context"
	"encoding/hex"
	"errors"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/isched/isched/internal/plan"
	"github.com/isched/isched/internal/report"
	"github.com/isched/isched/internal/slurm"
	"github.com/isched/isched/internal/stream"
)

// forwardEnv are the variables of the submitter's environment the job's
// wrapper needs to find isched-relay (ISCHED_RELAY_ADDR: the job then
// needs no Redis password), Redis and the coordinator. The Redis user and
// password file are not among them: the wrapper reports as `reporter`, and
// a login environment that sets ISCHED_REDIS_USER for the CLI is unset in
// the script.
var forwardEnv = []string{
	"ISCHED_RELAY_ADDR", "ISCHED_RELAY_UID",
	"ISCHED_REDIS_ADDR", "ISCHED_REDIS_MASTER", "ISCHED_REDIS_CA", "ISCHED_REDIS_PASSWORD_DIR",
	"ISCHED_COORDINATOR_UID", "ISCHED_ITER_PATTERN", "ISCHED_HELPER_DIR",
}

type listFlag []string

func (l *listFlag) String() string     { return strings.Join(*l, " ") }
func (l *listFlag) Set(s string) error { *l = append(*l, s); return nil }

var (
	memRE  = regexp.MustCompile(`^[0-9]{1,9}[KMGT]?$`)
	gresRE = regexp.MustCompile(`^[A-Za-z0-9_.-]+(:[A-Za-z0-9_.-]+){0,2}$`)
)

type submitOpts struct {
	in          inputs
	policy      string
	ckptDir     string
	name        string
	output      string
	wrapper     string
	wrapperArgs listFlag
	lineage     string
	totalIters  int64
	dryRun      bool
	noMigrate   bool
	asUser      string
	argv        []string
	site        siteOpts
	siteDirs    []Directive
	env         [][2]string // more variables for the job (isched profile's ISCHED_BATCH)
	export      string      // --export: the environment the job gets (ALL, NONE, NAME,...)

	// flags that override the estimate
	fIdeal, fFallback, fGres, fTime, fMem string
	fCPUs, fGPUs                          int

	// the decision
	partitions   []string
	gres         string
	cpus         int
	memMiB       int64
	timeLimit    time.Duration
	ideal        string
	idealGres    string
	idealTime    time.Duration
	fallbackList []string
	migrate      bool
	modelKey     string
	batch        int
	choiceReason string
	estimateNote string
	stateSource  string
}

func (a *App) submit(ctx context.Context, args []string) error {
	fs := a.newFlags("submit", "[flags] -- COMMAND [ARGS...]")
	var o submitOpts
	o.in.register(fs, "batch size of the run (one), for the estimate")
	fs.StringVar(&o.policy, "policy", plan.PolicyAuto, "auto (the recommendation), immediate, ideal, cheapest or deadline=TIME (RFC 3339, 2006-01-02T15:04 or +6h)")
	fs.StringVar(&o.ckptDir, "checkpoint-dir", "", "directory the training writes checkpoints to (default ./checkpoints/<lineage>)")
	fs.StringVar(&o.fIdeal, "partition-ideal", "", "ideal partition (default: from the estimate, else the default partition)")
	fs.StringVar(&o.fFallback, "fallback", "", "comma-separated partitions the job may run on meanwhile (default: from the estimate)")
	fs.StringVar(&o.fGres, "gres", "", "GRES of the submission, e.g. gpu:1 (default: from the estimate)")
	fs.StringVar(&o.fTime, "time", "", "time limit, Slurm spelling (default: estimate + 25% + 10 min, capped at MaxTime)")
	fs.StringVar(&o.fMem, "mem", "", "memory per node, Slurm spelling such as 4G (default: estimate + 25%)")
	fs.IntVar(&o.fCPUs, "cpus", 0, "CPUs per task (default: the node type's share)")
	fs.StringVar(&o.name, "job-name", "", "job name (default: the training script's name)")
	fs.StringVar(&o.output, "output", "", "output file, appended to across attempts (default ./isched-<lineage>.out)")
	fs.StringVar(&o.wrapper, "wrapper", "", "isched-wrapper path (default: beside this program, else in PATH)")
	fs.Var(&o.wrapperArgs, "wrapper-arg", "extra isched-wrapper argument (repeatable), e.g. --wrapper-arg=--iter-pattern=tqdm")
	fs.StringVar(&o.lineage, "lineage", "", "lineage id (default <cluster>-u<uid>-<name>-<random>)")
	fs.Int64Var(&o.totalIters, "total-iters", 0, "total iterations (default: from --samples, --epochs and --batch)")
	fs.BoolVar(&o.dryRun, "dry-run", false, "print the batch script and do not submit")
	fs.BoolVar(&o.noMigrate, "no-migrate", false, "never move the job (the coordinator may still checkpoint and continue it)")
	fs.StringVar(&o.asUser, "as-user", "", "submit as this user (root only: sbatch --uid/--gid)")
	fs.StringVar(&o.export, "export", "", "the environment the job gets, as sbatch --export: ALL (the default with no --as-user: this shell's, its venv, conda env and modules), NONE (your login environment), or [ALL,]NAME[=value],...")
	o.site.register(fs)
	fs.IntVar(&o.fGPUs, "gpus", 0, "GPUs per node, as sbatch --gpus on one node: the same as --gres=gpu:N")
	sbatchAliases(fs)
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return err
		}
		return fmt.Errorf("%w: %w", errUsage, err)
	}
	o.argv = fs.Args()
	if len(o.argv) == 0 {
		return usageErr("no training command: isched submit [flags] -- python train.py ...")
	}
	if err := o.gpusFlag(); err != nil {
		return err
	}
	if err := a.decide(ctx, &o); err != nil {
		return err
	}
	script, comment, err := a.buildScript(&o)
	if err != nil {
		return err
	}
	env, dropped, err := sbatchEnv(a.Environ(), scriptOptions(script))
	if err != nil {
		return err
	}
	for _, d := range dropped {
		fmt.Fprintf(a.stderr, "isched submit: %s\n", d)
	}
	if o.dryRun {
		fmt.Fprintf(a.stdout, "%s", script)
		with := ""
		if len(env) > 0 {
			with = ", with " + strings.Join(env, " ") + " from your environment"
		}
		fmt.Fprintf(a.stderr, "isched submit: dry run, not submitted (would run: sbatch --parsable --export=NONE --comment=%s < script%s)\n", ShellQuote(comment), with)
		return nil
	}
	if err := os.MkdirAll(o.ckptDir, 0o750); err != nil {
		return fmt.Errorf("checkpoint directory: %w", err)
	}
	if o.asUser == "" { // root making another user's directory owns it
		if err := checkOwnDir(o.ckptDir, os.Geteuid()); err != nil {
			return fmt.Errorf("checkpoint directory: %w", err)
		}
	}
	id, err := a.Slurm.SubmitWith(ctx, script, slurm.SubmitSpec{User: o.asUser, Comment: comment, Env: env})
	if err != nil {
		return err
	}
	fmt.Fprintf(a.stdout, "Submitted batch job %s\n", id)
	if err := a.remember(id, o.lineage); err != nil {
		fmt.Fprintf(a.stderr, "isched: warning: submission history: %v\n", err)
	}
	fmt.Fprintf(a.stderr, "isched: lineage %s on %s", o.lineage, strings.Join(o.partitions, ","))
	if o.migrate && o.ideal != o.partitions[0] {
		fmt.Fprintf(a.stderr, ", moving to %s when it frees", o.ideal)
	}
	fmt.Fprintf(a.stderr, "; follow it with: isched status %s\n", id)
	return nil
}

// sbatchShort are the sbatch spellings `isched submit` takes, as the
// isched flag they mean: a Slurm user's -p gpu -t 2:00:00 -c 8 -N 1 -J name.
var sbatchShort = [][2]string{
	{"p", "partition-ideal"}, {"partition", "partition-ideal"}, {"t", "time"}, {"c", "cpus"}, {"cpus-per-task", "cpus"},
	{"N", "nodes"}, {"n", "ntasks"}, {"J", "job-name"}, {"A", "account"}, {"q", "qos"}, {"o", "output"}, {"C", "constraint"},
}

// sbatchAliases registers sbatchShort on fs: each shares its isched
// flag's value.
func sbatchAliases(fs *flag.FlagSet) {
	for _, al := range sbatchShort {
		if f := fs.Lookup(al[1]); f != nil { // each one is, TestSubmitSbatchSpellings checks
			fs.Var(f.Value, al[0], "sbatch's spelling of --"+al[1])
		}
	}
}

// gpusFlag turns --gpus N into --gres=gpu:N.
func (o *submitOpts) gpusFlag() error {
	switch {
	case o.fGPUs < 0:
		return usageErr("--gpus %d: want a count of GPUs", o.fGPUs)
	case o.fGPUs > 0 && o.fGres != "":
		return usageErr("--gpus and --gres both given: use one")
	case o.fGPUs > 0:
		o.fGres = "gpu:" + strconv.Itoa(o.fGPUs)
	}
	return nil
}

// decide fills the partitions, resources and plan of a submission from the
// estimate (when --model is given), then applies the flags over it.
func (a *App) decide(ctx context.Context, o *submitOpts) error {
	now := a.Now()
	pol, err := plan.ParsePolicy(o.policy, now)
	if err != nil {
		return usageErr("--policy: %v", err)
	}
	if o.name == "" {
		o.name = jobName(o.argv)
	} else if !stream.ValidName(o.name) {
		return usageErr("--job-name %q: want 1-64 of [A-Za-z0-9._-]", o.name)
	}
	if o.lineage == "" {
		o.lineage = a.newLineage(o.name)
	} else if !stream.ValidName(o.lineage) {
		return usageErr("--lineage %q: want 1-64 of [A-Za-z0-9._-]", o.lineage)
	} else if ns := a.lineageNamespace(); !strings.HasPrefix(o.lineage, ns) {
		// free-form names are first come, first served (docs/threat-model.md)
		fmt.Fprintf(a.stderr, "isched: warning: lineage %q is not in your namespace (%s…): another user who learns the name before your job's first report can claim it; use --lineage %s%s\n",
			o.lineage, ns, ns, o.lineage)
	}
	if o.siteDirs, err = o.site.directives(); err != nil {
		return err
	}
	if o.totalIters < 0 || o.fCPUs < 0 {
		return usageErr("--total-iters and --cpus must not be negative")
	}
	o.migrate = !o.noMigrate
	if o.in.model != "" {
		if err := a.decideFromEstimate(ctx, o, pol, now); err != nil {
			return err
		}
	} else if pol.Kind != plan.PolicyAuto && pol.Kind != plan.PolicyImmediate {
		return usageErr("--policy %s needs an estimate: pass --model, --samples, --epochs, --batch and a site catalogue", o.policy)
	} else {
		o.estimateNote = "no estimate (no --model): Slurm's defaults for what is not given"
	}

	if o.fIdeal != "" {
		if !stream.ValidName(o.fIdeal) {
			return usageErr("--partition-ideal %q: not a partition name", o.fIdeal)
		}
		o.ideal = o.fIdeal
		if o.in.model == "" {
			o.partitions = []string{o.fIdeal} // with an estimate, decideFromEstimate chose the start
		}
	}
	if o.fFallback != "" {
		o.fallbackList = nil
		for _, p := range strings.Split(o.fFallback, ",") {
			if !stream.ValidName(p) {
				return usageErr("--fallback %q: not a partition list", o.fFallback)
			}
			o.fallbackList = append(o.fallbackList, p)
		}
		if o.in.model == "" && !o.noMigrate && o.policy == plan.PolicyImmediate {
			// no estimate: start wherever Slurm can, ideal first
			o.partitions = append(o.partitions, o.fallbackList...)
		}
	}
	if len(o.partitions) == 0 {
		def, err := a.defaultPartition(ctx)
		if err != nil {
			return usageErr("no partition: pass --partition-ideal (%v)", err)
		}
		o.partitions, o.ideal = []string{def}, def
	}
	if o.ideal == "" {
		o.ideal = o.partitions[0]
	}
	if o.fGres != "" {
		if !gresRE.MatchString(o.fGres) {
			return usageErr("--gres %q: want e.g. gpu:1 or gpu:v100:1", o.fGres)
		}
		o.gres = o.fGres
		if o.in.model == "" || o.ideal == o.partitions[0] {
			o.idealGres = o.fGres
		}
	}
	if o.fTime != "" {
		d, err := plan.ParseSlurmTime(o.fTime)
		if err != nil || d == 0 {
			return usageErr("--time %q: want a Slurm time such as 90, 2:00:00 or 1-00:00:00", o.fTime)
		}
		o.timeLimit = d
		if o.in.model == "" || o.ideal == o.partitions[0] {
			o.idealTime = d
		}
	}
	if o.fMem != "" {
		m := strings.ToUpper(o.fMem)
		if !memRE.MatchString(m) {
			return usageErr("--mem %q: want e.g. 4000M or 4G", o.fMem)
		}
		o.memMiB = memMiB(m)
	}
	if o.fCPUs > 0 {
		o.cpus = o.fCPUs
	}
	if o.in.model == "" && o.fFallback == "" {
		o.migrate = false // nothing to move between
	}
	return nil
}

func (a *App) decideFromEstimate(ctx context.Context, o *submitOpts, pol plan.Policy, now time.Time) error {
	o.in.user, o.in.qos = o.asUser, o.site.qos // the job's owner and QOS: their limits hold it
	if o.in.python == "" && len(o.argv) > 0 && isPython(o.argv[0]) {
		// the command's own interpreter, where it is found here (the job
		// may resolve it in another environment: jobEnv says so)
		if cwd, err := a.Getwd(); err == nil {
			if p, err := lookProgram(o.argv[0], a.Getenv("PATH"), cwd, a.Stat); err == nil {
				o.in.python = p
			}
		}
	}
	l, err := a.load(ctx, &o.in, pol.Kind != plan.PolicyIdeal && pol.Kind != plan.PolicyCheapest)
	if err != nil {
		return err
	}
	if len(l.req.Batches) != 1 {
		return usageErr("--batch: submit runs one batch size, got %d", len(l.req.Batches))
	}
	o.stateSource = l.view.source
	ps := l.plans()[0]
	var ch plan.Choice
	if o.fIdeal != "" {
		// the user's partition: its best option, no migration
		for _, opt := range ps.Options {
			if opt.Partition.Name == o.fIdeal {
				ch = plan.Choice{Start: []*plan.Option{opt}, Ideal: opt, Reason: "--partition-ideal " + o.fIdeal}
				break
			}
		}
		if ch.Ideal == nil {
			return usageErr("--partition-ideal %s: not a feasible partition for batch %d in %s", o.fIdeal, ps.Batch, l.sitePath)
		}
		for _, opt := range ps.Options {
			if opt.Partition != ch.Ideal.Partition && !containsOpt(ch.Fallbacks, opt) {
				ch.Fallbacks = append(ch.Fallbacks, opt)
			}
		}
		// --policy immediate with a busy ideal partition: start on an idle
		// partition the user allowed (--fallback), move to the ideal later
		if pol.Kind == plan.PolicyImmediate && !ch.Ideal.Wait.IdleNow {
			allowed := strings.Split(o.fFallback, ",")
			for _, opt := range ps.Options {
				if opt.Wait.IdleNow && opt.Partition != ch.Ideal.Partition && (o.fFallback == "" || slices.Contains(allowed, opt.Partition.Name)) {
					ch.Start = []*plan.Option{opt}
					ch.Migrate = true
					ch.Reason = fmt.Sprintf("--partition-ideal %s is busy; %s is idle now (policy immediate): start there, move to %s when it frees", o.fIdeal, opt.Partition.Name, o.fIdeal)
					break
				}
			}
		}
	} else if ch, err = ps.Choose(pol, now); err != nil {
		return err
	}
	start := ch.Start[0]
	for _, s := range ch.Start {
		o.partitions = append(o.partitions, s.Partition.Name)
	}
	o.ideal = ch.Ideal.Partition.Name
	o.idealGres = ch.Ideal.Row.NodeType.GresOne()
	o.idealTime = plan.TimeLimit(ch.Ideal.Row.Run(), ch.Ideal.Partition)
	// the partitions of the first submission are fallbacks too, unless ideal
	o.fallbackList = ch.FallbackList(o.fallbackList)
	o.migrate = o.migrate && ch.Migrate
	if o.fIdeal != "" && o.fFallback != "" {
		o.migrate = !o.noMigrate // the user named both ends
	}
	row := start.Row
	o.gres = row.NodeType.GresOne()
	o.cpus = row.NodeType.JobCPUs()
	o.timeLimit = plan.TimeLimit(row.Run(), start.Partition)
	o.memMiB = (plan.MemRequest(row) + (1<<20 - 1)) >> 20
	if o.totalIters == 0 {
		o.totalIters = row.Iters
	}
	o.modelKey = plan.ConfigKey(l.model, l.req.Training)
	o.batch = l.req.Batches[0]
	o.choiceReason = ch.Reason
	o.estimateNote = fmt.Sprintf("estimate: batch %d on %s: peak %s %s, run %s (%s), %d iterations",
		o.batch, row.NodeType.Name, plan.FormatBytes(row.Mem), memKind(row.NodeType), plan.FormatDuration(start.Run), row.Source, row.Iters)
	return nil
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

func (a *App) buildScript(o *submitOpts) ([]byte, string, error) {
	cwd, err := a.Getwd()
	if err != nil {
		return nil, "", err
	}
	if err := a.jobPaths(o, cwd); err != nil {
		return nil, "", err
	}
	wrapper, err := a.findWrapper(o.wrapper)
	if err != nil {
		return nil, "", err
	}
	p := report.Plan{Lineage: o.lineage, Cluster: a.cluster(), Ideal: o.ideal, IdealGres: o.idealGres, IdealTime: int64(o.idealTime / time.Minute),
		Total: o.totalIters, Model: o.modelKey, Batch: o.batch, Migrate: o.migrate}
	for _, f := range o.fallbackList {
		if f != o.ideal {
			p.Fallbacks = append(p.Fallbacks, f)
		}
	}
	comment := p.FormatComment()
	if _, _, err := report.ParsePlanComment(comment); err != nil {
		return nil, "", fmt.Errorf("plan comment %q: %w", comment, err)
	}
	s := Script{
		JobName: o.name, Partitions: o.partitions, Gres: o.gres, CPUs: o.cpus, MemMiB: o.memMiB, TimeLimit: o.timeLimit,
		Output: o.output, Chdir: cwd, Comment: comment, Wrapper: wrapper, Argv: o.argv,
		Unset: []string{"ISCHED_REDIS_USER", "ISCHED_REDIS_PASSWORD_FILE"},
		Nodes: o.site.nodes, Ntasks: o.site.ntasks, Site: o.siteDirs,
	}
	s.CkptEstimate = a.measuredCkpt(o.lineage)
	if err := a.jobEnv(o, &s, cwd); err != nil {
		return nil, "", err
	}
	s.Env = append(s.Env, [2]string{"ISCHED_LINEAGE", o.lineage}, [2]string{"ISCHED_CLUSTER", a.cluster()})
	s.Env = append(s.Env, o.env...)
	for _, k := range forwardEnv {
		if v := a.Getenv(k); v != "" {
			s.Env = append(s.Env, [2]string{k, v})
		}
	}
	s.WrapperArgs = []string{"--checkpoint-dir", o.ckptDir, "--checkpoint-signal", "file"}
	if o.totalIters > 0 {
		s.WrapperArgs = append(s.WrapperArgs, "--total-iters", strconv.FormatInt(o.totalIters, 10))
	}
	s.WrapperArgs = append(s.WrapperArgs, o.wrapperArgs...)
	s.Header = []string{"Generated by `isched submit`; lineage " + o.lineage + "."}
	where := "runs on " + strings.Join(o.partitions, ",")
	if o.migrate && o.ideal != o.partitions[0] {
		where += "; moves to " + o.ideal + " (" + orNone(o.idealGres) + ") when it frees"
	}
	var also []string
	for _, f := range p.Fallbacks {
		if !slices.Contains(o.partitions, f) {
			also = append(also, f)
		}
	}
	if len(also) > 0 {
		where += "; may also use " + strings.Join(also, ",")
	}
	s.Header = append(s.Header, "plan: "+where+".")
	if o.choiceReason != "" {
		s.Header = append(s.Header, "why: "+o.choiceReason+" (policy "+o.policy+").")
	}
	if o.estimateNote != "" {
		s.Header = append(s.Header, o.estimateNote+".")
	}
	if o.stateSource != "" {
		s.Header = append(s.Header, "cluster state: "+o.stateSource+".")
	}
	b, err := s.Render()
	return b, comment, err
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
	return nil
}

func containsOpt(list []*plan.Option, o *plan.Option) bool {
	for _, x := range list {
		if x.Partition == o.Partition {
			return true
		}
	}
	return false
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
	suffix := hex.EncodeToString(a.Random(4))
	prefix := a.lineageNamespace() + name
	if len(prefix) > 64-9 {
		prefix = prefix[:64-9]
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
