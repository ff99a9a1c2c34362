package sim

import (
	"cmp"
	"fmt"
	"io"
	"math"
	"slices"
	"strconv"
	"strings"
)

// curieNeed are the columns ReadCurie reads from the Parallel Workloads
// Archive's Curie log as kept in shared/traces (an SWF log with a header
// and the partition's name).
var curieNeed = []string{"job_id", "submit_epoch", "wait_s", "run_s", "alloc_procs", "req_procs", "req_time_s", "req_mem_kb", "user_id", "partition"}

// CurieHeaderPrefix starts the header of the Curie logs in shared/traces.
const CurieHeaderPrefix = "job_id,submit_epoch,submit_utc,start_epoch"

// ReadCurie reads a Curie log (CEA's Curie under Slurm, from the Parallel
// Workloads Archive, Feitelson, Tsafrir and Krakov, JPDC 2014): each job
// as ReadSWF reads one (ceil(P / cores) whole nodes, the requested time
// as its time limit, jobs with no run time or processors left out) on
// the nodes of its partition, whose cores per node cores gives (0: a
// partition the site does not model, whose jobs are left out). It
// returns the jobs and what the log recorded of them: their waits.
func ReadCurie(name string, r io.Reader, cores func(partition string) int) ([]Job, []Observed, error) {
	var jobs []Job
	var col map[string]int
	err := lines(r, func(n int, line string) error {
		f := strings.Split(strings.TrimRight(line, "\r"), ",")
		if col == nil {
			var err error
			col, err = header(name, n, f, curieNeed)
			return err
		}
		if strings.TrimSpace(line) == "" {
			return nil
		}
		if len(f) != len(col) {
			return &ParseError{name, n, "count", fmt.Errorf("%d fields, the header has %d", len(f), len(col))}
		}
		j, ok, err := curieJob(f, col, cores)
		if err != nil {
			err.File, err.Line = name, n
			return err
		}
		if ok {
			jobs = append(jobs, j)
		}
		return nil
	})
	if err != nil {
		return nil, nil, err
	}
	jobs = sortJobs(jobs)
	obs := make([]Observed, len(jobs))
	for i, j := range jobs {
		obs[i] = Observed{ID: j.ID, Submit: j.Submit, Wait: j.recorded, JCT: j.recorded + j.Run}
		jobs[i].recorded = 0
	}
	return jobs, obs, nil
}

func curieJob(f []string, col map[string]int, cores func(string) int) (Job, bool, *ParseError) {
	var v [9]float64
	for k, h := range curieNeed[:9] {
		x, err := strconv.ParseFloat(f[col[h]], 64)
		if err != nil || math.IsNaN(x) || math.IsInf(x, 0) {
			return Job{}, false, &ParseError{Field: h, Err: fmt.Errorf("%q: %w", f[col[h]], errSyntax)}
		}
		v[k] = x
	}
	part := f[col["partition"]]
	c := cores(part)
	if c <= 0 {
		return Job{}, false, nil
	}
	j, ok := swfJob(swfRecord{id: v[0], submit: v[1], run: v[3], procs: v[4], reqProcs: v[5], reqTime: v[6], reqMem: v[7], user: v[8]}, c)
	j.Partition, j.recorded = part, max(v[2], 0)
	return j, ok, nil
}

// Fidelity compares the waits a replay gives with those a log recorded.
type Fidelity struct {
	Jobs                           int
	MeanRecorded, MeanReplayed     float64 // seconds
	MedianRecorded, MedianReplayed float64
	P90Recorded, P90Replayed       float64
	ShareRecorded, ShareReplayed   float64 // wait / (wait + run), summed over jobs
	Spearman                       float64 // rank correlation of the jobs' waits
	WaitedRecorded, WaitedReplayed float64 // fraction of jobs that waited over a minute
}

// WaitFidelity pairs the recorded jobs with the replay's by ID.
func WaitFidelity(rec []Observed, r *Result) Fidelity {
	byID := make(map[int]*JobResult, len(r.Jobs))
	for k := range r.Jobs {
		byID[r.Jobs[k].ID] = &r.Jobs[k]
	}
	var a, b []float64
	var runA, runB float64
	var f Fidelity
	for _, o := range rec {
		j, ok := byID[o.ID]
		if !ok {
			continue
		}
		a, b = append(a, o.Wait), append(b, j.Wait)
		runA += o.JCT - o.Wait
		runB += j.JCT - j.Wait
		if o.Wait > 60 {
			f.WaitedRecorded++
		}
		if j.Wait > 60 {
			f.WaitedReplayed++
		}
	}
	f.Jobs = len(a)
	if f.Jobs == 0 {
		return f
	}
	f.WaitedRecorded /= float64(f.Jobs)
	f.WaitedReplayed /= float64(f.Jobs)
	f.MeanRecorded, f.MeanReplayed = mean(a), mean(b)
	f.MedianRecorded, f.MedianReplayed = quantile(a, 0.5), quantile(b, 0.5)
	f.P90Recorded, f.P90Replayed = quantile(a, 0.9), quantile(b, 0.9)
	f.ShareRecorded = f.MeanRecorded * float64(f.Jobs) / (f.MeanRecorded*float64(f.Jobs) + runA)
	f.ShareReplayed = f.MeanReplayed * float64(f.Jobs) / (f.MeanReplayed*float64(f.Jobs) + runB)
	f.Spearman = spearman(a, b)
	return f
}

// spearman is the rank correlation of a and b (ties get their mean rank).
func spearman(a, b []float64) float64 {
	ra, rb := ranks(a), ranks(b)
	ma, mb := mean(ra), mean(rb)
	var sab, saa, sbb float64
	for k := range ra {
		sab += (ra[k] - ma) * (rb[k] - mb)
		saa += (ra[k] - ma) * (ra[k] - ma)
		sbb += (rb[k] - mb) * (rb[k] - mb)
	}
	if saa == 0 || sbb == 0 {
		return 0
	}
	return sab / math.Sqrt(saa*sbb)
}

func ranks(v []float64) []float64 {
	idx := make([]int, len(v))
	for k := range idx {
		idx[k] = k
	}
	slices.SortStableFunc(idx, func(x, y int) int { return cmp.Compare(v[x], v[y]) })
	r := make([]float64, len(v))
	for lo := 0; lo < len(idx); {
		hi := lo
		for hi+1 < len(idx) && v[idx[hi+1]] == v[idx[lo]] {
			hi++
		}
		for k := lo; k <= hi; k++ {
			r[idx[k]] = float64(lo+hi)/2 + 1
		}
		lo = hi + 1
	}
	return r
}

// WriteFidelity prints f as a table: recorded against replayed.
func WriteFidelity(w io.Writer, title string, f Fidelity) error {
	_, err := fmt.Fprintf(w, "%s\njobs %d\n%-26s %12s %12s\n%-26s %12.0f %12.0f\n%-26s %12.0f %12.0f\n%-26s %12.0f %12.0f\n%-26s %11.1f%% %11.1f%%\n%-26s %11.1f%% %11.1f%%\nSpearman rank correlation of the jobs' waits: %.3f\n",
		title, f.Jobs, "", "recorded", "replayed",
		"mean wait s", f.MeanRecorded, f.MeanReplayed,
		"median wait s", f.MedianRecorded, f.MedianReplayed,
		"p90 wait s", f.P90Recorded, f.P90Replayed,
		"wait share of completion", 100*f.ShareRecorded, 100*f.ShareReplayed,
		"jobs waiting over 1 min", 100*f.WaitedRecorded, 100*f.WaitedReplayed, f.Spearman)
	return err
}
