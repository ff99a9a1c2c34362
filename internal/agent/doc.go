// Package agent is isched-agent: the only component that talks to Slurm and
// the only one that changes jobs. It runs two loops on one context:
//
// # Reading Slurm (publish)
//
// Every poll interval (default 5 s) it runs exactly four Slurm commands,
// whatever the number of jobs — `scontrol show partition -o`, `sinfo
// --json`, `squeue --json`, `squeue --start` (internal/slurm.Client.Poll) —
// and SETs two report envelopes: kind snapshot at isched:<cluster>:snapshot
// and kind jobs at isched:<cluster>:jobs. Both carry the time they were
// taken (envelope ts_ms and body taken_ms) and expire after SnapshotTTL
// (default 3 poll intervals, at least 15 s), so a consumer can tell a stale
// snapshot and a dead agent's snapshot disappears. When Slurm fails (e.g.
// slurmctld restarting) the agent publishes nothing — never data built from
// part of the cluster — retries with capped exponential backoff and logs the
// failure once, then at most once a minute, then once when it recovers.
//
// # Acting on Slurm (actions)
//
// Actions arrive on isched:<cluster>:actions, which only the coordinator
// may write (Redis ACL; the agent's own user has read-only access, so it
// reads with XREAD from its own cursor, not a consumer group). Each action
// is executed at most once and gets one result envelope on
// isched:<cluster>:results (ok / refused / failed, with Slurm's stderr).
//
// The protocol, per entry, with its crash points:
//
//  1. strict decode (report.Decode, kind action, this cluster); a malformed
//     entry is refused (a result when its id is readable) and skipped;
//  2. dedupe: an id already in the isched:<cluster>:agent:done hash is
//     skipped without acting (the same action delivered twice executes once);
//  3. check the job now (`scontrol show job`): it must exist, not have ended,
//     belong to action.user, and have opted in (below); otherwise refused;
//  4. SET isched:<cluster>:agent:inflight to the action and the job's state
//     before acting (state, restarts, partition);
//  5. execute (one Slurm command sequence);
//  6. HSET done[id] = the result envelope; 7. XADD it to the results stream;
//  8. DEL inflight; 9. SET isched:<cluster>:agent:cursor to the entry id.
//
// On start, an inflight marker means the previous agent died between 4 and
// 8. With done[id] present (died after 6) the stored result is appended
// again (same payload; consumers key results by action id). Otherwise the
// job's current state decides, and nothing runs twice: cancel, update and
// release are idempotent and run again unless the job already shows their
// effect; a requeue runs again only if the job's restart count did not
// move (if it moved, the move is finished: update and release of the held
// job); a submit is looked up by the action id in its --comment and never
// resubmitted; a signal is not re-sent (its delivery cannot be checked) and
// gets a failed result saying so. Entries before the cursor are never read
// again, and done[id] covers a crash between 6 and 9.
//
// Results are published at least once: a crash between XADD and the DEL of
// the marker publishes the identical result again, so consumers key results
// by action id. The entries' "mac" field is not checked: the ACL on the
// actions stream is what proves an action came from the coordinator.
//
// Actions older than MaxActionAge (default 15 min, by issued_ms) are
// refused as stale, so a backlog replayed after an outage does not move
// jobs on old information.
//
// # Opt-in
//
// The agent acts only on jobs that opted in to isched: the job's comment
// contains "isched" (`isched submit` and the coordinator's resubmissions set
// `--comment="isched lineage=... action=..."`) or its name starts with
// "isched" (`sbatch -J isched-train ...`, or a job run under
// isched-wrapper whose submit script names it so). action.user must equal
// the job's owner as Slurm reports it now. A submit action runs sbatch as
// action.user (never as root unless Config.AllowRootSubmit), with the
// user's login environment (--export=NONE) and primary group, and marks the
// new job opted in.
//
// # Slurm rights
//
// Reading needs none (PrivateData unset, as on most clusters). Acting on
// other users' jobs needs one of:
//
//   - running as root or as SlurmUser (`scontrol show config | grep
//     SlurmUser`): everything, including submit as another user (`sbatch
//     --uid`, root/SlurmUser only);
//   - an operator account: `sacctmgr modify user isched set
//     adminlevel=operator` (needs slurmdbd). Operators may signal, requeue,
//     requeuehold, hold, release, update partition/GRES/StartTime and raise a
//     running job's TimeLimit (a job's owner may only lower it) and cancel,
//     but not submit as another user: without root/SlurmUser, leave submit
//     actions to sites that run the agent as root, or expect them refused
//     by Slurm with its stderr in the result.
//
// Redis: the `agent` ACL user (docs/design.md): read/write on
// isched:*:snapshot, isched:*:jobs, isched:*:results, isched:*:agent:*;
// read-only on isched:*:actions. Its password file must not be readable by
// others (stream.Config.Private).
package agent
