package wrapper

import (
	"context"
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
	"github.com/isched/isched/internal/relayproto"
	"github.com/isched/isched/internal/report"
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
	// Environ is the environment the child starts from (nil: os.Environ);
	// Getenv must read the same one.
	Environ func() []string
	// Hostname names this node in the start report (nil: os.Hostname).
	Hostname func() (string, error)
	Stdin    io.Reader
	Stdout   io.Writer
	Stderr   io.Writer
	// Connect opens the Redis connection as the reporter user.
	Connect func(ctx context.Context, cluster string) (appender, error)
	Munger  auth.Munger
	GPU     GPUSampler
	// NewCheckpointWatcher builds the watcher of dir (nil: no watching).
	NewCheckpointWatcher func(dir, glob string, debounce, quiesce time.Duration, log *slog.Logger) (CheckpointWatcher, error)
	// MemCgroup resolves the child's memory cgroup (nil: none is read, and
	// an OOM kill is told only from the sampled peak).
	MemCgroup OpenMemCgroup
	// Attempts finds the lineage's other running jobs: the command waits
	// for them to end (handover.go; nil: it does not wait).
	Attempts Attempts
	Logger   *slog.Logger
}

// StreamConnect is the production Connect: the reporter ACL user from the
// environment (ISCHED_REDIS_*).
func StreamConnect(getenv func(string) string) func(ctx context.Context, cluster string) (appender, error) {
	return func(ctx context.Context, cluster string) (appender, error) {
		cfg, err := stream.ConfigFromEnv(func(k string) string {
			if k == "ISCHED_CLUSTER" {
				return cluster // the job's: ISCHED_CLUSTER or Slurm's name
			}
			return getenv(k)
		}, "reporter")
		if err != nil {
			return nil, err
		}
		return stream.Open(ctx, cfg)
	}
}

// RelayConnect is Connect through isched-relay at addr (docs/deployment.md):
// each connection proves the wrapper's uid with a MUNGE credential
// restricted to relayUID; the relay chooses the stream and its cap.
func RelayConnect(addr string, relayUID int, m auth.Munger) func(ctx context.Context, cluster string) (appender, error) {
	return func(ctx context.Context, cluster string) (appender, error) {
		c := &relayproto.Client{Addr: addr, Cred: func(ctx context.Context) (string, error) {
			return relayproto.Credential(ctx, m, cluster, relayUID, time.Now())
		}}
		if err := c.Connect(ctx); err != nil {
			return nil, err
		}
		return c, nil
	}
}

// Summary is the end-of-job summary (stderr and --summary-json).
//
// It holds what the end report (report.End) carries, under the names and
// units of the summary file, which scripts (scripts/gpu-check) and the CLI
// (isched profile) read: the two stay separate types so that neither the
// file nor the wire changes, and endReport derives one from the other. The
// mapping, summary field (JSON name) -> report.End field (JSON name):
//
//	ExitStatus (exit_status)                 -> ExitCode (exit_code)
//	Signal (signal)                          -> Signal (signal)
//	WallSeconds (wall_seconds, s)            -> WallMS (wall_ms, ms, truncated)
//	PeakRSSBytes (peak_rss_bytes)            -> PeakRSSBytes (peak_rss_bytes)
//	PeakGPUBytes (peak_gpu_bytes)            -> PeakGPUBytes (peak_gpu_bytes)
//	Iterations (iterations)                  -> Iters (iters)
//	MedianIterMS, P90IterMS                  -> MedianIterMS, P90IterMS (same names)
//	Checkpoints (checkpoints, paths)         -> Checkpoints (checkpoints, a count)
//	Reason (reason)                          -> Reason (reason)
//	CgroupPeak (cgroup_peak_bytes)           -> CgroupPeakBytes (cgroup_peak_bytes)
//	CgroupLimit (cgroup_limit_bytes)         -> MemLimitBytes (mem_limit_bytes)
//	UnreclaimPeak (unreclaimable_peak_bytes) -> UnreclaimPeakBytes (same name)
//	PageCachePeak (page_cache_peak_bytes)    -> PageCachePeakBytes (same name)
//	Efficiency.CPUSeconds (cpu_seconds)      -> CPUSeconds (cpu_seconds)
//	Efficiency.Cores (cores)                 -> Cores (cores)
//	Efficiency.MemRequestBytes               -> MemRequestBytes (mem_request_bytes)
//	Efficiency.GPUUtilPercent                -> GPUUtilPercent (gpu_util_percent)
//
// The rest (command, the GPU table, the last step, the resume path, the
// delivery counts, the advice, the profile window) is the summary's only.
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

	// wall is the exact wall time WallSeconds rounds, for End's WallMS.
	wall time.Duration
}

// endReport is the end report this summary stands for (the mapping is in
// Summary's comment).
func (s *Summary) endReport() *report.End {
	e := &report.End{ExitCode: s.ExitStatus, Signal: s.Signal, WallMS: s.wall.Milliseconds(),
		PeakRSSBytes: s.PeakRSSBytes, Iters: s.Iterations, MedianIterMS: s.MedianIterMS, P90IterMS: s.P90IterMS,
		Checkpoints: len(s.Checkpoints), Reason: s.Reason, CgroupPeakBytes: s.CgroupPeak, MemLimitBytes: s.CgroupLimit,
		UnreclaimPeakBytes: s.UnreclaimPeak, PageCachePeakBytes: s.PageCachePeak}
	if len(s.PeakGPUBytes) > 0 {
		e.PeakGPUBytes = s.PeakGPUBytes
	}
	if f := s.Efficiency; f != nil {
		e.CPUSeconds, e.Cores, e.MemRequestBytes, e.GPUUtilPercent = f.CPUSeconds, f.Cores, f.MemRequestBytes, f.GPUUtilPercent
	}
	return e
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
	par         parallelism // cores busy at once, per sample
	loopClocked bool
	prof        *profileWindow // --profile-window; nil: not profiling

	// untrustedDir is the checkpoint directory refused as another user's
	// (set before the workers start): nothing in it is a checkpoint.
	untrustedDir string
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
	var last progress.Event
	for _, ev := range evs {
		if ev.Kind == progress.KindStep {
			s.countStep(ev)
			last = ev
		}
	}
	// prefer the loop's clock when it has one; else the wrapper's arrivals
	for _, it := range its {
		s.loopClocked = s.loopClocked || it.By == progress.ByLoop
	}
	for _, it := range its {
		if s.loopClocked && it.By != progress.ByLoop {
			continue
		}
		s.recordIter(it, last)
	}
}

// countStep takes the totals and the step count of one step line (s.mu
// held).
func (s *state) countStep(ev progress.Event) {
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

// recordIter keeps one measured interval; last is its batch's last step
// line (s.mu held).
func (s *state) recordIter(it progress.Iter, last progress.Event) {
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
			if stat.Procs > 0 {
				st.par.observe(cpu.CPUPercent)
			}
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
			// the job's processes' peak, or the device's where NVML never
			// listed one: a device-level figure seen before the job's
			// processes showed gives way to theirs
			for key, peak := range st.gpu.observe(gs) {
				st.peakGPU[key] = peak
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
	sum := Summary{Command: opts.Argv, ExitStatus: status, WallSeconds: exit.Wall.Seconds(), wall: exit.Wall, PeakRSSBytes: s.peakRSS,
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

func visibleGPUs(getenv func(string) string) []string {
	v := getenv("CUDA_VISIBLE_DEVICES")
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
