package cli

import "github.com/isched/isched/internal/report"

// reportJSON is `isched report --json`: what the text report says, and the
// samples the plot draws, in the --json style (jsonstyle.go).
type reportJSON struct {
	Lineage      string          `json:"lineage"`
	Points       int             `json:"points"`
	Unreadable   int             `json:"unreadable"` // samples skipped: they did not decode
	FirstSample  jsonTime        `json:"first_sample"`
	LastSample   jsonTime        `json:"last_sample"`
	SpanS        float64         `json:"span_s"`
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
	MedianS   float64 `json:"median_s"`
	P90S      float64 `json:"p90_s"`
	FirstStep int64   `json:"first_step"`
	LastStep  int64   `json:"last_step"`
}

type attemptJSON struct {
	JobID     uint64    `json:"job_id"`
	Attempt   int       `json:"attempt"`
	Partition string    `json:"partition"`
	Node      string    `json:"node"`
	Start     jsonTime  `json:"start"`
	End       *jsonTime `json:"end"` // null: still running there
	StartStep int64     `json:"start_step"`
	EndStep   *int64    `json:"end_step"`         // null: still running there
	Reason    string    `json:"reason,omitempty"` // why it ended there
	Ranks     int       `json:"ranks"`            // world size: the step's tasks (1: one, or not known)
}

type endedJSON struct {
	State      string   `json:"state"`
	At         jsonTime `json:"at"`
	Step       int64    `json:"step"`
	TotalIters int64    `json:"total_iters"`
	ExitStatus *int     `json:"exit_status,omitempty"`
}

type sampleJSON struct {
	Time     jsonTime `json:"time"`
	Step     int64    `json:"step"`
	IterS    float64  `json:"iter_s,omitempty"` // absent: no iteration ended since the last sample
	RSSBytes int64    `json:"rss_bytes"`
	GPUBytes int64    `json:"gpu_bytes,omitempty"`
	Loss     *float64 `json:"loss,omitempty"` // the last loss the loop reported in the sample
}

// json is the report's data for --json.
func (r *reportData) json() reportJSON {
	sum := r.sum
	out := reportJSON{
		Lineage: r.lineage, Points: len(r.pts), Unreadable: r.bad,
		FirstSample: msTime(r.pts[0].TMS), LastSample: msTime(r.pts[len(r.pts)-1].TMS), SpanS: sum.span.Seconds(),
		PeakRSSBytes: sum.peakRSS, PeakGPUBytes: sum.peakGPU,
		Attempts: []attemptJSON{}, Samples: make([]sampleJSON, len(r.pts)),
	}
	if sum.iters > 0 {
		out.Iterations = &iterationsJSON{Count: sum.iters, MedianS: msSeconds(sum.medianIter), P90S: msSeconds(sum.p90Iter), FirstStep: sum.firstStep, LastStep: sum.lastStep}
	}
	for i, p := range r.pts {
		out.Samples[i] = sampleJSON{Time: msTime(p.TMS), Step: p.Step, IterS: msSeconds(p.IterMS), RSSBytes: p.RSS, GPUBytes: p.GPU, Loss: p.Loss}
	}
	if s := r.status; s != nil {
		out.Attempts, out.Continuations = attemptsJSON(s.History), s.Continuations
		if s.EndedMS > 0 {
			out.Ended = &endedJSON{State: s.State, At: msTime(s.EndedMS), Step: max(s.Step, 0), TotalIters: s.TotalIters, ExitStatus: s.ExitStatus}
		}
	}
	return out
}

func attemptsJSON(history []report.Span) []attemptJSON {
	out := make([]attemptJSON, len(history))
	for i, sp := range history {
		out[i] = attemptJSON{JobID: sp.JobID, Attempt: sp.Attempt, Partition: sp.Partition, Node: sp.Node, Start: msTime(sp.StartMS),
			StartStep: sp.StartStep, Reason: sp.Reason, Ranks: max(1, sp.Ranks)}
		if sp.EndMS > 0 {
			end, step := msTime(sp.EndMS), sp.EndStep
			out[i].End, out[i].EndStep = &end, &step
		}
	}
	return out
}
