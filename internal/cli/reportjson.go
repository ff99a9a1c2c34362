package cli

import (
	"time"

	"github.com/isched/isched/internal/report"
)

// reportJSON is `isched report --json`: what the text report says, and the
// samples the plot draws. Keys are snake_case, times RFC 3339 in UTC,
// sizes in bytes; the unit of every other number is in its key.
type reportJSON struct {
	Lineage      string          `json:"lineage"`
	Points       int             `json:"points"`
	Unreadable   int             `json:"unreadable"` // samples skipped: they did not decode
	FirstSample  time.Time       `json:"first_sample"`
	LastSample   time.Time       `json:"last_sample"`
	SpanSeconds  float64         `json:"span_seconds"`
	Iterations   *iterationsJSON `json:"iterations"` // null: no iterations recorded
	PeakRSSBytes int64           `json:"peak_rss_bytes"`
	PeakGPUBytes int64           `json:"peak_gpu_bytes"` // 0: no GPU memory sampled
	// Attempts are the partitions the lineage ran on, from the
	// coordinator's record ([] once it is gone).
	Attempts      []attemptJSON `json:"attempts"`
	Continuations int           `json:"continuations"` // attempts isched continued
	Ended         *endedJSON    `json:"ended"`         // null: not over, or no record
	Samples       []sampleJSON  `json:"samples"`
}

type iterationsJSON struct {
	Count     int     `json:"count"`
	MedianMS  float64 `json:"median_ms"`
	P90MS     float64 `json:"p90_ms"`
	FirstStep int64   `json:"first_step"`
	LastStep  int64   `json:"last_step"`
}

type attemptJSON struct {
	JobID     uint64     `json:"job_id"`
	Attempt   int        `json:"attempt"`
	Partition string     `json:"partition"`
	Node      string     `json:"node"`
	Start     time.Time  `json:"start"`
	End       *time.Time `json:"end"` // null: still running there
	StartStep int64      `json:"start_step"`
	EndStep   *int64     `json:"end_step"`         // null: still running there
	Reason    string     `json:"reason,omitempty"` // why it ended there
}

type endedJSON struct {
	State      string    `json:"state"`
	At         time.Time `json:"at"`
	Step       int64     `json:"step"`
	TotalIters int64     `json:"total_iters"`
	ExitStatus *int      `json:"exit_status,omitempty"`
}

type sampleJSON struct {
	Time     time.Time `json:"time"`
	Step     int64     `json:"step"`
	IterMS   float64   `json:"iter_ms,omitempty"` // absent: no iteration ended since the last sample
	RSSBytes int64     `json:"rss_bytes"`
	GPUBytes int64     `json:"gpu_bytes,omitempty"`
}

func utcMS(ms int64) time.Time { return time.UnixMilli(ms).UTC() }

// json is the report's data for --json.
func (r *reportData) json() reportJSON {
	sum := r.sum
	out := reportJSON{
		Lineage: r.lineage, Points: len(r.pts), Unreadable: r.bad,
		FirstSample: utcMS(r.pts[0].TMS), LastSample: utcMS(r.pts[len(r.pts)-1].TMS), SpanSeconds: sum.span.Seconds(),
		PeakRSSBytes: sum.peakRSS, PeakGPUBytes: sum.peakGPU,
		Attempts: []attemptJSON{}, Samples: make([]sampleJSON, len(r.pts)),
	}
	if sum.iters > 0 {
		out.Iterations = &iterationsJSON{Count: sum.iters, MedianMS: sum.medianIter, P90MS: sum.p90Iter, FirstStep: sum.firstStep, LastStep: sum.lastStep}
	}
	for i, p := range r.pts {
		out.Samples[i] = sampleJSON{Time: utcMS(p.TMS), Step: p.Step, IterMS: p.IterMS, RSSBytes: p.RSS, GPUBytes: p.GPU}
	}
	if s := r.status; s != nil {
		out.Attempts, out.Continuations = attemptsJSON(s.History), s.Continuations
		if s.EndedMS > 0 {
			out.Ended = &endedJSON{State: s.State, At: utcMS(s.EndedMS), Step: max(s.Step, 0), TotalIters: s.TotalIters, ExitStatus: s.ExitStatus}
		}
	}
	return out
}

func attemptsJSON(history []report.Span) []attemptJSON {
	out := make([]attemptJSON, len(history))
	for i, sp := range history {
		out[i] = attemptJSON{JobID: sp.JobID, Attempt: sp.Attempt, Partition: sp.Partition, Node: sp.Node, Start: utcMS(sp.StartMS),
			StartStep: sp.StartStep, Reason: sp.Reason}
		if sp.EndMS > 0 {
			end, step := utcMS(sp.EndMS), sp.EndStep
			out[i].End, out[i].EndStep = &end, &step
		}
	}
	return out
}
