package coordinator

import (
	"context"
	"encoding/json"
	"errors"
	"math"
	"slices"
	"strings"

	"github.com/isched/isched/internal/estimate"
	"github.com/isched/isched/internal/policy"
	"github.com/isched/isched/internal/report"
	"github.com/isched/isched/internal/stream"
)

// maxSpeedObs bounds the receipts' measurements kept for learning speeds:
// the receipts list's own bound.
const maxSpeedObs = 10000

// maxPastRuns bounds the earlier runs kept per configuration for ETA
// bands: the latest ones.
const maxPastRuns = 16

// speedBook is what the coordinator has measured of partition speeds:
// Slurm-confirmed receipts (read once from Redis when it comes to lead,
// then the ones it writes) and, each tick, its running lineages' own
// iteration estimates. learned is what the policy uses this tick; past
// holds the confirmed receipts' iteration times and owners per
// configuration, for the ETA band (estimate.ETA.WithPast) and the ETA
// before a run's first iterations (estimate.Prior).
type speedBook struct {
	loaded  bool
	obs     []policy.SpeedObs
	learned policy.LearnedSpeeds
	past    map[pastKey][]estimate.PastRun
	drift   map[string][]driftRun
}

// maxDriftRuns bounds the earlier runs whose ETA ratios are kept per
// partition (the latest ones), maxDriftPerUser what one user's runs may
// hold of them: the ratios are dimensionless, so every configuration's
// runs on the same nodes say how far the machine's speed strays within a
// run, and no one user's runs (a job that stalls on purpose) may decide
// everyone's band.
const (
	maxDriftRuns    = 32
	maxDriftPerUser = 4
)

// driftRun is one confirmed earlier run's ETA ratios.
type driftRun struct {
	user   string
	ratios []report.ETARatio
}

// pastKey is one configuration on one partition: the same work on the
// same nodes.
type pastKey struct {
	model, partition string
	batch            int
}

// receiptObs is a receipt's measurement, if it may teach speeds: only
// Slurm-confirmed runs with a time (an unconfirmed receipt would let a
// user teach other users' decisions an invented speed).
func receiptObs(r report.Receipt) (policy.SpeedObs, bool) {
	if !r.Confirmed || r.Model == "" || r.Partition == "" || !(r.IterMS > 0) {
		return policy.SpeedObs{}, false
	}
	return policy.SpeedObs{Model: r.Model, Partition: r.Partition, User: r.User, IterMS: r.IterMS}, true
}

// noteReceipt adds a receipt. The ones the coordinator writes are noted
// once the list is loaded (before, the list will hold them).
func (b *speedBook) noteReceipt(r report.Receipt) {
	o, ok := receiptObs(r)
	if !ok {
		return
	}
	b.obs = append(b.obs, o)
	if over := len(b.obs) - maxSpeedObs; over > 0 {
		b.obs = slices.Delete(b.obs, 0, over)
	}
	if r.Batch <= 0 || math.IsInf(r.IterMS, 0) {
		return
	}
	b.noteDrift(r)
	if b.past == nil {
		b.past = map[pastKey][]estimate.PastRun{}
	}
	k := pastKey{r.Model, r.Partition, r.Batch}
	uid := -1 // a receipt from before owners were recorded: nobody's own
	if r.UID != nil {
		uid = *r.UID
	}
	runs := append(b.past[k], estimate.PastRun{UID: uid, IterMS: r.IterMS})
	if over := len(runs) - maxPastRuns; over > 0 {
		runs = slices.Delete(runs, 0, over)
	}
	b.past[k] = runs
}

// pastRuns is the iteration times of the confirmed earlier runs of a
// lineage's configuration on the partition it runs on now; nil without a
// plan naming a model and batch.
func (b *speedBook) pastRuns(st *report.JobStatus) []float64 {
	runs := b.pastOf(st)
	if len(runs) == 0 {
		return nil
	}
	out := make([]float64, len(runs))
	for i, r := range runs {
		out[i] = r.IterMS
	}
	return out
}

// pastOf is the confirmed earlier runs of a lineage's configuration on
// the partition it runs on now, with their owners.
func (b *speedBook) pastOf(st *report.JobStatus) []estimate.PastRun {
	if st.Plan == nil || st.Plan.Model == "" || st.Plan.Batch <= 0 {
		return nil
	}
	return b.past[pastKey{st.Plan.Model, st.Partition, st.Plan.Batch}]
}

// prior is the iteration estimate of a running lineage before its own
// first iterations (estimate.Prior): its owner's earlier confirmed runs of
// the same configuration on the same partition, else other users'. The
// owner is the uid Slurm's job table gave the job (st.UID), matched
// against receipts that Slurm confirmed: neither side is anything a job
// reported of itself, so no user can make another's runs look like
// theirs, or theirs like another's.
func (b *speedBook) prior(st *report.JobStatus) (estimate.IterEstimate, estimate.PriorSource, int, bool) {
	if st.State != "RUNNING" || st.JobID == 0 {
		return estimate.IterEstimate{}, "", 0, false
	}
	return estimate.Prior(st.UID, b.pastOf(st))
}

// noteDrift adds a confirmed receipt's ETA ratios to its partition's
// pool: the latest maxDriftRuns runs, at most maxDriftPerUser of them one
// user's (that user's oldest goes first).
func (b *speedBook) noteDrift(r report.Receipt) {
	if len(r.ETARatios) == 0 || r.Partition == "" {
		return
	}
	if b.drift == nil {
		b.drift = map[string][]driftRun{}
	}
	runs := b.drift[r.Partition]
	n := 0
	for _, d := range runs {
		if d.user == r.User {
			n++
		}
	}
	if n >= maxDriftPerUser {
		i := slices.IndexFunc(runs, func(d driftRun) bool { return d.user == r.User })
		runs = slices.Delete(runs, i, i+1)
	}
	runs = append(runs, driftRun{user: r.User, ratios: slices.Clone(r.ETARatios)})
	if over := len(runs) - maxDriftRuns; over > 0 {
		runs = slices.Delete(runs, 0, over)
	}
	b.drift[r.Partition] = runs
}

// pastDrift is, for a lineage at its current progress, how far the ETAs of
// the confirmed earlier runs on its partition were off at the same point
// of theirs (estimate.DriftAt); nil without a total.
func (b *speedBook) pastDrift(st *report.JobStatus) []float64 {
	if st.TotalIters <= 0 {
		return nil
	}
	frac := float64(max(st.Step, 0)) / float64(st.TotalIters)
	var out []float64
	for _, d := range b.drift[st.Partition] {
		if v, ok := estimate.DriftAt(d.ratios, frac); ok {
			out = append(out, v)
		}
	}
	return out
}

// loadSpeeds reads the stored receipts once per leadership; a receipt
// that does not decode is skipped (the list is the coordinator's own).
func (c *Coordinator) loadSpeeds(ctx context.Context) error {
	if c.speeds.loaded {
		return nil
	}
	vals, err := c.store.List(ctx, c.keys.Receipts())
	if err != nil && !errors.Is(err, stream.ErrNotFound) {
		return err
	}
	for _, v := range vals {
		var r report.Receipt
		if json.Unmarshal(v, &r) == nil {
			c.speeds.noteReceipt(r)
		}
	}
	c.speeds.loaded = true
	return nil
}

// learnSpeeds recomputes the learned speeds from the receipts and the
// running lineages' current steady estimates, exports them for the models
// of the tracked lineages and logs those that are new or moved by more
// than 5%.
func (c *Coordinator) learnSpeeds() {
	obs := slices.Clone(c.speeds.obs)
	models := map[string]bool{}
	for _, l := range c.lineages {
		st := &l.Status
		if l.ended() || st.Plan == nil || st.Plan.Model == "" {
			continue
		}
		models[st.Plan.Model] = true
		if st.State != "RUNNING" {
			continue
		}
		if est, ok := l.Iter.Estimate(); ok && !est.Provisional {
			obs = append(obs, policy.SpeedObs{Model: st.Plan.Model, Partition: st.Partition, User: st.User, IterMS: est.MS})
		}
	}
	prev := c.speeds.learned
	c.speeds.learned = policy.LearnSpeeds(c.cfg.Policy.Speed, obs)
	for model := range models {
		for p, s := range c.speeds.learned[model] {
			if old, ok := prev[model][p]; !ok || math.Abs(s.Speed/old.Speed-1) > 0.05 {
				c.log.Info("learned speed", "model", model, "partition", p, "speed", s.Speed, "prior", s.Prior,
					"measurements", s.N, "users", s.Users)
			}
		}
	}
	c.metrics.setLearnedSpeeds(c.speeds.learned, models, c.cfg.MaxJobSeries)
	// once per model, not per lineage: a status only ever gets a new slice,
	// so lineages of one model may share it
	byModel := make(map[string][]report.PartitionSpeed, len(models))
	for model := range models {
		byModel[model] = statusSpeeds(c.speeds.learned[model], c.cfg.Policy.Speed)
	}
	for _, l := range c.lineages {
		if st := &l.Status; !l.ended() && st.Plan != nil && st.Plan.Model != "" {
			if sp := byModel[st.Plan.Model]; !slices.Equal(sp, st.Speeds) {
				st.Speeds, l.dirty = sp, true
			}
		}
	}
}

// statusSpeeds is a model's speed on every partition with a configured or
// learned one, by partition name, at 3 significant digits (a status is
// written again only when one of them moves).
func statusSpeeds(learned map[string]policy.LearnedSpeed, prior map[string]float64) []report.PartitionSpeed {
	var out []report.PartitionSpeed
	for p, s := range prior {
		if _, ok := learned[p]; !ok && s > 0 {
			out = append(out, report.PartitionSpeed{Partition: p, Speed: sig3(s), Prior: sig3(s)})
		}
	}
	for p, s := range learned {
		out = append(out, report.PartitionSpeed{Partition: p, Speed: sig3(s.Speed), Prior: sig3(s.Prior), N: s.N, Users: s.Users})
	}
	slices.SortFunc(out, func(a, b report.PartitionSpeed) int { return strings.Compare(a.Partition, b.Partition) })
	return out
}

func sig3(x float64) float64 {
	if x == 0 || math.IsInf(x, 0) || math.IsNaN(x) {
		return x
	}
	p := math.Pow(10, 2-math.Floor(math.Log10(math.Abs(x))))
	return math.Round(x*p) / p
}

// policyConfig is the policy's configuration with this tick's learned
// speeds.
func (c *Coordinator) policyConfig() policy.Config {
	p := c.cfg.Policy
	p.Learned = c.speeds.learned
	return p
}

// movedEst is the iteration estimate on the partition a lineage left.
type movedEst struct {
	From string                `json:"from"`
	Est  estimate.IterEstimate `json:"est"`
}

// carried is m's estimate converted to st's partition by the speeds of
// the lineage's model (learned where measured, else configured):
// provisional, for the ETA only.
func (c *Coordinator) carried(m *movedEst, st *report.JobStatus) estimate.IterEstimate {
	model := ""
	if st.Plan != nil {
		model = st.Plan.Model
	}
	from, _ := c.speeds.learned.Speed(model, m.From, c.cfg.Policy.Speed)
	to, _ := c.speeds.learned.Speed(model, st.Partition, c.cfg.Policy.Speed)
	f := from / to
	e := m.Est
	e.MS, e.LowMS, e.HighMS, e.OverheadMSPerIter = e.MS*f, e.LowMS*f, e.HighMS*f, e.OverheadMSPerIter*f
	e.Provisional = true
	return e
}
