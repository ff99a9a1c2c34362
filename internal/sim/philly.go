package sim

import (
	"cmp"
	"fmt"
	"hash/fnv"
	"io"
	"math"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/isched/isched/internal/plan"
)

// PhillyHeader is the header of the Philly trace as prepared for the
// Pollux evaluation (Qiao et al., OSDI 2021; petuum/adaptdl,
// simulator/traces/philly.csv): real arrivals of Microsoft's Philly
// cluster (Jeon et al., USENIX ATC 2019).
const PhillyHeader = "timestamp,duration,num_gpus,gpu_time,cluster"

var phillyFields = strings.Split(PhillyHeader, ",")

// PhillyNodeGPUs is the GPUs of a node a Philly job is packed on: jobs of
// up to 8 GPUs are one-node gangs, larger ones take whole 8-GPU nodes.
const PhillyNodeGPUs = 8

// PhillyCPUsPerGPU is the CPUs a Philly job asks per GPU (the trace has
// none): 4, which fits every GPU node of the catalogues used here.
const PhillyCPUsPerGPU = 4

// ReadPhilly reads the Philly trace with real arrivals: a job arrives at
// timestamp (UTC), runs duration seconds on num_gpus GPUs and belongs to
// the virtual cluster in cluster, which becomes its Slurm account (and
// its user: the trace has no users). A job of up to 8 GPUs is one node
// with its GPUs; a larger one takes ceil(GPUs/8) whole nodes of 8 GPUs.
// Arrivals are moved to start at second 0; Job.ID is the line number.
func ReadPhilly(name string, r io.Reader) ([]Job, error) {
	var jobs []Job
	err := lines(r, func(n int, line string) error {
		f := strings.Split(strings.TrimRight(line, "\r"), ",")
		if n == 1 {
			if strings.Join(f, ",") != PhillyHeader {
				return &ParseError{name, n, "header", fmt.Errorf("want %s", PhillyHeader)}
			}
			return nil
		}
		if strings.TrimSpace(line) == "" {
			return nil
		}
		if len(f) != len(phillyFields) {
			return &ParseError{name, n, "count", fmt.Errorf("%d fields, want %d", len(f), len(phillyFields))}
		}
		j, err := phillyJob(f)
		if err != nil {
			err.File, err.Line = name, n
			return err
		}
		j.ID = n
		jobs = append(jobs, j)
		return nil
	})
	if err != nil {
		return nil, err
	}
	return sortJobs(jobs), nil
}

func phillyJob(f []string) (Job, *ParseError) {
	bad := func(k int) *ParseError {
		return &ParseError{Field: phillyFields[k], Err: fmt.Errorf("%q: %w", f[k], errSyntax)}
	}
	t, err := time.ParseInLocation("2006-01-02 15:04:05", f[0], time.UTC)
	if err != nil {
		return Job{}, bad(0)
	}
	dur, err := strconv.ParseFloat(f[1], 64)
	if err != nil || !(dur > 0) || math.IsInf(dur, 0) {
		return Job{}, bad(1)
	}
	gpus, err := strconv.ParseFloat(f[2], 64)
	if err != nil || gpus < 1 || gpus != math.Trunc(gpus) || gpus > 1<<20 {
		return Job{}, bad(2)
	}
	if gt, err := strconv.ParseFloat(f[3], 64); err != nil || gt < 0 || math.IsInf(gt, 0) || math.IsNaN(gt) {
		return Job{}, bad(3)
	}
	if f[4] == "" {
		return Job{}, bad(4)
	}
	g := int(gpus)
	nodes, per := 1, g
	if g > PhillyNodeGPUs {
		nodes, per = (g+PhillyNodeGPUs-1)/PhillyNodeGPUs, PhillyNodeGPUs
	}
	vc := "vc-" + f[4]
	return Job{User: vc, Account: vc, Submit: float64(t.Unix()), Nodes: nodes, GPUs: per, CPUs: per * PhillyCPUsPerGPU, Run: dur}, nil
}

// SpreadPartitions gives every job that asks for no partition one of
// parts, drawn by a hash of its ID with probability proportional to
// weights (a site's users spread over its GPU partitions in proportion to
// their size); the same job gets the same partition in every replay.
func SpreadPartitions(jobs []Job, parts []string, weights []float64) []Job {
	total := 0.0
	for _, w := range weights {
		total += w
	}
	if len(parts) == 0 || total <= 0 {
		return jobs
	}
	out := slices.Clone(jobs)
	for i := range out {
		if out[i].Partition != "" {
			continue
		}
		h := fnv.New64a()
		fmt.Fprint(h, out[i].ID)
		u := float64(h.Sum64()>>11) / (1 << 53) * total
		k := 0
		for k < len(parts)-1 && u >= weights[k] {
			u -= weights[k]
			k++
		}
		out[i].Partition = parts[k]
	}
	return out
}

// GPUSeconds is the GPU-seconds jobs ask for (their run times).
func GPUSeconds(jobs []Job) float64 {
	var w float64
	for _, j := range jobs {
		w += float64(j.Nodes*j.GPUs) * j.Run
	}
	return w
}

// OfferedLoad is the trace's own offered load on gpus GPUs: the
// GPU-seconds of its jobs over gpus × the span of its arrivals.
func OfferedLoad(jobs []Job, gpus int) float64 {
	if len(jobs) < 2 || gpus <= 0 {
		return 0
	}
	span := jobs[len(jobs)-1].Submit - jobs[0].Submit
	if span <= 0 {
		return 0
	}
	return GPUSeconds(jobs) / (float64(gpus) * span)
}

// ScaleArrivals divides the arrival times by factor (1.5: arrivals 1.5×
// as often, the same jobs): the trace's own offered load times factor.
func ScaleArrivals(jobs []Job, factor float64) []Job {
	if factor <= 0 || factor == 1 {
		return jobs
	}
	out := slices.Clone(jobs)
	for i := range out {
		out[i].Submit /= factor
	}
	return out
}

// TimeWindow is the jobs arriving in [from, to) seconds, moved to start
// at second 0.
func TimeWindow(jobs []Job, from, to float64) []Job {
	var out []Job
	for _, j := range jobs {
		if j.Submit >= from && j.Submit < to {
			out = append(out, j)
		}
	}
	if len(out) == 0 {
		return nil
	}
	t0 := out[0].Submit
	for i := range out {
		out[i].Submit -= t0
	}
	return out
}

// BusiestWindow is the start (seconds, a whole number of days from the
// trace's start) of the window of length seconds whose arrivals ask for
// the most GPU-seconds.
func BusiestWindow(jobs []Job, length float64) float64 {
	if len(jobs) == 0 {
		return 0
	}
	const day = 86400.0
	last := jobs[len(jobs)-1].Submit
	best, bestW := 0.0, -1.0
	for from := 0.0; from == 0 || from+length <= last+day; from += day {
		var w float64
		lo, _ := slices.BinarySearchFunc(jobs, from, func(j Job, t float64) int { return cmp.Compare(j.Submit, t) })
		for k := lo; k < len(jobs) && jobs[k].Submit < from+length; k++ {
			w += float64(jobs[k].Nodes*jobs[k].GPUs) * jobs[k].Run
		}
		if w > bestW {
			best, bestW = from, w
		}
	}
	return best
}

// AccountQuotas sizes each account's GrpTRES=gres/gpu limit as a site
// would: its share of the trace's GPU-seconds × the cluster's GPUs ×
// oversub (quotas add up to oversub × the cluster: an account may use
// more than its share while others leave theirs idle, but not the whole
// cluster), rounded up, and never below its largest job (a job larger
// than its account's limit would never start). oversub <= 0: no quotas
// (nil). The shares are returned too: the fair-share's normalized shares.
func AccountQuotas(jobs []Job, gpus int, oversub float64) (quota map[string]int, shares map[string]float64) {
	use := map[string]float64{}
	biggest := map[string]int{}
	var total float64
	for _, j := range jobs {
		a := j.account()
		g := float64(j.Nodes*j.GPUs) * j.Run
		use[a] += g
		total += g
		biggest[a] = max(biggest[a], j.Nodes*j.GPUs)
	}
	shares = map[string]float64{}
	for a, u := range use {
		shares[a] = u / max(total, 1)
	}
	if oversub <= 0 {
		return nil, shares
	}
	quota = map[string]int{}
	for a, s := range shares {
		quota[a] = max(int(math.Ceil(s*float64(gpus)*oversub)), biggest[a])
	}
	return quota, shares
}

// account is the job's Slurm account: its Account, else its user.
func (j *Job) account() string {
	if j.Account != "" {
		return j.Account
	}
	return j.User
}

// GPUPartitions are the site's regular GPU partitions (neither
// preemptible nor dev) and the GPUs of each: where a trace's GPU jobs
// ask to run, and in what proportion (SpreadPartitions).
func GPUPartitions(site *plan.Site, dev []string) (names []string, gpus []float64, err error) {
	cl, err := newCluster(site, dev)
	if err != nil {
		return nil, nil, err
	}
	for pi := range cl.parts {
		if p := &cl.parts[pi]; p.tier > 0 && !p.dev && p.gpus > 0 {
			names, gpus = append(names, p.name), append(gpus, float64(p.gpus))
		}
	}
	return names, gpus, nil
}

// SiteGPUs is the GPUs of the site's regular partitions: the capacity
// OfferedLoad and AccountQuotas count.
func SiteGPUs(site *plan.Site, dev []string) (int, error) {
	cl, err := newCluster(site, dev)
	if err != nil {
		return 0, err
	}
	return capacity(cl).gpus, nil
}
