package cli

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"image/color"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
	"gonum.org/v1/plot/vg/vgsvg"

	"github.com/isched/isched/internal/atomicfile"
	"github.com/isched/isched/internal/coordconfig"
	"github.com/isched/isched/internal/plan"
	"github.com/isched/isched/internal/policy"
	"github.com/isched/isched/internal/report"
	"github.com/isched/isched/internal/sim"
	"github.com/spf13/pflag"
)

// simulateCmd is `isched simulate`: a trace replayed on a site catalogue
// under Slurm alone and isched's variants (internal/sim), as a table,
// optionally JSON, CSV and plots.
type simulateCmd struct {
	app                        *App
	trace, sacct, site, format string
	mix, coordConf             string
	loads, devParts, devWindow string
	load, window, scheduler    string
	variants, baseline         string
	scaling                    float64
	elasticMax                 int
	seeds, jobs, cores         int
	adoption, oversub, predErr float64
	plots, csv                 string
	asJSON, quiet, censored    bool
	loadsSet                   bool // --loads given
	fs                         *pflag.FlagSet
}

func (c *simulateCmd) leaf() leaf {
	return leaf{
		use:   "simulate --trace F | --from-sacct F --site S [flags]",
		short: "replay a workload trace on a site catalogue with Slurm alone and with isched, and compare: isched simulate --trace F --site S [--json] [--plots DIR]",
		flags: c.register, run: c.run, args: noArgs,
	}
}

func (c *simulateCmd) register(fs *pflag.FlagSet) {
	c.fs = fs
	fs.StringVar(&c.trace, "trace", "", "workload trace: SWF (.swf), openb tasks (openb_pod_list*.csv), run times (philly_runtime.csv), or Philly with real arrivals (philly_pollux_82k.csv; known by its header)")
	fs.StringVar(&c.sacct, "from-sacct", "", "a site's own history: sacct --parsable2 --allocations output with a header")
	fs.StringVar(&c.site, "site", "", "site catalogue (site.json) the trace is replayed on")
	fs.StringVar(&c.coordConf, "coordinator-config", "", "the site's coordinator config (coordinator.json): isched decides with its policy (default: the policy's defaults, speeds from the catalogue); its dev partitions and windows unless --dev is given")
	fs.StringVar(&c.format, "format", "", "trace format: swf, openb, runtimes or philly (default: from the file)")
	fs.StringVar(&c.load, "load", "", "factors of the trace's own arrival rate (1,1.2,1.5: its own arrivals, then 1.2 and 1.5 times as often), instead of --loads; the default for philly traces is 1")
	fs.StringVar(&c.window, "window", "", "replay only the jobs arriving in a window of the trace: busiest-week, or FROM-TO in days from its start (14-21)")
	fs.StringVar(&c.scheduler, "scheduler", "", "Slurm's model: backfill (multifactor priority with fair-share, sched/backfill, account limits) or easy (tier then submission, one reservation per partition); default backfill for philly traces, easy otherwise")
	fs.Float64Var(&c.predErr, "predict-error", 0, "isched's estimate of each run before it starts is off by a log-normal factor of this sigma (0: exact, the replay's run times; 0.5: within x0.37..x2.7 for 95 % of runs): its plan, time limit and rule 7's order see the estimate, its measured iterations the truth")
	fs.Float64Var(&c.oversub, "quota-oversub", 2, "philly traces: each virtual cluster's GrpTRES gres/gpu limit is its share of the trace's GPU-time x the site's GPUs x this (0: no limits)")
	fs.StringVar(&c.variants, "variants", "", "comma-separated variants to run (default all: "+variantNames()+")")
	fs.StringVar(&c.baseline, "baseline", "slurm", "the variant the Δ columns compare against, paired by seed (isched: what elastic runs or a lever change over isched alone); it must be among those run")
	fs.Float64Var(&c.scaling, "scaling", 0, "elastic runs' true throughput kept per doubling of GPUs (0: the policy's prior, 0.9); the policy sees it only through the runs' measured steps")
	fs.IntVar(&c.elasticMax, "elastic-max", sim.DefaultElasticMax, "isched+elastic: the one-GPU runs isched submits are elastic up to this many GPUs (--gpus 1-N), within a node")
	fs.StringVar(&c.mix, "mix", "", "job shapes for a run-times trace: an openb task list (default: one GPU each)")
	fs.StringVar(&c.loads, "loads", "0.5,0.7,0.9", "offered loads (fractions of the capacity users ask for); 0: the trace's own arrivals")
	fs.IntVar(&c.seeds, "seeds", 3, "replays per load (trace windows, adoption draws, timing jitter)")
	fs.IntVar(&c.jobs, "jobs", 5000, "jobs per replay (a window of the trace, or synthesized from run times); 0: all")
	fs.IntVar(&c.cores, "cores", 32, "cores per node, for SWF traces (SWF counts processors)")
	fs.Float64Var(&c.adoption, "adoption", 0.5, "fraction of one-GPU jobs submitted through isched; the rest are the untouched jobs")
	fs.StringVar(&c.devParts, "dev", "", "dev partitions (comma-separated), open to isched after hours")
	fs.StringVar(&c.devWindow, "dev-window", "18:00-08:00", "when dev partitions are free (HH:MM-HH:MM, UTC)")
	fs.StringVar(&c.plots, "plots", "", "directory for the plots (JCT CDF, wait over time, utilisation; SVG)")
	fs.StringVar(&c.csv, "csv", "", "write the table as CSV to this file")
	fs.BoolVar(&c.asJSON, "json", false, "print the rows as JSON instead of the table")
	fs.BoolVar(&c.quiet, "quiet", false, "no progress on stderr")
	fs.BoolVar(&c.censored, "keep-censored", false, "keep openb tasks still running at the trace's end (their run times are cut there)")
}

func (c *simulateCmd) run(ctx context.Context, pos []string) error {
	if len(pos) > 0 {
		return usageErr("unexpected argument %q", pos[0])
	}
	c.loadsSet = c.fs.Changed("loads")
	if c.trace != "" && c.formatOf(c.trace) == "curie" && c.variants == "" {
		return c.curieFidelity()
	}
	e, name, err := c.experiment()
	if err != nil {
		return err
	}
	cells, err := e.Run()
	if err != nil {
		return err
	}
	rows := sim.Aggregate(cells, c.baseline)
	if err := c.write(name, rows); err != nil {
		return err
	}
	if c.plots != "" {
		return writeSimPlots(c.plots, name, cells, rows)
	}
	return ctx.Err()
}

// experiment reads the inputs into the replays to run.
func (c *simulateCmd) experiment() (*sim.Experiment, string, error) {
	if (c.trace == "") == (c.sacct == "") || c.site == "" {
		return nil, "", usageErr("want --site and one of --trace or --from-sacct")
	}
	site, err := loadSite(c.site)
	if err != nil {
		return nil, "", err
	}
	e := &sim.Experiment{Site: site, Base: sim.DefaultConfig(site)}
	e.Base.Adoption = c.adoption
	if !(c.scaling >= 0 && c.scaling <= 1) {
		return nil, "", usageErr("--scaling %g: want a fraction in 0..1", c.scaling)
	}
	e.Base.Scaling = c.scaling
	if c.elasticMax < 2 || c.elasticMax > report.MaxElastic {
		return nil, "", usageErr("--elastic-max %d: want 2 to %d GPUs", c.elasticMax, report.MaxElastic)
	}
	e.Base.ElasticMax = c.elasticMax
	if err := c.runs(e); err != nil {
		return nil, "", err
	}
	if c.coordConf != "" {
		pol, err := coordconfig.LoadPolicy(c.coordConf)
		if err != nil {
			return nil, "", fmt.Errorf("--coordinator-config: %w", err)
		}
		e.Base.Policy = &pol
		e.DevPartitions, e.DevWindows = pol.DevPartitions, pol.DevWindows
	}
	if c.devParts != "" {
		e.DevPartitions = strings.Split(c.devParts, ",")
		w, err := policy.ParseWindow(c.devWindow)
		if err != nil {
			return nil, "", usageErr("--dev-window: %v", err)
		}
		e.DevWindows = []policy.Window{w}
	}
	if !c.quiet && c.app.Terminal(c.app.stderr) { // no bar's escape codes in a pipe or a log
		e.Base.Progress = c.progress
	}
	path := c.trace
	if path == "" {
		path = c.sacct
	}
	e.Name = filepath.Base(path)
	e.Jobs, err = c.jobsOf(path, e)
	if err == nil {
		err = c.schedulerOf(e)
	}
	return e, e.Name, err
}

// runs sets what the experiment replays: variants, loads, seeds and
// isched's estimate error.
func (c *simulateCmd) runs(e *sim.Experiment) error {
	if c.predErr < 0 {
		return usageErr("--predict-error %g: want a sigma of 0 or more", c.predErr)
	}
	e.Base.PredictErr = c.predErr
	var err error
	if e.Variants, err = pickVariants(c.variants); err != nil {
		return err
	}
	if !slices.ContainsFunc(e.Variants, func(v sim.Variant) bool { return v.Name == c.baseline }) {
		return usageErr("--baseline %q: not among the variants run (add it to --variants)", c.baseline)
	}
	if e.Loads, err = parseLoads(c.loads); err != nil {
		return err
	}
	if c.load != "" {
		if e.Loads, err = parseLoads(c.load); err != nil {
			return err
		}
		e.Factors = true
	}
	if c.seeds < 1 || c.jobs < 0 {
		return usageErr("--seeds must be at least 1 and --jobs not negative")
	}
	for s := range c.seeds {
		e.Seeds = append(e.Seeds, uint64(s+1))
	}
	return nil
}

// schedulerOf sets Slurm's model: --scheduler, else backfill for the
// traces that carry accounts (philly) and the older model otherwise.
func (c *simulateCmd) schedulerOf(e *sim.Experiment) error {
	switch c.scheduler {
	case "":
		if f := c.formatOf(c.trace); f != "philly" && f != "curie" {
			e.Base.Sched = sim.Sched{}
		}
	case "backfill":
		if !e.Base.Sched.Backfill {
			e.Base.Sched = sim.SlurmSched()
		}
	case "easy":
		e.Base.Sched = sim.Sched{}
	default:
		return usageErr("--scheduler %q: want backfill or easy", c.scheduler)
	}
	return nil
}

func variantNames() string {
	var names []string
	for _, v := range sim.Variants {
		names = append(names, v.Name)
	}
	return strings.Join(names, ", ")
}

// pickVariants is the variants named in s, Slurm alone always first (the
// changes are against it); "": all.
func pickVariants(s string) ([]sim.Variant, error) {
	if s == "" {
		return sim.Variants, nil
	}
	out := []sim.Variant{sim.Variants[0]}
	for _, name := range strings.Split(s, ",") {
		k := slices.IndexFunc(sim.Variants, func(v sim.Variant) bool { return v.Name == strings.TrimSpace(name) })
		if k < 0 {
			return nil, usageErr("--variants: unknown variant %q (want some of %s)", name, variantNames())
		}
		if k > 0 && !slices.ContainsFunc(out, func(v sim.Variant) bool { return v.Name == sim.Variants[k].Name }) {
			out = append(out, sim.Variants[k])
		}
	}
	return out, nil
}

func parseLoads(s string) ([]float64, error) {
	var out []float64
	for _, f := range strings.Split(s, ",") {
		v, err := strconv.ParseFloat(strings.TrimSpace(f), 64)
		if err != nil || v < 0 || v > 10 {
			return nil, usageErr("--loads %q: want fractions such as 0.5,0.7,0.9", s)
		}
		out = append(out, v)
	}
	return out, nil
}

// jobsOf reads the trace and returns each seed's jobs: a window of a
// trace of jobs, or jobs synthesized from run times.
func (c *simulateCmd) jobsOf(path string, e *sim.Experiment) (func(uint64) []sim.Job, error) {
	format := c.formatOf(path)
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var jobs []sim.Job
	switch format {
	case "swf":
		jobs, err = sim.ReadSWF(path, f, c.cores)
	case "sacct":
		jobs, err = sim.ReadSacct(path, f)
	case "openb":
		jobs, err = sim.ReadOpenB(path, f)
	case "runtimes":
		return c.synthesized(path, f)
	case "philly":
		return c.philly(path, f, e)
	case "curie":
		return c.curie(path, f, e)
	default:
		return nil, usageErr("--format %q: want swf, openb, runtimes or philly", format)
	}
	if err != nil {
		return nil, err
	}
	if !c.censored {
		jobs = slices.DeleteFunc(jobs, func(j sim.Job) bool { return j.Censored })
	}
	if len(jobs) == 0 {
		return nil, fmt.Errorf("%s: no jobs", path)
	}
	n := c.jobs
	return func(seed uint64) []sim.Job { return sim.Window(jobs, n, seed) }, nil
}

func (c *simulateCmd) synthesized(path string, r io.Reader) (func(uint64) []sim.Job, error) {
	rt, err := sim.ReadRuntimes(path, r)
	if err != nil {
		return nil, err
	}
	if len(rt) == 0 {
		return nil, fmt.Errorf("%s: no run times", path)
	}
	mix := []sim.Job{{Nodes: 1, CPUs: 8, GPUs: 1}}
	if c.mix != "" {
		f, err := os.Open(c.mix)
		if err != nil {
			return nil, err
		}
		defer f.Close()
		if mix, err = sim.ReadOpenB(c.mix, f); err != nil {
			return nil, err
		}
	}
	n := max(c.jobs, 1)
	return func(seed uint64) []sim.Job { return sim.Synthesize(rt, mix, n, seed) }, nil
}

// formatOf is the trace's format: --format, sacct for --from-sacct, else
// from its header or name.
func (c *simulateCmd) formatOf(path string) string {
	switch {
	case c.sacct != "":
		return "sacct"
	case c.format != "":
		return c.format
	}
	return guessFormat(path)
}

// philly replays the Philly trace with real arrivals (sim.ReadPhilly):
// the whole trace or --window of it, at its own arrival times scaled by
// --load; its virtual clusters are Slurm accounts with limits
// (--quota-oversub) and fair-share shares from their GPU-time; its jobs
// ask for the site's GPU partitions in proportion to their GPUs.
func (c *simulateCmd) philly(path string, r io.Reader, e *sim.Experiment) (func(uint64) []sim.Job, error) {
	jobs, err := sim.ReadPhilly(path, r)
	if err != nil {
		return nil, err
	}
	if len(jobs) == 0 {
		return nil, fmt.Errorf("%s: no jobs", path)
	}
	names, weights, err := sim.GPUPartitions(e.Site, e.DevPartitions)
	if err != nil {
		return nil, err
	}
	gpus, err := sim.SiteGPUs(e.Site, e.DevPartitions)
	if err != nil {
		return nil, err
	}
	e.Base.Sched = sim.SlurmSched()
	e.Base.Sched.Quota, e.Base.Sched.Shares = sim.AccountQuotas(jobs, gpus, c.oversub)
	jobs = sim.SpreadPartitions(jobs, names, weights)
	if jobs, err = c.windowOf(jobs); err != nil {
		return nil, err
	}
	if c.loadsSet {
		return nil, usageErr("philly traces replay their own arrivals: use --load factors (1,1.2,1.5), not --loads")
	}
	if c.load == "" {
		e.Loads, e.Factors = []float64{1}, true
	}
	return func(uint64) []sim.Job { return jobs }, nil
}

// curie reads a Curie log for an experiment (--variants): the site's own
// history at its own arrivals, every job of any shape adoptable
// (Config.AnyShape: isched follows a job with its user's request and
// acts on its time limit), under the multifactor and backfill model.
func (c *simulateCmd) curie(path string, r io.Reader, e *sim.Experiment) (func(uint64) []sim.Job, error) {
	jobs, _, err := sim.ReadCurie(path, r, siteCores(e.Site))
	if err != nil {
		return nil, err
	}
	if jobs, err = c.windowOf(jobs); err != nil {
		return nil, err
	}
	if len(jobs) == 0 {
		return nil, fmt.Errorf("%s: no jobs", path)
	}
	if c.loadsSet {
		return nil, usageErr("Curie logs replay their own arrivals: use --load factors (1,1.2), not --loads")
	}
	if c.load == "" {
		e.Loads, e.Factors = []float64{1}, true
	}
	e.Base.Sched, e.Base.AnyShape = sim.SlurmSched(), true
	return func(uint64) []sim.Job { return jobs }, nil
}

// siteCores is the cores per node of a partition's first node type (0: a
// partition the site does not have).
func siteCores(site *plan.Site) func(partition string) int {
	return func(part string) int {
		if ps := site.Partition(part); ps != nil && len(ps.NodeTypes) > 0 {
			if nt := site.NodeType(ps.NodeTypes[0]); nt != nil {
				return nt.Cores
			}
		}
		return 0
	}
}

// curieFidelity replays a Curie log (sim.ReadCurie) under Slurm alone,
// each job where it ran with its requested time as its limit, and prints
// how close the replayed waits come to those the log recorded.
func (c *simulateCmd) curieFidelity() error {
	if c.site == "" {
		return usageErr("want --site (examples/site-sim-curie.json)")
	}
	site, err := loadSite(c.site)
	if err != nil {
		return err
	}
	f, err := os.Open(c.trace)
	if err != nil {
		return err
	}
	defer f.Close()
	jobs, rec, err := sim.ReadCurie(c.trace, f, siteCores(site))
	if err != nil {
		return err
	}
	if jobs, err = c.windowOf(jobs); err != nil {
		return err
	}
	cfg := sim.DefaultConfig(site)
	cfg.Seed, cfg.Sched = 1, sim.SlurmSched()
	if c.scheduler == "easy" {
		cfg.Sched = sim.Sched{}
	}
	r, err := sim.Run(cfg, jobs)
	if err != nil {
		return err
	}
	name := fmt.Sprintf("trace %s under Slurm alone (%s): waits replayed against recorded", filepath.Base(c.trace), cmp.Or(c.scheduler, "backfill"))
	return sim.WriteFidelity(c.app.stdout, name, sim.WaitFidelity(rec, r))
}

// windowOf is the jobs of --window.
func (c *simulateCmd) windowOf(jobs []sim.Job) ([]sim.Job, error) {
	const day = 86400.0
	switch {
	case c.window == "":
		return jobs, nil
	case c.window == "busiest-week":
		from := sim.BusiestWindow(jobs, 7*day)
		return sim.TimeWindow(jobs, from, from+7*day), nil
	}
	a, b, ok := strings.Cut(c.window, "-")
	from, err1 := strconv.ParseFloat(a, 64)
	to, err2 := strconv.ParseFloat(b, 64)
	if !ok || err1 != nil || err2 != nil || from < 0 || to <= from {
		return nil, usageErr("--window %q: want busiest-week or FROM-TO in days (14-21)", c.window)
	}
	out := sim.TimeWindow(jobs, from*day, to*day)
	if len(out) == 0 {
		return nil, fmt.Errorf("--window %s: no jobs arrive in it", c.window)
	}
	return out, nil
}

func guessFormat(path string) string {
	if f, err := os.Open(path); err == nil {
		defer f.Close()
		head := make([]byte, len(sim.PhillyHeader)+2)
		n, _ := io.ReadFull(f, head)
		first, _, _ := strings.Cut(string(head[:n]), "\n")
		switch {
		case strings.TrimRight(first, "\r") == sim.PhillyHeader:
			return "philly"
		case strings.HasPrefix(first, sim.CurieHeaderPrefix):
			return "curie"
		}
	}
	base := strings.ToLower(filepath.Base(path))
	switch {
	case strings.HasSuffix(base, ".swf"):
		return "swf"
	case strings.HasPrefix(base, "openb_pod"):
		return "openb"
	case strings.Contains(base, "runtime"):
		return "runtimes"
	}
	return ""
}

// progress draws a bar on stderr for the replay in progress.
func (c *simulateCmd) progress(done, total int) {
	const width = 30
	n := width * done / max(total, 1)
	fmt.Fprintf(c.app.stderr, "\r[%s%s] %d/%d jobs", strings.Repeat("#", n), strings.Repeat(".", width-n), done, total)
	if done == total {
		fmt.Fprint(c.app.stderr, "\r\033[K")
	}
}

func (c *simulateCmd) write(name string, rows []sim.Row) error {
	if c.csv != "" {
		err := atomicfile.Write(c.csv, 0o644, func(w io.Writer) error { return sim.WriteCSV(w, name, rows) })
		if err != nil {
			return fmt.Errorf("write %s: %w", c.csv, err)
		}
	}
	if c.asJSON {
		return writeJSON(c.app.stdout, simRowsJSON(rows))
	}
	return sim.WriteTable(c.app.stdout, "trace "+name+" (means over seeds ± 95% CI; Δ against "+c.baselineName()+", paired by seed)", rows)
}

// writeSimPlots draws the JCT CDF and the wait over time at the highest
// load, and utilisation against load, as SVG files in dir.
func writeSimPlots(dir, name string, cells []sim.Cell, rows []sim.Row) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	loads := sim.Loads(rows)
	if len(loads) == 0 {
		return errors.New("no rows to plot")
	}
	top := loads[len(loads)-1]
	figs := []struct {
		file, title, x, y string
		series            []sim.Series
		logX              bool
	}{
		{"jct-cdf.svg", fmt.Sprintf("%s, load %g: job completion time", name, top), "hours (log)", "fraction of jobs", sim.JCTCDF(cells, top), true},
		{"wait-over-time.svg", fmt.Sprintf("%s, load %g: mean wait of the jobs submitted", name, top), "hours since the start", "wait, hours", sim.WaitOverTime(cells, top, 40), false},
		{"utilisation.svg", name + ": utilisation", "offered load", "allocated fraction", sim.Utilisation(rows), false},
	}
	for _, f := range figs {
		if err := linePlot(filepath.Join(dir, f.file), f.title, f.x, f.y, f.series, f.logX); err != nil {
			return err
		}
	}
	return nil
}

var simColors = []color.RGBA{{31, 119, 180, 255}, {214, 39, 40, 255}, {44, 160, 44, 255}, {148, 103, 189, 255}, {255, 127, 14, 255}, {140, 86, 75, 255}, {227, 119, 194, 255}, {127, 127, 127, 255}}

func linePlot(path, title, xl, yl string, series []sim.Series, logX bool) error {
	p := plot.New()
	p.Title.Text, p.X.Label.Text, p.Y.Label.Text = title, xl, yl
	p.Add(plotter.NewGrid())
	if logX {
		p.X.Scale, p.X.Tick.Marker = plot.LogScale{}, plot.LogTicks{Prec: -1}
	}
	for i, s := range series {
		xy := make(plotter.XYs, 0, len(s.X))
		for k := range s.X {
			// a log axis has no place for 0 (a job that completed in no
			// time): gonum panics on it
			if !logX || s.X[k] > 0 {
				xy = append(xy, plotter.XY{X: s.X[k], Y: s.Y[k]})
			}
		}
		if len(xy) == 0 {
			continue
		}
		l, err := plotter.NewLine(xy)
		if err != nil {
			return err
		}
		l.LineStyle.Color, l.LineStyle.Width = simColors[i%len(simColors)], vg.Points(1.5)
		p.Add(l)
		p.Legend.Add(s.Name, l)
	}
	p.Legend.Top, p.Legend.Left = false, false
	cv := vgsvg.New(24*vg.Centimeter, 15*vg.Centimeter)
	p.Draw(draw.New(cv))
	err := atomicfile.Write(path, 0o644, func(w io.Writer) error {
		_, err := cv.WriteTo(w)
		return err
	})
	if err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	return nil
}

// simIntervalJSON is a mean over seeds with its 95 % confidence
// interval's half width (0 with one seed), in the unit of its key.
type simIntervalJSON struct {
	Mean  float64 `json:"mean"`
	Half  float64 `json:"ci95_half"`
	Seeds int     `json:"seeds"`
}

// simRowJSON is one row of `isched simulate --json` (sim.Row): times in
// seconds, changes against Slurm alone as fractions (−0.25: 25 % lower).
type simRowJSON struct {
	Load           float64         `json:"load"`
	Policy         string          `json:"policy"`
	JCTS           simIntervalJSON `json:"mean_jct_s"`
	MedianJCTS     simIntervalJSON `json:"median_jct_s"`
	P95JCTS        simIntervalJSON `json:"p95_jct_s"`
	WaitS          simIntervalJSON `json:"mean_wait_s"`
	BSLD           simIntervalJSON `json:"bsld"`
	GPUUtil        simIntervalJSON `json:"gpu_util"`
	CPUUtil        simIntervalJSON `json:"cpu_util"`
	Elsewhere      simIntervalJSON `json:"isched_elsewhere"`
	Cost           simIntervalJSON `json:"cost"`
	Moves          simIntervalJSON `json:"moves_per_job"`
	Conts          simIntervalJSON `json:"conts_per_job"`
	Lost           simIntervalJSON `json:"lost_steps_per_job"`
	JCTIschedS     simIntervalJSON `json:"isched_mean_jct_s"`
	UntouchedWaitS simIntervalJSON `json:"untouched_wait_s"`
	DJCT           simIntervalJSON `json:"d_jct"`
	DJCTIsched     simIntervalJSON `json:"d_jct_isched"`
	DUntouchedWait simIntervalJSON `json:"d_untouched_wait"`
	Unfinished     float64         `json:"unfinished"`
	Offered        float64         `json:"offered_load"`
	MedianWaitS    simIntervalJSON `json:"median_wait_s"`
	P95WaitS       simIntervalJSON `json:"p95_wait_s"`
	WaitShare      simIntervalJSON `json:"wait_share"`
	Ceiling        simIntervalJSON `json:"ceiling"`
}

// simRowsJSON are rows in the --json style; sim's hours become seconds.
func simRowsJSON(rows []sim.Row) []simRowJSON {
	iv := func(i sim.Interval, unit float64) simIntervalJSON {
		return simIntervalJSON{Mean: i.Mean * unit, Half: i.Half * unit, Seeds: i.N}
	}
	const h = 3600
	out := make([]simRowJSON, len(rows))
	for k, r := range rows {
		out[k] = simRowJSON{Load: r.Load, Policy: r.Variant, JCTS: iv(r.JCT, h), MedianJCTS: iv(r.MedianJCT, h), P95JCTS: iv(r.P95JCT, h),
			WaitS: iv(r.Wait, h), BSLD: iv(r.BSLD, 1), GPUUtil: iv(r.GPUUtil, 1), CPUUtil: iv(r.CPUUtil, 1), Elsewhere: iv(r.Elsewhere, 1),
			Cost: iv(r.Cost, 1), Moves: iv(r.Moves, 1), Conts: iv(r.Conts, 1), Lost: iv(r.Lost, 1), JCTIschedS: iv(r.JCTIsched, h),
			UntouchedWaitS: iv(r.OtherWait, h), DJCT: iv(r.DJCT, 1), DJCTIsched: iv(r.DJCTIsched, 1), DUntouchedWait: iv(r.DOtherWait, 1),
			Unfinished: r.Unfinished, Offered: r.Offered, MedianWaitS: iv(r.MedianWait, h), P95WaitS: iv(r.P95Wait, h),
			WaitShare: iv(r.WaitShare, 1), Ceiling: iv(r.Ceiling, 1)}
	}
	return out
}

// baselineName is --baseline as the table's title says it.
func (c *simulateCmd) baselineName() string {
	if c.baseline == sim.Variants[0].Name {
		return "Slurm alone"
	}
	return c.baseline
}
