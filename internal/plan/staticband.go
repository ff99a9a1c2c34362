package plan

// StaticBand is how far the real peak memory and iteration time of CPU
// training were from the static estimate on the bench-predict grid
// (scripts/bench/predict/testdata/grid.json): the smallest and largest
// ratio real / static over the grid's cells, widened to hold 1 (the
// estimate itself). A static row of a CPU node type carries the band as
// its MemBand and IterBand: the range the real figure fell in on the grid,
// in sample (docs/model-summary.md gives its leave-one-architecture-out
// coverage). The values are generated from the grid (staticband_gen.go, by
// go run ./scripts/bench/predict -write-static-band), never typed in; a
// test there fails when they drift from it.
type StaticBand struct {
	MemLow, MemHigh   float64 // real / static peak memory
	TimeLow, TimeHigh float64 // real / static iteration time
	Cells             int     // grid cells behind the band
	Grid              string  // the grid's measured_at
}

// StaticBandFor returns the band of the static model with a probe record
// for the node type (probed) or with the assumed framework footprint and
// efficiency.
func StaticBandFor(probed bool) StaticBand {
	if probed {
		return staticBandProbed
	}
	return staticBandAssumed
}

// staticBands sets a static CPU row's bands from the grid's calibration.
// GPU rows keep none: the grid measured no GPU.
//
// Without a probe record of the node type the time is unmeasured: the row
// says so (TimeUnmeasured) instead of carrying the assumed model's time
// band, which spans 40x and tells a user nothing; its memory band stays.
func (s *Site) staticBands(r *Row) {
	if r.Source != Static {
		return
	}
	probed := s.Probe(r.NodeType) != nil
	r.TimeUnmeasured = !probed
	b := StaticBandFor(probed)
	if r.NodeType.Kind != KindCPU || b.Cells == 0 {
		return
	}
	m := float64(r.Mem)
	r.MemBand = Band{m * b.MemLow, m, m * b.MemHigh}
	if probed {
		r.IterBand = Band{r.IterSeconds * b.TimeLow, r.IterSeconds, r.IterSeconds * b.TimeHigh}
	}
}
