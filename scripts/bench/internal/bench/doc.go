// Package bench is the load generator behind scripts/bench/ingest: it plays
// N isched-wrappers against the real Redis and a real isched-coordinator and
// measures what the coordinator sustains.
//
// Each simulated wrapper is a real session as internal/wrapper makes it: a
// random session key sealed in a MUNGE credential (the munge command,
// restricted to the coordinator's uid) sent in a start report, then a
// sample every Every, HMAC-signed, with a strictly increasing sequence
// number, appended to the ingest stream as the `reporter` ACL user. The
// coordinator confirms each session against the agent's job table: either a
// real isched-agent publishes it from a fake Slurm (Config.Slurm: FakeSlurm
// serves squeue --json with one captured 22.05 record per simulated job and
// counts every Slurm command), or the agent's part is played here
// (Config.Agent: the job table and a snapshot written as the `agent` user).
//
// A soak (Config.SoakEvery) samples the coordinator's and the agent's RSS
// and the run's Redis memory through the window; JudgeSoak says whether it
// stayed flat after the warm-up.
//
// The generator sends its start reports in batches that fit one job table
// (report.MaxTablePayload, 32 MiB: all of 10,000 jobs since the agent's
// tables may exceed a stream report) and moves on once the coordinator
// accepted them; samples begin (each wrapper at a random phase) once every
// session is accepted, so the measured window is the steady state, not a
// burst of starts. Result.TableCapacity reports the limit.
//
// Two more differences from real wrappers: all sessions share one
// connection pool (a wrapper keeps a connection of its own), and all jobs
// belong to the user running the benchmark.
//
// Decision latency is measured on probe jobs: after each probe sample the
// generator reads the lineage's status key (admin user) until its step
// reaches the sample's last step, and takes the status's updated_ms (the
// coordinator's clock when it saved the state that includes the sample)
// minus the generator's clock just before XADD. Same machine, same clock. A
// status already past the sample makes that figure an upper bound.
//
// This package never starts processes: the caller runs the coordinator and
// hands in how to observe it (Observer).
package bench
