package wrapper

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/isched/isched/internal/auth"
	"github.com/isched/isched/internal/child"
	"github.com/isched/isched/internal/procstat"
	"github.com/isched/isched/internal/progress"
	"github.com/isched/isched/internal/report"
	"github.com/isched/isched/internal/spool"
	"github.com/isched/isched/internal/stream"
	"github.com/isched/isched/internal/version"
)

// Version is the wrapper's build version (internal/version, stamped by the
// linker or left "dev"); its start report carries it.
var Version = version.Version

// GPUSampler measures the GPUs of a process tree. It never fails: without
// NVML it returns a stat whose NoData says why.
type GPUSampler interface {
	Sample(pids []int32) *report.GPUStat
}

// CheckpointEvent is a checkpoint found complete in the watched directory:
// a file, or a directory (Dir) whose tree has the digest Tree (Size: its
// files' bytes, MTime: its newest change).
type CheckpointEvent struct {
	Path     string
	Dir      bool
	Tree     string
	Size     int64
	MTime    time.Time
	Step     *int64
	Existing bool
}

// CheckpointWatcher watches a checkpoint directory until ctx ends.
type CheckpointWatcher interface {
	Run(ctx context.Context, emit func(CheckpointEvent)) error
}

// pendingCounter is what a CheckpointWatcher may also tell: how many files
// wait for their debounce period.
type pendingCounter interface{ Pending() int }

// Deps are the wrapper's outside parts, injected by main (and by tests).
type Deps struct {
	Getenv func(string) string
	Stdin  io.Reader
	Stdout io.Writer
	Stderr io.Writer
	// Connect opens the Redis connection as the reporter user.
	Connect func(ctx context.Context, cluster string) (appender, error)
	Munger  auth.Munger
	GPU     GPUSampler
	// NewCheckpointWatcher builds the watcher of dir (nil: no watching).
	NewCheckpointWatcher func(dir, glob string, debounce, quiesce time.Duration, log *slog.Logger) (CheckpointWatcher, error)
	// MemCgroup resolves the child's memory cgroup (nil: none is read, and
	// an OOM kill is told only from the sampled peak).
	MemCgroup OpenMemCgroup
	Logger    *slog.Logger
}

// StreamConnect is the production Connect: the reporter ACL user from the
// environment (ISCHED_REDIS_*).
func StreamConnect(getenv func(string) string) func(ctx context.Context, cluster string) (appender, error) {
	return func(ctx context.Context, cluster string) (appender, error) {
		cfg, err := stream.ConfigFromEnv(getenv, "reporter")
		if err != nil {
			return nil, err
		}
		cfg.Cluster = cluster
		return stream.Open(ctx, cfg)
	}
}

// Summary is the end-of-job summary (stderr and --summary-json).
type Summary struct {
	Command       []string         `json:"command"`
	ExitStatus    int              `json:"exit_status"`
	Signal        string           `json:"signal,omitempty"`
	WallSeconds   float64          `json:"wall_seconds"`
	PeakRSSBytes  int64            `json:"peak_rss_bytes"`
	CgroupPeak    int64            `json:"cgroup_peak_bytes,omitempty"`
	CgroupLimit   int64            `json:"cgroup_limit_bytes,omitempty"`
	UnreclaimPeak int64            `json:"unreclaimable_peak_bytes,omitempty"`
	PageCachePeak int64            `json:"page_cache_peak_bytes,omitempty"`
	PeakGPUBytes  map[string]int64 `json:"peak_gpu_bytes,omitempty"`
	GPU           *GPUSummary      `json:"gpu,omitempty"`
	GPUNoData     string           `json:"gpu_no_data,omitempty"`
	Iterations    int64            `json:"iterations"`
	LastStep      int64            `json:"last_step"`
	MedianIterMS  float64          `json:"median_iter_ms"`
	P90IterMS     float64          `json:"p90_iter_ms"`
	Checkpoints   []string         `json:"checkpoints"`
	ResumedFrom   string           `json:"resumed_from,omitempty"`
	Reports       int              `json:"reports_delivered"`
	ReportsQueued int              `json:"reports_undelivered"`
	Reason        string           `json:"reason"`
	Efficiency    *Efficiency      `json:"efficiency,omitempty"`
	// Profile: the measured window of --profile-window; MedianIterMS and
	// P90IterMS then cover the window only.
	Profile *ProfileSummary `json:"profile,omitempty"`
}

// state is what the wrapper accumulates while the child runs.
type state struct {
	mu          sync.Mutex
	iters       []report.Iter // since the last sample report
	durations   []float64     // all iteration durations, ms
	iterCount   int64
	lastStep    int64
	totalIters  int64
	loopTotal   int64 // the loop's own total, from its progress lines; 0: it never said
	epochs      int
	perEpoch    int64
	peakRSS     int64
	cgPeak      int64
	cgLimit     int64
	mem         memSplit // the cgroup's charge apart
	peakGPU     map[string]int64
	gpu         gpuTally
	gpuNoData   string
	ckpts       []string
	ckptSeen    map[string]bool
	resumeMu    sync.Mutex // the lineage resume file: read, record, write
	gaps        int
	lastCPU     *report.CPUStat
	lastGPU     *report.GPUStat
	loopClocked bool
	prof        *profileWindow // --profile-window; nil: not profiling
}

// Run is the wrapper: it runs opts.Argv as its child, measures and reports
// it, and returns the status to exit with (the child's). Monitoring failures
// are logged and never change what happens to the child.
func Run(ctx context.Context, opts Options, d Deps) int {
	log := d.Logger
	if log == nil {
		log = slog.New(slog.NewTextHandler(d.Stderr, nil))
	}
	attemptStart := time.Now().Add(-time.Second) // mtimes are coarser than the clock
	getenv := d.Getenv
	job, inSlurm, err := identity(getenv, opts.Lineage)
	if err != nil {
		log.Warn("job identity unreadable; running standalone", "err", err)
		inSlurm = false
	}
	log = log.With("component", "wrapper")
	if inSlurm {
		log = log.With("job", job.JobID, "rank", job.Rank)
	}

	tmp, tmpCreated := jobTmpDir(getenv, job, inSlurm, log)
	env := os.Environ()
	setenv := func(k, v string) {
		env = slices.DeleteFunc(env, func(kv string) bool { return strings.HasPrefix(kv, k+"=") })
		env = append(env, k+"="+v)
	}
	if opts.ProgressFile == "" && tmp != "" {
		opts.ProgressFile = filepath.Join(tmp, "progress")
		// the loop creates it; a stale one from a previous attempt is read from its end
	}
	control := filepath.Join(tmp, "checkpoint-request")
	ours := []string{opts.ProgressFile, control} // removed at exit when tmp was not ours to remove whole
	if opts.ProgressFile != "" {
		setenv("ISCHED_PROGRESS_FILE", opts.ProgressFile)
	}
	if tmp != "" {
		setenv("ISCHED_CONTROL_FILE", control)
		_ = os.Remove(control) // a request from a previous attempt is stale
	}
	sigmap, err := buildSignalMap(opts, control)
	if err != nil {
		fmt.Fprintf(d.Stderr, "isched-wrapper: %v\n", err)
		removeTmp(tmp, tmpCreated, ours, log)
		return 2
	}
	if inSlurm {
		setenv("ISCHED_LINEAGE", job.Lineage)
	}
	if opts.CheckpointDir != "" {
		setenv("ISCHED_CHECKPOINT_DIR", opts.CheckpointDir)
	}
	var resume string
	if inSlurm && opts.CheckpointDir != "" {
		r, rejects, ok, stateErr := loadResume(opts.CheckpointDir, job.Lineage)
		if stateErr != nil {
			log.Error("the lineage's resume state is not trusted (another user may have planted it)", "err", stateErr)
		}
		for _, x := range rejects {
			log.Warn("confirmed checkpoint changed, gone or not this user's; not resuming from it", "path", x.p.Path, "err", x.err)
		}
		if ok {
			resume = r.Path
			setenv("ISCHED_RESUME_FROM", resume)
			attrs := []any{"path", resume}
			if r.Step != nil {
				attrs = append(attrs, "step", *r.Step)
			}
			log.Info("resuming from the lineage's newest intact checkpoint", attrs...)
		}
	}
	if len(opts.ResumeArg) > 0 {
		if resume != "" {
			opts.Argv = resumeArgv(opts.Argv, opts.ResumeArg, resume)
			log.Info("resume arguments appended to the command", "args", opts.Argv[len(opts.Argv)-len(opts.ResumeArg):])
		} else {
			log.Info("no resume point: the command runs without its resume arguments")
		}
	}
	// cuda only when NVML sees a device: Slurm sets CUDA_VISIBLE_DEVICES for
	// any GPU GRES, also on nodes whose "GPUs" are not real (emulated, or a
	// driver that is missing), and a script told "cuda" there would crash
	device := "cpu"
	if v, ok := os.LookupEnv("CUDA_VISIBLE_DEVICES"); ok && v != "" && v != "NoDevFiles" && d.GPU != nil {
		if g := d.GPU.Sample(nil); g != nil && g.NoData == "" && len(g.Devices) > 0 {
			device = "cuda"
		} else {
			log.Info("GPUs allocated but not usable here; the job is told to use the CPU", "cuda_visible_devices", v)
		}
	}
	if getenv("ISCHED_DEVICE") == "" {
		setenv("ISCHED_DEVICE", device)
	}

	st := &state{lastStep: -1, totalIters: opts.TotalIters, peakGPU: map[string]int64{}, ckptSeen: map[string]bool{}}
	if opts.ProfileWindow > 0 {
		st.prof = newProfileWindow(opts.ProfileWarmup, opts.ProfileWindow)
	}

	// reporting
	var rep *reporter
	runCtx, stopAll := context.WithCancel(ctx)
	defer stopAll()
	var wg sync.WaitGroup
	var ckptPending pendingCounter // the checkpoint watcher, when it tells its pending files
	if inSlurm && !opts.NoReport {
		sess, err := auth.NewSession()
		if err != nil {
			log.Warn("no session key; not reporting", "err", err)
		} else {
			if opts.SpoolDir != "" {
				if err := os.MkdirAll(opts.SpoolDir, 0o700); err != nil {
					log.Warn("spool directory not usable", "dir", opts.SpoolDir, "err", err)
				}
			}
			layout := spool.NewLayout(opts.SpoolDir, tmp, tmpBase(getenv), job)
			var leftovers []string
			if prev, err := spool.AdoptOwn(layout.Path, time.Now()); err != nil {
				log.Warn("spool path taken; not spooling", "path", layout.Path, "err", err)
				layout.Path = ""
			} else if prev != "" {
				leftovers = append(leftovers, prev) // our previous attempt's, dead for sure
			}
			for _, p := range spool.FindLeftovers(layout.Patterns, layout.Path, os.Getuid(), time.Now(), spool.LeftoverMinAge) {
				if !slices.Contains(leftovers, p) {
					leftovers = append(leftovers, p)
				}
			}
			out := spool.NewQueue(opts.QueueMax, 32<<20, layout.Path, log)
			connect := func(ctx context.Context) (appender, error) { return d.Connect(ctx, job.Cluster) }
			keys := stream.Keys{Cluster: job.Cluster}
			rep = newReporter(job, sess, out, connect, keys.Ingest(), log)
			rep.leftovers = leftovers
			wg.Add(1)
			go func() { defer wg.Done(); rep.run(runCtx, opts.ReportInterval) }()
		}
	}

	host, _ := os.Hostname()
	cwd, _ := os.Getwd()
	var matchersMu sync.Mutex
	var outMatcher, errMatcher *progress.Matcher
	var outClock, errClock progress.IterClock
	if opts.IterPattern != "" {
		if outMatcher, err = progress.NewMatcher(opts.IterPattern); err != nil {
			fmt.Fprintf(d.Stderr, "isched-wrapper: --iter-pattern: %v\n", err)
			stopAll()
			wg.Wait()
			removeTmp(tmp, tmpCreated, ours, log)
			return 2
		}
		errMatcher, _ = progress.NewMatcher(opts.IterPattern)
	}
	cfg := child.Config{
		Argv: opts.Argv, Env: env, Stdin: d.Stdin, Stdout: d.Stdout, Stderr: d.Stderr,
		Grace: opts.Grace, SignalMap: sigmap, Logger: log,
		OnSignal: func(recv os.Signal, del child.Delivery) {
			log.Info("signal forwarded", "received", recv.String(), "delivered", del.String())
			if rep != nil {
				e := report.NewEnvelope(report.KindSignal, time.Now())
				e.Signal = &report.SignalEvent{Signal: sigName(recv), Forwarded: sigName(recv)}
				switch {
				case del.File != "":
					e.Signal.Forwarded = "file:" + del.File
				case del.Signal != 0:
					e.Signal.Forwarded = sigName(del.Signal) // "SIGTERM", as the schema wants
				}
				rep.emit(e)
			}
		},
	}
	if outMatcher != nil {
		cfg.StdoutTap = func(b []byte) {
			matchersMu.Lock()
			defer matchersMu.Unlock()
			st.observe(&outClock, outMatcher.Feed(b, time.Now()))
		}
		cfg.StderrTap = func(b []byte) {
			matchersMu.Lock()
			defer matchersMu.Unlock()
			st.observe(&errClock, errMatcher.Feed(b, time.Now()))
		}
	}

	var mem endMemory
	started := func(p *child.Process) {
		pid := int32(p.PID())
		mem.open(d.MemCgroup, pid, log)
		if rep != nil {
			e := report.NewEnvelope(report.KindStart, time.Now())
			e.Start = &report.Start{Argv: truncArgv(opts.Argv), Cwd: cwd, Host: host, PID: int(pid), WrapperVersion: Version,
				CheckpointDir: opts.CheckpointDir, ProgressFile: absOrEmpty(opts.ProgressFile), Device: device,
				GPUs: visibleGPUs(), TotalIters: opts.TotalIters, ResumeFrom: resume}
			if d.Munger != nil {
				cred, err := auth.Issue(runCtx, d.Munger, rep.sess, job.Cluster, job.JobID, job.Lineage, opts.CoordinatorUID, 24*time.Hour, time.Now())
				if err != nil {
					log.Warn("no MUNGE credential: the coordinator will not trust these reports", "err", err)
				} else if len(cred) <= 8<<10 {
					e.Start.Cred = cred
				}
			}
			rep.emit(e)
		}
		if st.prof != nil {
			wg.Add(1)
			go func() { defer wg.Done(); st.prof.stopWhenMeasured(runCtx, p, log) }()
		}
		// sampling
		wg.Add(1)
		go func() { defer wg.Done(); sampleLoop(runCtx, opts, pid, d.GPU, st, rep, log) }()
		// the progress file
		if opts.ProgressFile != "" {
			t, err := progress.NewTail(progress.TailConfig{Path: opts.ProgressFile, Logger: log, SkipExisting: true})
			if err != nil {
				log.Warn("progress file not followed", "path", opts.ProgressFile, "err", err)
			} else {
				wg.Add(1)
				go func() {
					defer wg.Done()
					var clock progress.IterClock
					err := t.Run(runCtx, func(evs []progress.Event) {
						st.observe(&clock, evs)
						for _, ev := range evs {
							if ev.Kind == progress.KindCkpt && ev.Path != "" {
								checkpointFromLoop(ev, st, rep, opts, job, log)
							}
						}
					})
					if err != nil {
						log.Warn("progress file no longer followed", "err", err)
					}
				}()
			}
		}
		// checkpoints
		if opts.CheckpointDir != "" && d.NewCheckpointWatcher != nil {
			w, err := d.NewCheckpointWatcher(opts.CheckpointDir, opts.CheckpointGlob, opts.CheckpointDebounce, opts.CheckpointQuiesce, log)
			if err != nil {
				log.Warn("checkpoint directory not watched", "dir", opts.CheckpointDir, "err", err)
			} else {
				ckptPending, _ = w.(pendingCounter)
				wg.Add(1)
				go func() {
					defer wg.Done()
					if err := w.Run(runCtx, func(ev CheckpointEvent) { checkpointSeen(ev, st, rep, opts, job, log) }); err != nil && !errors.Is(err, context.Canceled) {
						log.Warn("checkpoint watcher stopped", "err", err)
					}
				}()
			}
		}
	}

	exit, err := child.Run(ctx, cfg, started)
	status := exit.Status()
	reason := report.EndExited
	var startErr *child.StartError
	switch {
	case errors.As(err, &startErr):
		fmt.Fprintf(d.Stderr, "isched-wrapper: %v\n", err)
		status, reason = startErr.Code, report.EndStartFailed
	case err != nil:
		fmt.Fprintf(d.Stderr, "isched-wrapper: %v\n", err)
		if status == 0 {
			status = 1
		}
	case exit.Signaled:
		reason = report.EndSignaled
	}
	// a final look: the last progress lines and checkpoint renames
	time.Sleep(min(300*time.Millisecond, opts.Interval))
	// a checkpoint saved on the way out (the trainer's answer to SIGTERM)
	// is the resume point of the next attempt: let the watcher confirm it
	// (its debounce period, bounded) before it stops
	if ckptPending != nil {
		// (a directory needs its marker, then a period without change: two)
		for until := time.Now().Add(2*opts.CheckpointDebounce + 250*time.Millisecond); ckptPending.Pending() > 0 && time.Now().Before(until); {
			time.Sleep(25 * time.Millisecond)
		}
	}
	stopAll()
	wg.Wait()
	if d.NewCheckpointWatcher != nil {
		// what the watcher had no time to deliver or confirm
		finalScan(ctx, attemptStart, st, rep, opts, job, log)
	}
	before, after, haveCg := mem.final(log)
	st.mu.Lock()
	verdict := judgeEnd(reason, exit, before, after, haveCg, st.cgPeak, st.cgLimit, st.mem.oomRisk(st.peakRSS))
	st.cgPeak, st.cgLimit = verdict.peak, verdict.limit
	st.mu.Unlock()
	reason = verdict.reason
	if reason == report.EndOOM {
		log.Warn("the child was killed at its memory limit", "peak_bytes", verdict.peak, "limit_bytes", verdict.limit)
	}

	sum := st.summary(opts, exit, status, reason, resume)
	sum.Efficiency = efficiency(getenv, sum, childCPUSeconds())
	if rep != nil {
		if s := st.takeSample(); s != nil {
			e := report.NewEnvelope(report.KindSample, time.Now())
			e.Sample = s
			rep.emit(e)
		}
		e := report.NewEnvelope(report.KindEnd, time.Now())
		e.End = &report.End{ExitCode: status, WallMS: exit.Wall.Milliseconds(), PeakRSSBytes: sum.PeakRSSBytes,
			Iters: sum.Iterations, MedianIterMS: sum.MedianIterMS, P90IterMS: sum.P90IterMS,
			Checkpoints: len(sum.Checkpoints), Reason: reason, CgroupPeakBytes: sum.CgroupPeak, MemLimitBytes: sum.CgroupLimit,
			UnreclaimPeakBytes: sum.UnreclaimPeak, PageCachePeakBytes: sum.PageCachePeak, CPUSeconds: sum.Efficiency.CPUSeconds,
			Cores: sum.Efficiency.Cores, MemRequestBytes: sum.Efficiency.MemRequestBytes, GPUUtilPercent: sum.Efficiency.GPUUtilPercent}
		if len(sum.PeakGPUBytes) > 0 {
			e.End.PeakGPUBytes = sum.PeakGPUBytes
		}
		if exit.Signaled {
			e.End.Signal = sigName(exit.Signal)
		}
		rep.emit(e)
		if !rep.drain(5 * time.Second) {
			rep.out.Finish()
			log.Warn("reports left undelivered at exit; the next wrapper of this user on this node sends them", "queued", rep.out.Len(), "spool", rep.out.Path())
		}
		sum.Reports, sum.ReportsQueued = rep.delivered(), rep.out.Len()
	}
	if rep != nil && rep.out.Len() > 0 && filepath.Dir(rep.out.Path()) == tmp {
		tmpCreated = false // the spool of undelivered reports stays, for a post-mortem
	}
	removeTmp(tmp, tmpCreated, ours, log)
	writeSummary(d.Stderr, sum)
	if opts.SummaryJSON != "" {
		if b, err := json.MarshalIndent(sum, "", "  "); err == nil {
			if err := os.WriteFile(opts.SummaryJSON, append(b, '\n'), 0o644); err != nil {
				log.Warn("summary not written", "path", opts.SummaryJSON, "err", err)
			}
		}
	}
	return status
}

func buildSignalMap(opts Options, control string) (map[os.Signal]child.Delivery, error) {
	spec := opts.SignalMap
	switch cs := strings.ToLower(opts.CheckpointSignal); {
	case cs == "":
	case cs == "file":
		spec = joinSpec(spec, "USR1=file:"+control)
	default:
		spec = joinSpec(spec, "USR1="+opts.CheckpointSignal)
	}
	m, err := child.ParseSignalMap(spec)
	if err != nil {
		return nil, fmt.Errorf("--signal-map: %w", err)
	}
	return m, nil
}

func joinSpec(a, b string) string {
	if a == "" {
		return b
	}
	return a + "," + b
}

// tmpBase is the parent of the wrappers' tmp directories.
func tmpBase(getenv func(string) string) string {
	if base := getenv("TMPDIR"); base != "" {
		return base
	}
	return os.TempDir()
}

// removeTmp removes the wrapper's temporary directory at exit: all of it
// when the wrapper created it, else only the files in it that are the
// wrapper's (ours: the progress and control files, when under dir).
func removeTmp(dir string, created bool, ours []string, log *slog.Logger) {
	if dir == "" {
		return
	}
	if created {
		if err := os.RemoveAll(dir); err != nil {
			log.Warn("temporary directory not removed", "dir", dir, "err", err)
		}
		return
	}
	for _, p := range ours {
		if p != "" && filepath.Dir(p) == dir {
			if err := os.Remove(p); err != nil && !errors.Is(err, os.ErrNotExist) {
				log.Warn("temporary file not removed", "path", p, "err", err)
			}
		}
	}
}

// observe records iteration events from one source.
func (s *state) observe(clock *progress.IterClock, evs []progress.Event) {
	if len(evs) == 0 {
		return
	}
	its := clock.Observe(evs)
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, ev := range evs {
		if ev.Kind != progress.KindStep {
			continue
		}
		if ev.Total > 0 {
			s.totalIters, s.loopTotal = ev.Total, ev.Total
		}
		if ev.Epochs > 0 {
			s.epochs = ev.Epochs
		}
		if ev.StepsPerEpoch > 0 {
			s.perEpoch = ev.StepsPerEpoch
		}
		if ev.Step > s.lastStep {
			if s.lastStep >= 0 {
				s.iterCount += ev.Step - s.lastStep
			} else {
				s.iterCount++
			}
			s.lastStep = ev.Step
		}
	}
	// prefer the loop's clock when it has one; else the wrapper's arrivals
	hasLoop := false
	for _, it := range its {
		hasLoop = hasLoop || it.By == progress.ByLoop
	}
	if hasLoop {
		s.loopClocked = true
	}
	var last progress.Event
	for _, ev := range evs {
		if ev.Kind == progress.KindStep {
			last = ev
		}
	}
	for _, it := range its {
		if s.loopClocked && it.By != progress.ByLoop {
			continue
		}
		ms := float64(it.PerStep) / float64(time.Millisecond)
		if !it.AfterCkpt {
			s.durations = append(s.durations, ms)
			s.prof.note(len(s.durations), it.At, s.peakRSS, s.peakGPU)
		}
		ri := report.Iter{Step: it.Step, Epoch: max(last.Epoch, 0), AtMS: it.At.UnixMilli(), DurMS: ms, Source: last.Source}
		if it.By == progress.ByLoop {
			ri.LoopDurMS = ms
		}
		if it.Step == last.Step {
			ri.Loss, ri.LossNonFinite = last.Loss, last.NonFinite
			if last.Samples > 0 {
				ri.Samples = last.Samples
			}
		}
		if ri.Source == "" {
			ri.Source = report.SourceFile
		}
		if s.loopTotal >= ri.Step {
			ri.Total = s.loopTotal // a loop counting past its own total says nothing reliable about it
		}
		if len(s.iters) < 4096 {
			s.iters = append(s.iters, ri)
		}
	}
}

// takeSample builds the next sample report from what accumulated.
func (s *state) takeSample() *report.Sample {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.lastCPU == nil && s.lastGPU == nil && len(s.iters) == 0 {
		return nil
	}
	out := &report.Sample{CPU: s.lastCPU, GPU: s.lastGPU, Iters: s.iters, Gaps: s.gaps}
	s.iters, s.gaps = nil, 0
	return out
}

func sampleLoop(ctx context.Context, opts Options, pid int32, g GPUSampler, st *state, rep *reporter, log *slog.Logger) {
	sampler := procstat.New(pid)
	t := time.NewTicker(opts.Interval)
	defer t.Stop()
	lastReport := time.Now()
	for {
		stat, err := sampler.Sample(ctx)
		var gs *report.GPUStat
		if g != nil {
			gs = g.Sample(stat.PIDs) // logs "no gpu data" once itself
		}
		st.mu.Lock()
		if err != nil {
			st.gaps++
		}
		if stat.Procs > 0 || stat.PeakRSSBytes > 0 {
			cpu := &report.CPUStat{RSSBytes: stat.RSSBytes, PeakRSSBytes: stat.PeakRSSBytes, PSSBytes: stat.PSSBytes,
				CPUPercent: finite(stat.CPUPercent), Procs: stat.Procs}
			st.lastCPU = cpu
		}
		st.peakRSS = max(st.peakRSS, stat.PeakRSSBytes)
		if stat.Procs > 0 { // a sample of a child already gone has no cgroup: keep the last limit seen
			st.cgLimit = stat.CgroupLimitBytes
		}
		// the kernel's peak of the cgroup, also between samples (page cache included)
		st.cgPeak = max(st.cgPeak, stat.CgroupPeakBytes)
		st.mem.observe(stat, st.lastCPU)
		if gs != nil {
			st.lastGPU = gs
			st.gpuNoData = gs.NoData
			// the job's processes, or the device where NVML listed none
			for key, used := range st.gpu.observe(gs) {
				st.peakGPU[key] = max(st.peakGPU[key], used)
			}
		}
		st.mu.Unlock()
		if rep != nil && time.Since(lastReport) >= opts.ReportInterval {
			lastReport = time.Now()
			if s := st.takeSample(); s != nil {
				e := report.NewEnvelope(report.KindSample, time.Now())
				e.Sample = s
				rep.emit(e)
			}
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

func finite(f float64) float64 {
	if math.IsNaN(f) || math.IsInf(f, 0) || f < 0 {
		return 0
	}
	return f
}

func (s *state) summary(opts Options, exit child.Exit, status int, reason, resume string) Summary {
	s.mu.Lock()
	defer s.mu.Unlock()
	sum := Summary{Command: opts.Argv, ExitStatus: status, WallSeconds: exit.Wall.Seconds(), PeakRSSBytes: s.peakRSS,
		CgroupPeak: s.cgPeak, CgroupLimit: s.cgLimit, UnreclaimPeak: s.mem.unreclaimPeak, PageCachePeak: s.mem.cachePeak,
		GPUNoData: s.gpuNoData, Iterations: s.iterCount, LastStep: s.lastStep, Checkpoints: append([]string{}, s.ckpts...),
		ResumedFrom: resume, Reason: reason, GPU: s.gpu.summary()}
	if exit.Signaled {
		sum.Signal = sigName(exit.Signal)
	}
	if len(s.peakGPU) > 0 {
		sum.PeakGPUBytes = map[string]int64{}
		for k, v := range s.peakGPU {
			sum.PeakGPUBytes[k] = v
		}
	}
	sum.MedianIterMS, sum.P90IterMS = quantile(s.durations, 0.5), quantile(s.durations, 0.9)
	s.prof.fill(&sum, s.durations)
	return sum
}

func quantile(xs []float64, q float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	s := slices.Clone(xs)
	slices.Sort(s)
	pos := q * float64(len(s)-1)
	lo := int(math.Floor(pos))
	hi := int(math.Ceil(pos))
	return s[lo] + (s[hi]-s[lo])*(pos-float64(lo))
}

func writeSummary(w io.Writer, s Summary) {
	mb := func(b int64) string { return fmt.Sprintf("%.1f MiB", float64(b)/(1<<20)) }
	fmt.Fprintf(w, "isched-wrapper: summary: exit=%d", s.ExitStatus)
	if s.Signal != "" {
		fmt.Fprintf(w, " (%s)", s.Signal)
	}
	fmt.Fprintf(w, " wall=%.1fs peak_rss=%s", s.WallSeconds, mb(s.PeakRSSBytes))
	if s.CgroupPeak > 0 {
		fmt.Fprintf(w, " cgroup_peak=%s", mb(s.CgroupPeak)) // page cache included
	}
	if s.UnreclaimPeak > 0 || s.PageCachePeak > 0 {
		fmt.Fprintf(w, " unreclaimable_peak=%s page_cache_peak=%s", mb(s.UnreclaimPeak), mb(s.PageCachePeak))
	}
	if len(s.PeakGPUBytes) > 0 {
		keys := make([]string, 0, len(s.PeakGPUBytes))
		for k := range s.PeakGPUBytes {
			keys = append(keys, k)
		}
		slices.Sort(keys)
		for _, k := range keys {
			fmt.Fprintf(w, " gpu[%s]=%s", k, mb(s.PeakGPUBytes[k]))
			if s.GPU != nil {
				if i := slices.IndexFunc(s.GPU.Devices, func(d GPUDeviceSummary) bool { return d.UUID == k }); i >= 0 && s.GPU.Devices[i].Source != GPUSourceProcess {
					fmt.Fprintf(w, "(%s-level)", s.GPU.Devices[i].Source)
				}
			}
		}
	} else if s.GPUNoData != "" {
		fmt.Fprintf(w, " gpu=no-data(%s)", s.GPUNoData)
	}
	fmt.Fprintf(w, " iters=%d median_iter=%.1fms p90_iter=%.1fms checkpoints=%d reports=%d undelivered=%d reason=%s\n",
		s.Iterations, s.MedianIterMS, s.P90IterMS, len(s.Checkpoints), s.Reports, s.ReportsQueued, s.Reason)
	writeEfficiency(w, s.Efficiency)
}

func sigName(s os.Signal) string {
	n := s.String()
	if names[n] != "" {
		return names[n]
	}
	return n
}

var names = map[string]string{
	"hangup": "SIGHUP", "interrupt": "SIGINT", "killed": "SIGKILL", "terminated": "SIGTERM",
	"user defined signal 1": "SIGUSR1", "user defined signal 2": "SIGUSR2", "aborted": "SIGABRT",
	"segmentation fault": "SIGSEGV", "continued": "SIGCONT", "quit": "SIGQUIT", "bus error": "SIGBUS",
	"floating point exception": "SIGFPE", "broken pipe": "SIGPIPE", "alarm clock": "SIGALRM",
}

func truncArgv(a []string) []string {
	out := make([]string, 0, len(a))
	total := 0
	for _, s := range a {
		if len(s) > 1024 {
			s = s[:1024]
		}
		total += len(s)
		if total > 16<<10 || len(out) >= 256 {
			break
		}
		out = append(out, strings.ToValidUTF8(s, "?"))
	}
	return out
}

func absOrEmpty(p string) string {
	if p == "" {
		return ""
	}
	a, err := filepath.Abs(p)
	if err != nil {
		return ""
	}
	return a
}

func visibleGPUs() []string {
	v := os.Getenv("CUDA_VISIBLE_DEVICES")
	if v == "" {
		return nil
	}
	var out []string
	for _, s := range strings.Split(v, ",") {
		if s = strings.TrimSpace(s); s != "" && len(out) < 64 {
			out = append(out, s)
		}
	}
	return out
}
