package estimate

import (
	"encoding/json"
	"math"
	"math/rand/v2"
	"testing"
)

const (
	mib = 1 << 20
	gib = 1 << 30
)

type memSample struct{ step, rss, gpu int64 }

// series samples every `every` steps up to n; rss and gpu give the memory at a step.
func series(n, every int64, seed uint64, rss, gpu func(step int64, rng *rand.Rand) int64) []memSample {
	rng := rand.New(rand.NewPCG(seed, seed))
	var out []memSample
	for s := int64(0); s <= n; s += every {
		out = append(out, memSample{s, rss(s, rng), gpu(s, rng)})
	}
	return out
}

func flat(level int64, noise float64) func(int64, *rand.Rand) int64 {
	return func(_ int64, rng *rand.Rand) int64 {
		return level + int64(noise*float64(level)*(2*rng.Float64()-1))
	}
}

func linear(level int64, perStep float64, noise int64) func(int64, *rand.Rand) int64 {
	return func(s int64, rng *rand.Rand) int64 {
		return level + int64(perStep*float64(s)) + rng.Int64N(2*noise+1) - noise
	}
}

func TestMemTracker(t *testing.T) {
	t.Parallel()
	zero := func(int64, *rand.Rand) int64 { return 0 }
	tests := []struct {
		name        string
		samples     []memSample
		total       int64
		wantGrowing bool
		wantRSS     float64 // slope, bytes per step
		slopeTol    float64 // relative
		wantPeak    [2]int64
		predict     [2]int64 // PredictPeak(total); 0: same as peak
		predictTol  float64
	}{
		{
			name:    "flat with noise",
			samples: series(2000, 10, 1, flat(2*gib, 0.02), flat(10*gib, 0.01)),
			total:   10000, wantRSS: 0, slopeTol: -1,
		},
		{
			name:    "RSS leak 1 MiB per step",
			samples: series(2000, 10, 2, linear(2*gib, mib, 20*mib), zero),
			total:   4000, wantGrowing: true, wantRSS: mib, slopeTol: 0.05,
			predict: [2]int64{2*gib + 4000*mib, 0}, predictTol: 0.02,
		},
		{
			name:    "GPU leak only",
			samples: series(2000, 10, 3, flat(2*gib, 0.01), linear(8*gib, 0.5*mib, 10*mib)),
			total:   4000, wantGrowing: true, wantRSS: 0, slopeTol: -1,
			predict: [2]int64{0, 8*gib + 2000*mib}, predictTol: 0.02,
		},
		{
			name: "grows early then levels off",
			samples: series(4000, 10, 4, func(s int64, rng *rand.Rand) int64 {
				return 2*gib + min(s, 600)*mib + rng.Int64N(10*mib)
			}, zero),
			total: 8000, wantRSS: 0, slopeTol: -1,
		},
		{
			name: "one jump is not a leak",
			samples: series(2000, 10, 5, func(s int64, rng *rand.Rand) int64 {
				if s > 1000 {
					return 3*gib + rng.Int64N(10*mib)
				}
				return 2*gib + rng.Int64N(10*mib)
			}, zero),
			total: 4000, slopeTol: -1,
		},
		{
			name:    "slow growth below the significance threshold",
			samples: series(2000, 10, 6, linear(4*gib, 4096, mib), zero),
			total:   4000, wantRSS: 4096, slopeTol: 0.1,
		},
		{
			name: "warm-up samples are left out of the trend",
			samples: append([]memSample{{0, 100 * mib, 0}, {1, 500 * mib, 0}, {2, gib, 0}, {3, 1500 * mib, 0}, {4, 2 * gib, 0}},
				series(2000, 10, 7, flat(2*gib, 0.01), zero)[1:]...),
			total: 4000, slopeTol: -1,
		},
		{
			name: "unknown total predicts the current peak",
			samples: []memSample{
				{0, gib, 0}, {1, gib, 0}, {2, gib, 0}, {3, gib, 0}, {4, gib, 0}, {5, gib, 0},
				{10, 2 * gib, 0}, {20, 3 * gib, 0}, {30, 4 * gib, 0}, {40, 5 * gib, 0}, {50, 6 * gib, 0}, {60, 7 * gib, 0}, {70, 8 * gib, 0}, {80, 9 * gib, 0},
			},
			total: 0, wantGrowing: true, wantRSS: gib / 10, slopeTol: 0.01,
		},
		{
			// a run past its total (a total that was too low) has no
			// steps left to grow in: its peak is not lowered either
			name: "past its total predicts the current peak",
			samples: []memSample{
				{0, gib, 0}, {1, gib, 0}, {2, gib, 0}, {3, gib, 0}, {4, gib, 0}, {5, gib, 0},
				{10, 2 * gib, 0}, {20, 3 * gib, 0}, {30, 4 * gib, 0}, {40, 5 * gib, 0}, {50, 6 * gib, 0}, {60, 7 * gib, 0}, {70, 8 * gib, 0}, {80, 9 * gib, 0},
			},
			total: 40, wantGrowing: true, wantRSS: gib / 10, slopeTol: 0.01,
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			var m MemTracker
			var peak [2]int64
			for _, s := range tc.samples {
				m.Add(s.step, s.rss, s.gpu)
				peak = [2]int64{max(peak[0], s.rss), max(peak[1], s.gpu)}
			}
			if r, g := m.Peak(); r != peak[0] || g != peak[1] {
				t.Errorf("Peak() = %d, %d; want %d, %d", r, g, peak[0], peak[1])
			}
			if got := m.Growing(); got != tc.wantGrowing {
				tr := m.Trend()
				t.Errorf("Growing() = %v, want %v (trend %+v)", got, tc.wantGrowing, tr)
			}
			rs, _ := m.Slope()
			switch {
			case tc.slopeTol < 0:
				// Only the verdict matters; a flat series may have any small slope.
			case !within(rs, tc.wantRSS, tc.slopeTol):
				t.Errorf("RSS slope %.0f B/step, want %.0f ±%.0f%%", rs, tc.wantRSS, 100*tc.slopeTol)
			}
			want := tc.predict
			for i := range want {
				if want[i] == 0 {
					want[i] = peak[i]
				}
			}
			pr, pg := m.PredictPeak(tc.total)
			if !within(float64(pr), float64(want[0]), tc.predictTol) || !within(float64(pg), float64(want[1]), tc.predictTol) {
				t.Errorf("PredictPeak(%d) = %d MiB, %d MiB; want %d MiB, %d MiB", tc.total, pr/mib, pg/mib, want[0]/mib, want[1]/mib)
			}
			if len(m.Points) > memPoints {
				t.Errorf("%d points kept, want <= %d", len(m.Points), memPoints)
			}
		})
	}
}

func TestMemTrackerLifecycle(t *testing.T) {
	t.Parallel()
	leak := series(2000, 10, 8, linear(2*gib, mib, 0), func(int64, *rand.Rand) int64 { return gib })
	tests := []struct {
		name   string
		then   func(m *MemTracker)
		check  func(m *MemTracker) bool
		expect string
	}{
		{
			name: "restart keeps peaks, drops the trend",
			then: func(m *MemTracker) { m.Add(500, gib, 0) },
			check: func(m *MemTracker) bool {
				r, g := m.Peak()
				return m.Restarts == 1 && len(m.Points) == 0 && !m.Growing() && r == 2*gib+2000*mib && g == gib
			},
			expect: "1 restart, no points, peaks kept",
		},
		{
			// a new attempt resumed at the last step seen: no step back
			name: "new process keeps peaks, drops the trend, skips its warm-up",
			then: func(m *MemTracker) {
				m.NewProcess()
				for s := int64(2000); s < 2000+memWarmup*10; s += 10 {
					m.Add(s, gib/2, 0) // warm-up of the new process
				}
			},
			check: func(m *MemTracker) bool {
				r, g := m.Peak()
				return m.Restarts == 1 && len(m.Points) == 0 && !m.Growing() && r == 2*gib+2000*mib && g == gib && m.HaveStep
			},
			expect: "1 restart, no points through the warm-up, peaks kept",
		},
		{
			name: "new process, then its own trend",
			then: func(m *MemTracker) {
				m.NewProcess()
				for s := int64(2000); s < 2600; s += 10 {
					m.Add(s, 3*gib, 0) // flat, above the old process's level
				}
			},
			check: func(m *MemTracker) bool {
				sl, _ := m.Slope()
				return m.Restarts == 1 && len(m.Points) > memMinPoints && sl == 0 && !m.Growing() && m.Points[0].Step >= 2000+memWarmup*10
			},
			expect: "a flat trend of the new process's points only",
		},
		{
			name: "reset forgets peaks",
			then: func(m *MemTracker) { m.Reset() },
			check: func(m *MemTracker) bool {
				r, g := m.Peak()
				return m.Resets == 1 && r == 0 && g == 0 && len(m.Points) == 0
			},
			expect: "1 reset, nothing kept",
		},
		{
			name: "JSON round trip",
			then: func(m *MemTracker) {
				b, err := json.Marshal(m)
				if err != nil {
					panic(err)
				}
				*m = MemTracker{}
				if err := json.Unmarshal(b, m); err != nil {
					panic(err)
				}
			},
			check: func(m *MemTracker) bool {
				s, _ := m.Slope()
				return m.Growing() && math.Abs(s-mib) < 1 && len(m.Points) <= memPoints
			},
			expect: "the same trend",
		},
		{
			name: "a million samples stay bounded",
			then: func(m *MemTracker) {
				for s := int64(2001); s < 1_000_000; s++ {
					m.Add(s, 2*gib+s*mib, 0)
				}
			},
			check: func(m *MemTracker) bool {
				return len(m.Points) <= memPoints && m.Points[len(m.Points)-1].Step > 900_000
			},
			expect: "<= 64 points reaching the end of the run",
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			var m MemTracker
			for _, s := range leak {
				m.Add(s.step, s.rss, s.gpu)
			}
			tc.then(&m)
			if !tc.check(&m) {
				t.Errorf("want %s; got %+v", tc.expect, m.Trend())
			}
		})
	}
}

// Trend remembers its answer until the points change: after every Add
// (points appended, thinned, dropped by a restart or a reset) and after a
// JSON round trip it answers what a fresh computation over the points does.
func TestTrendCacheFollowsThePoints(t *testing.T) {
	t.Parallel()
	r := rand.New(rand.NewPCG(3, 4))
	var m MemTracker
	step := int64(0)
	for i := range 3000 {
		switch {
		case i%997 == 996:
			m.Reset()
		case i%701 == 700:
			step /= 2 // a resumed process
		default:
			step += 1 + r.Int64N(20)
		}
		m.Add(step, 1<<30+step*int64(r.IntN(4096)), int64(r.IntN(1<<20)))
		want := trendOf(m.Points)
		if got := m.Trend(); got != want {
			t.Fatalf("add %d: cached trend %+v, computed %+v", i, got, want)
		}
		if got := m.Trend(); got != want { // the cached answer itself
			t.Fatalf("add %d: second Trend %+v, computed %+v", i, got, want)
		}
		if i%500 == 0 {
			b, err := json.Marshal(m)
			if err != nil {
				t.Fatal(err)
			}
			var back MemTracker
			if err := json.Unmarshal(b, &back); err != nil {
				t.Fatal(err)
			}
			if got := back.Trend(); got != want {
				t.Fatalf("add %d: trend after a JSON round trip %+v, want %+v", i, got, want)
			}
		}
	}
}

// TestGrowingClauses pins each clause of the leak verdict on a series that
// only it decides: Kendall's tau exactly at GrowthMinTau counts as
// sustained, and a series whose later half is flat is no leak however it
// grew before.
func TestGrowingClauses(t *testing.T) {
	t.Parallel()
	points := func(units ...int64) []MemPoint {
		var pts []MemPoint
		for i, u := range units {
			pts = append(pts, MemPoint{Step: int64(10 * (i + 1)), RSS: gib + u*100*mib})
		}
		return pts
	}
	for _, tc := range []struct {
		name    string
		pts     []MemPoint
		tau     float64 // -1: any
		growing bool
	}{
		// 7 of 28 pairs go down: tau = (21 - 7) / 28
		{"tau at the threshold", points(3, 0, 2, 1, 7, 4, 5, 6), GrowthMinTau, true},
		{"later half flat", points(0, 1, 2, 3, 8, 8, 8, 8), -1, false},
		{"later half still grows", points(0, 1, 2, 3, 8, 9, 10, 11), -1, true},
	} {
		tr := trendOf(tc.pts)
		if tc.tau >= 0 && tr.RSSTau != tc.tau {
			t.Errorf("%s: tau %v, want %v (the case no longer tests its clause)", tc.name, tr.RSSTau, tc.tau)
		}
		if tr.RSSGrowing != tc.growing {
			t.Errorf("%s: growing %v, want %v (%+v)", tc.name, tr.RSSGrowing, tc.growing, tr)
		}
	}
}
