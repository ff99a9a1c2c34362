package plan

import (
	"cmp"
	"fmt"
	"math"
	"slices"
	"strings"
	"time"
)

// DefaultMigrationOverhead is what one move costs in wall time: the
// checkpoint on request, Slurm's requeue delay (the credential lifetime,
// about two minutes on 22.05), and start-up and checkpoint loading on the
// new node. The coordinator measures checkpoint times per job; this is the
// planning figure before any was measured.
const DefaultMigrationOverhead = 3 * time.Minute

// Option is running the whole job on one partition.
type Option struct {
	Row       *Row
	Partition *PartitionSpec
	Fit       PartitionFit
	Wait      Wait
	// Run includes the restarts of a run longer than the time limit.
	Run   time.Duration
	Total time.Duration // Wait + Run; meaningful when Wait.Known
	Cost  float64
	// Rate is the cost per hour of the job on this partition.
	Rate float64
}

// Name is the partition name, qualified by the node type when the
// partition has several.
func (o *Option) Name() string {
	if len(o.Partition.NodeTypes) > 1 {
		return o.Partition.Name + "/" + o.Row.NodeType.Name
	}
	return o.Partition.Name
}

// Migration is starting on one partition and moving to a faster one when
// it is predicted to free.
type Migration struct {
	From, To *Option
	OnFrom   time.Duration // wall time on From before the move
	Done     float64       // fraction of the work done on From
	Overhead time.Duration
	Total    time.Duration
	Cost     float64
}

// Plans are the options of one batch size.
type Plans struct {
	Batch   int
	Options []*Option // feasible; known waits first, by total time
	// Ideal is the fastest run among the partitions that are not
	// preemptible (the partition the job should end up on).
	Ideal *Option
	// Without is the best single partition: the shortest wait + run.
	Without *Option
	// With is the best plan that starts now and moves to a faster
	// partition when it frees; nil when none applies (the fastest is idle,
	// or nothing is idle).
	With     *Migration
	Cheapest *Option
	// Recommend is "with" (migration) or "without"; Reason says why.
	Recommend string
	Reason    string
	// Overhead is the wall time one move costs in these plans.
	Overhead time.Duration
}

// Options builds the feasible options of rows (one batch size) with their
// waits; wait may be nil (waits unknown).
func Options(rows []Row, wait func(*PartitionSpec, *NodeType) Wait, overhead time.Duration) []*Option {
	var out []*Option
	for i := range rows {
		r := &rows[i]
		for _, f := range r.Partitions {
			if !f.OK {
				continue
			}
			o := &Option{Row: r, Partition: f.Partition, Fit: f}
			if wait != nil {
				o.Wait = wait(f.Partition, r.NodeType)
			}
			if o.Wait.Partition == "" {
				o.Wait = Wait{Partition: f.Partition.Name, Reason: "unknown: no cluster state"}
			}
			o.Run = r.Run() + time.Duration(f.Chunks-1)*overhead
			o.Rate = r.CostPerHour * f.Partition.costFactor()
			o.Cost = o.Rate * o.Run.Hours()
			o.Total = o.Wait.Wait + o.Run
			out = append(out, o)
		}
	}
	slices.SortStableFunc(out, func(a, b *Option) int {
		if a.Wait.Known != b.Wait.Known {
			if a.Wait.Known {
				return -1
			}
			return 1
		}
		if c := cmp.Compare(a.Total, b.Total); c != 0 {
			return c
		}
		return cmp.Compare(a.Cost, b.Cost)
	})
	return out
}

// WhyNot says why none of rows (one batch size) can run anywhere: each
// partition's reason, with the node type it was judged on, e.g.
// "cpu (lab-cpu): memory: needs 1.36 TiB, has 7.81 GiB".
func WhyNot(rows []Row) string {
	var why []string
	for _, r := range rows {
		for _, f := range r.Partitions {
			if !f.OK {
				why = append(why, fmt.Sprintf("%s (%s): %s", f.Partition.Name, r.NodeType.Name, f.Why))
			}
		}
	}
	if len(why) == 0 {
		return "no partition of the site catalogue has a node type for it"
	}
	return strings.Join(why, "; ")
}

// MakePlans compares the options of one batch size and recommends one.
func MakePlans(batch int, opts []*Option, overhead time.Duration) Plans {
	p := Plans{Batch: batch, Options: opts, Overhead: overhead}
	if len(opts) == 0 {
		p.Reason = "no partition can run this batch size"
		return p
	}
	for _, o := range opts {
		if !o.Partition.Preemptible && fasterRun(o, p.Ideal) {
			p.Ideal = o
		}
		// A preemptible partition can requeue the job at any time, so its
		// figures are not a plan to rely on; it remains a place to start
		// (migration) and a cheapest choice.
		if !o.Partition.Preemptible && endsSooner(o, p.Without) {
			p.Without = o
		}
		if cheaper(o, p.Cheapest) {
			p.Cheapest = o
		}
	}
	if p.Ideal == nil {
		p.Ideal = opts[0]
	}
	if p.Without == nil {
		for _, o := range opts {
			if endsSooner(o, p.Without) {
				p.Without = o
			}
		}
	}
	p.With = bestMigration(opts, overhead)
	p.recommend(overhead)
	return p
}

// fasterRun: o runs faster than cur (nil: none yet), or as fast for less.
func fasterRun(o, cur *Option) bool {
	return cur == nil || o.Run < cur.Run || (o.Run == cur.Run && o.Cost < cur.Cost)
}

// endsSooner: o's wait is known and it ends before cur (nil: none yet).
func endsSooner(o, cur *Option) bool {
	return o.Wait.Known && (cur == nil || o.Total < cur.Total)
}

// cheaper: o costs less than cur (nil: none yet), or as much and runs
// faster.
func cheaper(o, cur *Option) bool {
	return cur == nil || o.Cost < cur.Cost || (o.Cost == cur.Cost && o.Run < cur.Run)
}

// bestMigration tries every start-now option against every faster,
// non-preemptible option that is busy, and keeps the earliest finish.
func bestMigration(opts []*Option, overhead time.Duration) *Migration {
	var best *Migration
	for _, from := range opts {
		if !from.Wait.Known || !from.Wait.IdleNow {
			continue
		}
		for _, to := range opts {
			if !movePays(from, to, overhead) {
				continue
			}
			if m := migrate(from, to, overhead); betterMigration(m, best) {
				best = m
			}
		}
	}
	return best
}

// movePays: a job started now on from may move to to, which is busy, not
// preemptible, faster and in the same cluster, and frees before the job
// would end on from.
func movePays(from, to *Option, overhead time.Duration) bool {
	if to == from || !to.Wait.Known || to.Wait.IdleNow || to.Partition.Preemptible || to.Run >= from.Run {
		return false
	}
	if to.Partition.cluster != from.Partition.cluster {
		return false // a job moves by requeue, within its cluster
	}
	return from.Run > to.Wait.Wait+overhead // else it would finish where it started before the move pays
}

// betterMigration: m ends before best (nil: none yet), or as soon for
// less, or the same from a partition that is not preemptible.
func betterMigration(m, best *Migration) bool {
	return best == nil || m.Total < best.Total || (m.Total == best.Total && m.Cost < best.Cost) ||
		(m.Total == best.Total && m.Cost == best.Cost && best.From.Partition.Preemptible && !m.From.Partition.Preemptible)
}

// migrate computes one migration plan. The job computes on from until to
// frees (minus the restarts from's time limit forces meanwhile), moves
// with one overhead, and does the rest at to's speed.
func migrate(from, to *Option, overhead time.Duration) *Migration {
	m := &Migration{From: from, To: to, Overhead: overhead, OnFrom: to.Wait.Wait}
	compute := m.OnFrom
	if limit := from.Partition.MaxTimeLimit(); limit > 5*time.Minute && m.OnFrom > limit {
		restarts := int(m.OnFrom / (limit - 5*time.Minute))
		compute -= time.Duration(restarts) * overhead
	}
	pureFrom := from.Row.Run()
	m.Done = math.Min(1, max(compute, 0).Hours()/pureFrom.Hours())
	rest := time.Duration((1 - m.Done) * float64(to.Run))
	m.Total = m.OnFrom + overhead + rest
	m.Cost = from.Rate*m.OnFrom.Hours() + to.Rate*(overhead+rest).Hours()
	return m
}

// moveMargin is how much sooner than total (waiting, or staying) a plan
// that starts elsewhere must end to be chosen: one move's overhead, and a
// twentieth of total when that is more.
func moveMargin(total, overhead time.Duration) time.Duration {
	return max(overhead, total/20)
}

func (p *Plans) recommend(overhead time.Duration) {
	w := p.Without
	switch {
	case w == nil:
		p.Recommend = "without"
		p.Without = p.Ideal
		p.Reason = fmt.Sprintf("no wait is known (no cluster state): %s is the fastest partition", p.Ideal.Name())
		return
	case p.With != nil && w.Total-p.With.Total > moveMargin(w.Total, overhead):
		p.Recommend = "with"
		m := p.With
		how := "waiting for " + w.Name()
		if w.Wait.IdleNow {
			how = "all on " + w.Name()
		}
		p.Reason = fmt.Sprintf("start now on %s, move to %s when it frees (in ~%s, %.0f%% done): done in %s instead of %s %s",
			m.From.Name(), m.To.Name(), FormatDuration(m.OnFrom), 100*m.Done, FormatDuration(m.Total), FormatDuration(w.Total), how)
		p.Reason += costDelta(m.Cost, w.Cost)
		return
	}
	p.Recommend = "without"
	switch {
	case w.Wait.IdleNow && w == p.Ideal:
		p.Reason = fmt.Sprintf("%s is idle now and the fastest: done in %s", w.Name(), FormatDuration(w.Total))
	case w.Wait.IdleNow:
		p.Reason = fmt.Sprintf("%s is idle now and finishes first (%s)", w.Name(), FormatDuration(w.Total))
		if p.Ideal.Wait.Known && p.Ideal != w {
			p.Reason += fmt.Sprintf("; waiting for %s would take %s", p.Ideal.Name(), FormatDuration(p.Ideal.Total))
		}
	case p.With != nil:
		p.Reason = fmt.Sprintf("waiting %s for %s finishes in %s; starting on %s and moving would take %s",
			FormatDuration(w.Wait.Wait), w.Name(), FormatDuration(w.Total), p.With.From.Name(), FormatDuration(p.With.Total))
	default:
		p.Reason = fmt.Sprintf("nothing suitable is idle: %s has the shortest wait + run (%s)", w.Name(), FormatDuration(w.Total))
	}
}

func costDelta(a, b float64) string {
	switch d := a - b; {
	case d > 0.005:
		return fmt.Sprintf(", for %.2f more", d)
	case d < -0.005:
		return fmt.Sprintf(", and %.2f cheaper", -d)
	}
	return ", at the same cost"
}

// FormatDuration prints a planning duration: "0", "25 min", "3.4 h",
// "2.1 d".
func FormatDuration(d time.Duration) string {
	switch {
	case d <= 0:
		return "0"
	case d == time.Duration(math.MaxInt64):
		return "∞"
	case d < time.Hour:
		return fmt.Sprintf("%d min", int(math.Ceil(d.Minutes())))
	case d < 72*time.Hour:
		return fmt.Sprintf("%.1f h", d.Hours())
	}
	return fmt.Sprintf("%.1f d", d.Hours()/24)
}

// OnCluster is the plans made again from the options on one cluster's
// partitions ("": the home cluster's): a job runs on the cluster it is
// submitted to, so its ideal partition and fallbacks must be there too.
func (p Plans) OnCluster(cluster string) Plans {
	var opts []*Option
	for _, o := range p.Options {
		if o.Partition.cluster == cluster {
			opts = append(opts, o)
		}
	}
	return MakePlans(p.Batch, opts, p.Overhead)
}

// Clusters reports whether the plans' options span several clusters.
func (p Plans) Clusters() bool {
	for _, o := range p.Options {
		if o.Partition.cluster != p.Options[0].Partition.cluster {
			return true
		}
	}
	return false
}

// StartElsewhere is lever e for a run whose ideal partition is fixed
// (isched submit --partition-ideal P, --policy auto): start now on an
// idle option that allowed accepts, and move to ideal when it frees, only
// when that ends sooner than waiting for ideal by more than one move's
// overhead and a twentieth of the wait-and-run, as the recommendation
// asks of a migration plan. start is nil when waiting pays; why says
// which, with the figures.
func (p Plans) StartElsewhere(ideal *Option, allowed func(*Option) bool) (start *Option, why string) {
	switch {
	case ideal.Wait.IdleNow:
		return nil, ideal.Name() + " is idle now"
	case !ideal.Wait.Known:
		return nil, fmt.Sprintf("the wait for %s is unknown (%s): waiting for it", ideal.Name(), ideal.Wait.Reason)
	}
	var best *Option
	var bestTotal time.Duration
	how := ""
	for _, o := range p.Options {
		if o.Partition == ideal.Partition || !o.Wait.Known || !o.Wait.IdleNow || !allowed(o) {
			continue
		}
		total, h := o.Total, "it ends there before "+ideal.Name()+" frees"
		if movePays(o, ideal, p.Overhead) {
			total, h = migrate(o, ideal, p.Overhead).Total, "move to "+ideal.Name()+" when it frees"
		}
		if best == nil || total < bestTotal {
			best, bestTotal, how = o, total, h
		}
	}
	wait := fmt.Sprintf("waiting %s for %s ends in %s", FormatDuration(ideal.Wait.Wait), ideal.Name(), FormatDuration(ideal.Total))
	margin := moveMargin(ideal.Total, p.Overhead)
	switch {
	case best == nil:
		return nil, wait + "; no partition it may start on is idle"
	case ideal.Total-bestTotal > margin:
		return best, fmt.Sprintf("start now on %s (idle, %s), %s: ends in %s; %s",
			best.Name(), FormatDuration(best.Run), how, FormatDuration(bestTotal), wait)
	}
	return nil, fmt.Sprintf("%s; starting now on %s (idle, %s) would end in %s, not sooner by more than %s: waiting",
		wait, best.Name(), FormatDuration(best.Run), FormatDuration(bestTotal), FormatDuration(margin))
}
