package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/isched/isched/internal/child"
	"github.com/isched/isched/internal/plan"
	"github.com/isched/isched/internal/report"
	"github.com/isched/isched/internal/slurm"
	"github.com/isched/isched/internal/stream"
	"github.com/spf13/pflag"
)

// `isched profile` runs the user's real training command under
// isched-wrapper for a short measured window per batch size and keeps what
// it measured as the user's own receipts, marked profiled. The wrapper
// measures (--profile-window, --profile-warmup: the first iterations are
// left out) and stops the command itself, so a run here (--local) and a
// short Slurm job measure the same way.
//
// The receipts go to a file of the user's (profiledPath), not to Redis:
// the CLI's Redis user is read-only by design, and receipts in the shared
// list are only the coordinator's, checked against Slurm
// (docs/threat-model.md).

// batchPlaceholder in a command argument is replaced by the batch size.
const batchPlaceholder = "{batch}"

type profileOpts struct {
	model, site, optimizer, precision string
	batches                           string
	window, startup, grace, queueWait time.Duration
	warmup                            int64
	local                             bool
	partition, nodeType               string
	wrapper, iterPattern, mem         string
	wrapperArgs                       listFlag
	site2                             siteOpts
	argv                              []string
}

// wrapperSummary is what profile reads of isched-wrapper's
// --summary-json (internal/wrapper.Summary; the CLI does not import the
// wrapper's package).
type wrapperSummary struct {
	ExitStatus   int     `json:"exit_status"`
	Signal       string  `json:"signal"`
	GPUNoData    string  `json:"gpu_no_data"`
	MedianIterMS float64 `json:"median_iter_ms"`
	Profile      *struct {
		WarmupIters   int64   `json:"warmup_iters"`
		MeasuredIters int     `json:"measured_iters"`
		WindowSeconds float64 `json:"window_seconds"`
		MeanIterMS    float64 `json:"mean_iter_ms"`
		Complete      bool    `json:"complete"`
		// the peaks until the window was measured (not while stopping)
		PeakRSSBytes int64            `json:"peak_rss_bytes"`
		PeakGPUBytes map[string]int64 `json:"peak_gpu_bytes"`
	} `json:"profile"`
}

// profileRun is one batch size's measured window.
type profileRun struct {
	batch   int
	summary wrapperSummary
	where   string // "local" or "job 123 on dev/dev1"
}

// profileCmd is `isched profile`: measure a training at a few batch sizes
// and keep the receipts.
type profileCmd struct {
	app *App
	o   profileOpts
}

func (c *profileCmd) leaf() leaf {
	return leaf{
		use: "profile --model model.json --batches 8,16 (--local --node-type T | --partition P) [flags] -- COMMAND [ARGS...] ({batch} in an argument, or the command reads ISCHED_BATCH)",
		short: "run the training command for a short measured window per batch size (--local or a short Slurm job) " +
			"and keep receipts: isched profile [flags] -- CMD ... {batch} ...",
		ordered: true,
		flags:   func(fs *pflag.FlagSet) { c.o.register(fs, c.app.Getenv("ISCHED_ITER_PATTERN")) },
		run:     c.run,
	}
}

func (c *profileCmd) run(ctx context.Context, pos []string) error {
	a, o := c.app, &c.o
	o.argv = pos
	batches, err := o.validate()
	if err != nil {
		return err
	}
	tr := plan.Training{Optimizer: strings.ToLower(o.optimizer), Precision: strings.ToLower(o.precision)}
	if err := tr.Validate(); err != nil {
		return usageErr("%v", err)
	}
	if o.model == "" {
		return usageErr("--model is required: receipts count for one model, optimizer and precision (make it with scripts/model_summary.py)")
	}
	m, err := loadModel(o.model)
	if err != nil {
		return err
	}
	_, site, err := a.openSite(o.site)
	if err != nil {
		return err
	}
	nt, err := profileNodeType(site, o.partition, o.nodeType)
	if err != nil {
		return err
	}
	wrapperPath, err := a.findWrapper(o.wrapper)
	if err != nil {
		return err
	}
	if !slices.ContainsFunc(o.argv, func(s string) bool { return strings.Contains(s, batchPlaceholder) }) {
		fmt.Fprintf(a.stderr, "isched profile: no %s in the command: it must take the batch size from ISCHED_BATCH\n", batchPlaceholder)
	}
	key := plan.ConfigKey(m, tr)
	path := a.profiledPath()
	if path == "" {
		return usageErr("nowhere to keep the receipts: set HOME or XDG_DATA_HOME")
	}
	where := "here (--local)"
	if !o.local {
		where = "as Slurm jobs on " + o.partition
	}
	fmt.Fprintf(a.stderr, "isched profile: %s on %s, batches %s, %s per batch after %d warm-up iterations, %s\n",
		key, nt.Name, batchesString(batches), o.window, o.warmup, where)
	for _, b := range batches {
		if err := a.profileBatch(ctx, o, wrapperPath, b, key, nt, path); err != nil {
			return fmt.Errorf("batch %d: %w", b, err)
		}
	}
	fmt.Fprintf(a.stderr, "isched profile: receipts kept in %s; isched estimate/plan/submit use them (source \"profiled\")\n", path)
	return nil
}

// register adds isched profile's flags to fs; iterPattern is the
// default of --iter-pattern ($ISCHED_ITER_PATTERN).
func (o *profileOpts) register(fs *pflag.FlagSet, iterPattern string) {
	fs.StringVar(&o.model, "model", "", "model summary (model.json from scripts/model_summary.py): the receipts are this model's")
	fs.StringVar(&o.site, "site", "", "site catalogue (default $ISCHED_SITE, else "+DefaultSitePath+")")
	fs.StringVar(&o.optimizer, "optimizer", "adam", "the command's optimizer: sgd, momentum, nesterov, rmsprop, adagrad, adam, adamw, lamb")
	fs.StringVar(&o.precision, "precision", "fp32", "the command's precision: fp32, bf16 or fp16 (autocast)")
	fs.StringVar(&o.batches, "batches", "", "batch sizes to measure, two or more, e.g. 8,16")
	fs.DurationVar(&o.window, "window", time.Minute, "measured window per batch size, after the warm-up iterations")
	fs.Int64Var(&o.warmup, "warmup-iters", 5, "iterations at the start that are not measured (data loader start, allocator growth)")
	fs.DurationVar(&o.startup, "startup-timeout", 10*time.Minute, "how long start-up and the warm-up iterations may take before a run is given up")
	fs.DurationVar(&o.grace, "grace", 10*time.Second, "after the window: SIGTERM to the command's process group, this long, then SIGKILL")
	fs.BoolVar(&o.local, "local", false, "run here, as a child of this program (this machine stands for --node-type)")
	fs.StringVar(&o.partition, "partition", "", "run each batch size as a short Slurm job on this partition (e.g. dev)")
	fs.StringVar(&o.nodeType, "node-type", "", "the catalogue's node type the runs measure (default: the partition's only node type)")
	fs.DurationVar(&o.queueWait, "queue-wait", 30*time.Minute, "with --partition: how long a job may wait to start")
	fs.StringVar(&o.mem, "mem", "", "with --partition: memory per node, Slurm spelling such as 4G (default: Slurm's)")
	fs.StringVar(&o.wrapper, "wrapper", "", "isched-wrapper path (default: beside this program, else in PATH)")
	fs.StringVar(&o.iterPattern, "iter-pattern", iterPattern, "the command's iteration lines, as isched-wrapper --iter-pattern (a preset or a Go regexp with a (?P<step>...) group)")
	fs.StringArrayVar(o.wrapperArgs.ptr(), "wrapper-arg", nil, "extra isched-wrapper argument (repeatable)")
	o.site2.register(fs)
}

// profileBatch measures one batch size, here or as a Slurm job, and
// keeps its receipt in path.
func (a *App) profileBatch(ctx context.Context, o *profileOpts, wrapperPath string, b int, key string, nt *plan.NodeType, path string) error {
	var run profileRun
	var err error
	if o.local {
		run, err = a.profileLocal(ctx, o, wrapperPath, b)
	} else {
		run, err = a.profileSlurm(ctx, o, wrapperPath, b)
	}
	if err != nil {
		return err
	}
	r, err := a.profiledReceipt(&run, key, o.partition, nt, o.warmup)
	if err != nil {
		return err
	}
	if err := appendReceipt(path, r); err != nil {
		return fmt.Errorf("keep the receipt: %w", err)
	}
	p := run.summary.Profile
	fmt.Fprintf(a.stderr, "isched profile: batch %d: %d iterations measured over %.1f s after %d warm-up (%s): %.1f ms/iter (median %.1f), peak process memory %s\n",
		b, p.MeasuredIters, p.WindowSeconds, p.WarmupIters, run.where, p.MeanIterMS, run.summary.MedianIterMS, plan.FormatBytes(p.PeakRSSBytes))
	if !p.Complete {
		fmt.Fprintf(a.stderr, "isched profile: batch %d: the command ended before the %s window; the receipt holds what was measured\n", b, o.window)
	}
	return nil
}

func (o *profileOpts) validate() ([]int, error) {
	if len(o.argv) == 0 {
		return nil, usageErr("no training command: isched profile [flags] -- python3 train.py --batch-size {batch}")
	}
	if o.local == (o.partition != "") {
		return nil, usageErr("say where to run: --local (here) or --partition P (a short Slurm job), one of them")
	}
	if o.partition != "" && !stream.ValidName(o.partition) {
		return nil, usageErr("--partition %q: not a partition name", o.partition)
	}
	if o.window < time.Second {
		return nil, usageErr("--window %s: at least 1s", o.window)
	}
	if o.warmup < 0 || o.startup <= 0 || o.grace <= 0 || o.queueWait <= 0 {
		return nil, usageErr("--warmup-iters must not be negative; --startup-timeout, --grace and --queue-wait must be positive")
	}
	if o.mem != "" && !memRE.MatchString(strings.ToUpper(o.mem)) {
		return nil, usageErr("--mem %q: want e.g. 4000M or 4G", o.mem)
	}
	for _, a := range o.argv {
		if strings.IndexByte(a, 0) >= 0 {
			return nil, usageErr("command argument %q contains a NUL byte", a)
		}
	}
	return parseProfileBatches(o.batches)
}

// parseProfileBatches reads --batches: two or more distinct positive
// integers (a line needs two points), sorted.
func parseProfileBatches(s string) ([]int, error) {
	if strings.TrimSpace(s) == "" {
		return nil, usageErr("--batches is required: two or more batch sizes, e.g. 8,16")
	}
	bs, err := parseBatches(s)
	if err != nil {
		return nil, usageErr("--batches %q: want positive integers, e.g. 8,16", s)
	}
	slices.Sort(bs)
	for i, b := range bs {
		if b > 1<<20 {
			return nil, usageErr("--batches: batch size %d: at most %d", b, 1<<20)
		}
		if i > 0 && b == bs[i-1] {
			return nil, usageErr("--batches %q: %d is given twice", s, b)
		}
	}
	if len(bs) < 2 {
		return nil, usageErr("--batches %q: two or more batch sizes, so that larger ones can be extrapolated", s)
	}
	return bs, nil
}

func batchesString(bs []int) string {
	s := make([]string, len(bs))
	for i, b := range bs {
		s[i] = strconv.Itoa(b)
	}
	return strings.Join(s, ",")
}

// profileNodeType is the catalogue's node type the runs stand for.
func profileNodeType(site *plan.Site, partition, name string) (*plan.NodeType, error) {
	var ps *plan.PartitionSpec
	if partition != "" {
		if ps = site.Partition(partition); ps == nil {
			return nil, usageErr("--partition %s: not in the site catalogue", partition)
		}
	}
	if name != "" {
		nt := site.NodeType(name)
		if nt == nil {
			return nil, usageErr("--node-type %s: not in the site catalogue", name)
		}
		if ps != nil && !slices.Contains(ps.NodeTypes, name) {
			return nil, usageErr("--node-type %s: partition %s has %s", name, partition, strings.Join(ps.NodeTypes, ","))
		}
		return nt, nil
	}
	if ps == nil {
		return nil, usageErr("--local needs --node-type: the catalogue's node type this machine stands for")
	}
	if len(ps.NodeTypes) != 1 {
		return nil, usageErr("partition %s has node types %s: choose one with --node-type", partition, strings.Join(ps.NodeTypes, ","))
	}
	return site.NodeType(ps.NodeTypes[0]), nil
}

// batchArgv substitutes the batch size into every argument.
func batchArgv(argv []string, batch int) []string {
	out := make([]string, len(argv))
	for i, a := range argv {
		out[i] = strings.ReplaceAll(a, batchPlaceholder, strconv.Itoa(batch))
	}
	return out
}

// wrapperProfileArgs are the wrapper's flags of a profile run.
func (o *profileOpts) wrapperProfileArgs(summary string) []string {
	args := []string{"--no-report", "--summary-json", summary, "--interval", "250ms",
		"--profile-window", o.window.String(), "--profile-warmup", strconv.FormatInt(o.warmup, 10), "--grace", o.grace.String()}
	if o.iterPattern != "" {
		args = append(args, "--iter-pattern", o.iterPattern)
	}
	return append(args, o.wrapperArgs...)
}

// profileLocal runs the wrapper here as a child (its own process group, no
// shell), with the command's output in a log file.
func (a *App) profileLocal(ctx context.Context, o *profileOpts, wrapperPath string, batch int) (profileRun, error) {
	dir, err := os.MkdirTemp("", "isched-profile-")
	if err != nil {
		return profileRun{}, err
	}
	keep := false
	defer func() {
		if !keep {
			_ = os.RemoveAll(dir)
		}
	}()
	sumPath := filepath.Join(dir, "summary.json")
	logPath := filepath.Join(dir, "output.log")
	logf, err := os.OpenFile(logPath, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o600)
	if err != nil {
		return profileRun{}, err
	}
	defer logf.Close()
	argv := append([]string{wrapperPath}, o.wrapperProfileArgs(sumPath)...)
	argv = append(argv, "--")
	argv = append(argv, batchArgv(o.argv, batch)...)
	env := slices.DeleteFunc(a.Environ(), func(kv string) bool {
		return strings.HasPrefix(kv, "ISCHED_BATCH=") || strings.HasPrefix(kv, "SLURM_JOB_ID=")
	})
	env = append(env, "ISCHED_BATCH="+strconv.Itoa(batch))
	limit := o.startup + o.window + 2*o.grace + 10*time.Second
	runCtx, cancel := context.WithTimeout(ctx, limit)
	defer cancel()
	// the wrapper stops the command after the window; past the limit (no
	// iteration lines matched, a hung start) this stops the wrapper, which
	// stops the command: SIGTERM, its grace, SIGKILL of its group
	exit, err := child.Run(runCtx, child.Config{Argv: argv, Env: env, Stdout: logf, Stderr: logf, Grace: o.grace + 5*time.Second}, nil)
	timedOut := runCtx.Err() != nil && ctx.Err() == nil
	if err != nil {
		return profileRun{}, fmt.Errorf("run isched-wrapper: %w", err)
	}
	if ctx.Err() != nil {
		return profileRun{}, ctx.Err()
	}
	s, serr := readSummary(sumPath)
	switch {
	case timedOut && (serr != nil || s.Profile == nil || !s.Profile.Complete):
		keep = true
		return profileRun{}, fmt.Errorf("no window measured within %s (do the command's iteration lines match --iter-pattern?); output in %s:\n%s", limit, logPath, tail(logPath))
	case serr != nil:
		keep = true
		return profileRun{}, fmt.Errorf("isched-wrapper left no summary (%s, %w); output in %s:\n%s", exit, serr, logPath, tail(logPath))
	}
	if err := checkWindow(s); err != nil {
		keep = true
		return profileRun{}, fmt.Errorf("%w; output in %s:\n%s", err, logPath, tail(logPath))
	}
	return profileRun{batch: batch, summary: *s, where: "local"}, nil
}

// checkWindow says why a run's summary holds no usable window.
func checkWindow(s *wrapperSummary) error {
	p := s.Profile
	switch {
	case p == nil:
		return errors.New("the summary has no profile window (an isched-wrapper without --profile-window?)")
	case p.MeasuredIters < 2 || p.MeanIterMS <= 0:
		return fmt.Errorf("%d iterations measured after the %d warm-up ones (exit status %d): too few for a receipt", p.MeasuredIters, p.WarmupIters, s.ExitStatus)
	case !p.Complete && s.ExitStatus != 0:
		return fmt.Errorf("the command failed (exit status %d%s) before the window was measured", s.ExitStatus, sigSuffix(s.Signal))
	case p.PeakRSSBytes <= 0:
		return errors.New("no memory measured")
	}
	return nil
}

func sigSuffix(sig string) string {
	if sig == "" {
		return ""
	}
	return ", " + sig
}

func readSummary(path string) (*wrapperSummary, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var s wrapperSummary
	if err := json.Unmarshal(b, &s); err != nil {
		return nil, fmt.Errorf("summary %s: %w", path, err)
	}
	return &s, nil
}

// tail is the end of a log, for an error message.
func tail(path string) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return "  (" + err.Error() + ")"
	}
	b = bytes.TrimRight(b, "\n")
	lines := strings.Split(string(b), "\n")
	if len(lines) > 15 {
		lines = lines[len(lines)-15:]
	}
	for i, l := range lines {
		lines[i] = "  " + clean(l)
	}
	return strings.Join(lines, "\n")
}

// profiledReceipt is the receipt of one measured window.
func (a *App) profiledReceipt(run *profileRun, key, partition string, nt *plan.NodeType, warmup int64) (report.Receipt, error) {
	s := &run.summary
	p := s.Profile
	uid := a.UID()
	r := report.Receipt{Model: key, Batch: run.batch, Partition: partition, NodeType: nt.Name, IterMS: p.MeanIterMS,
		PeakRSS: p.PeakRSSBytes, Iters: int64(p.MeasuredIters), User: a.Username(), WallS: p.WindowSeconds,
		EndedMS: a.Now().UnixMilli(), UID: &uid, Profiled: true}
	for _, v := range p.PeakGPUBytes {
		r.PeakGPU = max(r.PeakGPU, v)
		r.GPUs++
	}
	if nt.DeviceMemory() && r.PeakGPU <= 0 {
		return r, fmt.Errorf("node type %s keeps tensors in GPU memory, but the run measured none (%s)", nt.Name, orNone(s.GPUNoData))
	}
	return r, nil
}

// profiledPath is the user's file of profiled receipts for this cluster:
// $XDG_DATA_HOME/isched/<cluster>/profiled-receipts.jsonl, else under
// $HOME/.local/share; "" when neither is set.
func (a *App) profiledPath() string {
	dir := a.dataDir()
	if dir == "" {
		return ""
	}
	return filepath.Join(dir, "profiled-receipts.jsonl")
}

// dataDir is the user's isched data for this cluster:
// $XDG_DATA_HOME/isched/<cluster>, else under $HOME/.local/share; ""
// when neither is set.
func (a *App) dataDir() string {
	dir := a.Getenv("XDG_DATA_HOME")
	if dir == "" {
		home := a.Getenv("HOME")
		if home == "" {
			return ""
		}
		dir = filepath.Join(home, ".local", "share")
	}
	c := a.cluster()
	if !stream.ValidName(c) {
		return ""
	}
	return filepath.Join(dir, "isched", c)
}

func appendReceipt(path string, r report.Receipt) error {
	b, err := json.Marshal(r)
	if err != nil {
		return err
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return err
	}
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o600)
	if err != nil {
		return err
	}
	_, err = f.Write(append(b, '\n'))
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	return err
}

// loadProfiled reads the user's profiled receipts (none when the file is
// missing); lines that do not decode, or are not profiled receipts of this
// user, are counted and skipped.
func (a *App) loadProfiled() (rs []report.Receipt, path string, bad int, err error) {
	path = a.profiledPath()
	if path == "" {
		return nil, "", 0, nil
	}
	b, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return nil, path, 0, nil
	}
	if err != nil {
		return nil, path, 0, fmt.Errorf("profiled receipts: %w", err)
	}
	uid := a.UID()
	for _, line := range bytes.Split(b, []byte("\n")) {
		if len(bytes.TrimSpace(line)) == 0 {
			continue
		}
		var r report.Receipt
		if err := json.Unmarshal(line, &r); err != nil || !r.Profiled || r.UID == nil || *r.UID != uid {
			bad++
			continue
		}
		rs = append(rs, r)
	}
	return rs, path, bad, nil
}

// profileSlurm submits one batch size as a short job on the partition
// through submit's own path (the batch script, sbatch as the user), with
// a time limit of the start-up allowance + the window + a margin, and
// waits for it to end. The wrapper reports nothing to Redis (--no-report:
// the coordinator neither tracks, continues nor moves a profile run) and
// writes its summary beside the job's output, in the working directory,
// which must be shared with the node (as for any isched job's output).
func (a *App) profileSlurm(ctx context.Context, o *profileOpts, wrapperPath string, batch int) (profileRun, error) {
	cwd, err := a.Getwd()
	if err != nil {
		return profileRun{}, err
	}
	argv := batchArgv(o.argv, batch)
	so := submitOpts{req: placeRequest{policy: plan.PolicyImmediate, ideal: o.partition, noMigrate: true}, wrapper: wrapperPath, argv: argv, site: o.site2, noReport: true}
	so.name = "profile-" + jobName(argv)
	if len(so.name) > 50 {
		so.name = so.name[:50]
	}
	so.name += "-b" + strconv.Itoa(batch)
	so.lineage = a.newLineage(so.name)
	sumPath := filepath.Join(cwd, "isched-"+so.lineage+".summary.json")
	// so.output and so.ckptDir: submit's defaults (jobPaths: in cwd, or in a
	// private directory when cwd is shared); the checkpoint directory is
	// never made, a profile run resumes nothing
	so.wrapperArgs = listFlag(o.wrapperProfileArgs(sumPath))
	limit := o.startup + o.window + 2*o.grace + time.Minute
	so.req.time = strconv.Itoa(int((limit + time.Minute - 1) / time.Minute))
	so.req.mem = o.mem
	so.env = [][2]string{{"ISCHED_BATCH", strconv.Itoa(batch)}} // for a command that reads it
	sub, err := a.decide(ctx, &so)
	if err != nil {
		return profileRun{}, err
	}
	script, comment, err := a.buildScript(&so, &sub)
	if err != nil {
		return profileRun{}, err
	}
	env, dropped, err := sbatchEnv(a.Environ(), scriptOptions(script))
	if err != nil {
		return profileRun{}, err
	}
	for _, d := range dropped {
		fmt.Fprintf(a.stderr, "isched profile: %s\n", d)
	}
	_ = os.Remove(sumPath)
	id, err := a.Slurm.SubmitWith(ctx, script, slurm.SubmitSpec{Comment: comment, Env: env})
	if err != nil {
		return profileRun{}, err
	}
	fmt.Fprintf(a.stderr, "isched profile: batch %d: job %s on %s (time limit %s min), output %s\n", batch, id, o.partition, so.req.time, so.output)
	return a.awaitProfile(ctx, profileJob{id: id, batch: batch, sumPath: sumPath, output: so.output, queueWait: o.queueWait, limit: limit})
}

// profileJob is a profile run's Slurm job, as awaitProfile follows it.
type profileJob struct {
	id               string
	batch            int
	sumPath, output  string        // the wrapper's summary and the job's output
	queueWait, limit time.Duration // to start; to run once started
}

// awaitProfile waits for the job's summary: until the job ends, or past
// its time to start and run.
func (a *App) awaitProfile(ctx context.Context, j profileJob) (profileRun, error) {
	id := j.id
	deadline := a.Now().Add(j.queueWait + j.limit)
	var info *slurm.JobInfo
	started := false
	for {
		if s, err := readSummary(j.sumPath); err == nil {
			where := "job " + id
			if info != nil {
				where += " on " + info.Partition + "/" + info.NodeList
			}
			return j.result(s, where)
		}
		ji, err := a.Slurm.ShowJob(ctx, id)
		if err == nil {
			info = ji
			if !started && ji.State == "RUNNING" {
				started = true
				deadline = a.Now().Add(j.limit)
			}
			if slurm.Ended(ji.State) {
				return j.ended(ctx, ji)
			}
		}
		if a.Now().After(deadline) {
			state := "unknown"
			if info != nil {
				state = info.State
			}
			return profileRun{}, fmt.Errorf("job %s not done in time (state %s); cancel it with scancel %s", id, state, id)
		}
		select {
		case <-ctx.Done():
			return profileRun{}, fmt.Errorf("job %s left running (scancel %s): %w", id, id, ctx.Err())
		case <-time.After(2 * time.Second):
		}
	}
}

// ended is the run of a job Slurm shows ended: the summary is written
// before the job ends; a shared file system gets a moment to show it.
func (j profileJob) ended(ctx context.Context, ji *slurm.JobInfo) (profileRun, error) {
	if s, err := waitSummary(ctx, j.sumPath, 10*time.Second); err == nil {
		return j.result(s, "job "+j.id+" on "+ji.Partition+"/"+ji.NodeList)
	}
	return profileRun{}, fmt.Errorf("job %s ended %s without a summary in %s; output in %s:\n%s", j.id, ji.State, j.sumPath, j.output, tail(j.output))
}

// result is the run of the job's summary, if its window was measured.
func (j profileJob) result(s *wrapperSummary, where string) (profileRun, error) {
	if err := checkWindow(s); err != nil {
		return profileRun{}, fmt.Errorf("job %s: %w; output in %s:\n%s", j.id, err, j.output, tail(j.output))
	}
	_ = os.Remove(j.sumPath)
	return profileRun{batch: j.batch, summary: *s, where: where}, nil
}

// waitSummary waits up to d for the summary file to appear.
func waitSummary(ctx context.Context, path string, d time.Duration) (*wrapperSummary, error) {
	until := time.Now().Add(d)
	for {
		s, err := readSummary(path)
		if err == nil || time.Now().After(until) {
			return s, err
		}
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(250 * time.Millisecond):
		}
	}
}
