// Package e2e holds the end-to-end tests (build tag integration): the real
// binaries (isched-wrapper, isched-agent, isched-coordinator) against the
// local Slurm cluster and Redis of scripts/dev-cluster, with the fake
// trainer or a real PyTorch script as the training job. Each test asserts
// outcomes (job ids, nodes, restart counts, step counts, Redis records), not
// log lines, and prints its runtime.
//
// Each test runs its own agent and coordinator under a cluster name of its
// own, and its jobs' plans carry that name, so tests (and other people's
// isched deployments on the same Slurm) never act on each other's jobs. The
// cluster is shared: tests wait for the nodes they need, name their jobs
// isched-e2e-*, and cancel only their own.
//
// The flows: migration cpu → gpu (TestMigrateCPUToGPU), time-limit
// continuation (TestTimeLimitContinuation), preemption from scavenger
// (TestPreemptionFromScavenger), an early OOM (TestEarlyOOM), a two-rank
// gang migrating as one (TestGangMigration), a dev chunk
// (TestDevChunk); and issue 8's CI subset: the coordinator SIGKILLed during
// a migration (TestChaosCoordinatorKilledDuringMigration) and damaged
// checkpoints (TestCheckpointDamageNeverResumed); and issue 14's
// conventions matrix (TestConvention*, a real PyTorch loop with a 1-minute
// limit under each common checkpoint and signal convention, run in
// parallel: 2.5 minutes with -parallel 6, 6.5 at go test's default of
// two at a time on a 2-core machine) with the opt-in
// TestIssue14Scenario (ISCHED_E2E_SCENARIO=1, about 9 minutes).
//
// ISCHED_E2E_KEEP=1 keeps each test's directory (job outputs, trainer facts
// per attempt, agent and coordinator logs) for a post-mortem.
package e2e
