// Package sim replays a workload trace on a model of a Slurm cluster, once
// with Slurm alone and once with isched's decisions, and measures what
// changes: completion times, waits, utilisation, cost, migrations and lost
// work, and the wait of the jobs isched did not manage (harm to others).
//
// The model is a discrete-event simulation in seconds (docs/evaluation.md
// says what it covers and what it leaves out): partitions of nodes with
// CPUs and GPUs as a site catalogue (plan.Site) describes them, time
// limits, a priority queue (partition tier, then submission order) with
// EASY backfill, requeueing preemption by higher-tier partitions, a
// per-user GPU and CPU limit, and dev partitions usable only in the
// policy's dev windows. A job is a run of iterations with periodic
// checkpoints, so a requeue, a continuation or a kill at the time limit
// redoes the iterations since its last checkpoint, counted as lost.
//
// isched's decisions are not modelled: they are taken by the real
// packages, called as the CLI and the coordinator call them. A managed
// job's submission is planned by plan (KnownRow, EstimateWait,
// MakePlans, Choose with --policy immediate); while it runs its
// iterations feed an estimate.IterEstimator and its requested checkpoints
// an estimate.CkptTimer, and policy.Decide, policy.AfterCheckpoint and
// policy.AfterEnd decide what happens to it, from a report.Snapshot of the
// simulated cluster. The simulator only carries the decisions out.
//
// Everything is deterministic given the trace, the site and the seed: no
// clock, no goroutines, no map iteration where order matters.
package sim
