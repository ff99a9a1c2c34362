package policy

import (
	"math"
	"testing"
)

func TestLearnSpeeds(t *testing.T) {
	t.Parallel()
	prior := map[string]float64{"gpu": 8, "cpu": 1}
	obs := func(model, part, user string, ms float64, n int) []SpeedObs {
		var o []SpeedObs
		for range n {
			o = append(o, SpeedObs{Model: model, Partition: part, User: user, IterMS: ms})
		}
		return o
	}
	cat := func(oo ...[]SpeedObs) []SpeedObs {
		var all []SpeedObs
		for _, o := range oo {
			all = append(all, o...)
		}
		return all
	}
	// measured 4× (cpu 800 ms, gpu 200 ms), prior 8×; equal counts anchor
	// the measured speeds at the priors' log mean: cpu √2, gpu 4√2.
	blend := func(n float64, measured, prior float64) float64 {
		return math.Exp((n*math.Log(measured) + SpeedPriorWeight*math.Log(prior)) / (n + SpeedPriorWeight))
	}
	cases := []struct {
		name     string
		obs      []SpeedObs
		model    string
		cpu, gpu float64 // want; 0: nothing learned
	}{
		{"one partition measured: nothing learned", obs("m", "cpu", "a", 800, 10), "m", 0, 0},
		{"few measurements: near the prior", cat(obs("m", "cpu", "a", 800, 1), obs("m", "gpu", "a", 200, 1)), "m",
			blend(1, math.Sqrt2, 1), blend(1, 4*math.Sqrt2, 8)},
		{"many: the measured ratio", cat(obs("m", "cpu", "a", 800, 300), obs("m", "gpu", "a", 200, 300)), "m",
			blend(300, math.Sqrt2, 1), blend(300, 4*math.Sqrt2, 8)},
		{"one user's many lies are one vote of three", cat(obs("m", "cpu", "a", 800, 2), obs("m", "cpu", "b", 800, 2),
			obs("m", "cpu", "liar", 1, 50), obs("m", "gpu", "a", 200, 27)), "m",
			blend(54, math.Exp((54*math.Log(1)+27*math.Log(8)-54*math.Log(1.0/800)-27*math.Log(1.0/200))/81)/800, 1),
			blend(27, math.Exp((54*math.Log(1)+27*math.Log(8)-54*math.Log(1.0/800)-27*math.Log(1.0/200))/81)/200, 8)},
		{"bad figures ignored", cat(obs("m", "cpu", "a", 800, 1), obs("m", "gpu", "a", 200, 1),
			obs("m", "gpu", "a", 0, 5), obs("m", "gpu", "a", math.Inf(1), 5), obs("", "gpu", "a", 1, 5), obs("m", "", "a", 1, 5)), "m",
			blend(1, math.Sqrt2, 1), blend(1, 4*math.Sqrt2, 8)},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			ls := LearnSpeeds(prior, c.obs)
			gc, lc := ls.Speed(c.model, "cpu", prior)
			gg, lg := ls.Speed(c.model, "gpu", prior)
			if c.cpu == 0 {
				if lc || lg || gc != 1 || gg != 8 {
					t.Errorf("learned %g (%v), %g (%v); want the priors", gc, lc, gg, lg)
				}
				return
			}
			if !lc || !lg || math.Abs(gc-c.cpu) > 1e-9 || math.Abs(gg-c.gpu) > 1e-9 {
				t.Errorf("cpu %g (learned %v) gpu %g (learned %v), want %g, %g", gc, lc, gg, lg, c.cpu, c.gpu)
			}
			if s, learned := ls.Speed(c.model, "dev", prior); learned || s != 1 {
				t.Errorf("unmeasured dev: %g learned %v", s, learned)
			}
		})
	}
	// the learned ratio tends to the measured one as measurements come
	for _, n := range []int{1, 10, 1000} {
		ls := LearnSpeeds(prior, cat(obs("m", "cpu", "a", 800, n), obs("m", "gpu", "a", 200, n)))
		r := ls["m"]["gpu"].Speed / ls["m"]["cpu"].Speed
		t.Logf("n=%d: learned gpu/cpu %.3f (measured 4, prior 8)", n, r)
		if r < 4 || r > 8 || (n == 1000 && math.Abs(r-4) > 0.05) {
			t.Errorf("n=%d: ratio %g", n, r)
		}
	}
}
