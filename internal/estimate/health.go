package estimate

import (
	"fmt"
	"time"
)

// Event kinds, as report.StatusEvent.Kind.
const (
	EventStall           = "stall"
	EventNaNLoss         = "nan-loss"
	EventMemoryNearLimit = "memory-near-limit"
	EventMemoryGrowth    = "memory-growth"
)

// Health thresholds.
const (
	// MinStall is the shortest silence ever called a stall.
	MinStall = 60 * time.Second
	// DefaultStallFactor is used when Check gets a factor <= 0.
	DefaultStallFactor = 10.0
	// NearLimit is the fraction of a memory limit that counts as near it.
	NearLimit = 0.9
)

// Event is something the user should see.
type Event struct {
	Kind    string `json:"kind"`
	Message string `json:"message"`
}

// Health is what the coordinator knows of a running job for Check.
// Limits of 0 are unknown and not checked.
type Health struct {
	LastIterAt       time.Time    // when the last iteration was seen; zero: none yet
	Est              IterEstimate // from IterEstimator.Estimate
	HaveEst          bool
	LossNonFinite    bool // the last reported loss was NaN or infinite
	RSS, RSSLimit    int64
	GPU, GPULimit    int64
	Growing          bool  // MemTracker.Growing
	PredictedPeakRSS int64 // MemTracker.PredictPeak
	PredictedPeakGPU int64
}

// Check returns the health events of a job, in a stable order: stall,
// nan-loss, memory-near-limit (RSS, then GPU), memory-growth.
//
// Stall: no iteration for longer than all of MinStall (60 s),
// stallFactor × the typical time between step reports (GapMS, which is the
// iteration time when every step is reported) and 1.5 × the longest gap
// already seen after warm-up (so a recurring eval pass or checkpoint write
// is not a stall). Without an estimate nothing is said: a job still
// starting up cannot be told from a hung one.
//
// Memory near limit: usage above 90% of the limit, or a predicted peak
// above the limit.
func Check(now time.Time, h Health, stallFactor float64) []Event {
	if !(stallFactor > 0) {
		stallFactor = DefaultStallFactor
	}
	var out []Event
	if h.HaveEst && !h.LastIterAt.IsZero() {
		gap := max(h.Est.GapMS, h.Est.MS)
		limit := max(MinStall, msDuration(stallFactor*gap), msDuration(1.5*h.Est.MaxGapMS))
		if since := now.Sub(h.LastIterAt); since > limit {
			out = append(out, Event{Kind: EventStall, Message: fmt.Sprintf(
				"no iteration for %s (expected one every %s; stall threshold %s)",
				round(since), round(msDuration(gap)), round(limit))})
		}
	}
	if h.LossNonFinite {
		out = append(out, Event{Kind: EventNaNLoss, Message: "the training loss is NaN or infinite: the run is diverging"})
	}
	near := func(what string, used, peak, limit int64) {
		switch {
		case limit <= 0:
		case float64(used) > NearLimit*float64(limit):
			out = append(out, Event{Kind: EventMemoryNearLimit, Message: fmt.Sprintf(
				"%s memory %s is %.0f%% of the limit %s", what, size(used), 100*float64(used)/float64(limit), size(limit))})
		case peak > limit:
			out = append(out, Event{Kind: EventMemoryNearLimit, Message: fmt.Sprintf(
				"%s memory %s now, predicted to reach %s before the end, above the limit %s", what, size(used), size(peak), size(limit))})
		}
	}
	near("CPU", h.RSS, h.PredictedPeakRSS, h.RSSLimit)
	near("GPU", h.GPU, h.PredictedPeakGPU, h.GPULimit)
	if h.Growing {
		msg := fmt.Sprintf("memory keeps growing (possible leak): CPU %s now, predicted peak %s", size(h.RSS), size(max(h.PredictedPeakRSS, h.RSS)))
		if h.GPU > 0 || h.PredictedPeakGPU > 0 {
			msg += fmt.Sprintf("; GPU %s now, predicted peak %s", size(h.GPU), size(max(h.PredictedPeakGPU, h.GPU)))
		}
		out = append(out, Event{Kind: EventMemoryGrowth, Message: msg})
	}
	return out
}

func round(d time.Duration) time.Duration {
	if d >= time.Second {
		return d.Round(time.Second)
	}
	return d.Round(time.Millisecond)
}

// size formats a size in binary units with one decimal.
func size(n int64) string {
	const unit = 1024
	if n < unit {
		return fmt.Sprintf("%d B", n)
	}
	div, exp := int64(unit), 0
	for m := n / unit; m >= unit && exp < 5; m /= unit {
		div *= unit
		exp++
	}
	return fmt.Sprintf("%.1f %ciB", float64(n)/float64(div), "KMGTPE"[exp])
}
