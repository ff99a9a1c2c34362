package cli

import (
	"context"
	"fmt"
	"io"
	"text/tabwriter"
	"time"

	"github.com/isched/isched/internal/plan"
	"github.com/spf13/pflag"
)

// planCmd is `isched plan`: for each batch size, where the job could run,
// when it would end and what each policy would choose.
type planCmd struct {
	app    *App
	in     inputs
	asJSON bool
}

func (c *planCmd) leaf() leaf {
	return leaf{
		use:   "plan --model model.json --samples N --epochs E --batch 32 [flags]",
		short: "waits, run time, total and cost per partition; plans with and without migration",
		flags: func(fs *pflag.FlagSet) {
			c.in.register(fs, "batch size(s) to plan, e.g. 32 (one table per batch size)")
			c.in.registerQOS(fs)
			fs.BoolVar(&c.asJSON, "json", false, "print the plans as JSON")
		},
		run: c.run, args: noArgs,
	}
}

func (c *planCmd) run(ctx context.Context, pos []string) error {
	a := c.app
	if len(pos) > 0 {
		return usageErr("unexpected arguments %q", pos)
	}
	l, err := a.load(ctx, &c.in, true)
	if err != nil {
		return err
	}
	all := l.plans()
	if c.asJSON {
		return writeJSON(a.stdout, jsonPlans(all, a.Now()))
	}
	l.header(a.stdout)
	for _, p := range all {
		fmt.Fprintln(a.stdout)
		writePlan(a.stdout, l, p, a.Now())
	}
	return nil
}

// plans computes the plans of every batch size.
func (l *loaded) plans() []plan.Plans {
	var out []plan.Plans
	for _, b := range l.req.Batches {
		var rows []plan.Row
		for _, r := range l.rows {
			if r.Batch == b {
				rows = append(rows, r)
			}
		}
		opts := plan.Options(rows, l.wait, l.in.overhead)
		p := plan.MakePlans(b, opts, l.in.overhead)
		if len(opts) == 0 {
			p.Reason += ": " + plan.WhyNot(rows)
		}
		out = append(out, p)
	}
	return out
}

func slurmWait(w plan.Wait, now time.Time) string {
	switch {
	case w.SlurmStart.IsZero():
		return "-"
	case !w.SlurmStart.After(now):
		return "now"
	}
	return plan.FormatDuration(w.SlurmStart.Sub(now))
}

func writePlan(w io.Writer, l *loaded, p plan.Plans, now time.Time) {
	iters := int64(0)
	for _, r := range l.rows {
		if r.Batch == p.Batch {
			iters = r.Iters
			break
		}
	}
	fmt.Fprintf(w, "batch %d (%d iterations)\n", p.Batch, iters)
	if len(p.Options) == 0 {
		fmt.Fprintf(w, "  %s\n", p.Reason)
		return
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "PARTITION\tNODE TYPE\tWAIT\tSLURM SAYS\tRUN\tTOTAL\tCOST\tWAIT BASIS")
	for _, o := range p.Options {
		wait, total := "?", "?"
		if o.Wait.Known {
			wait, total = plan.FormatDuration(o.Wait.Wait), plan.FormatDuration(o.Total)
		}
		name := o.Partition.Name
		if o.Fit.Chunks > 1 {
			name += fmt.Sprintf(" (%d chunks)", o.Fit.Chunks)
		}
		if o.Partition.Preemptible {
			name += " (preemptible)"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", name, o.Row.NodeType.Name, wait, slurmWait(o.Wait, now),
			plan.FormatDuration(o.Run), total, l.cost(o.Cost), o.Wait.Reason)
	}
	tw.Flush()
	if o := p.Without; o != nil && o.Wait.Known {
		fmt.Fprintf(w, "without migration: %s: wait %s + run %s = %s, cost %s\n", o.Name(),
			plan.FormatDuration(o.Wait.Wait), plan.FormatDuration(o.Run), plan.FormatDuration(o.Total), l.cost(o.Cost))
	} else {
		fmt.Fprintf(w, "without migration: waits unknown; fastest run on %s: %s, cost %s\n", p.Ideal.Name(), plan.FormatDuration(p.Ideal.Run), l.cost(p.Ideal.Cost))
	}
	if m := p.With; m != nil {
		fmt.Fprintf(w, "with migration:    start now on %s, move to %s when it frees (~%s, %.0f%% done) + %s move: %s, cost %s\n",
			m.From.Name(), m.To.Name(), plan.FormatDuration(m.OnFrom), 100*m.Done, plan.FormatDuration(m.Overhead),
			plan.FormatDuration(m.Total), l.cost(m.Cost))
	} else {
		fmt.Fprintf(w, "with migration:    no plan: %s\n", noMigration(p))
	}
	if c := p.Cheapest; c != nil {
		fmt.Fprintf(w, "cheapest:          %s: run %s, cost %s\n", c.Name(), plan.FormatDuration(c.Run), l.cost(c.Cost))
	}
	rec := "without migration"
	if p.Recommend == "with" {
		rec = "with migration"
	}
	fmt.Fprintf(w, "recommendation:    %s: %s\n", rec, p.Reason)
}

func noMigration(p plan.Plans) string {
	idle, busyFaster := false, false
	for _, o := range p.Options {
		if o.Wait.IdleNow {
			idle = true
		}
	}
	if p.Ideal != nil && p.Ideal.Wait.IdleNow {
		return p.Ideal.Name() + ", the fastest, is idle now"
	}
	for _, o := range p.Options {
		if o.Wait.Known && !o.Wait.IdleNow {
			busyFaster = true
		}
	}
	switch {
	case !idle && busyFaster:
		return "nothing suitable is idle to start on"
	case !idle:
		return "waits unknown"
	}
	return "the idle partitions finish before a faster one frees"
}

type jsonOption struct {
	Partition  string    `json:"partition"`
	NodeType   string    `json:"node_type"`
	WaitKnown  bool      `json:"wait_known"`
	WaitS      float64   `json:"wait_s"`
	WaitBasis  string    `json:"wait_basis"`
	HeldBy     string    `json:"held_by,omitempty"`     // the Slurm reason of the user's limit that holds the job
	SlurmStart *jsonTime `json:"slurm_start,omitempty"` // when Slurm expects it to start there
	RunS       float64   `json:"run_s"`
	TotalS     float64   `json:"total_s"`
	Cost       float64   `json:"cost"`
	Chunks     int       `json:"chunks"`
}

type jsonMigration struct {
	From      string  `json:"from"`
	To        string  `json:"to"`
	OnFromS   float64 `json:"on_from_s"`
	Done      float64 `json:"done_fraction"`
	OverheadS float64 `json:"overhead_s"`
	TotalS    float64 `json:"total_s"`
	Cost      float64 `json:"cost"`
}

type jsonPlan struct {
	Batch     int            `json:"batch"`
	Options   []jsonOption   `json:"options"`
	Ideal     string         `json:"ideal,omitempty"`
	Without   string         `json:"without,omitempty"`
	With      *jsonMigration `json:"with,omitempty"`
	Cheapest  string         `json:"cheapest,omitempty"`
	Recommend string         `json:"recommend"`
	Reason    string         `json:"reason"`
}

func jsonPlans(all []plan.Plans, now time.Time) []jsonPlan {
	out := []jsonPlan{}
	name := func(o *plan.Option) string {
		if o == nil {
			return ""
		}
		return o.Name()
	}
	for _, p := range all {
		jp := jsonPlan{Batch: p.Batch, Options: []jsonOption{}, Ideal: name(p.Ideal), Without: name(p.Without),
			Cheapest: name(p.Cheapest), Recommend: p.Recommend, Reason: p.Reason}
		for _, o := range p.Options {
			jo := jsonOption{Partition: o.Partition.Name, NodeType: o.Row.NodeType.Name, WaitKnown: o.Wait.Known,
				WaitS: o.Wait.Wait.Seconds(), WaitBasis: o.Wait.Reason, HeldBy: o.Wait.HeldBy, RunS: o.Run.Seconds(), TotalS: o.Total.Seconds(),
				Cost: o.Cost, Chunks: o.Fit.Chunks}
			jo.SlurmStart = timeOrNil(o.Wait.SlurmStart)
			jp.Options = append(jp.Options, jo)
		}
		if m := p.With; m != nil {
			jp.With = &jsonMigration{From: m.From.Name(), To: m.To.Name(), OnFromS: m.OnFrom.Seconds(), Done: m.Done,
				OverheadS: m.Overhead.Seconds(), TotalS: m.Total.Seconds(), Cost: m.Cost}
		}
		out = append(out, jp)
	}
	return out
}
