package plan

import (
	"fmt"
	"math"
	"slices"
	"strings"
	"time"
)

// Policies of `isched submit`.
const (
	PolicyAuto      = "auto"      // follow the recommendation
	PolicyImmediate = "immediate" // start as soon as possible, move to the ideal partition later
	PolicyIdeal     = "ideal"     // wait for the ideal partition
	PolicyCheapest  = "cheapest"  // the cheapest partition, however long it takes
	PolicyDeadline  = "deadline"  // the cheapest plan predicted to end before a time
)

// Policy says how to choose among the plans.
type Policy struct {
	Kind     string
	Deadline time.Time // PolicyDeadline only
}

// ParsePolicy reads "auto", "immediate", "ideal", "cheapest" or
// "deadline=TIME", TIME being RFC 3339, "2006-01-02T15:04" or
// "2006-01-02 15:04" (local time), or "+DURATION" from now ("+6h").
func ParsePolicy(s string, now time.Time) (Policy, error) {
	k, v, hasV := strings.Cut(s, "=")
	switch k {
	case PolicyAuto, PolicyImmediate, PolicyIdeal, PolicyCheapest:
		if hasV {
			return Policy{}, fmt.Errorf("policy %q takes no value", k)
		}
		return Policy{Kind: k}, nil
	case PolicyDeadline:
		if v == "" {
			return Policy{}, fmt.Errorf("policy deadline needs a time: deadline=2006-01-02T15:04 or deadline=+6h")
		}
		if strings.HasPrefix(v, "+") {
			d, err := time.ParseDuration(v[1:])
			if err != nil || d <= 0 {
				return Policy{}, fmt.Errorf("deadline %q: want +DURATION such as +6h30m", v)
			}
			return Policy{Kind: k, Deadline: now.Add(d)}, nil
		}
		for _, layout := range []string{time.RFC3339, "2006-01-02T15:04", "2006-01-02 15:04", "2006-01-02T15:04:05"} {
			if t, err := time.ParseInLocation(layout, v, now.Location()); err == nil {
				if !t.After(now) {
					return Policy{}, fmt.Errorf("deadline %s is in the past", t.Format(time.RFC3339))
				}
				return Policy{Kind: k, Deadline: t}, nil
			}
		}
		return Policy{}, fmt.Errorf("deadline %q: want RFC 3339, 2006-01-02T15:04 or +DURATION", v)
	}
	return Policy{}, fmt.Errorf("policy %q: want auto, immediate, ideal, cheapest or deadline=TIME", s)
}

// Choice is what to submit.
type Choice struct {
	// Start are the partitions of the submission, all with the same GRES
	// (Slurm takes one GRES request for the whole partition list).
	Start []*Option
	// Ideal is where the job should end up; the coordinator moves it there
	// when Migrate is set.
	Ideal     *Option
	Fallbacks []*Option // the other partitions the coordinator may use
	Migrate   bool
	Predicted time.Duration // predicted wall time to the end; 0: unknown
	Cost      float64
	Reason    string
}

// Choose applies a policy to the plans of one batch size.
func (p Plans) Choose(pol Policy, now time.Time) (Choice, error) {
	if len(p.Options) == 0 {
		if p.Reason != "" {
			return Choice{}, fmt.Errorf("batch size %d: %s", p.Batch, p.Reason)
		}
		return Choice{}, fmt.Errorf("no partition can run batch size %d", p.Batch)
	}
	c := Choice{Ideal: p.Ideal}
	switch pol.Kind {
	case PolicyAuto, "":
		if p.Recommend == "with" && p.With != nil {
			c.moving(p.With, p.Reason)
		} else {
			c.single(p.Without, p.Without != p.Ideal, p.Reason)
		}
	case PolicyImmediate:
		p.chooseImmediate(&c)
	case PolicyIdeal:
		c.single(p.Ideal, false, "ideal: "+p.Ideal.Name()+" runs it fastest")
	case PolicyCheapest:
		c.single(p.Cheapest, false, fmt.Sprintf("cheapest: %s costs %.2f", p.Cheapest.Name(), p.Cheapest.Cost))
	case PolicyDeadline:
		if err := p.chooseDeadline(&c, pol, now); err != nil {
			return Choice{}, err
		}
	default:
		return Choice{}, fmt.Errorf("unknown policy %q", pol.Kind)
	}
	for _, o := range p.Options {
		if o.Partition == c.Ideal.Partition || containsPart(c.Start, o) || containsPart(c.Fallbacks, o) {
			continue
		}
		c.Fallbacks = append(c.Fallbacks, o)
	}
	return c, nil
}

// single starts the job on o alone; with migrate the coordinator may
// move it to c.Ideal, else it stays there.
func (c *Choice) single(o *Option, migrate bool, why string) {
	c.Start, c.Migrate, c.Reason = []*Option{o}, migrate, why
	if !migrate {
		c.Ideal = o // it stays where it starts
	}
	if o.Wait.Known {
		c.Predicted = o.Total
	}
	c.Cost = o.Cost
}

// moving starts the job where m starts, to be moved where m ends.
func (c *Choice) moving(m *Migration, why string) {
	c.Start, c.Migrate, c.Reason, c.Ideal = []*Option{m.From}, true, why, m.To
	c.Predicted, c.Cost = m.Total, m.Cost
}

// chooseImmediate is PolicyImmediate: start as soon as possible.
func (p Plans) chooseImmediate(c *Choice) {
	switch {
	case p.With != nil:
		c.moving(p.With, "immediate: "+fmt.Sprintf("starts now on %s, moves to %s when it frees", p.With.From.Name(), p.With.To.Name()))
	case p.Without != nil && p.Without.Wait.IdleNow:
		c.single(p.Without, p.Without != p.Ideal, "immediate: "+p.Without.Name()+" is idle now")
	case p.Without != nil:
		c.single(p.Without, true, "immediate: nothing suitable is idle; "+p.Without.Name()+" has the shortest wait")
	default:
		// no cluster state: let Slurm start it wherever the ideal GRES
		// fits first
		c.Start = sameGres(p.Options, p.Ideal)
		c.Migrate, c.Reason = true, "immediate: waits unknown; every partition with the ideal GRES, fastest first"
	}
}

// chooseDeadline is PolicyDeadline: the cheapest plan predicted to end
// before pol.Deadline.
func (p Plans) chooseDeadline(c *Choice, pol Policy, now time.Time) error {
	left := pol.Deadline.Sub(now)
	best := math.Inf(1)
	var pick func()
	for _, o := range p.Options {
		if o.Wait.Known && o.Total <= left && o.Cost < best {
			best = o.Cost
			pick = func() {
				c.single(o, false, fmt.Sprintf("deadline: %s ends in %s (before %s) for %.2f, the cheapest that does",
					o.Name(), FormatDuration(o.Total), pol.Deadline.Format("2006-01-02 15:04"), o.Cost))
			}
		}
	}
	if m := p.With; m != nil && m.Total <= left && m.Cost < best {
		pick = func() {
			c.moving(m, fmt.Sprintf("deadline: start on %s and move to %s ends in %s for %.2f, the cheapest that does",
				m.From.Name(), m.To.Name(), FormatDuration(m.Total), m.Cost))
		}
	}
	if pick == nil {
		return fmt.Errorf("no plan is predicted to end before %s (the fastest: %s)",
			pol.Deadline.Format("2006-01-02 15:04"), fastest(p))
	}
	pick()
	return nil
}

// FallbackList is the fallback partitions a submission of c carries:
// given (the user's --fallback) first, then c's other feasible
// partitions, and before all of them the partitions c starts on, other
// than the ideal one (the coordinator may move the job from where it
// started back there).
func (c Choice) FallbackList(given []string) []string {
	out := slices.Clone(given)
	ideal := c.Ideal.Partition.Name
	for _, f := range c.Fallbacks {
		if f.Partition.Name != ideal && !slices.Contains(out, f.Partition.Name) {
			out = append(out, f.Partition.Name)
		}
	}
	for _, s := range c.Start {
		if p := s.Partition.Name; p != ideal && !slices.Contains(out, p) {
			out = append([]string{p}, out...)
		}
	}
	return out
}

func fastest(p Plans) string {
	var best time.Duration
	name := "unknown"
	for _, o := range p.Options {
		if o.Wait.Known && (best == 0 || o.Total < best) {
			best, name = o.Total, o.Name()+" in "+FormatDuration(o.Total)
		}
	}
	if p.With != nil && (best == 0 || p.With.Total < best) {
		name = "moving from " + p.With.From.Name() + " to " + p.With.To.Name() + " in " + FormatDuration(p.With.Total)
	}
	return name
}

func containsPart(list []*Option, o *Option) bool {
	for _, x := range list {
		if x.Partition == o.Partition {
			return true
		}
	}
	return false
}

// sameGres returns ideal and the other options with its GRES, ideal first,
// then by run time.
func sameGres(opts []*Option, ideal *Option) []*Option {
	out := []*Option{ideal}
	g := ideal.Row.NodeType.GresOne()
	for _, o := range opts {
		if o != ideal && o.Row.NodeType.GresOne() == g && !containsPart(out, o) {
			out = append(out, o)
		}
	}
	return out
}

// TimeLimit is the time limit to ask for a run: the estimate plus a
// quarter and ten minutes (start-up, checkpoints, a slower node), rounded
// up to whole minutes and capped at the partition's MaxTime (the job then
// continues from a checkpoint in another attempt).
func TimeLimit(run time.Duration, ps *PartitionSpec) time.Duration {
	d := run + run/4 + 10*time.Minute
	d = (d + time.Minute - 1).Truncate(time.Minute)
	if ps != nil {
		if limit := ps.MaxTimeLimit(); limit > 0 && d > limit {
			d = limit
		}
	}
	return d
}

// MemRequest is the host memory to ask for: the estimate plus a quarter,
// rounded up to 256 MiB, at most the node's memory.
func MemRequest(r *Row) int64 {
	const step = 256 << 20
	m := r.HostMem + r.HostMem/4
	m = (m + step - 1) / step * step
	return min(m, r.NodeType.HostMemoryBytes)
}

// Cluster is the cluster the choice runs on, its first start's ("": the
// home cluster), and whether every partition it names is there.
func (c Choice) Cluster() (cluster string, one bool) {
	if len(c.Start) == 0 {
		return "", true
	}
	cluster = c.Start[0].Partition.cluster
	all := append(append([]*Option{c.Ideal}, c.Start...), c.Fallbacks...)
	for _, o := range all {
		if o != nil && o.Partition.cluster != cluster {
			return cluster, false
		}
	}
	return cluster, true
}
