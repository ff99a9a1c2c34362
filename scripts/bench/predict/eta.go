package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"slices"
	"text/tabwriter"
	"time"

	iest "github.com/isched/isched/internal/estimate"
	"github.com/isched/isched/internal/plan"
	"github.com/isched/isched/internal/report"
)

// traces is one trace set, testdata/traces.json or traces-long.json
// (traces.py): the per-step wall times of real CPU training runs, some
// with a changed regime.
type traces struct {
	V          int      `json:"v"`
	MeasuredAt string   `json:"measured_at"`
	Note       string   `json:"note,omitempty"` // how it was recorded, where the command line does not say
	Framework  string   `json:"framework"`
	Threads    int      `json:"threads"`
	CPUs       int      `json:"cpus"`
	Runs       []*trace `json:"runs"`
}

type trace struct {
	Name       string    `json:"name"`
	Arch       string    `json:"arch"`
	Batch      int       `json:"batch"`
	IterMS     []float64 `json:"iter_ms"`
	LoadBefore float64   `json:"load_before"`
	LoadAfter  float64   `json:"load_after"`
	Burners    int       `json:"burners,omitempty"` // busy loops sharing the CPUs for a part of the run
	// BurnSteps [first, last]: the burners ran after step first (0: from
	// the start) until step last ended.
	BurnSteps []int `json:"burn_steps,omitempty"`
}

// changeAhead says whether the run's speed changes after step k: the
// burners start or stop later (a change no estimator can foresee).
func (r *trace) changeAhead(k int64) bool {
	if len(r.BurnSteps) != 2 {
		return false
	}
	first, last := int64(r.BurnSteps[0]), int64(r.BurnSteps[1])
	return first > k || (last > k && last < int64(len(r.IterMS)))
}

// etaFracs are the progress points the ETA is judged at.
var etaFracs = []float64{0.10, 0.25, 0.50}

// bandTolMS absorbs the nanosecond rounding of time.Time: a band of
// zero width around an exact prediction holds the real end.
const bandTolMS = 1e-3

// etaPoint is the coordinator's ETA at one progress point of a replayed run.
type etaPoint struct {
	Frac  float64
	Step  int64
	Known bool
	// Err is (predicted end − real end) / real run length; InBand is
	// whether [Low, High] holds the real end, InBandPast whether the band
	// widened by the earlier runs (ETA.WithPast, ETA.WithDrift) does.
	Err        float64
	InBand     bool
	InBandPast bool
	// Width and WidthPast: the band's width (High − Low) / real run length
	Width, WidthPast float64
	Provisional      bool
	// InBandCal, WidthCal: the calibrated band (ETA.Calibrated over the
	// same pool), CalSource what it rests on
	InBandCal bool
	WidthCal  float64
	CalSource iest.BandSource
}

// replayETA feeds a run's step times, one report.Iter per step as the
// wrapper sends them, to the estimator the coordinator keeps per job
// (estimate.IterEstimator) and asks estimate.PredictEnd, as the
// coordinator's refreshEstimates does, at each progress point: the run
// starts at 0, step i ends at the sum of the first i times, and the real
// end is the sum of all of them. past are the earlier runs of the same
// configuration, pool the ETA ratios of earlier runs on the same machine,
// for InBandPast (see pastOf). It also returns the run as its own receipt
// shows it: the iteration time the estimator holds at the end (IterMS) and
// its ETA ratios, its marks (estimate.MarkDrift, asked after every step as
// a coordinator ticking at every step would) judged at its end.
func replayETA(iterMS []float64, fracs []float64, past []pastRun, pool [][]report.ETARatio) ([]etaPoint, pastRun, error) {
	n := int64(len(iterMS))
	if n == 0 {
		return nil, pastRun{}, errors.New("empty trace")
	}
	ends := make([]float64, n) // ms since the start
	var sum float64
	for i, ms := range iterMS {
		if !(ms > 0) || math.IsInf(ms, 0) {
			return nil, pastRun{}, fmt.Errorf("step %d: iteration time %v ms", i+1, ms)
		}
		sum += ms
		ends[i] = sum
	}
	realEnd := sum
	at := func(ms float64) time.Time {
		return time.UnixMilli(0).Add(time.Duration(ms * float64(time.Millisecond)))
	}
	since := func(t time.Time) float64 { return float64(t.Sub(at(0))) / float64(time.Millisecond) }
	in := func(eta iest.ETA) bool {
		return since(eta.Low) <= realEnd+bandTolMS && realEnd <= since(eta.High)+bandTolMS
	}
	pastMS := make([]float64, len(past))
	for i, r := range past {
		pastMS[i] = r.ms
	}
	var est iest.IterEstimator
	var marks []iest.DriftMark
	out := make([]etaPoint, 0, len(fracs))
	next := 0 // the next point of fracs
	for k := int64(1); k <= n; k++ {
		est.Add(report.Iter{Step: k, DurMS: iterMS[k-1]})
		now := at(ends[k-1])
		e, ok := est.Estimate()
		if ok {
			marks = iest.MarkDrift(marks, k, n, now, e)
		}
		for ; next < len(fracs) && min(max(int64(math.Ceil(fracs[next]*float64(n))), 1), n) == k; next++ {
			p := etaPoint{Frac: fracs[next], Step: k}
			if eta := iest.PredictEnd(now, k, n, e, 0); ok && eta.Known {
				var drift []float64
				for _, r := range pool {
					if v, found := iest.DriftAt(r, float64(k)/float64(n)); found {
						drift = append(drift, v)
					}
				}
				p.Known, p.Provisional = true, e.Provisional
				p.Err = (since(eta.End) - realEnd) / realEnd
				wide := eta.WithPast(now, e, 0, pastMS).WithDrift(now, e, 0, drift)
				p.InBand, p.InBandPast = in(eta), in(wide)
				p.Width = float64(eta.High.Sub(eta.Low)) / float64(time.Millisecond) / realEnd
				p.WidthPast = float64(wide.High.Sub(wide.Low)) / float64(time.Millisecond) / realEnd
				cal := wide.Calibrated(now, e, 0, drift)
				p.InBandCal, p.CalSource = in(cal), cal.BandSource
				p.WidthCal = float64(cal.High.Sub(cal.Low)) / float64(time.Millisecond) / realEnd
			}
			out = append(out, p)
		}
	}
	final, _ := est.Estimate()
	return out, pastRun{ms: final.MS, drift: iest.DriftRatios(marks, n, at(realEnd).UnixMilli())}, nil
}

// traceFiles are the committed trace sets: short runs (300 steps, about a
// minute or two: the speed's wander on a shared machine is as long as the
// run) and long ones (2000 steps, about 8 minutes).
var traceFiles = []string{"traces.json", "traces-long.json"}

// pastRun is an earlier run as its receipt shows it: the iteration time
// the estimator held at its end (IterMS) and its ETA ratios.
type pastRun struct {
	ms    float64
	drift []report.ETARatio
}

// pastOf is, for each run, the receipts of the other runs of the same
// architecture and batch in the set (earlier runs of the same
// configuration on the same machine, as the coordinator pools their speeds:
// speedBook.pastRuns) and the ETA ratios of all the other runs in the set
// (earlier runs on the same nodes, as the coordinator pools their drift:
// speedBook.noteDrift), each run left out of its own.
func pastOf(runs []*trace) ([][]pastRun, [][][]report.ETARatio, error) {
	own := make([]pastRun, len(runs))
	for i, r := range runs {
		var err error
		if _, own[i], err = replayETA(r.IterMS, nil, nil, nil); err != nil {
			return nil, nil, fmt.Errorf("%s: %w", r.Name, err)
		}
	}
	same := make([][]pastRun, len(runs))
	pool := make([][][]report.ETARatio, len(runs))
	for i, r := range runs {
		for j, o := range runs {
			if j == i {
				continue
			}
			pool[i] = append(pool[i], own[j].drift)
			if o.Arch == r.Arch && o.Batch == r.Batch {
				same[i] = append(same[i], own[j])
			}
		}
	}
	return same, pool, nil
}

// printETA replays every trace of every trace file and prints the ETA's
// error and band coverage per progress point, per run and summed up.
func printETA(w io.Writer, dir string) error {
	sets := make([]*traces, len(traceFiles))
	var all []*trace
	for i, name := range traceFiles {
		b, err := os.ReadFile(filepath.Join(dir, name))
		if err != nil {
			return err
		}
		var tf traces
		if err := json.Unmarshal(b, &tf); err != nil {
			return fmt.Errorf("%s: %w", name, err)
		}
		if len(tf.Runs) == 0 {
			return fmt.Errorf("%s: no runs", name)
		}
		sets[i], all = &tf, append(all, tf.Runs...)
	}
	past, pool, err := pastOf(all)
	if err != nil {
		return err
	}
	for i, tf := range sets {
		n := len(tf.Runs)
		if err := printETAFile(w, traceFiles[i], tf, past[:n], pool[:n]); err != nil {
			return err
		}
		past, pool = past[n:], pool[n:]
	}
	return nil
}

// printETAFile prints one trace set's replay; past and pool are its runs'
// earlier runs (pastOf over every set: all ran on this machine).
func printETAFile(w io.Writer, name string, tf *traces, past [][]pastRun, pool [][][]report.ETARatio) error {
	fmt.Fprintf(w, "\nETA replay: %s %s (%s, %d thread(s), %d CPUs shared): every step of each run fed to the coordinator's estimator (estimate.IterEstimator + PredictEnd)\n",
		name, tf.MeasuredAt, tf.Framework, tf.Threads, tf.CPUs)
	fmt.Fprintln(w, "err = (predicted end - real end) / run length; band = [low, high] holds the real end; * = provisional (warm-up);")
	fmt.Fprintln(w, "burners = busy loops sharing the CPUs over those steps; ^ = the speed changes after this point (burners start or stop later: no estimator can know)")
	fmt.Fprintln(w, "+past = the band widened by earlier runs, as receipts: to hold the end at the speed of those of the same model and batch (ETA.WithPast),")
	fmt.Fprintln(w, "        and at the miss of every other run's own ETA at the same point of its run (ETA ratios pooled per partition: ETA.WithDrift); - = no earlier run")
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	hdr := "run\tsteps\tseconds\tload avg\tburners\t"
	for _, f := range etaFracs {
		hdr += fmt.Sprintf("err@%.0f%%\tband\t+past\t", 100*f)
	}
	fmt.Fprintln(tw, hdr)
	type acc struct {
		errs, widths, widthsPast []float64
		in, inPast, n, unknown   int
	}
	// settled: the judging points with no change of speed ahead; shifted:
	// the runs with burners; foreseen: those of them whose change is behind
	all, settled := make([]acc, len(etaFracs)), make([]acc, len(etaFracs))
	shifted, foreseen := make([]acc, len(etaFracs)), make([]acc, len(etaFracs))
	for ri, r := range tf.Runs {
		pts, _, err := replayETA(r.IterMS, etaFracs, past[ri], pool[ri])
		if err != nil {
			return fmt.Errorf("%s: %s: %w", name, r.Name, err)
		}
		if r.Burners > 0 && (len(r.BurnSteps) != 2 || r.BurnSteps[0] < 0 || r.BurnSteps[0] >= r.BurnSteps[1] || r.BurnSteps[1] > len(r.IterMS)) {
			return fmt.Errorf("%s: %s: burn_steps %v: want [first, last], 0 <= first < last <= %d", name, r.Name, r.BurnSteps, len(r.IterMS))
		}
		load := "-"
		if r.Burners > 0 {
			load = fmt.Sprintf("%d-%d", r.BurnSteps[0], r.BurnSteps[1])
		}
		var total float64
		for _, ms := range r.IterMS {
			total += ms
		}
		line := fmt.Sprintf("%s\t%d\t%.1f\t%.1f-%.1f\t%s\t", r.Name, len(r.IterMS), total/1000, r.LoadBefore, r.LoadAfter, load)
		for i, p := range pts {
			ahead := r.changeAhead(p.Step)
			for _, a := range []*acc{&all[i], &settled[i], &shifted[i], &foreseen[i]} {
				switch {
				case a == &settled[i] && ahead, a == &shifted[i] && r.Burners == 0, a == &foreseen[i] && (r.Burners == 0 || ahead):
					continue
				}
				a.n++
				if !p.Known {
					a.unknown++
					continue
				}
				a.errs = append(a.errs, math.Abs(p.Err))
				a.widths, a.widthsPast = append(a.widths, p.Width), append(a.widthsPast, p.WidthPast)
				if p.InBand {
					a.in++
				}
				if p.InBandPast {
					a.inPast++
				}
			}
			if !p.Known {
				line += "unknown\t-\t-\t"
				continue
			}
			mark := ""
			if p.Provisional {
				mark = "*"
			}
			in := "miss"
			if p.InBand {
				in = "in"
			}
			if ahead {
				mark += "^"
			}
			inPast := "miss"
			if p.InBandPast {
				inPast = "in"
			}
			if len(past[ri]) == 0 && len(pool[ri]) == 0 {
				inPast = "-"
			}
			line += fmt.Sprintf("%+.1f%%%s\t%s\t%s\t", 100*p.Err, mark, in, inPast)
		}
		fmt.Fprintln(tw, line)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	fmt.Fprintln(w)
	tw = tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "runs\tprogress\tn\tmedian |err|\tworst |err|\tband coverage\t+past\tmedian width\t+past\tunknown\t")
	for _, set := range []struct {
		name string
		a    []acc
	}{{"all", all}, {"no change ahead", settled}, {"burners", shifted}, {"burners, change behind", foreseen}} {
		for i, f := range etaFracs {
			a := set.a[i]
			if a.n == 0 {
				continue
			}
			med, worst, width, widthPast := math.NaN(), math.NaN(), math.NaN(), math.NaN()
			if len(a.errs) > 0 {
				med, worst = plan.Median(a.errs), slices.Max(a.errs)
				width, widthPast = plan.Median(a.widths), plan.Median(a.widthsPast)
			}
			fmt.Fprintf(tw, "%s\t%.0f%%\t%d\t%.1f%%\t%.1f%%\t%d/%d (%.0f%%)\t%d/%d (%.0f%%)\t%.1f%%\t%.1f%%\t%d\t\n", set.name, 100*f, a.n, 100*med, 100*worst,
				a.in, a.n, 100*float64(a.in)/float64(a.n), a.inPast, a.n, 100*float64(a.inPast)/float64(a.n), 100*width, 100*widthPast, a.unknown)
		}
	}
	return tw.Flush()
}
