package plan

import (
	"fmt"
	"math"
	"slices"

	"github.com/isched/isched/internal/report"
)

// RatioPriorWeight is how many measured pairs the catalogue's speed ratio
// between two node types counts as (learnedRatio).
const RatioPriorWeight = 3

// LearnRatio blends measured speed ratios of node type `to` over `from`
// (one per configuration and batch size measured on both) with the
// catalogue's: the median of the measured ones, shrunk toward the prior
// by count in log space, (n·log median + RatioPriorWeight·log prior) /
// (n + RatioPriorWeight). Without measurements it is the prior.
func LearnRatio(prior float64, measured []float64) float64 {
	var ok []float64
	for _, m := range measured {
		if m > 0 && !math.IsInf(m, 0) {
			ok = append(ok, m)
		}
	}
	if len(ok) == 0 || !(prior > 0) {
		return prior
	}
	slices.Sort(ok)
	med := ok[len(ok)/2]
	if len(ok)%2 == 0 {
		med = math.Sqrt(ok[len(ok)/2-1] * ok[len(ok)/2])
	}
	n := float64(len(ok))
	return math.Exp((n*math.Log(med) + RatioPriorWeight*math.Log(prior)) / (n + RatioPriorWeight))
}

// measuredRatios are iter(from) / iter(to) of every other configuration
// the receipts measured at one batch size on both node types (mean
// iteration time of each).
func (s *Site) measuredRatios(receipts []report.Receipt, skip string, from, to *NodeType) []float64 {
	type key struct {
		model string
		batch int
	}
	sum := map[key]map[string][2]float64{} // node type → (sum, count)
	for i := range receipts {
		r := &receipts[i]
		if r.Model == skip || r.Batch <= 0 || !(r.IterMS > 0) || math.IsInf(r.IterMS, 0) {
			continue
		}
		nt := s.receiptNodeType(r)
		if nt == nil || (nt != from && nt != to) {
			continue
		}
		k := key{r.Model, r.Batch}
		if sum[k] == nil {
			sum[k] = map[string][2]float64{}
		}
		v := sum[k][nt.Name]
		sum[k][nt.Name] = [2]float64{v[0] + r.IterMS, v[1] + 1}
	}
	var out []float64
	for _, m := range sum {
		a, b := m[from.Name], m[to.Name]
		if a[1] > 0 && b[1] > 0 {
			out = append(out, (a[0]/a[1])/(b[0]/b[1]))
		}
	}
	return out
}

// learnedRatio is how much faster `to` trains than `from` for req: the
// catalogue's ratio, blended with what the user's receipts of other
// configurations measured on both; why says which.
func (s *Site) learnedRatio(req Request, from, to *NodeType) (ratio float64, why string) {
	prior := s.speedRatio(from, to, req.Training.Precision)
	m := s.measuredRatios(req.Receipts, ConfigKey(req.Model, req.Training), from, to)
	if len(m) == 0 {
		return prior, "relative throughput"
	}
	r := LearnRatio(prior, m)
	return r, fmt.Sprintf("relative throughput learned from %d other configuration(s) on both, catalogue %.3g", len(m), prior)
}
