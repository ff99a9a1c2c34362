// Package policy decides what the coordinator does with one lineage: ask
// for a checkpoint, requeue onto another partition, move a pending job, or
// nothing, always with a human-readable reason that carries the numbers
// (a user asks "why was my job moved?", or "why not?").
//
// Decisions are pure functions of a Config, what the coordinator knows of
// the job (Job, with the estimates of internal/estimate), the agent's last
// cluster Snapshot and the time: no I/O, no clock, no randomness, so every
// rule is table-tested. Executing a decision (actions to the agent,
// recording it, undoing it when an action fails) is the coordinator's job.
//
// # Rules, in the order Decide applies them
//
//  1. Time limit (running jobs). A job whose predicted end is past its
//     time limit is asked for a checkpoint at the last safe moment,
//     deadline = limit − checkpoint duration − Margin, and once the
//     checkpoint has landed (AfterCheckpoint) it is requeued: onto its
//     ideal partition when it was on a dev partition (a chunk) or the ideal
//     one has room now, else onto the same partition, with a time limit
//     covering the rest of the run (capped at the partition's MaxTime). The
//     decision is taken late on purpose: the allocation is used to the end
//     and the ETA band is narrowest. If the total is unknown the checkpoint
//     is still taken at the deadline (cheap insurance: the alternative is
//     losing everything since the last checkpoint at TIMEOUT, which Slurm
//     never requeues). With AllowExtend the time limit is raised instead,
//     before the deadline, up to the partition's MaxTime.
//  2. Migrate to the ideal partition (running jobs on any other
//     partition, plan.Migrate set). When the ideal partition has room (an
//     idle node with enough idle GPUs, or a partly allocated node with the
//     GPUs, the CPUs the job will ask there and its memory free:
//     report.Partition.Mixed), the time saved, remaining × (1 −
//     speed(here)/speed(ideal)) (speeds learned for the job's model where
//     measured, Config.Learned, else configured), must exceed MinGain × (MoveCost + the
//     cheaper of a fresh checkpoint and redoing the work since the last
//     one). Hysteresis: no migration within MinInterval of the last move,
//     at most MaxMoves per lineage. With an unknown total the remaining
//     time is taken to be as long as the job has run so far (the median
//     under a scale-free prior), so short runs are not moved and long ones
//     are. AfterCheckpoint re-checks the room before the requeue.
//  3. Dev chunks (pending jobs, plan.Migrate set, a dev partition among
//     the plan's fallbacks). A job pending for MinPending for resources or
//     priority is moved to a dev partition with an idle node (inside
//     DevWindows) with time limit min(dev MaxTime, needed, end of the
//     window). Rule 1 then checkpoints it before the dev limit and
//     requeues it back onto its ideal partition.
//  4. CPU until GPU is rule 2 with the fallback cpu.
//  5. Continuation (AfterEnd, called by the coordinator when an attempt
//     has ended, not by Decide): steps left after a confirmed checkpoint
//     and the job ended (exit 0 after saving, a non-zero exit, TIMEOUT,
//     PREEMPTED, NODE_FAIL): requeue the ended job onto rule 1's
//     continuation target, unless it was CANCELLED, crashed without a new
//     checkpoint, made no progress since it resumed, or MaxContinuations
//     is reached.
//  6. Trim the time limit (running jobs, TrimLimits; issue 41's lever d,
//     EASY++): a job whose limit lies far beyond its predicted end at worst
//     (the estimate's, or the coordinator's calibrated band where later)
//     gets that end plus a tenth, a checkpoint and Margin as its limit,
//     when that frees TrimMin and a fifth of it; only with a steady
//     estimate, a confirmed checkpoint and continuations on, so a miss is
//     rule 1's or rule 5's to handle. Slurm's backfill then plans the jobs
//     waiting for the node at the job's real end.
//  7. Order (isched's pending jobs, OrderByRemaining; lever a, as Helios's
//     QSSF and Tiresias): Order exchanges the priorities isched's pending
//     jobs hold in a queue so that the least predicted run left goes
//     first, through their nice values; the set of priorities held stays
//     the same, so no job outside isched has more of isched's jobs ahead
//     of it than under Slurm alone. A job pending OrderMaxWait keeps its
//     place (the starvation guard).
//  8. Preempt (PreemptForShort; lever b, as Tiresias and Gandiva): when
//     one of isched's jobs waits on a partition behind one of isched's
//     running jobs whose predicted run left is longer by more than
//     MinGain × (checkpoint + MoveCost), Preempt names the running one:
//     it checkpoints (AfterCheckpoint's RulePreempt), is requeued held
//     (lifecycle.Yielding) and released once the waiting one has
//     started. At most MaxPreemptions per run, never within MinInterval
//     of its start or last move.
//  9. Elastic runs (Elastic; issue 42): see elastic.go.
//  10. Keep the place (KeepPlace; lever c): while a run runs off its
//     ideal partition and a move there would save more than MinGain ×
//     (MoveCost + checkpoint), WantTwin asks for a twin job pending on
//     the ideal partition (the plan's GRES, CPUs, a limit for the rest)
//     so that it ages in that queue. When Slurm starts the twin,
//     TwinStarted checkpoints the running attempt (then Handover: it ends
//     and the twin resumes from the checkpoint) or drops the twin when
//     the move no longer pays. While the twin waits, Decide keeps rules 1
//     (cancelling the twin first) and 6, and rule 2 only where the ideal
//     has room and the twin has waited MinPending without starting; a
//     handover whose checkpoint does not arrive in time is given up.
//
// Rule 1 sends no checkpoint request before the current attempt's first
// step (Job.NoStepYet), until half its time limit has passed.
//
// A job holding GPUs only moves to partitions with GPUs (Slurm 22.05
// cannot drop a GPU request); a plan without GRES never gets one. A nil
// snapshot (missing or stale) disables rules 2 and 3 and extensions;
// rule 1's checkpoint still fires, because it needs no cluster data and
// skipping it loses work.
//
// The package imports only the standard library, internal/report and
// internal/estimate (the other half of the pure decision core).
package policy
