package main

import (
	"encoding/json"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"strings"
	"text/tabwriter"

	iest "github.com/isched/isched/internal/estimate"
	"github.com/isched/isched/internal/plan"
)

// calFiles are the trace sets the calibrated band is judged on: every
// committed real run (traces-cal.json adds eval phases, checkpoints and
// load that appears and ends mid-run).
var calFiles = []string{"traces.json", "traces-long.json", "traces-cal.json"}

// calBucket is a range of progress, [Lo, Hi) in percent.
type calBucket struct{ Lo, Hi int }

// calBuckets are the progress ranges coverage is judged in, from 5 %.
var calBuckets = []calBucket{{5, 15}, {15, 30}, {30, 50}, {50, 75}, {75, 100}}

// calFracs are the status updates judged: one per point of progress from
// 5 to 99 %, so that every run weighs the same whatever its length.
func calFracs() []float64 {
	var out []float64
	for p := 5; p < 100; p++ {
		out = append(out, float64(p)/100)
	}
	return out
}

// calTol is how far a bucket's measured coverage may be from the stated
// rate (issue 30: ±10 points).
const calTol = 0.10

// calAcc is one bucket's tally for one band.
type calAcc struct {
	n, in, def int
	runs       map[string]bool
	widths     []float64
}

func (a *calAcc) add(run string, in bool, width float64, def bool) {
	if a.runs == nil {
		a.runs = map[string]bool{}
	}
	a.n++
	a.runs[run] = true
	a.widths = append(a.widths, width)
	if in {
		a.in++
	}
	if def {
		a.def++
	}
}

func (a *calAcc) cov() float64 { return float64(a.in) / float64(max(a.n, 1)) }

// loadRuns reads the trace files in dir, in order.
func loadRuns(dir string, files []string) ([]*trace, error) {
	var all []*trace
	for _, name := range files {
		b, err := os.ReadFile(filepath.Join(dir, name))
		if err != nil {
			return nil, err
		}
		var tf traces
		if err := json.Unmarshal(b, &tf); err != nil {
			return nil, fmt.Errorf("%s: %w", name, err)
		}
		if len(tf.Runs) == 0 {
			return nil, fmt.Errorf("%s: no runs", name)
		}
		for _, r := range tf.Runs {
			r.Name = name[:len(name)-len(".json")] + "/" + r.Name
		}
		all = append(all, tf.Runs...)
	}
	return all, nil
}

// printCalibration judges the calibrated ETA band (ETA.Calibrated) over
// every real run, leave-one-run-out: each run is replayed with the ETA
// ratios of all the other runs as its partition's pool (pastOf), never
// its own, and every status update from 5 % on counts in its progress
// bucket. For comparison it prints the band before calibration (the
// estimator's own, widened by earlier runs: WithPast, WithDrift) and the
// fallback a run with no earlier run gets (BandDefault).
func printCalibration(w io.Writer, dir string) error {
	runs, err := loadRuns(dir, calFiles)
	if err != nil {
		return err
	}
	past, pool, err := pastOf(runs)
	if err != nil {
		return err
	}
	fracs := calFracs()
	before, cal, fallback := make([]calAcc, len(calBuckets)), make([]calAcc, len(calBuckets)), make([]calAcc, len(calBuckets))
	bucketOf := func(frac float64) int {
		p := int(math.Round(100 * frac))
		for i, b := range calBuckets {
			if p >= b.Lo && p < b.Hi {
				return i
			}
		}
		return -1
	}
	for i, r := range runs {
		pts, _, err := replayETA(r.IterMS, fracs, past[i], pool[i])
		if err != nil {
			return fmt.Errorf("%s: %w", r.Name, err)
		}
		alone, _, err := replayETA(r.IterMS, fracs, nil, nil)
		if err != nil {
			return fmt.Errorf("%s: %w", r.Name, err)
		}
		for k, p := range pts {
			b := bucketOf(p.Frac)
			if b < 0 {
				continue
			}
			// an unknown ETA (no estimate yet) holds nothing
			before[b].add(r.Name, p.Known && p.InBandPast, p.WidthPast, false)
			cal[b].add(r.Name, p.Known && p.InBandCal, p.WidthCal, p.CalSource != iest.BandConformal)
			a := alone[k]
			fallback[b].add(r.Name, a.Known && a.InBandCal, a.WidthCal, a.CalSource != iest.BandConformal)
		}
	}
	fmt.Fprintf(w, "\nCalibrated ETA band: stated coverage %.0f %% (estimate.BandCoverage), split-conformal over the other runs' ETA ratios at the same progress\n", 100*iest.BandCoverage)
	fmt.Fprintf(w, "(estimate.ETA.Calibrated; %d earlier runs needed, else the default band, coverage unknown). Leave-one-run-out over %d real CPU runs\n",
		iest.CalibMinRuns(iest.BandCoverage), len(runs))
	fmt.Fprintf(w, "(%s); each run judged at every 1 %% of progress from 5 %% (a status update), so every run weighs the same.\n", strings.Join(calFiles, ", "))
	fmt.Fprintln(w, "coverage = share of updates whose band holds the real end; ok = within ±10 points of the stated rate; width = median (high - low) / run length;")
	fmt.Fprintln(w, "before = the band before calibration (estimator's percentiles + WithPast + WithDrift, same pool); fallback = each run with no earlier run (default band)")
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "progress\tupdates\truns\tcalibrated\tok\twidth\tdefault used\tbefore\twidth\tfallback\twidth\t")
	allOK := true
	for i, b := range calBuckets {
		c := cal[i]
		ok := math.Abs(c.cov()-iest.BandCoverage) <= calTol+1e-9
		allOK = allOK && ok
		okS := "yes"
		if !ok {
			okS = "NO"
		}
		fmt.Fprintf(tw, "%d-%d %%\t%d\t%d\t%d/%d (%.0f%%)\t%s\t%.1f%%\t%d\t%.0f%%\t%.1f%%\t%.0f%%\t%.1f%%\t\n", b.Lo, b.Hi, c.n, len(c.runs),
			c.in, c.n, 100*c.cov(), okS, 100*medianOr(c.widths), c.def,
			100*before[i].cov(), 100*medianOr(before[i].widths), 100*fallback[i].cov(), 100*medianOr(fallback[i].widths))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	verdict := "every bucket within ±10 points of the stated rate"
	if !allOK {
		verdict = "NOT calibrated: a bucket is more than 10 points off the stated rate"
	}
	fmt.Fprintf(w, "%s; %d runs, so each bucket's coverage moves by about %.0f points per run (updates within a run are not independent)\n",
		verdict, len(runs), 100/float64(len(runs)))
	return nil
}

func medianOr(v []float64) float64 {
	if len(v) == 0 {
		return math.NaN()
	}
	return plan.Median(v)
}
