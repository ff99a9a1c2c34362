package sim

import (
	"fmt"
	"io"
	"slices"
	"strings"
	"text/tabwriter"
)

// WriteTable prints rows as a text table: times in hours, changes in
// percent against Slurm alone, each a mean over seeds ± its 95 %
// confidence half width.
func WriteTable(w io.Writer, title string, rows []Row) error {
	if _, err := fmt.Fprintf(w, "%s\n", title); err != nil {
		return err
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "load\toffered\tpolicy\tmean JCT h\tΔ JCT\tΔ JCT isched jobs\tΔ p95 isched jobs\tΔ JCT elastic runs\tmedian JCT h\tp95 JCT h\twait h\tmedian wait h\tp95 wait h\twait share\tceiling\tbsld\tGPU util\tCPU util\tisched work elsewhere\tcost\tmoves/job\tconts/job\tpreempts/job\tresizes/job\ttwins/job\thandovers/job\ttwin idle GPU h\tlost steps/job\tuntouched wait h\tΔ untouched wait\tunfinished")
	for _, r := range rows {
		fmt.Fprintf(tw, "%g\t%.3f\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%.3g\n",
			r.Load, r.Offered, r.Variant, r.JCT, pct(r.DJCT), pct(r.DJCTIsched), pct(r.DP95Isched), pct(r.DJCTElastic), r.MedianJCT, r.P95JCT, r.Wait, r.MedianWait, r.P95Wait,
			share(r.WaitShare), share(r.Ceiling), r.BSLD,
			r.GPUUtil, r.CPUUtil, r.Elsewhere, r.Cost, r.Moves, r.Conts, r.Preempts, r.Resizes, r.Twins, r.Handovers, r.TwinIdle, r.Lost, r.OtherWait, pct(r.DOtherWait), r.Unfinished)
	}
	return tw.Flush()
}

// share prints a fraction as a percentage.
func share(i Interval) string {
	if i.N == 0 {
		return "–"
	}
	return fmt.Sprintf("%.1f%%", 100*i.Mean)
}

// pct prints a change as a percentage; "–" when there is none (the
// baseline's own row).
func pct(i Interval) string {
	if i.N == 0 {
		return "–"
	}
	if i.N < 2 {
		return fmt.Sprintf("%+.1f%%", 100*i.Mean)
	}
	return fmt.Sprintf("%+.1f%% ± %.1f", 100*i.Mean, 100*i.Half)
}

// Series is one line of a plot.
type Series struct {
	Name string
	X, Y []float64
}

// JCTCDF is, per variant of the first seed at load, the empirical CDF of
// the completion times (hours).
func JCTCDF(cells []Cell, load float64) []Series {
	var out []Series
	for _, c := range cells {
		if c.Result == nil || c.Load != load {
			continue
		}
		xs := make([]float64, len(c.Result.Jobs))
		for i, j := range c.Result.Jobs {
			xs[i] = max(j.JCT/3600, 1e-3)
		}
		slices.Sort(xs)
		ys := make([]float64, len(xs))
		for i := range ys {
			ys[i] = float64(i+1) / float64(len(xs))
		}
		out = append(out, Series{Name: c.Variant, X: xs, Y: ys})
	}
	return out
}

// WaitOverTime is, per variant of the first seed at load, the mean wait
// (hours) of the jobs submitted in each of bins equal stretches of the
// replay (x: the stretch's middle, hours from the start).
func WaitOverTime(cells []Cell, load float64, bins int) []Series {
	var out []Series
	for _, c := range cells {
		if c.Result == nil || c.Load != load || len(c.Result.Jobs) == 0 || bins < 1 {
			continue
		}
		last := 0.0
		for _, j := range c.Result.Jobs {
			last = max(last, j.Submit)
		}
		width := max(last, 1) / float64(bins)
		sum, n := make([]float64, bins), make([]float64, bins)
		for _, j := range c.Result.Jobs {
			b := min(int(j.Submit/width), bins-1)
			sum[b] += j.Wait / 3600
			n[b]++
		}
		s := Series{Name: c.Variant}
		for b := range bins {
			if n[b] > 0 {
				s.X = append(s.X, (float64(b)+0.5)*width/3600)
				s.Y = append(s.Y, sum[b]/n[b])
			}
		}
		out = append(out, s)
	}
	return out
}

// Utilisation is, per variant, GPU and CPU utilisation against load
// (means over seeds).
func Utilisation(rows []Row) []Series {
	var names []string
	for _, r := range rows {
		if !slices.Contains(names, r.Variant) {
			names = append(names, r.Variant)
		}
	}
	var out []Series
	for _, kind := range []string{"GPU", "CPU"} {
		for _, name := range names {
			s := Series{Name: name + " " + kind}
			for _, r := range rows {
				if r.Variant != name {
					continue
				}
				s.X = append(s.X, r.Load)
				if kind == "GPU" {
					s.Y = append(s.Y, r.GPUUtil.Mean)
				} else {
					s.Y = append(s.Y, r.CPUUtil.Mean)
				}
			}
			out = append(out, s)
		}
	}
	return out
}

// WriteCSV writes rows as CSV, one line per load and variant, for other
// tools.
func WriteCSV(w io.Writer, trace string, rows []Row) error {
	head := []string{"trace", "load", "policy", "mean_jct_h", "mean_jct_ci", "d_jct", "d_jct_ci", "d_jct_isched", "d_jct_isched_ci",
		"median_jct_h", "p95_jct_h", "wait_h", "bsld", "gpu_util", "cpu_util", "isched_elsewhere", "cost", "moves_per_job", "conts_per_job",
		"lost_steps_per_job", "untouched_wait_h", "d_untouched_wait", "d_untouched_wait_ci", "unfinished",
		"offered_load", "median_wait_h", "p95_wait_h", "wait_share", "ceiling", "d_p95_jct_isched", "d_p95_jct_isched_ci", "preempts_per_job", "resizes_per_job", "d_jct_elastic", "d_jct_elastic_ci"}
	if _, err := fmt.Fprintln(w, strings.Join(head, ",")); err != nil {
		return err
	}
	for _, r := range rows {
		if _, err := fmt.Fprintf(w, "%s,%g,%s,%g,%g,%g,%g,%g,%g,%g,%g,%g,%g,%g,%g,%g,%g,%g,%g,%g,%g,%g,%g,%g,%g,%g,%g,%g,%g,%g,%g,%g,%g,%g,%g\n",
			trace, r.Load, r.Variant, r.JCT.Mean, r.JCT.Half, r.DJCT.Mean, r.DJCT.Half, r.DJCTIsched.Mean, r.DJCTIsched.Half,
			r.MedianJCT.Mean, r.P95JCT.Mean, r.Wait.Mean, r.BSLD.Mean, r.GPUUtil.Mean, r.CPUUtil.Mean, r.Elsewhere.Mean, r.Cost.Mean,
			r.Moves.Mean, r.Conts.Mean, r.Lost.Mean, r.OtherWait.Mean, r.DOtherWait.Mean, r.DOtherWait.Half, r.Unfinished,
			r.Offered, r.MedianWait.Mean, r.P95Wait.Mean, r.WaitShare.Mean, r.Ceiling.Mean, r.DP95Isched.Mean, r.DP95Isched.Half, r.Preempts.Mean, r.Resizes.Mean, r.DJCTElastic.Mean, r.DJCTElastic.Half); err != nil {
			return err
		}
	}
	return nil
}
