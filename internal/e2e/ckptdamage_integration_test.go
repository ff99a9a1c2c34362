//go:build integration && knownbugs

package e2e

import ()

// TestCheckpointDamageNeverResumed (issue 8): a checkpoint that is not whole
// is never the resume point. Three jobs, run side by side:
//   - tmp: the trainer is killed halfway through saving step 100 (its
//     ckpt-step100.pt.tmp is left half-written); the job is requeued and
//     must resume from step 80, the last complete checkpoint;
//   - between: the trainer is killed at step 90; its last checkpoint
//     (step 80) is truncated while the job is down; the requeued job must
//     not resume from it (the wrapper's resume state re-checks the size);
//   - watched: the last checkpoint (step 80) is truncated while the job
//     still runs, after the wrapper recorded it; the trainer is killed at
//     step 100; the requeued job must not resume from it either.
//
