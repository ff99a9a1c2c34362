package slurm

import (
	"context"
	"time"

	"github.com/isched/isched/internal/report"
)

// Fetching: one command each, whatever the number of jobs. `squeue --json`
// ignores job and user filters in 22.05 and lists every job, including ones
// that ended less than MinJobAge ago, so there is never a reason to call it
// per job.

// SqueueJSON runs `squeue --all --json`.
func (c *Client) SqueueJSON(ctx context.Context) ([]byte, error) {
	return c.run(ctx, or(c.Squeue, "squeue"), []string{"--all", "--json"}, nil)
}

// SinfoJSON runs `sinfo --all --json`.
func (c *Client) SinfoJSON(ctx context.Context) ([]byte, error) {
	return c.run(ctx, or(c.Sinfo, "sinfo"), []string{"--all", "--json"}, nil)
}

// PartitionsText runs `scontrol --all show partition --oneliner`.
func (c *Client) PartitionsText(ctx context.Context) ([]byte, error) {
	return c.run(ctx, or(c.Scontrol, "scontrol"), []string{"--all", "show", "partition", "--oneliner"}, nil)
}

// StartText runs `squeue --start --noheader --format='%i %S'`.
func (c *Client) StartText(ctx context.Context) ([]byte, error) {
	return c.run(ctx, or(c.Squeue, "squeue"), append([]string{"--all"}, startArgs...), nil)
}

// Jobs fetches and parses the job list.
func (c *Client) Jobs(ctx context.Context) ([]report.Job, error) {
	b, err := c.SqueueJSON(ctx)
	if err != nil {
		return nil, err
	}
	return ParseSqueue(b)
}

// Nodes fetches and parses the node list.
func (c *Client) Nodes(ctx context.Context) ([]Node, error) {
	b, err := c.SinfoJSON(ctx)
	if err != nil {
		return nil, err
	}
	return ParseSinfo(b)
}

// Partitions fetches and parses the partition configuration.
func (c *Client) Partitions(ctx context.Context) ([]PartitionInfo, error) {
	b, err := c.PartitionsText(ctx)
	if err != nil {
		return nil, err
	}
	return ParsePartitions(b)
}

// StartEstimates fetches and parses `squeue --start`.
func (c *Client) StartEstimates(ctx context.Context) (map[string]time.Time, error) {
	b, err := c.StartText(ctx)
	if err != nil {
		return nil, err
	}
	return ParseStart(b)
}

// State is one poll of the cluster: four commands.
type State struct {
	Partitions []PartitionInfo
	Nodes      []Node
	Jobs       []report.Job
	Starts     map[string]time.Time
}

// Poll fetches partitions, nodes, jobs and start estimates, in that order,
// one command each. Any failure fails the poll: a snapshot built from part
// of the cluster's state would be wrong, not just old.
func (c *Client) Poll(ctx context.Context) (*State, error) {
	var s State
	var err error
	if s.Partitions, err = c.Partitions(ctx); err != nil {
		return nil, err
	}
	if s.Nodes, err = c.Nodes(ctx); err != nil {
		return nil, err
	}
	if s.Jobs, err = c.Jobs(ctx); err != nil {
		return nil, err
	}
	if s.Starts, err = c.StartEstimates(ctx); err != nil {
		return nil, err
	}
	return &s, nil
}

// Snapshot and JobTable build the two published bodies from one poll.
func (s *State) Snapshot(cluster string, now time.Time) report.Snapshot {
	return BuildSnapshot(cluster, s.Partitions, s.Nodes, s.Jobs, now)
}

// JobTable builds the job table of one poll.
func (s *State) JobTable(cluster string, now time.Time) report.JobTable {
	return BuildJobTable(cluster, s.Jobs, s.Starts, now)
}
