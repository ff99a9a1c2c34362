// Package e2e holds the end-to-end tests (build tag integration): the real
// binaries (isched-wrapper, isched-agent, isched-coordinator) against the
// local Slurm cluster and Redis of scripts/dev-cluster, with the fake
// trainer or a real PyTorch script as the training job. Each test asserts
// outcomes (job ids, nodes, restart counts, step counts, Redis records), not
// log lines, and prints its runtime.
package e2e
