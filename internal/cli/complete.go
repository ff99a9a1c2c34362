package cli

// Dynamic shell completion (isched __complete, called by the scripts of
// isched completion bash|zsh|fish): your jobs and lineages for status,
// report and stop; the cluster's partitions and QOS for the flags that
// name them; the fixed words of the flags that take one.

import (
	"context"
	"slices"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/isched/isched/internal/slurm"
)

// completeTimeout bounds what one completion may ask of Slurm or Redis:
// a shell waits for it.
const completeTimeout = 3 * time.Second

// flagWords are the fixed values of the flags that have them.
var flagWords = map[string][]string{
	"policy":    {"auto", "immediate", "ideal", "cheapest"},
	"precision": {"fp32", "bf16", "fp16"},
	"optimizer": {"sgd", "momentum", "nesterov", "rmsprop", "adagrad", "adam", "adamw", "lamb"},
	"receipts":  {"auto", "redis", "none"},
	"state":     {"auto", "redis", "slurm", "none"},
	"export":    {"ALL", "NONE"},
	"scheduler": {"backfill", "easy"},
	"format":    {"swf", "openb", "runtimes", "philly"},
	"window":    {"busiest-week"},
}

// partitionFlags name one partition, or several comma-separated
// (fallback, dev). --partition is --partition-ideal (sbatchAliases).
var partitionFlags = []string{"partition-ideal", "fallback", "dev"}

// completeFlags registers the completion of cmd's flags that name
// something: fixed words, partitions, QOS. The others complete files.
func (a *App) completeFlags(cmd *cobra.Command) {
	cmd.Flags().VisitAll(func(f *pflag.Flag) {
		var fn cobra.CompletionFunc
		switch {
		case flagWords[f.Name] != nil:
			fn = cobra.FixedCompletions(flagWords[f.Name], cobra.ShellCompDirectiveNoFileComp)
		case slices.Contains(partitionFlags, f.Name):
			fn = a.completePartitions
		case f.Name == "qos":
			fn = a.completeQOS
		default:
			return
		}
		_ = cmd.RegisterFlagCompletionFunc(f.Name, fn) // each flag once: VisitAll
	})
}

// partitionLister is the part of Slurm that lists partitions
// (*slurm.Client: scontrol show partition).
type partitionLister interface {
	Partitions(ctx context.Context) ([]slurm.PartitionInfo, error)
}

// qosLister is the part of Slurm that lists QOS (*slurm.Client: sacctmgr).
type qosLister interface {
	Limits(ctx context.Context) ([]slurm.QOS, []slurm.Association, error)
}

// completePartitions completes a partition name (after the commas of a
// list): Slurm's partitions that are up, else the site catalogue's.
func (a *App) completePartitions(cmd *cobra.Command, _ []string, toComplete string) ([]cobra.Completion, cobra.ShellCompDirective) {
	ctx, cancel := context.WithTimeout(cmd.Context(), completeTimeout)
	defer cancel()
	var names []string
	if pl, ok := a.Slurm.(partitionLister); ok {
		if ps, err := pl.Partitions(ctx); err == nil {
			for _, p := range ps {
				if !p.Hidden && p.State == "UP" {
					names = append(names, p.Name)
				}
			}
		}
	}
	if len(names) == 0 {
		if _, site, err := a.openSite(""); err == nil {
			for _, p := range site.Partitions {
				names = append(names, p.Name)
			}
		}
	}
	head := toComplete[:strings.LastIndex(toComplete, ",")+1] // a list: the names before the last
	out := make([]cobra.Completion, 0, len(names))
	for _, n := range names {
		out = append(out, head+n)
	}
	return out, cobra.ShellCompDirectiveNoFileComp
}

// completeQOS completes a QOS name from sacctmgr.
func (a *App) completeQOS(cmd *cobra.Command, _ []string, _ string) ([]cobra.Completion, cobra.ShellCompDirective) {
	ctx, cancel := context.WithTimeout(cmd.Context(), completeTimeout)
	defer cancel()
	var out []cobra.Completion
	if ql, ok := a.Slurm.(qosLister); ok {
		if qs, _, err := ql.Limits(ctx); err == nil {
			for _, q := range qs {
				out = append(out, q.Name)
			}
		}
	}
	return out, cobra.ShellCompDirectiveNoFileComp
}

// completeJobs completes status, report and stop's one argument: your
// runs' job ids, described by their lineage, then the lineages.
func (a *App) completeJobs(cmd *cobra.Command, args []string, _ string) ([]cobra.Completion, cobra.ShellCompDirective) {
	if len(args) > 0 {
		return nil, cobra.ShellCompDirectiveNoFileComp
	}
	ctx, cancel := context.WithTimeout(cmd.Context(), completeTimeout)
	defer cancel()
	jobs, err := a.jobTable(ctx)
	if err != nil {
		jobs = a.historyTable(ctx)
	}
	st, _ := a.openStore(ctx)
	var ids, lineages []cobra.Completion
	for _, r := range a.myJobs(ctx, st, jobs, "") {
		if r.job != nil {
			ids = append(ids, cobra.CompletionWithDesc(jobKey(r.job), r.plan.Lineage))
		}
		if l := r.plan.Lineage; l != "" && !slices.Contains(lineages, l) {
			lineages = append(lineages, l)
		}
	}
	return append(ids, lineages...), cobra.ShellCompDirectiveNoFileComp
}
