package estimate

import (
	"math"
	"time"
)

// ETA is a predicted end of a run.
type ETA struct {
	Known  bool   `json:"known"`
	Reason string `json:"reason,omitempty"` // why it is unknown
	// End uses the typical iteration time, Low and High its 10th and 90th
	// percentiles (each plus the amortised overhead): the run ends at High
	// only if every remaining step is as slow as the slowest tenth of the
	// steps so far, so [Low, High] is a wide, pessimistic band, and it
	// narrows as the run nears its end.
	// Calibrated replaces that band by one of stated coverage where
	// earlier runs allow it.
	End       time.Time `json:"end"`
	Low       time.Time `json:"low"`
	High      time.Time `json:"high"`
	Remaining int64     `json:"remaining"` // steps left
	// Coverage is the band's stated coverage (BandCoverage), 0 while it
	// is unknown; BandSource what the band rests on, BandRuns how many
	// earlier runs' ratios there were (Calibrated). Empty before
	// Calibrated is asked.
	Coverage   float64    `json:"coverage,omitempty"`
	BandSource BandSource `json:"band_source,omitempty"`
	BandRuns   int        `json:"band_runs,omitempty"`
}

// Reasons an ETA is unknown.
const (
	ReasonNoTotal    = "total iterations unknown"
	ReasonNoEstimate = "no iteration time estimate yet"
)

// PredictEnd predicts when a run at step (completed steps) of total ends:
// now + remaining × (MS + OverheadMSPerIter) + extraMS, where extraMS is
// whatever else the caller knows is ahead (a final checkpoint, a restart).
// An unknown total (<= 0) is reported as such rather than invented.
func PredictEnd(now time.Time, step, total int64, est IterEstimate, extraMS float64) ETA {
	if total <= 0 {
		return ETA{Reason: ReasonNoTotal}
	}
	if !(est.MS > 0) {
		return ETA{Reason: ReasonNoEstimate}
	}
	rem := max(total-max(step, 0), 0)
	at := func(perStep float64) time.Time {
		return now.Add(msDuration(float64(rem)*perStep + max(extraMS, 0)))
	}
	ov := max(est.OverheadMSPerIter, 0)
	return ETA{
		Known:     true,
		End:       at(est.MS + ov),
		Low:       at(min(est.LowMS, est.MS) + ov),
		High:      at(max(est.HighMS, est.MS) + ov),
		Remaining: rem,
	}
}

// WithPast widens the band of an ETA that PredictEnd(now, …, est,
// extraMS) made to hold the end the run would reach at each earlier run's
// typical iteration time (pastMS: the receipts of the same model
// configuration, batch and partition), plus this run's amortised
// overhead. The end itself stays this run's own prediction: earlier runs
// say how far the speed of the same work on the same nodes has strayed,
// which the steps measured so far cannot (a machine whose speed drifts
// over a run, a job sharing the node that later ends). Values that are
// not positive and finite are skipped; an unknown ETA is returned as is.
func (e ETA) WithPast(now time.Time, est IterEstimate, extraMS float64, pastMS []float64) ETA {
	if !e.Known {
		return e
	}
	ov := max(est.OverheadMSPerIter, 0)
	for _, ms := range pastMS {
		if !(ms > 0) || math.IsInf(ms, 0) {
			continue
		}
		e = e.widen(now.Add(msDuration(float64(e.Remaining)*(ms+ov) + max(extraMS, 0))))
	}
	return e
}
