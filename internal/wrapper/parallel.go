package wrapper

import "math"

// parallelism tallies how many cores the process tree kept busy at once,
// sample by sample, in tenths of a core: bounded by the cores the job can
// use (a few thousand bins at most), however long the run.
type parallelism struct {
	bins map[int]int // tenths of a core (rounded up) -> samples
	n    int
}

// observe counts one sample's CPU percent (100 per busy core); a
// non-finite or negative one is not a measurement.
func (p *parallelism) observe(cpuPercent float64) {
	if math.IsNaN(cpuPercent) || math.IsInf(cpuPercent, 0) || cpuPercent < 0 {
		return
	}
	if p.bins == nil {
		p.bins = map[int]int{}
	}
	p.bins[int(math.Ceil(cpuPercent/10))]++
	p.n++
}

// quantile is the busy cores that q of the samples stayed at or under (to
// a tenth of a core, rounded up); 0 with fewer than minSamples samples.
func (p *parallelism) quantile(q float64, minSamples int) float64 {
	if p.n < max(1, minSamples) {
		return 0
	}
	need := int(math.Ceil(q * float64(p.n)))
	seen := 0
	for tenth := 0; ; tenth++ {
		seen += p.bins[tenth]
		if seen >= need {
			return float64(tenth) / 10
		}
	}
}
