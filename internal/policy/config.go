package policy

import (
	"fmt"
	"strconv"
	"strings"
	"time"
)

// Defaults. A zero field of Config means its default.
const (
	DefaultMargin            = 60 * time.Second
	DefaultMinGain           = 1.5
	DefaultMoveCost          = 15 * time.Second
	DefaultMinInterval       = 10 * time.Minute
	DefaultMaxMoves          = 5
	DefaultCkpt              = 30 * time.Second
	DefaultCkptTimeoutFactor = 3.0
	DefaultMinCkptTimeout    = 30 * time.Second
	DefaultMaxContinuations  = 20
	DefaultMinPending        = 60 * time.Second
	DefaultTrimMin           = 10 * time.Minute
	DefaultOrderMaxWait      = 24 * time.Hour
	DefaultMaxPreemptions    = 2
	// DefaultMaxResizes bounds rule 9's resizes of one run.
	DefaultMaxResizes = 8
	// DefaultScalingEfficiency is rule 9's prior for a size the run has
	// not measured yet: each doubling of its GPUs multiplies its
	// throughput by 2 × 0.9 (data-parallel training at a constant global
	// batch: Goyal et al. 2017 measured 90 % scaling efficiency for
	// ResNet-50 from 8 to 256 GPUs; Sergeev and Del Balso 2018, Horovod,
	// 88 % for Inception V3 and ResNet-101 at 128 GPUs).
	DefaultScalingEfficiency = 0.9
	// DefaultElasticHeadroomShare is the share of a partition's nodes
	// whose GPUs rule 9 keeps idle for arrivals unless the site sets
	// elastic_headroom. Runs grown onto every idle GPU hold them for
	// hours, and a job that asks a whole node then waits for one to drain:
	// in the replay of the Philly run times at load 0.7 (docs/elastic.md,
	// "Room for arrivals"), the untouched jobs waited 57 s on average
	// instead of 13 s with none kept, 15 s with an eighth, 5.5 s with a
	// quarter.
	DefaultElasticHeadroomShare = 0.25
)

// DefaultRequeueWait is the coordinator's RequeueWait when unset: a
// requeued job not started again after it is no longer waited for, and a
// run that yielded (rule 8) is released after it even if the job it
// yielded to still waits. The replay uses it too.
const DefaultRequeueWait = 30 * time.Minute

// Config holds the policy's knobs. Zero values mean the defaults above;
// where zero is a meaningful setting, a negative value expresses it (see
// each field).
type Config struct {
	// Margin is kept free before a time limit: a checkpoint must land at
	// least Margin before it. It must cover the coordinator's decision
	// interval and the agent's reaction time.
	Margin time.Duration
	// MinGain: a running job migrates only if the time saved exceeds
	// MinGain × the cost of moving.
	MinGain float64
	// MoveCost is the requeue and restart overhead (on the lab: ~2 s with
	// the agent's move sequence plus the training script's start-up).
	MoveCost time.Duration
	// MinInterval: no migration (rule 2) within this of the job's last
	// move. Negative: no hysteresis.
	MinInterval time.Duration
	// MaxMoves bounds migrations (rule 2) per lineage. Negative: unbounded.
	MaxMoves int
	// Speed is the relative throughput per partition (on the lab: gpu 8,
	// cpu 1; examples/coordinator-lab.json).
	// A partition not listed counts 1, so with a nil map no partition is
	// faster than another and rule 2 never finds a gain (its reason says so).
	Speed map[string]float64
	// Learned are speeds per model configuration and partition measured
	// from receipts and running jobs (LearnSpeeds, in Speed's units); they
	// take the place of Speed for a job of that model where they exist.
	// Speed is their prior.
	Learned LearnedSpeeds
	// DevPartitions have a short MaxTime and are usable in chunks; nil or
	// empty: none.
	DevPartitions []string
	// DevWindows restrict when dev partitions may be used (e.g.
	// 18:00–08:00); empty: always.
	DevWindows []Window
	// Location is the time zone of DevWindows; nil: the location of the
	// time passed to Decide.
	Location *time.Location
	// AllowExtend lets rule 1 raise a running job's time limit (up to the
	// partition's MaxTime) instead of checkpointing and requeueing. Only
	// root may do that in Slurm.
	AllowExtend bool
	// DefaultCkpt is the checkpoint duration assumed when Job.CkptDur is 0.
	DefaultCkpt time.Duration
	// A requested checkpoint that has not arrived after
	// max(CkptTimeoutFactor × the checkpoint duration, MinCkptTimeout) is
	// given up.
	CkptTimeoutFactor float64
	MinCkptTimeout    time.Duration
	// MaxContinuations bounds rule 1 and rule 5 requeues per lineage: a script that
	// ignores ISCHED_RESUME_FROM would otherwise restart from scratch after
	// every requeue, forever. Negative: unbounded.
	MaxContinuations int
	// NoContinuations turns rules 1 and 5 off: an ended job with work left
	// is reported, never requeued (coordinator config "max_continuations": 0).
	NoContinuations bool
	// MinPending: rule 3 leaves a job alone until it has been pending this
	// long (the scheduler gets a chance to start it where it is).
	MinPending time.Duration
	// TrimLimits lets rule 6 lower a running job's time limit to its
	// predicted end at worst plus a margin, when that frees at least
	// TrimMin and a fifth of the limit (coordinator config
	// "trim_time_limits"; off by default).
	TrimLimits bool
	TrimMin    time.Duration
	// OrderByRemaining lets rule 7 (Order) exchange the Slurm priorities
	// of isched's pending jobs so that the least predicted run left goes
	// first (coordinator config "order_by_remaining"; off by default).
	// A job pending OrderMaxWait or longer keeps its place.
	OrderByRemaining bool
	OrderMaxWait     time.Duration
	// PreemptForShort lets rule 8 (Preempt) checkpoint and requeue one of
	// isched's running jobs, held, so that a much shorter one of isched's
	// waiting behind it runs first (coordinator config
	// "preempt_for_short"; off by default); MaxPreemptions bounds it per
	// run.
	PreemptForShort bool
	MaxPreemptions  int

	// KeepPlace turns rule 10 on (issue 41, lever c; coordinator config
	// "keep_place"; off by default): while a run runs off its ideal
	// partition, a twin job waits on the ideal one and ages in its queue;
	// when Slurm starts the twin, the run checkpoints and the twin
	// resumes from the checkpoint.
	KeepPlace bool

	// Elastic turns rule 9 on (issue 42): a run submitted with a GPU
	// range (--gpus 1-4) grows onto GPUs that idle while no job waits for
	// them, by checkpoint and requeue at the new size, and shrinks back to
	// its base size when jobs wait.
	Elastic bool
	// MaxResizes bounds one run's growths (a shrink is never refused);
	// 0: DefaultMaxResizes.
	MaxResizes int
	// ScalingEfficiency is the throughput kept per doubling of GPUs for a
	// size the run has not measured; 0: DefaultScalingEfficiency.
	ScalingEfficiency float64
	// ElasticHeadroom is the GPUs of a partition that rule 9 keeps idle
	// for the jobs that arrive: a run starts larger or grows only onto
	// the idle GPUs past it, and when arrivals leave fewer than half of it
	// idle, the runs above their base shrink back until half is idle
	// again. 0: the GPUs of DefaultElasticHeadroomShare of the
	// partition's nodes, in whole nodes; negative: none.
	ElasticHeadroom int
}

// DefaultConfig is the defaults. They name no partition: no speeds (every
// partition counts 1) and no dev partitions; a site writes its own in the
// coordinator's config file (the lab's: examples/coordinator-lab.json).
func DefaultConfig() Config {
	return Config{}.normalized()
}

// normalized fills zero fields with defaults and turns the negative
// spellings of "off" into zero.
func (c Config) normalized() Config {
	if c.Margin <= 0 {
		c.Margin = DefaultMargin
	}
	if !(c.MinGain > 0) {
		c.MinGain = DefaultMinGain
	}
	if c.MoveCost <= 0 {
		c.MoveCost = DefaultMoveCost
	}
	switch {
	case c.MinInterval == 0:
		c.MinInterval = DefaultMinInterval
	case c.MinInterval < 0:
		c.MinInterval = 0
	}
	if c.MaxMoves == 0 {
		c.MaxMoves = DefaultMaxMoves
	}
	if c.DefaultCkpt <= 0 {
		c.DefaultCkpt = DefaultCkpt
	}
	if !(c.CkptTimeoutFactor > 0) {
		c.CkptTimeoutFactor = DefaultCkptTimeoutFactor
	}
	if c.MinCkptTimeout <= 0 {
		c.MinCkptTimeout = DefaultMinCkptTimeout
	}
	if c.MaxContinuations == 0 {
		c.MaxContinuations = DefaultMaxContinuations
	}
	if c.TrimMin <= 0 {
		c.TrimMin = DefaultTrimMin
	}
	if c.OrderMaxWait <= 0 {
		c.OrderMaxWait = DefaultOrderMaxWait
	}
	if c.MaxPreemptions <= 0 {
		c.MaxPreemptions = DefaultMaxPreemptions
	}
	if c.MinPending <= 0 {
		c.MinPending = DefaultMinPending
	}
	if c.MaxResizes <= 0 {
		c.MaxResizes = DefaultMaxResizes
	}
	if !(c.ScalingEfficiency > 0 && c.ScalingEfficiency <= 1) {
		c.ScalingEfficiency = DefaultScalingEfficiency
	}
	return c
}

func (c Config) isDev(partition string) bool {
	for _, d := range c.DevPartitions {
		if d == partition {
			return true
		}
	}
	return false
}

// devOpen reports whether dev partitions may be used at now, and until when
// (zero: no end).
func (c Config) devOpen(now time.Time) (bool, time.Time) {
	if len(c.DevWindows) == 0 {
		return true, time.Time{}
	}
	if c.Location != nil {
		now = now.In(c.Location)
	}
	var end time.Time
	open, endless := false, false
	for _, w := range c.DevWindows {
		if !w.Contains(now) {
			continue
		}
		open = true
		switch e := w.End(now); {
		case e.IsZero():
			endless = true
		case e.After(end):
			end = e
		}
	}
	if endless {
		end = time.Time{}
	}
	return open, end
}

// Window is a daily time window, as offsets from midnight in wall-clock
// time. From > To wraps around midnight (18:00–08:00); From == To is all day.
type Window struct {
	From, To time.Duration
}

// ParseWindow reads "HH:MM-HH:MM" (e.g. "18:00-08:00").
func ParseWindow(s string) (Window, error) {
	from, to, ok := strings.Cut(s, "-")
	if !ok {
		return Window{}, fmt.Errorf("window %q: want HH:MM-HH:MM", s)
	}
	f, err := clock(from)
	if err != nil {
		return Window{}, fmt.Errorf("window %q: %w", s, err)
	}
	t, err := clock(to)
	if err != nil {
		return Window{}, fmt.Errorf("window %q: %w", s, err)
	}
	return Window{From: f, To: t}, nil
}

func clock(s string) (time.Duration, error) {
	h, m, ok := strings.Cut(strings.TrimSpace(s), ":")
	hh, err1 := strconv.Atoi(h)
	mm, err2 := strconv.Atoi(m)
	if !ok || err1 != nil || err2 != nil || hh < 0 || hh > 24 || mm < 0 || mm > 59 || (hh == 24 && mm != 0) {
		return 0, fmt.Errorf("%q is not a time of day HH:MM", s)
	}
	return time.Duration(hh)*time.Hour + time.Duration(mm)*time.Minute, nil
}

func (w Window) String() string {
	f := func(d time.Duration) string { return fmt.Sprintf("%02d:%02d", int(d.Hours()), int(d.Minutes())%60) }
	return f(w.From) + "-" + f(w.To)
}

// Contains reports whether t's wall-clock time is inside the window.
func (w Window) Contains(t time.Time) bool {
	off := sinceMidnight(t)
	switch {
	case w.From == w.To:
		return true
	case w.From < w.To:
		return w.From <= off && off < w.To
	}
	return off >= w.From || off < w.To
}

// End returns when the window containing t closes: the next To after t
// (for an all-day window, the zero time).
func (w Window) End(t time.Time) time.Time {
	if w.From == w.To {
		return time.Time{}
	}
	y, mo, d := t.Date()
	to := int(w.To / time.Minute)
	end := time.Date(y, mo, d, to/60, to%60, 0, 0, t.Location())
	if !end.After(t) {
		end = time.Date(y, mo, d+1, to/60, to%60, 0, 0, t.Location())
	}
	return end
}

func sinceMidnight(t time.Time) time.Duration {
	return time.Duration(t.Hour())*time.Hour + time.Duration(t.Minute())*time.Minute +
		time.Duration(t.Second())*time.Second + time.Duration(t.Nanosecond())
}
