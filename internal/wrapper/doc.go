// Package wrapper is isched-wrapper: it runs the user's training command as
// its child, under srun or in a batch step, measures it and reports it to
// the coordinator, and never changes what happens to the child. Monitoring
// failures are logged to stderr (stdout belongs to the training job) and
// the wrapper exits with the child's status.
//
// Run is the whole life of one wrapper: options and the job's identity from
// Slurm's environment (options.go), the child's supervision (internal/child),
// samples of its CPU, memory and GPU use (internal/procstat, internal/gpu,
// the memory cgroup: endmem.go), iterations read from its output or a
// progress file (internal/progress), checkpoints seen in its directory and
// the lineage's resume point (checkpoints.go, internal/ckpt), and the
// summary at exit.
//
// Reports are sealed with a MUNGE-bound session key (internal/auth), signed
// and queued by the reporter (reporter.go), which appends them in order to
// the cluster's ingest stream from its own goroutine. While Redis is
// unreachable the queue spools to a locked file (internal/spool); what is
// left at exit is sent by the user's next wrapper on the node, or by
// `isched-wrapper --send-spools` (leftover.go, sendspools.go).
//
// The environment, the Redis connection, MUNGE, the GPU, the checkpoint
// watcher and the memory cgroup come in through Deps (AddSystemDeps fills
// in the machine's), so that tests run the wrapper on fakes of each.
package wrapper
