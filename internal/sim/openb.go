package sim

import (
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"strconv"
	"strings"
)

var openbFields = []string{"name", "cpu_milli", "memory_mib", "num_gpu", "gpu_milli", "gpu_spec", "qos", "pod_phase",
	"creation_time", "deletion_time", "scheduled_time"}

// ReadOpenB reads the openb GPU cluster's task list (Weng et al., USENIX
// ATC 2023; alibaba/clusterdata cluster-trace-gpu-v2023): a task is a
// one-node job of ceil(cpu_milli/1000) CPUs and num_gpu GPUs (a shared
// GPU, gpu_milli < 1000, counts as one), arriving at creation_time and
// running deletion_time − scheduled_time. Tasks never scheduled are left
// out (their run time is unknown); tasks still running at the trace's
// end are marked Censored (their run time is cut there). Users are not in the trace: each task
// gets one of 64 users by its index, so per-user limits bind alike in
// every replay.
func ReadOpenB(name string, r io.Reader) ([]Job, error) {
	var jobs []Job
	err := lines(r, func(n int, line string) error {
		f := strings.Split(line, ",")
		if n == 1 {
			if strings.Join(f, ",") != strings.Join(openbFields, ",") {
				return &ParseError{name, n, "header", fmt.Errorf("want %s", strings.Join(openbFields, ","))}
			}
			return nil
		}
		if len(f) != len(openbFields) {
			return &ParseError{name, n, "count", fmt.Errorf("%d fields, want %d", len(f), len(openbFields))}
		}
		if f[10] == "" {
			return nil
		}
		v := map[string]float64{}
		for _, k := range []int{1, 2, 3, 8, 9, 10} {
			x, err := strconv.ParseFloat(f[k], 64)
			if err != nil || x < 0 || math.IsInf(x, 0) {
				return &ParseError{name, n, openbFields[k], fmt.Errorf("%q: %w", f[k], errSyntax)}
			}
			v[openbFields[k]] = x
		}
		id := len(jobs)
		jobs = append(jobs, Job{ID: id, User: "u" + strconv.Itoa(id%64), Submit: v["creation_time"], Nodes: 1,
			CPUs: max(1, int(math.Ceil(v["cpu_milli"]/1000))), GPUs: int(v["num_gpu"]), MemMiB: int64(v["memory_mib"]),
			Run: max(v["deletion_time"]-v["scheduled_time"], 0), Censored: f[7] == "Running"})
		return nil
	})
	if err != nil {
		return nil, err
	}
	return sortJobs(jobs), nil
}

// ReadRuntimes reads a one-column CSV of run times in seconds with a
// header (Philly's philly_runtime.csv: Jeon et al., USENIX ATC 2019).
func ReadRuntimes(name string, r io.Reader) ([]float64, error) {
	var out []float64
	err := lines(r, func(n int, line string) error {
		if n == 1 {
			return nil
		}
		line = strings.TrimSpace(line)
		if line == "" {
			return nil
		}
		x, err := strconv.ParseFloat(line, 64)
		if err != nil || x < 0 || math.IsInf(x, 0) || math.IsNaN(x) {
			return &ParseError{name, n, "runtime", fmt.Errorf("%q: %w", line, errSyntax)}
		}
		out = append(out, x)
		return nil
	})
	return out, err
}

// Synthesize makes n jobs from run times (Philly's) and a mix of shapes
// (openb's): Poisson arrivals at one per second (ScaleLoad sets the real
// rate), run times drawn from runtimes, shape (CPUs, GPUs, memory) from
// mix, user one of 64. Philly gives run times only, so the rest is this
// model's, and docs/evaluation.md says so.
func Synthesize(runtimes []float64, mix []Job, n int, seed uint64) []Job {
	r := rand.New(rand.NewPCG(seed, 0x9417))
	jobs := make([]Job, n)
	t := 0.0
	for i := range jobs {
		t += r.ExpFloat64()
		m := mix[r.IntN(len(mix))]
		jobs[i] = Job{ID: i, User: "u" + strconv.Itoa(r.IntN(64)), Submit: t, Nodes: 1, CPUs: m.CPUs, GPUs: m.GPUs,
			MemMiB: m.MemMiB, Run: runtimes[r.IntN(len(runtimes))]}
	}
	return jobs
}

// Window is n consecutive jobs of trace from a point drawn by seed,
// shifted to start at second 0: the seeds of an experiment replay
// different stretches of a long trace.
func Window(trace []Job, n int, seed uint64) []Job {
	if n <= 0 || n >= len(trace) {
		return trace
	}
	r := rand.New(rand.NewPCG(seed, 0x3d1))
	from := r.IntN(len(trace) - n + 1)
	out := append([]Job(nil), trace[from:from+n]...)
	t0 := out[0].Submit
	for i := range out {
		out[i].Submit -= t0
	}
	return out
}

// ScaleLoad stretches or compresses the arrivals of trace so that the
// work offered while jobs arrive is load × the capacity of the partitions
// its jobs ask for: GPU-seconds against the GPUs of the site's GPU
// partitions when the trace has GPU jobs, else CPU-seconds against CPU
// partitions (dev and preemptible partitions are not capacity a user asks
// for). Work after the last arrival does not count: a heavy-tailed
// trace's longest jobs would otherwise stand for load the cluster only
// sees after the replay's window. The factor is found by bisection (the
// clipped load falls as arrivals spread).
func ScaleLoad(trace []Job, site *siteCap, load float64) []Job {
	if len(trace) < 2 || load <= 0 {
		return trace
	}
	gpu := false
	for _, j := range trace {
		gpu = gpu || j.GPUs > 0
	}
	capacity := float64(site.cpus)
	if gpu {
		capacity = float64(site.gpus)
	}
	t0, span := trace[0].Submit, trace[len(trace)-1].Submit-trace[0].Submit
	if capacity <= 0 || span <= 0 {
		return trace
	}
	offered := func(f float64) float64 {
		end := span * f
		var work float64
		for _, j := range trace {
			size := float64(j.Nodes * j.CPUs)
			if gpu {
				size = float64(j.Nodes * j.GPUs)
			}
			work += size * min(j.Run, end-(j.Submit-t0)*f)
		}
		return work / (capacity * end)
	}
	lo, hi := 1e-9, 1e9
	for range 200 {
		mid := math.Sqrt(lo * hi)
		if offered(mid) > load {
			lo = mid
		} else {
			hi = mid
		}
	}
	out := append([]Job(nil), trace...)
	for i := range out {
		out[i].Submit = t0 + (out[i].Submit-t0)*hi
	}
	return out
}

// siteCap is the capacity users ask for: GPUs of GPU partitions and CPUs
// of CPU partitions, dev and preemptible ones left out.
type siteCap struct{ gpus, cpus int }

func capacity(c *cluster) *siteCap {
	sc := &siteCap{}
	seen := map[int]bool{}
	for pi := range c.parts {
		p := &c.parts[pi]
		if p.dev || p.tier == 0 {
			continue
		}
		for _, ni := range p.nodes {
			if seen[ni] {
				continue
			}
			seen[ni] = true
			if n := &c.nodes[ni]; n.gpuNode() {
				sc.gpus += n.gpus
			} else {
				sc.cpus += n.cpus
			}
		}
	}
	return sc
}
