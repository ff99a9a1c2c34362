package estimate

import (
	"encoding/json"
	"fmt"
	"math"
	"slices"
)

// Tuning of MemTracker.
const (
	memPoints    = 64 // points kept for the trend
	memWarmup    = 5  // samples of each process skipped (allocator and cache warm-up)
	memMinPoints = 8  // points before a trend is believed
	// GrowthMinTau: at least 3 of 4 ordered pairs of points must go up
	// (Kendall's tau ≥ 0.5) for growth to count as sustained.
	GrowthMinTau = 0.5
	// GrowthMinBytes and GrowthMinFraction: growth over the observed span
	// must reach both 32 MiB and 5% of the typical level to be significant.
	GrowthMinBytes    = 32 << 20
	GrowthMinFraction = 0.05
)

// MemPoint is one kept memory sample, stored as [step, rss, gpu].
type MemPoint struct {
	Step, RSS, GPU int64
}

// MarshalJSON writes [step, rss, gpu].
func (p MemPoint) MarshalJSON() ([]byte, error) { return appendMemPoint(nil, p) }

// UnmarshalJSON reads [step, rss, gpu].
func (p *MemPoint) UnmarshalJSON(b []byte) error {
	var a [3]int64
	if err := json.Unmarshal(b, &a); err != nil {
		return err
	}
	v, err := newMemPoint(a)
	if err != nil {
		return err
	}
	*p = v
	return nil
}

func appendMemPoint(b []byte, p MemPoint) ([]byte, error) {
	return appendInts(b, p.Step, p.RSS, p.GPU), nil
}

func newMemPoint(a [3]int64) (MemPoint, error) {
	if a[0] < 0 || a[1] < 0 || a[2] < 0 {
		return MemPoint{}, fmt.Errorf("estimate: bad memory point %v", a)
	}
	return MemPoint{Step: a[0], RSS: a[1], GPU: a[2]}, nil
}

// MemPoints is a list of memory points, stored as the JSON array of their
// [step, rss, gpu] triples, encoded and decoded as a whole (codec.go).
type MemPoints []MemPoint

// MarshalJSON writes [[step, rss, gpu], ...] (null for a nil list).
func (ps MemPoints) MarshalJSON() ([]byte, error) {
	return ps.appendTo(make([]byte, 0, 2+len(ps)*24))
}

// UnmarshalJSON reads [[step, rss, gpu], ...], with the checks of MemPoint.
func (ps *MemPoints) UnmarshalJSON(b []byte) error {
	l, err := decodeList(b, "memory points", newMemPoint)
	if err != nil {
		return err
	}
	*ps = l
	return nil
}

// MemTracker follows one job's CPU (RSS) and GPU memory. The zero value
// is ready to use.
//
// It keeps the peaks, and for the trend at most 64 points spread evenly
// over the steps of the current process after its first 5 samples: a
// point is kept when it is at least Stride steps after the last one, and
// when 64 are kept every other one is dropped and Stride doubles. The
// slope is the Theil–Sen estimate over those points (the median of all
// pairwise slopes), which a few spikes (an eval pass, a checkpoint
// buffer) do not move.
type MemTracker struct {
	PeakRSS  int64     `json:"peak_rss"`
	PeakGPU  int64     `json:"peak_gpu"`
	Points   MemPoints `json:"points"`
	Stride   int64     `json:"stride"`
	Seen     int       `json:"seen"` // samples of the current process
	LastStep int64     `json:"last_step"`
	HaveStep bool      `json:"have_step"`
	Restarts int       `json:"restarts"`
	Resets   int       `json:"resets"`

	// the last Trend and what it was computed from: the coordinator asks
	// for the trend at every report (three times), while the points change
	// only every Stride steps. Not persisted.
	trend    MemTrend
	trendKey memTrendKey
}

// memTrendKey identifies the points a Trend was computed from: points are
// only appended (each at a higher step than the last), thinned (the count
// halves) or dropped with a restart or a reset (counted).
type memTrendKey struct {
	ok               bool
	n                int
	first, last      MemPoint
	restarts, resets int
}

// MemTrend is everything the tracker derives from its points.
type MemTrend struct {
	RSSPerIter, GPUPerIter float64 // Theil–Sen slopes, bytes per step
	RSSTau, GPUTau         float64 // Kendall's tau of each series
	RSSGrowing, GPUGrowing bool    // significant sustained growth, see Growing
	Points                 int
}

// Add takes one sample: the last step seen and the memory in use then.
// Negative values are treated as unknown (0). A step that goes back means
// a new process: the trend restarts, the peaks stay.
func (m *MemTracker) Add(step, rssBytes, gpuBytes int64) {
	rssBytes, gpuBytes, step = max(rssBytes, 0), max(gpuBytes, 0), max(step, 0)
	m.PeakRSS = max(m.PeakRSS, rssBytes)
	m.PeakGPU = max(m.PeakGPU, gpuBytes)
	if m.HaveStep && step < m.LastStep {
		m.restart()
	}
	m.LastStep, m.HaveStep = step, true
	m.Seen++
	if m.Seen <= memWarmup {
		return
	}
	if len(m.Points) > memPoints {
		m.Points = m.Points[len(m.Points)-memPoints:]
	}
	m.Stride = max(m.Stride, 1)
	if n := len(m.Points); n > 0 && step < m.Points[n-1].Step+m.Stride {
		return
	}
	if len(m.Points) == memPoints {
		kept := m.Points[:0]
		for i := 0; i < len(m.Points); i += 2 {
			kept = append(kept, m.Points[i])
		}
		m.Points = kept
		m.Stride *= 2
		if step < m.Points[len(m.Points)-1].Step+m.Stride {
			return
		}
	}
	if cap(m.Points) < memPoints {
		// the points fill up to memPoints over minutes (one per sample at
		// most): allocated at their bound at once, a tracker's footprint is
		// flat from its first point (a soak sees no growth toward the cap)
		m.Points = slices.Grow(m.Points, memPoints-len(m.Points))
	}
	m.Points = append(m.Points, MemPoint{Step: step, RSS: rssBytes, GPU: gpuBytes})
}

// NewProcess starts the trend again for a new process of the job (a new
// attempt after a requeue or a move): its memory level is its own, and a
// process that resumed from a checkpoint at the last step seen does not
// step back for Add to notice. Its first samples are skipped as warm-up
// again; the peaks stay.
func (m *MemTracker) NewProcess() {
	if !m.HaveStep && m.Seen == 0 {
		return // nothing of an earlier process
	}
	m.restart()
	m.HaveStep = false
}

// restart drops the trend of the process that ended; the peaks stay.
func (m *MemTracker) restart() {
	m.Restarts++
	m.Points, m.Seen, m.Stride = nil, 0, 0
}

// Reset forgets everything, peaks included: the job runs on another node
// type, where memory use differs (no GPU memory on a CPU node).
func (m *MemTracker) Reset() {
	*m = MemTracker{Resets: m.Resets + 1}
}

// Peak returns the highest RSS and GPU memory seen.
func (m *MemTracker) Peak() (rss, gpu int64) { return m.PeakRSS, m.PeakGPU }

// Slope returns the memory growth per step (Theil–Sen), 0 before 3 points.
func (m *MemTracker) Slope() (rssPerIter, gpuPerIter float64) {
	t := m.Trend()
	return t.RSSPerIter, t.GPUPerIter
}

// Growing reports a suspected leak: sustained, significant growth of RSS
// or GPU memory. A series grows when, over at least 8 points, its
// Theil–Sen slope is positive, Kendall's tau is at least 0.5 (most pairs
// of points go up: sustained, not noise), the growth over the observed
// steps reaches both 32 MiB and 5% of the series' median level, and the
// later half of the points alone still grows by half that (it has not
// levelled off, and one jump between two flat halves is not a leak).
func (m *MemTracker) Growing() bool {
	t := m.Trend()
	return t.RSSGrowing || t.GPUGrowing
}

// PredictPeak predicts the peaks at totalIters: the current peak plus the
// slope × the remaining steps for a series that is Growing, else the
// current peak. totalIters <= 0 (unknown) gives the current peaks.
func (m *MemTracker) PredictPeak(totalIters int64) (rss, gpu int64) {
	rss, gpu = m.PeakRSS, m.PeakGPU
	rem := totalIters - m.LastStep
	if totalIters <= 0 || rem <= 0 {
		return rss, gpu
	}
	t := m.Trend()
	grow := func(peak int64, slope float64, growing bool) int64 {
		if !growing || slope <= 0 {
			return peak
		}
		add := slope * float64(rem)
		if add >= float64(math.MaxInt64-peak) {
			return math.MaxInt64
		}
		return peak + int64(add)
	}
	return grow(rss, t.RSSPerIter, t.RSSGrowing), grow(gpu, t.GPUPerIter, t.GPUGrowing)
}

// Trend computes slopes and growth verdicts in one pass over the points,
// remembered until the points change (Slope, Growing and PredictPeak each
// call it).
func (m *MemTracker) Trend() MemTrend {
	key := memTrendKey{ok: true, n: len(m.Points), restarts: m.Restarts, resets: m.Resets}
	if key.n > 0 {
		key.first, key.last = m.Points[0], m.Points[key.n-1]
	}
	if m.trendKey == key {
		return m.trend
	}
	m.trend, m.trendKey = trendOf(m.Points), key
	return m.trend
}

// trendOf computes the trend of a tracker's points.
func trendOf(pts []MemPoint) MemTrend {
	if len(pts) > memPoints {
		pts = pts[len(pts)-memPoints:]
	}
	t := MemTrend{Points: len(pts)}
	if len(pts) < 3 {
		return t
	}
	x := make([]int64, len(pts))
	rss := make([]float64, len(pts))
	gpu := make([]float64, len(pts))
	for i, p := range pts {
		x[i], rss[i], gpu[i] = p.Step, float64(p.RSS), float64(p.GPU)
	}
	t.RSSPerIter, t.RSSTau = trend(x, rss)
	t.GPUPerIter, t.GPUTau = trend(x, gpu)
	if len(pts) >= memMinPoints {
		span := float64(x[len(x)-1] - x[0])
		h := len(pts) / 2
		growing := func(y []float64, slope, tau float64) bool {
			if slope <= 0 || tau < GrowthMinTau {
				return false
			}
			need := max(GrowthMinBytes, GrowthMinFraction*median(y))
			late, _ := trend(x[h:], y[h:])
			return slope*span >= need && late*float64(x[len(x)-1]-x[h]) >= need/2
		}
		t.RSSGrowing = growing(rss, t.RSSPerIter, t.RSSTau)
		t.GPUGrowing = growing(gpu, t.GPUPerIter, t.GPUTau)
	}
	return t
}
