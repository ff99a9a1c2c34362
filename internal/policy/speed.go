package policy

import (
	"fmt"
	"math"
	"slices"
)

// SpeedPriorWeight is how many measurements the configured speed of a
// partition (Config.Speed) counts as when it is blended with measured
// ones: with n measurements of a model on a partition, the learned log
// speed is (n × measured + SpeedPriorWeight × prior) / (n + SpeedPriorWeight).
const SpeedPriorWeight = 3

// SpeedObs is one measured mean iteration time of a model configuration
// (report.Plan.Model) on a partition: an ended run's receipt or a running
// job's own current estimate.
type SpeedObs struct {
	Model, Partition, User string
	IterMS                 float64
}

// LearnedSpeed is one partition's learned speed for one model
// configuration, in the units of Config.Speed, and how many measurements
// (N) and distinct users (Users) are behind it.
type LearnedSpeed struct {
	Speed    float64
	Prior    float64
	N, Users int
}

// LearnedSpeeds is model configuration → partition → learned speed.
type LearnedSpeeds map[string]map[string]LearnedSpeed

// Speed is the speed of partition for model: the learned one where it
// exists, else the prior (Config.Speed; 1 when not configured); learned
// says which.
func (ls LearnedSpeeds) Speed(model, partition string, prior map[string]float64) (speed float64, learned bool) {
	if s, ok := ls[model][partition]; ok && s.Speed > 0 {
		return s.Speed, true
	}
	return priorSpeed(prior, partition), false
}

func priorSpeed(prior map[string]float64, partition string) float64 {
	if s := prior[partition]; s > 0 {
		return s
	}
	return 1
}

// LearnSpeeds learns per-model partition speeds from measured iteration
// times. Only ratios between partitions are measured, so a model measured
// on fewer than two partitions learns nothing (its speeds stay the prior).
// For a model measured on partitions P:
//
//   - a partition's iteration time is the median over users of each
//     user's median (one user's reports cannot outvote the others);
//   - measured speed_p = c / iter_p, c chosen so that the measured speeds'
//     log mean, weighted by measurement counts, equals the priors' (the
//     learned figures stay in the configuration's units);
//   - learned log speed_p = (n_p log measured_p + SpeedPriorWeight log
//     prior_p) / (n_p + SpeedPriorWeight): shrinkage toward the prior
//     that fades as measurements accumulate.
//
// Observations with no model, no partition or a non-positive or
// non-finite time are ignored.
func LearnSpeeds(prior map[string]float64, obs []SpeedObs) LearnedSpeeds {
	type cell struct {
		byUser map[string][]float64
		n      int
	}
	models := map[string]map[string]*cell{}
	for _, o := range obs {
		if o.Model == "" || o.Partition == "" || !(o.IterMS > 0) || math.IsInf(o.IterMS, 0) {
			continue
		}
		ps := models[o.Model]
		if ps == nil {
			ps = map[string]*cell{}
			models[o.Model] = ps
		}
		c := ps[o.Partition]
		if c == nil {
			c = &cell{byUser: map[string][]float64{}}
			ps[o.Partition] = c
		}
		c.byUser[o.User] = append(c.byUser[o.User], o.IterMS)
		c.n++
	}
	out := LearnedSpeeds{}
	for model, ps := range models {
		if len(ps) < 2 {
			continue
		}
		logRaw := map[string]float64{}
		var num, den float64
		for p, c := range ps {
			var users []float64
			for _, ts := range c.byUser {
				users = append(users, median(ts))
			}
			logRaw[p] = -math.Log(median(users))
			w := float64(c.n)
			num += w * (math.Log(priorSpeed(prior, p)) - logRaw[p])
			den += w
		}
		logC := num / den
		learned := map[string]LearnedSpeed{}
		for p, c := range ps {
			pr := priorSpeed(prior, p)
			n := float64(c.n)
			ls := (n*(logC+logRaw[p]) + SpeedPriorWeight*math.Log(pr)) / (n + SpeedPriorWeight)
			learned[p] = LearnedSpeed{Speed: math.Exp(ls), Prior: pr, N: c.n, Users: len(c.byUser)}
		}
		out[model] = learned
	}
	return out
}

func median(v []float64) float64 {
	s := slices.Clone(v)
	slices.Sort(s)
	n := len(s)
	if n%2 == 1 {
		return s[n/2]
	}
	return (s[n/2-1] + s[n/2]) / 2
}

// speedOf is partition's speed for the job's model configuration: learned
// (Config.Learned) where measured, else the configured prior.
func (v *view) speedOf(partition string) (float64, bool) {
	model := ""
	if v.j.Plan != nil {
		model = v.j.Plan.Model
	}
	return v.cfg.Learned.Speed(model, partition, v.cfg.Speed)
}

func (v *view) speed(partition string) float64 {
	s, _ := v.speedOf(partition)
	return s
}

// speedText is "speed 8" (configured) or "speed 5.2 learned from 6 runs,
// prior 8" for reasons.
func (v *view) speedText(partition string) string {
	s, learned := v.speedOf(partition)
	if !learned {
		return fmt.Sprintf("speed %g", s)
	}
	l := v.cfg.Learned[v.j.Plan.Model][partition]
	return fmt.Sprintf("speed %.3g learned from %d measurement(s), prior %g", s, l.N, l.Prior)
}
