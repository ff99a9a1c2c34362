package sim

import (
	"fmt"
	"io"
	"math"
	"slices"
	"strings"
	"text/tabwriter"

	"github.com/isched/isched/internal/plan"
)

// Observed is one job of a trace as it went on a real cluster (or in the
// simulation): seconds from the trace's start.
type Observed struct {
	ID     int
	Submit float64
	Wait   float64 // to its first start
	JCT    float64 // submission to the end of its last step
	Path   []Hop   // its attempts' starts, in order
}

// ValidationRow is one job on the real cluster and in the simulation.
type ValidationRow struct {
	Lab, Sim Observed
	Isched   bool
	Err      float64 // (sim JCT − lab JCT) / lab JCT
	SamePath bool    // the same partitions in the same order
}

// Validation compares a replay on a real cluster with the simulation of
// the same trace (docs/evaluation.md, "Validation against the lab").
type Validation struct {
	Rows []ValidationRow
	// MedianErr and MaxErr are of |Err| over the jobs.
	MedianErr, MaxErr float64
	// SamePaths of IschedJobs isched jobs went through the same
	// partitions in the same order.
	SamePaths, IschedJobs int
	// Moves are the attempts after a job's first that changed partition,
	// as "job N: from→to", in time order; InOrder is the length of their
	// longest common subsequence (the moves both made in the same order).
	LabMoves, SimMoves []string
	InOrder            int
}

// Validate pairs lab's jobs with the simulation's by id. isched reports
// whether a job was submitted through isched.
func Validate(lab []Observed, sim *Result) (Validation, error) {
	byID := map[int]JobResult{}
	for _, j := range sim.Jobs {
		byID[j.ID] = j
	}
	var v Validation
	var errs []float64
	for _, l := range lab {
		j, ok := byID[l.ID]
		if !ok {
			return v, fmt.Errorf("sim: job %d ran on the cluster but not in the simulation", l.ID)
		}
		if l.JCT <= 0 {
			return v, fmt.Errorf("sim: job %d: no completion time on the cluster", l.ID)
		}
		row := ValidationRow{Lab: l, Sim: Observed{ID: j.ID, Submit: j.Submit, Wait: j.Wait, JCT: j.JCT, Path: j.Path}, Isched: j.Managed}
		row.Err = (j.JCT - l.JCT) / l.JCT
		row.SamePath = slices.Equal(partitions(l.Path), partitions(j.Path))
		if row.Isched {
			v.IschedJobs++
			if row.SamePath {
				v.SamePaths++
			}
		}
		errs = append(errs, math.Abs(row.Err))
		v.Rows = append(v.Rows, row)
	}
	if len(errs) > 0 {
		v.MedianErr, v.MaxErr = plan.Median(errs), slices.Max(errs)
	}
	labObs, simObs := make([]Observed, len(v.Rows)), make([]Observed, len(v.Rows))
	for i, r := range v.Rows {
		labObs[i], simObs[i] = r.Lab, r.Sim
	}
	v.LabMoves, v.SimMoves = moves(labObs), moves(simObs)
	v.InOrder = lcs(v.LabMoves, v.SimMoves)
	return v, nil
}

func partitions(path []Hop) []string {
	out := make([]string, len(path))
	for i, h := range path {
		out[i] = h.Partition
	}
	return out
}

// moves are the partition changes of jobs, in time order (ties by job).
func moves(jobs []Observed) []string {
	type mv struct {
		at float64
		id int
		s  string
	}
	var all []mv
	for _, j := range jobs {
		for k := 1; k < len(j.Path); k++ {
			if from, to := j.Path[k-1].Partition, j.Path[k].Partition; from != to {
				all = append(all, mv{j.Path[k].At, j.ID, fmt.Sprintf("job %d: %s→%s", j.ID, from, to)})
			}
		}
	}
	slices.SortStableFunc(all, func(a, b mv) int {
		if a.at != b.at {
			return int(math.Copysign(1, a.at-b.at))
		}
		return a.id - b.id
	})
	out := make([]string, len(all))
	for i, m := range all {
		out[i] = m.s
	}
	return out
}

// lcs is the length of the longest common subsequence of a and b.
func lcs(a, b []string) int {
	prev, cur := make([]int, len(b)+1), make([]int, len(b)+1)
	for i := range a {
		for k := range b {
			switch {
			case a[i] == b[k]:
				cur[k+1] = prev[k] + 1
			default:
				cur[k+1] = max(prev[k+1], cur[k])
			}
		}
		prev, cur = cur, prev
	}
	return prev[len(b)]
}

// WriteValidation prints v: a row per job, then the summary.
func WriteValidation(w io.Writer, v Validation) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "job\tisched\tsubmit s\twait lab s\twait sim s\tJCT lab s\tJCT sim s\tΔ JCT\tpath lab\tpath sim")
	for _, r := range v.Rows {
		fmt.Fprintf(tw, "%d\t%s\t%.0f\t%.0f\t%.0f\t%.0f\t%.0f\t%+.1f%%\t%s\t%s\n", r.Lab.ID, yesNo(r.Isched), r.Lab.Submit,
			r.Lab.Wait, r.Sim.Wait, r.Lab.JCT, r.Sim.JCT, 100*r.Err, pathText(r.Lab.Path), pathText(r.Sim.Path))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	_, err := fmt.Fprintf(w, "median |Δ JCT| %.1f%%, max %.1f%%; isched jobs through the same partitions: %d of %d; moves in the same order: %d (lab %d, sim %d)\nlab moves: %s\nsim moves: %s\n",
		100*v.MedianErr, 100*v.MaxErr, v.SamePaths, v.IschedJobs, v.InOrder, len(v.LabMoves), len(v.SimMoves),
		orNone(strings.Join(v.LabMoves, ", ")), orNone(strings.Join(v.SimMoves, ", ")))
	return err
}

func yesNo(b bool) string {
	if b {
		return "yes"
	}
	return "no"
}

func orNone(s string) string {
	if s == "" {
		return "none"
	}
	return s
}

// pathText is a job's attempts as "cpu@15 gpu@152".
func pathText(path []Hop) string {
	parts := make([]string, len(path))
	for i, h := range path {
		parts[i] = fmt.Sprintf("%s@%d", h.Partition, int(math.Round(max(h.At, 0))))
	}
	return orNone(strings.Join(parts, " "))
}
