package wrapper

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/isched/isched/internal/auth"
	"github.com/isched/isched/internal/child"
	"github.com/isched/isched/internal/progress"
	"github.com/isched/isched/internal/report"
	"github.com/isched/isched/internal/spool"
	"github.com/isched/isched/internal/stream"
)

// Run is the wrapper: it runs opts.Argv as its child, measures and reports
// it, and returns the status to exit with (the child's). Monitoring failures
// are logged and never change what happens to the child. Its phases are
// run's methods: prepare, startReporting, childConfig, onStarted, finish.
func Run(ctx context.Context, opts Options, d Deps) int {
	r := newRun(opts, d)
	r.outer = ctx
	if code, ok := r.awaitOtherAttempts(); !ok {
		return code
	}
	r.attemptStart = time.Now().Add(-time.Second) // after the wait: the other attempt's checkpoints are not this one's
	if code, ok := r.prepare(); !ok {
		return code
	}
	runCtx, stopAll := context.WithCancel(ctx)
	defer stopAll()
	r.ctx, r.stopAll = runCtx, stopAll
	r.startReporting()
	cfg, err := r.childConfig()
	if err != nil {
		fmt.Fprintf(d.Stderr, "isched-wrapper: %v\n", err)
		stopAll()
		r.wg.Wait()
		removeTmp(r.tmp, r.tmpCreated, r.ours, r.log)
		return 2
	}
	exit, err := child.Run(ctx, cfg, r.onStarted)
	return r.finish(exit, err)
}

// run is one wrapper run: what its phases share.
type run struct {
	opts    Options
	d       Deps
	log     *slog.Logger
	getenv  func(string) string
	job     report.JobRef
	inSlurm bool

	tmp        string   // the job's private directory ("" if none)
	tmpCreated bool     // created here: removed whole at exit
	ours       []string // removed at exit when tmp was not ours to remove whole
	env        []string // the child's
	sigmap     map[os.Signal]child.Delivery
	resume     string // the checkpoint the child resumes from
	device     string // ISCHED_DEVICE: cuda or cpu

	st          *state
	rep         *reporter // nil: not reporting
	ctx         context.Context
	stopAll     context.CancelFunc
	wg          sync.WaitGroup
	ckptPending pendingCounter // the checkpoint watcher, when it tells its pending files
	mem         endMemory

	outer        context.Context // Run's: still live when ctx is stopped
	attemptStart time.Time       // checkpoints older than this are not this attempt's
}

func newRun(opts Options, d Deps) *run {
	r := &run{opts: opts, d: d, log: d.Logger, getenv: d.Getenv,
		attemptStart: time.Now().Add(-time.Second)} // mtimes are coarser than the clock
	if r.log == nil {
		r.log = slog.New(slog.NewTextHandler(d.Stderr, nil))
	}
	job, inSlurm, err := identity(r.getenv, opts.Lineage)
	if err != nil {
		r.log.Warn("job identity unreadable; running standalone", "err", err)
		inSlurm = false
	}
	r.job, r.inSlurm = job, inSlurm
	r.log = r.log.With("component", "wrapper")
	if inSlurm {
		r.log = r.log.With("job", job.JobID, "rank", job.Rank)
	}
	r.st = &state{lastStep: -1, totalIters: opts.TotalIters, peakGPU: map[string]int64{}, ckptSeen: map[string]bool{}}
	if opts.ProfileWindow > 0 {
		r.st.prof = newProfileWindow(opts.ProfileWarmup, opts.ProfileWindow)
	}
	return r
}

func (r *run) setenv(k, v string) {
	r.env = slices.DeleteFunc(r.env, func(kv string) bool { return strings.HasPrefix(kv, k+"=") })
	r.env = append(r.env, k+"="+v)
}

// prepare sets up the job's files and the child's environment: the
// progress and control files, the signal map, the resume point and the
// device. ok false: exit with code (a bad option).
func (r *run) prepare() (code int, ok bool) {
	r.tmp, r.tmpCreated = jobTmpDir(r.getenv, r.job, r.inSlurm, r.log)
	environ := r.d.Environ
	if environ == nil {
		environ = os.Environ
	}
	r.env = environ()
	if r.opts.ProgressFile == "" && r.tmp != "" {
		r.opts.ProgressFile = filepath.Join(r.tmp, "progress")
		// the loop creates it; a stale one from a previous attempt is read from its end
	}
	control := filepath.Join(r.tmp, "checkpoint-request")
	r.ours = []string{r.opts.ProgressFile, control}
	if r.opts.ProgressFile != "" {
		r.setenv("ISCHED_PROGRESS_FILE", r.opts.ProgressFile)
	}
	if r.tmp != "" {
		r.setenv("ISCHED_CONTROL_FILE", control)
		_ = os.Remove(control) // a request from a previous attempt is stale
	}
	var err error
	if r.sigmap, err = buildSignalMap(r.opts, control); err != nil {
		fmt.Fprintf(r.d.Stderr, "isched-wrapper: %v\n", err)
		removeTmp(r.tmp, r.tmpCreated, r.ours, r.log)
		return 2, false
	}
	if r.inSlurm {
		r.setenv("ISCHED_LINEAGE", r.job.Lineage)
		r.setDistEnv()
	}
	if r.opts.CheckpointDir != "" {
		r.setenv("ISCHED_CHECKPOINT_DIR", r.opts.CheckpointDir)
		r.refuseForeignCkptDir()
	}
	r.resumePoint()
	r.chooseDevice()
	return 0, true
}

// setDistEnv gives a rank of a step of several tasks torchrun's
// environment (distEnv). One that cannot be made is logged: the training
// runs as it would, with the environment it has.
func (r *run) setDistEnv() {
	env, err := distEnv(r.getenv)
	if err != nil {
		r.log.Warn("no torch.distributed environment (RANK, WORLD_SIZE, MASTER_ADDR...) for the command", "err", err)
		return
	}
	for _, kv := range env {
		r.setenv(kv[0], kv[1])
	}
	if len(env) > 0 {
		r.log.Debug("torch.distributed environment", "vars", env)
	}
}

// refuseForeignCkptDir stops trusting a checkpoint directory of another
// user (foreignCkptDir): it is not watched, no resume point comes from it
// and no checkpoint in it is recorded or reported (the start report says
// no directory is watched). The command still gets ISCHED_CHECKPOINT_DIR
// and runs as it would: monitoring never stops the training, and its
// checkpoints are its own business; isched just does not vouch for them.
func (r *run) refuseForeignCkptDir() {
	err := foreignCkptDir(r.opts.CheckpointDir, r.job.UID)
	if err == nil {
		return
	}
	r.log.Error("checkpoint directory refused: not watched, no resume point taken from it, no checkpoint in it recorded; the training runs as it would",
		"dir", r.opts.CheckpointDir, "err", err)
	r.st.untrustedDir = r.opts.CheckpointDir
	r.opts.CheckpointDir = ""
}

// resumePoint finds the lineage's newest intact checkpoint and tells the
// child (ISCHED_RESUME_FROM, --resume-arg).
func (r *run) resumePoint() {
	if r.inSlurm && r.opts.CheckpointDir != "" {
		p, rejects, ok, stateErr := loadResume(r.opts.CheckpointDir, r.job.Lineage)
		if stateErr != nil {
			r.log.Error("the lineage's resume state is not trusted (another user may have planted it)", "err", stateErr)
		}
		for _, x := range rejects {
			r.log.Warn("confirmed checkpoint changed, gone or not this user's; not resuming from it", "path", x.p.Path, "err", x.err)
		}
		if ok {
			r.resume = p.Path
			r.setenv("ISCHED_RESUME_FROM", r.resume)
			attrs := []any{"path", r.resume}
			if p.Step != nil {
				attrs = append(attrs, "step", *p.Step)
			}
			r.log.Info("resuming from the lineage's newest intact checkpoint", attrs...)
		}
	}
	if len(r.opts.ResumeArg) > 0 {
		if r.resume != "" {
			r.opts.Argv = resumeArgv(r.opts.Argv, r.opts.ResumeArg, r.resume)
			r.log.Info("resume arguments appended to the command", "args", r.opts.Argv[len(r.opts.Argv)-len(r.opts.ResumeArg):])
		} else {
			r.log.Info("no resume point: the command runs without its resume arguments")
		}
	}
}

// chooseDevice sets ISCHED_DEVICE (unless set): cuda only when NVML sees a
// device the job may use. Slurm sets CUDA_VISIBLE_DEVICES for any GPU GRES,
// also on nodes whose "GPUs" are not real (emulated, or a driver that is
// missing), and a script told "cuda" there would crash. In Slurm, a job
// without it was given no GPU, even where it could see one; outside Slurm (a
// workstation, `isched profile --local`) every GPU NVML sees is the job's.
func (r *run) chooseDevice() {
	r.device = "cpu"
	v := r.getenv("CUDA_VISIBLE_DEVICES")
	given := (v != "" && v != "NoDevFiles") || (v == "" && !r.inSlurm)
	if given && r.d.GPU != nil {
		if g := r.d.GPU.Sample(nil); g != nil && g.NoData == "" && len(g.Devices) > 0 {
			r.device = "cuda"
		} else if v != "" {
			r.log.Info("GPUs allocated but not usable here; the job is told to use the CPU", "cuda_visible_devices", v)
		}
	}
	if r.getenv("ISCHED_DEVICE") == "" {
		r.setenv("ISCHED_DEVICE", r.device)
	}
}

// startReporting starts the reporter (in Slurm, unless --no-report): its
// queue spools to disk, and takes over the leftovers of earlier wrappers.
func (r *run) startReporting() {
	if !r.inSlurm || r.opts.NoReport {
		return
	}
	sess, err := auth.NewSession()
	if err != nil {
		r.log.Warn("no session key; not reporting", "err", err)
		return
	}
	out, leftovers := r.spool()
	connect := func(ctx context.Context) (appender, error) { return r.d.Connect(ctx, r.job.Cluster) }
	keys := stream.Keys{Cluster: r.job.Cluster}
	r.rep = newReporter(r.job, sess, out, connect, keys.Ingest(), r.log)
	r.rep.leftovers = leftovers
	r.wg.Add(1)
	go func() { defer r.wg.Done(); r.rep.run(r.ctx, r.opts.ReportInterval) }()
}

// spool makes the reports' queue and lists the spools left by earlier
// wrappers of this user (this job's previous attempt first).
func (r *run) spool() (*spool.Queue, []string) {
	if r.opts.SpoolDir != "" {
		if err := os.MkdirAll(r.opts.SpoolDir, 0o700); err != nil {
			r.log.Warn("spool directory not usable", "dir", r.opts.SpoolDir, "err", err)
		}
	}
	layout := spool.NewLayout(r.opts.SpoolDir, r.tmp, tmpBase(r.getenv), r.job)
	var leftovers []string
	if prev, err := spool.AdoptOwn(layout.Path, time.Now()); err != nil {
		r.log.Warn("spool path taken; not spooling", "path", layout.Path, "err", err)
		layout.Path = ""
	} else if prev != "" {
		leftovers = append(leftovers, prev) // our previous attempt's, dead for sure
	}
	for _, p := range spool.FindLeftovers(layout.Patterns, layout.Path, os.Getuid(), time.Now(), spool.LeftoverMinAge) {
		if !slices.Contains(leftovers, p) {
			leftovers = append(leftovers, p)
		}
	}
	return spool.NewQueue(r.opts.QueueMax, 32<<20, layout.Path, r.log), leftovers
}

// childConfig is the child's configuration: its command, environment and
// signals, and taps on its output when --iter-pattern is given.
func (r *run) childConfig() (child.Config, error) {
	cfg := child.Config{
		Argv: r.opts.Argv, Env: r.env, Stdin: r.d.Stdin, Stdout: r.d.Stdout, Stderr: r.d.Stderr,
		Grace: r.opts.Grace, SignalMap: r.sigmap, Logger: r.log, OnSignal: r.onSignal,
	}
	if r.opts.IterPattern == "" {
		return cfg, nil
	}
	outMatcher, err := progress.NewMatcher(r.opts.IterPattern)
	if err != nil {
		return cfg, fmt.Errorf("--iter-pattern: %w", err)
	}
	errMatcher, _ := progress.NewMatcher(r.opts.IterPattern)
	var (
		mu                 sync.Mutex
		outClock, errClock progress.IterClock
	)
	cfg.StdoutTap = func(b []byte) {
		mu.Lock()
		defer mu.Unlock()
		r.st.observe(&outClock, outMatcher.Feed(b, time.Now()))
	}
	cfg.StderrTap = func(b []byte) {
		mu.Lock()
		defer mu.Unlock()
		r.st.observe(&errClock, errMatcher.Feed(b, time.Now()))
	}
	return cfg, nil
}

// onSignal logs and reports a signal forwarded to the child.
func (r *run) onSignal(recv os.Signal, del child.Delivery) {
	r.log.Info("signal forwarded", "received", recv.String(), "delivered", del.String())
	if r.rep == nil {
		return
	}
	e := report.NewEnvelope(report.KindSignal, time.Now())
	e.Signal = &report.SignalEvent{Signal: sigName(recv), Forwarded: sigName(recv)}
	switch {
	case del.File != "":
		e.Signal.Forwarded = "file:" + del.File
	case del.Signal != 0:
		e.Signal.Forwarded = sigName(del.Signal) // "SIGTERM", as the schema wants
	}
	r.rep.emit(e)
}

// onStarted runs once the child has started: the start report, then
// sampling, the progress file and the checkpoint watcher.
func (r *run) onStarted(p *child.Process) {
	pid := int32(p.PID())
	r.mem.open(r.d.MemCgroup, pid, r.log)
	r.reportStart(pid)
	if r.st.prof != nil {
		r.wg.Add(1)
		go func() { defer r.wg.Done(); r.st.prof.stopWhenMeasured(r.ctx, p, r.log) }()
	}
	r.wg.Add(1)
	go func() { defer r.wg.Done(); sampleLoop(r.ctx, r.opts, pid, r.d.GPU, r.st, r.rep, r.log) }()
	r.followProgress()
	r.watchCheckpoints()
}

// reportStart reports the start, with the MUNGE credential that makes the
// coordinator trust this session.
func (r *run) reportStart(pid int32) {
	if r.rep == nil {
		return
	}
	hostname := r.d.Hostname
	if hostname == nil {
		hostname = os.Hostname
	}
	host, _ := hostname()
	cwd, _ := os.Getwd()
	e := report.NewEnvelope(report.KindStart, time.Now())
	e.Start = &report.Start{Argv: truncArgv(r.opts.Argv), Cwd: cwd, Host: host, PID: int(pid), WrapperVersion: Version,
		CheckpointDir: r.opts.CheckpointDir, ProgressFile: absOrEmpty(r.opts.ProgressFile), Device: r.device,
		GPUs: visibleGPUs(r.getenv), TotalIters: r.opts.TotalIters, ResumeFrom: r.resume}
	if r.d.Munger != nil {
		cred, err := auth.Issue(r.ctx, r.d.Munger, r.rep.sess, r.job.Cluster, r.job.JobID, r.job.Lineage, r.opts.CoordinatorUID, 24*time.Hour, time.Now())
		if err != nil {
			r.log.Warn("no MUNGE credential: the coordinator will not trust these reports", "err", err)
		} else if len(cred) <= 8<<10 {
			e.Start.Cred = cred
		}
	}
	r.rep.emit(e)
}

// followProgress follows the training loop's progress file.
func (r *run) followProgress() {
	if r.opts.ProgressFile == "" {
		return
	}
	t, err := progress.NewTail(progress.TailConfig{Path: r.opts.ProgressFile, Logger: r.log, SkipExisting: true})
	if err != nil {
		r.log.Warn("progress file not followed", "path", r.opts.ProgressFile, "err", err)
		return
	}
	r.wg.Add(1)
	go func() {
		defer r.wg.Done()
		var clock progress.IterClock
		err := t.Run(r.ctx, func(evs []progress.Event) {
			r.st.observe(&clock, evs)
			for _, ev := range evs {
				if ev.Kind == progress.KindCkpt && ev.Path != "" {
					checkpointFromLoop(ev, r.st, r.rep, r.opts, r.job, r.log)
				}
			}
		})
		if err != nil {
			r.log.Warn("progress file no longer followed", "err", err)
		}
	}()
}

// watchCheckpoints watches the checkpoint directory.
func (r *run) watchCheckpoints() {
	if r.opts.CheckpointDir == "" || r.d.NewCheckpointWatcher == nil {
		return
	}
	w, err := r.d.NewCheckpointWatcher(r.opts.CheckpointDir, r.opts.CheckpointGlob, r.opts.CheckpointDebounce, r.opts.CheckpointQuiesce, r.log)
	if err != nil {
		r.log.Warn("checkpoint directory not watched", "dir", r.opts.CheckpointDir, "err", err)
		return
	}
	r.ckptPending, _ = w.(pendingCounter)
	r.wg.Add(1)
	go func() {
		defer r.wg.Done()
		if err := w.Run(r.ctx, func(ev CheckpointEvent) { checkpointSeen(ev, r.st, r.rep, r.opts, r.job, r.log) }); err != nil && !errors.Is(err, context.Canceled) {
			r.log.Warn("checkpoint watcher stopped", "err", err)
		}
	}()
}

// exitStatus is the status to exit with and the end's reason.
func (r *run) exitStatus(exit child.Exit, err error) (int, string) {
	status := exit.Status()
	reason := report.EndExited
	var startErr *child.StartError
	switch {
	case errors.As(err, &startErr):
		fmt.Fprintf(r.d.Stderr, "isched-wrapper: %v\n", err)
		status, reason = startErr.Code, report.EndStartFailed
	case err != nil:
		fmt.Fprintf(r.d.Stderr, "isched-wrapper: %v\n", err)
		if status == 0 {
			status = 1
		}
	case exit.Signaled:
		reason = report.EndSignaled
	}
	return status, reason
}

// settle takes a final look (the last progress lines and checkpoint
// renames) and stops the workers. A checkpoint saved on the way out (the
// trainer's answer to SIGTERM) is the resume point of the next attempt:
// the watcher gets its debounce period, bounded, to confirm it.
func (r *run) settle() {
	time.Sleep(min(300*time.Millisecond, r.opts.Interval))
	if r.ckptPending != nil {
		// (a directory needs its marker, then a period without change: two)
		for until := time.Now().Add(2*r.opts.CheckpointDebounce + 250*time.Millisecond); r.ckptPending.Pending() > 0 && time.Now().Before(until); {
			time.Sleep(25 * time.Millisecond)
		}
	}
	r.stopAll()
	r.wg.Wait()
	if r.d.NewCheckpointWatcher != nil {
		// what the watcher had no time to deliver or confirm
		finalScan(r.outer, r.attemptStart, r.st, r.rep, r.opts, r.job, r.log)
	}
}

// finish judges the end, reports it, cleans up and writes the summary; it
// returns the status to exit with.
func (r *run) finish(exit child.Exit, err error) int {
	status, reason := r.exitStatus(exit, err)
	r.settle()
	before, after, haveCg := r.mem.final(r.log)
	st := r.st
	st.mu.Lock()
	verdict := judgeEnd(reason, exit, before, after, haveCg, st.cgPeak, st.cgLimit, st.mem.oomRisk(st.peakRSS))
	st.cgPeak, st.cgLimit = verdict.peak, verdict.limit
	st.mu.Unlock()
	reason = verdict.reason
	if reason == report.EndOOM {
		r.log.Warn("the child was killed at its memory limit", "peak_bytes", verdict.peak, "limit_bytes", verdict.limit)
	}
	sum := st.summary(r.opts, exit, status, reason, r.resume)
	st.mu.Lock()
	busy := st.par.quantile(busyQuantile, minBusySamples)
	st.mu.Unlock()
	sum.Efficiency = efficiency(r.getenv, sum, childCPUSeconds(), busy)
	r.reportEnd(&sum)
	if r.rep != nil && r.rep.out.Len() > 0 && filepath.Dir(r.rep.out.Path()) == r.tmp {
		r.tmpCreated = false // the spool of undelivered reports stays, for a post-mortem
	}
	removeTmp(r.tmp, r.tmpCreated, r.ours, r.log)
	writeSummary(r.d.Stderr, sum)
	if r.opts.SummaryJSON != "" {
		if b, err := json.MarshalIndent(sum, "", "  "); err == nil {
			if err := os.WriteFile(r.opts.SummaryJSON, append(b, '\n'), 0o644); err != nil {
				r.log.Warn("summary not written", "path", r.opts.SummaryJSON, "err", err)
			}
		}
	}
	return status
}

// reportEnd reports the last sample and the end, and waits (bounded) for
// the queue to drain; sum gets the delivery counts.
func (r *run) reportEnd(sum *Summary) {
	if r.rep == nil {
		return
	}
	if s := r.st.takeSample(); s != nil {
		e := report.NewEnvelope(report.KindSample, time.Now())
		e.Sample = s
		r.rep.emit(e)
	}
	e := report.NewEnvelope(report.KindEnd, time.Now())
	e.End = sum.endReport()
	r.rep.emit(e)
	if !r.rep.drain(5 * time.Second) {
		r.rep.out.Finish()
		r.log.Warn("reports left undelivered at exit; the next wrapper of this user on this node sends them", "queued", r.rep.out.Len(), "spool", r.rep.out.Path())
	}
	sum.Reports, sum.ReportsQueued = r.rep.delivered(), r.rep.out.Len()
}
