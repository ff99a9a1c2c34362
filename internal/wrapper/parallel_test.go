package wrapper

import (
	"math"
	"testing"
)

func TestParallelismQuantile(t *testing.T) {
	for _, c := range []struct {
		name    string
		samples []float64
		q       float64
		min     int
		want    float64
	}{
		{"too few samples", []float64{100, 100}, 0.95, 5, 0},
		// a single-threaded loop: 99-100 % a sample, one import burst at 380 %
		{"one thread, one burst", append(repeat(99.5, 19), 380), 0.95, 5, 1.0},
		// 20 samples: the 95th is the 19th in order, 2.5 cores
		{"two and a half cores", append(append(repeat(120, 10), repeat(250, 9)...), 400), 0.95, 5, 2.5},
		{"idle", repeat(0, 10), 0.95, 5, 0},
		{"not measurements are not counted", []float64{math.NaN(), -1, math.Inf(1), 100, 100, 100, 100, 100}, 0.95, 5, 1.0},
	} {
		var p parallelism
		for _, s := range c.samples {
			p.observe(s)
		}
		if got := p.quantile(c.q, c.min); got != c.want {
			t.Errorf("%s: quantile %v = %v, want %v", c.name, c.q, got, c.want)
		}
	}
}

func repeat(v float64, n int) []float64 {
	out := make([]float64, n)
	for i := range out {
		out[i] = v
	}
	return out
}
