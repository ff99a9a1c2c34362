// Package slurm is isched's only door to Slurm: it runs the Slurm client
// commands (squeue, sinfo, scontrol, scancel, sbatch) and parses what they
// print.
//
// Fetching is split from parsing. [Client] runs commands the go-runc way:
// overridable binary paths, a timeout on every call, no shell ever (job
// names, paths and user strings are argv elements, so shell metacharacters
// in them are inert), ids validated before anything runs, and a failed
// command returned as a [*ExitError] carrying Slurm's stderr. The parsers
// ([ParseSqueue], [ParseSinfo], [ParsePartitions], [ParseStart],
// [ParseShowJob]) and builders ([BuildSnapshot], [BuildJobTable]) are pure
// functions tested on output captured from Slurm 22.05 under
// testdata/22.05/; testdata/README.md lists which JSON field types drift
// between Slurm versions and what was measured on the real cluster.
//
// One poll of the cluster is four commands whatever the number of jobs
// ([Client.Poll]): `scontrol show partition -o` (limits: 22.05's JSON has
// no partition records), `sinfo --json` (nodes, CPUs, GRES), `squeue --json`
// (jobs; it ignores -j/-u filters in 22.05 anyway) and `squeue --start`.
//
// [Client.Move] is the migration sequence verified on 22.05: requeuehold,
// wait for PENDING, one update (partition, GRES, time limit,
// StartTime=now+2), release. The job keeps its id and restarts with
// SLURM_RESTART_COUNT incremented.
package slurm
