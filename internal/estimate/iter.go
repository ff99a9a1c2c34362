package estimate

import (
	"math"

	"github.com/isched/isched/internal/report"
)

// Tuning of IterEstimator. They are constants rather than options: the
// coordinator persists estimators, and one estimator must not change its
// rules between two coordinator versions' configs.
const (
	// WindowSize is how many steady observations the estimator keeps.
	WindowSize = 512
	// OutlierFactor: a steady observation slower than OutlierFactor × the
	// median is a periodic phase (eval pass, checkpoint write, data-loader
	// stall), kept out of the window and amortised instead.
	OutlierFactor = 3.0

	warmHalf      = 5    // warm-up compares the medians of two halves of this many
	maxWarmup     = 100  // warm-up ends after this many observations whatever happens
	warmTolerance = 0.10 // "the running median has stabilised": halves within 10%
	levelShiftRun = 16   // this many outliers in a row: the job got slower for good
	refreshEvery  = 64   // recompute the outlier reference median every so many adds
	minSteady     = 3    // steady observations before a non-provisional estimate
	maxWeight     = 1000 // steps one observation may stand for
	// regime: every regimeEvery steady adds, the last regimeRecent
	// observations are compared with the up to regimeOld before them (at
	// least regimeMinOld). When the larger of their medians is more than
	// 1 + regimeShift times the smaller (1.3: a shared VM's speed wanders
	// by ±20 % on its own, docs/model-summary.md) and they differ by more
	// than regimeZ standard errors (from the parts' interquartile ranges),
	// and the recent middle half lies wholly on one side of the older
	// median, the job runs at a new speed (a job sharing the node ended,
	// the data loader warmed its cache) and the window restarts from the
	// recent observations.
	regimeEvery  = 4
	regimeRecent = 24
	regimeOld    = 48
	regimeMinOld = 24
	regimeShift  = 0.30
	regimeZ      = 5.0
)

// IterEstimator is a robust online estimate of one job's iteration time.
// The zero value is ready to use. Feed it every report.Iter in order.
//
// Warm-up: the first observations of a process (start-up, compilation,
// cache filling) are skipped until the running median has stabilised: the
// estimator buffers the last 10 and ends warm-up when the median of the
// later 5 is within 10% of the median of the earlier 5 (or after 100
// observations). The earlier half is dropped, so at least 5 observations
// are always skipped; the later half becomes the first steady data. A step
// that goes back (the job resumed from a checkpoint in a new process)
// starts a new warm-up but keeps the window: same node, same speed.
//
// Steady state: the typical iteration time MS is the step-weighted median
// of the last WindowSize observations; LowMS and HighMS are their 10th and
// 90th percentiles, so 80% of steady iterations take between the two.
// Observations above OutlierFactor × the median are periodic phases: they
// stay out of the window and their cost above the median, summed since the
// warm-up, is amortised over every steady step into OverheadMSPerIter, so
// an eval pass every 100 iterations neither inflates the median nor is
// forgotten by the ETA. Sixteen outliers in a row are a level shift (the
// node got slower): the window restarts from them. A regime shift (the last
// 24 observations' median 1.3 times faster or slower than, and more than 5
// standard errors away from, the median of the up to 48 before them, their
// middle half wholly on one side of it) restarts the window from those 24:
// the job got faster, or slower by less than the outlier factor. It is
// noticed about 24 steps after the change, once 48 steady observations
// exist.
type IterEstimator struct {
	Window Observations `json:"window"` // ring of at most WindowSize steady observations
	Next   int          `json:"next"`   // where the next observation goes once the ring is full

	Steady        bool         `json:"steady"`         // warm-up of the current process is over
	Warm          Observations `json:"warm"`           // last observations of the warm-up in progress
	WarmN         int          `json:"warm_n"`         // observations in the warm-up in progress
	WarmupSkipped int          `json:"warmup_skipped"` // observations skipped as warm-up since the last Reset

	RefMS           float64      `json:"ref_ms"`            // median the outlier test compares with
	SinceRef        int          `json:"since_ref"`         // adds since RefMS was computed
	Run             Observations `json:"run"`               // consecutive outliers not yet counted
	OutlierExcessMS float64      `json:"outlier_excess_ms"` // Σ (outlier − RefMS) × steps
	Outliers        int          `json:"outliers"`
	SteadySteps     int64        `json:"steady_steps"` // steps covered after warm-up, outliers included
	MaxGapMS        float64      `json:"max_gap_ms"`   // longest time between two steady step reports

	LastStep int64 `json:"last_step"`
	HaveStep bool  `json:"have_step"`

	Restarts     int `json:"restarts"`      // steps went back (resumed process)
	LevelShifts  int `json:"level_shifts"`  // window restarted after a run of outliers
	RegimeShifts int `json:"regime_shifts"` // window restarted from its recent part (new speed)
	SinceRegime  int `json:"since_regime"`  // steady adds since the last regime check
	Resets       int `json:"resets"`        // Reset calls (new node type)
	Ignored      int `json:"ignored"`       // duplicate steps, non-positive durations

	// the last Estimate and the state it was computed from: the coordinator
	// asks at every report and for every job at every decision round, while
	// the state changes only when a report adds iterations. Not persisted.
	est    IterEstimate
	estOK  bool
	estKey iterEstKey
	// the window in MS order, kept by push (order.go). Not persisted.
	order windowOrder
}

// iterEstKey identifies the state an Estimate was computed from. Every Add
// that changes what Estimate reads moves LastStep (a new step) or a count;
// Reset clears the cache with everything else.
type iterEstKey struct {
	valid                   bool
	window, warm, run, next int
	steady                  bool
	warmN, warmupSkipped    int
	refMS, excess, maxGap   float64
	outliers                int
	steadySteps, lastStep   int64
	restarts, levelShifts   int
	regimeShifts            int
	resets                  int
}

func (e *IterEstimator) key() iterEstKey {
	return iterEstKey{valid: true, window: len(e.Window), warm: len(e.Warm), run: len(e.Run), next: e.Next,
		steady: e.Steady, warmN: e.WarmN, warmupSkipped: e.WarmupSkipped,
		refMS: e.RefMS, excess: e.OutlierExcessMS, maxGap: e.MaxGapMS, outliers: e.Outliers,
		steadySteps: e.SteadySteps, lastStep: e.LastStep,
		restarts: e.Restarts, levelShifts: e.LevelShifts, regimeShifts: e.RegimeShifts, resets: e.Resets}
}

// IterEstimate is the estimator's answer. Times are milliseconds per step.
type IterEstimate struct {
	MS     float64 `json:"ms"`      // typical iteration: step-weighted median of the window
	LowMS  float64 `json:"low_ms"`  // 10th percentile of steady iterations
	HighMS float64 `json:"high_ms"` // 90th percentile of steady iterations
	// OverheadMSPerIter is what an average step costs above MS: periodic
	// phases (outliers, amortised over all steady steps) plus the skew of the
	// steady body (its mean above its median, never negative). MS +
	// OverheadMSPerIter is the mean cost of a step, which is what an ETA needs.
	OverheadMSPerIter float64 `json:"overhead_ms_per_iter"`
	N                 int     `json:"n"` // observations the estimate rests on
	WarmupSkipped     int     `json:"warmup_skipped"`
	Outliers          int     `json:"outliers"`
	// GapMS is the median time between two step reports (MS × the steps one
	// report covers) and MaxGapMS the longest seen after warm-up, eval and
	// checkpoint phases included: the yardsticks of stall detection.
	GapMS    float64 `json:"gap_ms"`
	MaxGapMS float64 `json:"max_gap_ms"`
	// Provisional is set while the first warm-up is still running: the
	// estimate then comes from the last few warm-up observations, which
	// are usually slower than the steady state (so a provisional ETA errs late).
	Provisional bool `json:"provisional,omitempty"`
}

// PerIterMS is the mean cost of one step: MS + OverheadMSPerIter.
func (e IterEstimate) PerIterMS() float64 { return e.MS + e.OverheadMSPerIter }

// Add takes one iteration. It uses LoopDurMS (the loop's own clock) when
// set, else DurMS; both are already per step. A repeated step is a
// duplicate and ignored; a step that goes back means a new process.
func (e *IterEstimator) Add(it report.Iter) {
	e.sanitize()
	ms := it.DurMS
	if it.LoopDurMS > 0 {
		ms = it.LoopDurMS
	}
	if !(ms > 0) || math.IsInf(ms, 0) {
		e.Ignored++
		return
	}
	steps := int64(1)
	if e.HaveStep {
		switch {
		case it.Step == e.LastStep:
			e.Ignored++
			return
		case it.Step < e.LastStep:
			e.restart()
		default:
			steps = min(it.Step-e.LastStep, maxWeight)
		}
	}
	e.LastStep, e.HaveStep = it.Step, true
	o := Obs{MS: math.Round(ms*1000) / 1000, Steps: steps}
	if o.MS <= 0 {
		o.MS = 0.001
	}
	if e.Steady {
		e.addSteady(o)
	} else {
		e.addWarm(o)
	}
}

// NewProcess starts a new warm-up for a new process of the job (a new
// attempt after a requeue), as a step that goes back does: a process that
// resumed from a checkpoint at the last step seen does not step back for
// Add to notice, and its first iterations (start-up, data loading,
// compilation) are not steady ones. The window stays: same node type,
// same speed (Reset is for another node type).
func (e *IterEstimator) NewProcess() {
	if !e.HaveStep {
		return // nothing of an earlier process
	}
	e.restart()
	e.HaveStep = false
}

// restart begins the warm-up of a new process, keeping the window.
func (e *IterEstimator) restart() {
	e.Restarts++
	e.Steady, e.Warm, e.WarmN, e.Run = false, nil, 0, nil
}

// Reset forgets every time: the job runs on another node type now. Counts
// of earlier resets are kept.
func (e *IterEstimator) Reset() {
	*e = IterEstimator{Resets: e.Resets + 1}
}

func (e *IterEstimator) addWarm(o Obs) {
	e.Warm = append(e.Warm, o)
	if len(e.Warm) > 2*warmHalf {
		e.Warm = append(e.Warm[:0], e.Warm[1:]...)
	}
	e.WarmN++
	e.WarmupSkipped++
	if len(e.Warm) < 2*warmHalf {
		return
	}
	early, late := wmedian(e.Warm[:warmHalf]), wmedian(e.Warm[warmHalf:])
	if math.Abs(late-early) > warmTolerance*late && e.WarmN < maxWarmup {
		return
	}
	rest := e.Warm[warmHalf:]
	e.Steady, e.Warm, e.WarmN = true, nil, 0
	e.WarmupSkipped -= len(rest)
	if len(e.Window) == 0 {
		e.RefMS = late
	}
	for _, r := range rest {
		e.addSteady(r)
	}
}

func (e *IterEstimator) addSteady(o Obs) {
	if e.RefMS <= 0 {
		e.RefMS = o.MS
	}
	if o.MS > OutlierFactor*e.RefMS {
		e.Run = append(e.Run, o)
		if len(e.Run) >= levelShiftRun {
			// Not a phase: the job is slower now. Start the window afresh.
			e.LevelShifts++
			e.Window, e.Next = nil, 0
			for _, r := range e.Run {
				e.push(r)
			}
			e.Run = nil
			e.refresh()
		}
		return
	}
	e.commitRun()
	e.push(o)
	e.SinceRef++
	if e.SinceRef >= refreshEvery {
		e.refresh()
	}
	e.SinceRegime++
	if e.SinceRegime >= regimeEvery {
		e.SinceRegime = 0
		e.checkRegime()
	}
}

// appendRecent appends the last n observations pushed, oldest first, to
// dst.
func (e *IterEstimator) appendRecent(dst Observations, n int) Observations {
	n = min(n, len(e.Window))
	if len(e.Window) < WindowSize {
		return append(dst, e.Window[len(e.Window)-n:]...)
	}
	for i := range n {
		dst = append(dst, e.Window[(e.Next-n+i+WindowSize)%WindowSize])
	}
	return dst
}

// checkRegime restarts the window from its last regimeRecent observations
// when they show the job running at another speed for good. Without it a
// window of 512 observations follows a speed-up (a job that shared the
// node ended) only once half of it is new, and the ETA stays late that
// long; a slow-down under OutlierFactor is never a level shift either.
//
// The recent observations are compared with the ones just before them,
// not with the whole window: a window that already mixes two speeds has a
// median between them. The standard-error test keeps noisy jobs (±40 %
// per step) from seeing regimes in their noise; the relative one keeps
// very steady jobs from restarting at every small drift.
func (e *IterEstimator) checkRegime() {
	if len(e.Window) < regimeRecent+regimeMinOld {
		return // too little history to tell a new regime from the old
	}
	// on the stack: this runs every regimeEvery adds, on the coordinator's
	// ingest path
	var buf [regimeRecent + regimeOld]Obs
	var pos [regimeRecent + regimeOld]uint16
	all := e.appendRecent(buf[:0], regimeRecent+regimeOld)
	old, rec := all[:len(all)-regimeRecent], all[len(all)-regimeRecent:]
	// both medians lie within the observations' range: a range narrower
	// than the shift settles it without sorting (a steady job, most checks)
	lo, hi := all[0].MS, all[0].MS
	for _, o := range all {
		lo, hi = min(lo, o.MS), max(hi, o.MS)
	}
	if hi <= (1+regimeShift)*lo {
		return
	}
	r := wquantilesOrdered(rec, byMS(pos[:0], rec), 0.25, 0.5, 0.75)
	o := wquantilesOrdered(old, byMS(pos[:0], old), 0.25, 0.5, 0.75)
	med, diff := o[1], math.Abs(r[1]-o[1])
	// the spread: the wider of the two parts' interquartile ranges (a couple
	// of dozen observations can show a narrow one by chance)
	iqr := max(r[2]-r[0], o[2]-o[0])
	if !(med > 0) || !(r[1] > 0) || max(r[1], med) <= (1+regimeShift)*min(r[1], med) || diff <= regimeZ*medianDiffSE(iqr, len(rec), len(old)) {
		return
	}
	if r[0] <= med && med <= r[2] {
		return // the recent spread still covers the old level: noise, not a regime
	}
	// the change may have come within the recent observations: the ones
	// still on the old level's side of the midpoint belong to the old regime
	mid := (r[1] + med) / 2
	faster := r[1] < med
	e.RegimeShifts++
	steps := e.SteadySteps // the recent observations are counted already
	e.Window, e.Next = nil, 0
	for _, o := range rec {
		if (faster && o.MS > mid) || (!faster && o.MS < mid) {
			continue
		}
		e.push(o)
	}
	e.SteadySteps = steps
	e.refresh()
}

// medianDiffSE is the standard error of the difference of the medians of
// two samples of n and m observations with the interquartile range iqr:
// 1.253 σ √(1/n + 1/m), σ estimated as iqr / 1.349 (normal data; robust to
// the odd slow step).
func medianDiffSE(iqr float64, n, m int) float64 {
	return 1.253 * iqr / 1.349 * math.Sqrt(1/float64(n)+1/float64(m))
}

// commitRun counts the pending outliers as periodic phases: a normal
// iteration came after them.
func (e *IterEstimator) commitRun() {
	for _, r := range e.Run {
		e.OutlierExcessMS += (r.MS - e.RefMS) * float64(r.Steps)
		e.SteadySteps += r.Steps
		e.Outliers++
		e.MaxGapMS = max(e.MaxGapMS, r.gap())
	}
	e.Run = nil
}

func (e *IterEstimator) push(o Obs) {
	e.SteadySteps += o.Steps
	e.MaxGapMS = max(e.MaxGapMS, o.gap())
	if len(e.Window) < WindowSize {
		was := e.Window
		e.Window = append(e.Window, o)
		e.order.appended(e, was, e.Window)
		return
	}
	e.order.replace(e, e.Window, e.Next, o) // e.Window[e.Next] = o
	e.Next = (e.Next + 1) % WindowSize
}

// windowQuantiles is wquantiles(e.Window, qs...), read from the kept order.
func (e *IterEstimator) windowQuantiles(qs ...float64) []float64 {
	return wquantilesOrdered(e.Window, e.order.sorted(e, e.Window), qs...)
}

func (e *IterEstimator) refresh() {
	e.SinceRef = 0
	if len(e.Window) > 0 {
		e.RefMS = e.windowQuantiles(0.5)[0]
	}
}

// sanitize repairs state that did not come from this code (a hand-edited
// or truncated Redis value), so that no method can index out of range.
func (e *IterEstimator) sanitize() {
	if len(e.Window) > WindowSize {
		e.Window = e.Window[len(e.Window)-WindowSize:]
	}
	if e.Next < 0 || e.Next >= WindowSize || len(e.Window) < WindowSize {
		e.Next = 0
	}
	if len(e.Warm) > 2*warmHalf {
		e.Warm = e.Warm[len(e.Warm)-2*warmHalf:]
	}
	if !(e.RefMS >= 0) || math.IsInf(e.RefMS, 0) {
		e.RefMS = 0
	}
}

// Estimate returns the current estimate; ok is false until there is
// anything to say (fewer than 3 observations).
func (e *IterEstimator) Estimate() (IterEstimate, bool) {
	e.sanitize()
	key := e.key()
	if e.estKey != key {
		e.est, e.estOK = e.estimate()
		e.estKey = key
	}
	return e.est, e.estOK
}

func (e *IterEstimator) estimate() (IterEstimate, bool) {
	if len(e.Window) >= minSteady {
		q := e.windowQuantiles(0.1, 0.5, 0.9)
		est := IterEstimate{
			LowMS: q[0], MS: q[1], HighMS: q[2],
			N:             len(e.Window),
			WarmupSkipped: e.WarmupSkipped,
			Outliers:      e.Outliers + len(e.Run),
			MaxGapMS:      e.MaxGapMS,
		}
		excess, steps := e.OutlierExcessMS, e.SteadySteps
		for _, r := range e.Run {
			excess += (r.MS - e.RefMS) * float64(r.Steps)
			steps += r.Steps
			est.MaxGapMS = max(est.MaxGapMS, r.gap())
		}
		est.OverheadMSPerIter = max(0, wmean(e.Window)-est.MS)
		if steps > 0 && excess > 0 {
			est.OverheadMSPerIter += excess / float64(steps)
		}
		est.GapMS = medianGap(e.Window)
		return est, true
	}
	if len(e.Warm) >= minSteady {
		last := e.Warm[max(0, len(e.Warm)-warmHalf):]
		est := IterEstimate{MS: wmedian(last), LowMS: last[0].MS, HighMS: last[0].MS, N: len(last),
			WarmupSkipped: e.WarmupSkipped, Provisional: true}
		gaps := make([]float64, len(last))
		for i, o := range last {
			est.LowMS = min(est.LowMS, o.MS)
			est.HighMS = max(est.HighMS, o.MS)
			gaps[i] = o.gap()
		}
		est.GapMS = median(gaps)
		return est, true
	}
	return IterEstimate{WarmupSkipped: e.WarmupSkipped}, false
}
