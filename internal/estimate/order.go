package estimate

import (
	"cmp"
	"slices"
	"sync"
)

// windowOrder is the window's ring positions sorted by their
// observation's MS: the quantiles of a full window are one pass over it
// instead of a sort of 512 observations at every estimate (the
// coordinator estimates after every report of every job). It costs 2 bytes
// per observation, is not persisted, and is rebuilt whenever it is not known
// to match the window (after a load, a repair or a level shift).
//
// An estimator copied by value shares its window's and pos's backing
// arrays with the original: owner tells the copy that pos is not its own,
// so it builds a new one instead of reading or writing the original's.
type windowOrder struct {
	pos   []uint16 // ring positions in MS order (ties in any order)
	owner *IterEstimator
	base  *Obs // &window[0] when pos was last known to match
	n     int  // len(window) then

	rebuilds int // sorts done (tests check that push keeps the order)
}

// matches reports whether pos describes w of e: built by e, for this
// backing array and length, and kept since by push. A window replaced by a
// load or truncated by sanitize has another first element's address.
func (x *windowOrder) matches(e *IterEstimator, w []Obs) bool {
	if x.owner != e || len(w) != x.n || len(x.pos) != len(w) {
		return false
	}
	return len(w) == 0 || &w[0] == x.base
}

// sorted returns pos for w of e, rebuilding it when it does not match.
func (x *windowOrder) sorted(e *IterEstimator, w []Obs) []uint16 {
	if x.matches(e, w) {
		return x.pos
	}
	if x.owner != e {
		x.pos, x.owner = make([]uint16, 0, len(w)), e
	}
	x.rebuilds++
	x.pos = byMS(x.pos, w)
	x.seen(w)
	return x.pos
}

// byMS returns the positions of w sorted by their MS (ties in any order),
// in dst's storage. Positions are uint16: w is a window (at most
// WindowSize, sanitize bounds a loaded one) or a warm-up buffer.
func byMS(dst []uint16, w []Obs) []uint16 {
	dst = dst[:0]
	for i := range w {
		dst = append(dst, uint16(i))
	}
	slices.SortFunc(dst, func(a, b uint16) int { return cmp.Compare(w[a].MS, w[b].MS) })
	return dst
}

func (x *windowOrder) seen(w []Obs) {
	x.n = len(w)
	if len(w) > 0 {
		x.base = &w[0]
	} else {
		x.base = nil
	}
}

// search is where an observation of ms goes among pos (the first
// position whose MS is not below ms).
func (x *windowOrder) search(w []Obs, ms float64) int {
	i, _ := slices.BinarySearchFunc(x.pos, ms, func(p uint16, ms float64) int { return cmp.Compare(w[p].MS, ms) })
	return i
}

// appended records that w of e grew by one observation at its end; was
// is the window before the append.
func (x *windowOrder) appended(e *IterEstimator, was, w []Obs) {
	if len(was) == 0 { // a new window: an empty order matches it
		if x.owner != e {
			x.pos, x.owner = nil, e
		}
		x.pos, x.n = x.pos[:0], 0
	}
	if !x.matches(e, was) {
		x.n = -1
		return
	}
	last := len(w) - 1
	x.pos = slices.Insert(x.pos, x.search(w, w[last].MS), uint16(last))
	x.seen(w)
}

// replace records that ring position p of w of e gets o: call it
// instead of assigning w[p] = o.
func (x *windowOrder) replace(e *IterEstimator, w []Obs, p int, o Obs) {
	if !x.matches(e, w) {
		w[p] = o
		x.n = -1
		return
	}
	// find p's slot among the observations of its MS (w[p] is still the old one)
	i := x.search(w, w[p].MS)
	for ; i < len(x.pos) && x.pos[i] != uint16(p); i++ {
	}
	w[p] = o
	if i == len(x.pos) {
		x.n = -1 // cannot happen while pos matches; rebuilt on next use
		return
	}
	x.pos = slices.Delete(x.pos, i, i+1)
	x.pos = slices.Insert(x.pos, x.search(w, o.MS), uint16(p))
}

// wquantilesOrdered is wquantiles over w visited in the order pos gives
// (w's positions sorted by MS).
func wquantilesOrdered(w []Obs, pos []uint16, qs ...float64) []float64 {
	out := make([]float64, len(qs))
	if len(pos) == 0 {
		return out
	}
	var total float64
	for _, o := range w {
		total += float64(o.Steps)
	}
	for k, q := range qs {
		want, cum := q*total, 0.0
		out[k] = w[pos[len(pos)-1]].MS
		for _, p := range pos {
			cum += float64(w[p].Steps)
			if cum >= want {
				out[k] = w[p].MS
				break
			}
		}
	}
	return out
}

// scratch holds the buffers median, medianGap and trend select in.
var scratch = sync.Pool{New: func() any { return new([]float64) }}

// medianGap is the median of the observations' gaps, found by selection
// in a pooled buffer instead of sorting a fresh copy.
func medianGap(w []Obs) float64 {
	bp := scratch.Get().(*[]float64)
	defer scratch.Put(bp)
	v := (*bp)[:0]
	for _, o := range w {
		v = append(v, o.gap())
	}
	*bp = v
	return medianInPlace(v)
}

// nth reorders v so that v[k] is the value a sort would put there, every
// element before it is not greater and none after it is smaller; it
// returns v[k]. Quickselect with a median-of-three pivot.
func nth(v []float64, k int) float64 {
	lo, hi := 0, len(v)-1
	for hi > lo {
		if hi-lo < 16 {
			slices.Sort(v[lo : hi+1])
			break
		}
		m := lo + (hi-lo)/2
		if v[m] < v[lo] {
			v[m], v[lo] = v[lo], v[m]
		}
		if v[hi] < v[lo] {
			v[hi], v[lo] = v[lo], v[hi]
		}
		if v[hi] < v[m] {
			v[hi], v[m] = v[m], v[hi]
		}
		pivot := v[m]
		i, j := lo, hi
		for i <= j {
			for v[i] < pivot {
				i++
			}
			for v[j] > pivot {
				j--
			}
			if i <= j {
				v[i], v[j] = v[j], v[i]
				i++
				j--
			}
		}
		switch {
		case k <= j:
			hi = j
		case k >= i:
			lo = i
		default:
			return v[k]
		}
	}
	return v[k]
}
