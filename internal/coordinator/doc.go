// Package coordinator is isched-coordinator: it learns from running jobs
// and decides.
//
// Ingest: wrapper reports are read from isched:<cluster>:ingest with a
// consumer group and acknowledged only after they were processed (a report
// that cannot be judged yet, because the agent's job table does not list its
// job, stays pending and is retried). A session is trusted only when its
// start report carries a MUNGE credential made by the uid that owns the job
// in the agent's job table; every later report must carry an HMAC under the
// session key and a sequence number above the last one seen. Forged,
// replayed, malformed and foreign reports are rejected with a counted,
// logged reason (see docs/threat-model.md).
//
// The ingest loop overlaps its Redis round trips with its work (pipeline,
// apart from the coordinator's domain state): while a round judges its
// reports, the next ones are read ahead (readAhead) and the previous
// round's writes land (writeBehind: state, sessions, series and the XACK
// of the entries that changed them, in one MULTI/EXEC, so a crash lands a
// report's effects and its ack together or neither). One write is in
// flight at a time; a tick, a decision's save and forget wait for it.
//
// State: per lineage, the job's status (report.JobStatus, for `isched
// status`), its estimators and its migration phase live in Redis, so a
// restarted coordinator continues where the last one stopped. Two
// coordinators may run; one leads (a lock with expiry), the other takes over
// when the lock lapses.
//
// Decisions come from internal/policy (pure) and are executed through the
// agent's action stream with deterministic action ids, so a decision
// re-issued after a crash is executed once.
package coordinator
