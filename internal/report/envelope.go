package report

import (
	"fmt"
	"time"
)

// Version is the schema version this package reads and writes.
const Version = 1

// MaxPayload is the largest encoded envelope, in bytes. Decode refuses
// larger input before parsing it; Encode refuses to produce it.
const MaxPayload = 64 << 10

// MaxTablePayload bounds the agent's snapshot and job table (see DecodeTable).
const MaxTablePayload = 32 << 20

// Kind says which body an envelope carries. Its value is also the JSON name
// of that body.
type Kind string

// Envelope kinds.
const (
	KindStart      Kind = "start"      // wrapper: the training command started
	KindSample     Kind = "sample"     // wrapper: periodic resource and progress sample
	KindCheckpoint Kind = "checkpoint" // wrapper: a checkpoint file appeared or changed
	KindSignal     Kind = "signal"     // wrapper: the wrapper received (and forwarded) a signal
	KindEnd        Kind = "end"        // wrapper: the training command ended
	KindSnapshot   Kind = "snapshot"   // agent: partition capacity
	KindJobs       Kind = "jobs"       // agent: the job table
	KindAction     Kind = "action"     // coordinator: an order for the agent
	KindResult     Kind = "result"     // agent: the outcome of an action
)

// session reports whether kind comes from a wrapper session and therefore
// carries Job, SID and Seq.
func (k Kind) session() bool {
	switch k {
	case KindStart, KindSample, KindCheckpoint, KindSignal, KindEnd:
		return true
	}
	return false
}

// Envelope is the unit on the wire. Exactly one body pointer is set, the one
// whose JSON name equals Kind.
type Envelope struct {
	V      int   `json:"v"`     // schema version, always Version
	Kind   Kind  `json:"kind"`  // which body is set
	TimeMS int64 `json:"ts_ms"` // sender's clock when the envelope was built, Unix ms

	// Wrapper kinds only.
	Job *JobRef `json:"job,omitempty"`
	SID string  `json:"sid,omitempty"` // wrapper session id: random lower-case hex, 16-64 digits
	Seq uint64  `json:"seq,omitempty"` // per session, starts at 1, strictly increasing

	Start      *Start       `json:"start,omitempty"`
	Sample     *Sample      `json:"sample,omitempty"`
	Checkpoint *Checkpoint  `json:"checkpoint,omitempty"`
	Signal     *SignalEvent `json:"signal,omitempty"`
	End        *End         `json:"end,omitempty"`
	Snapshot   *Snapshot    `json:"snapshot,omitempty"`
	Jobs       *JobTable    `json:"jobs,omitempty"`
	Action     *Action      `json:"action,omitempty"`
	Result     *Result      `json:"result,omitempty"`
}

// NewEnvelope returns an envelope of the given kind stamped with now; the
// caller sets the body (and, for wrapper kinds, Job, SID and Seq).
func NewEnvelope(kind Kind, now time.Time) *Envelope {
	return &Envelope{V: Version, Kind: kind, TimeMS: now.UnixMilli()}
}

// Time returns TimeMS as a time.Time.
func (e *Envelope) Time() time.Time { return time.UnixMilli(e.TimeMS) }

type body struct {
	kind     Kind
	set      bool
	validate func() error
}

func (e *Envelope) bodies() [9]body {
	return [...]body{
		{KindStart, e.Start != nil, func() error { return e.Start.Validate() }},
		{KindSample, e.Sample != nil, func() error { return e.Sample.Validate() }},
		{KindCheckpoint, e.Checkpoint != nil, func() error { return e.Checkpoint.Validate() }},
		{KindSignal, e.Signal != nil, func() error { return e.Signal.Validate() }},
		{KindEnd, e.End != nil, func() error { return e.End.Validate() }},
		{KindSnapshot, e.Snapshot != nil, func() error { return e.Snapshot.Validate() }},
		{KindJobs, e.Jobs != nil, func() error { return e.Jobs.Validate() }},
		{KindAction, e.Action != nil, func() error { return e.Action.Validate() }},
		{KindResult, e.Result != nil, func() error { return e.Result.Validate() }},
	}
}

// Validate checks the envelope and its body. A wrong V wraps [ErrVersion];
// everything else is a [*FieldError].
func (e *Envelope) Validate() error {
	if e == nil {
		return fail("", "nil envelope")
	}
	if e.V != Version {
		return fmt.Errorf("%w %d (this build speaks %d)", ErrVersion, e.V, Version)
	}
	bodies := e.bodies()
	known := false
	for _, b := range bodies {
		known = known || b.kind == e.Kind
	}
	if !known {
		return fail("kind", "unknown kind %s", quote(string(e.Kind)))
	}
	if err := unixMS("ts_ms", e.TimeMS, true); err != nil {
		return err
	}
	if err := e.validateSession(); err != nil {
		return err
	}
	return e.validateBodies(bodies)
}

// validateSession checks job, sid and seq: required for a session's kinds,
// absent for the others.
func (e *Envelope) validateSession() error {
	if !e.Kind.session() {
		switch {
		case e.Job != nil:
			return fail("job", "must be absent for kind %q", e.Kind)
		case e.SID != "":
			return fail("sid", "must be absent for kind %q", e.Kind)
		case e.Seq != 0:
			return fail("seq", "must be absent for kind %q", e.Kind)
		}
		return nil
	}
	if e.Job == nil {
		return fail("job", "required for kind %q", e.Kind)
	}
	if err := within("job", e.Job.Validate()); err != nil {
		return err
	}
	if err := lowerHex("sid", e.SID, minSIDLen, maxSIDLen); err != nil {
		return err
	}
	if e.Seq == 0 {
		return fail("seq", "required for kind %q (sequence starts at 1)", e.Kind)
	}
	return nil
}

// validateBodies checks the body the kind asks for, then that no other
// is there.
func (e *Envelope) validateBodies(bodies [9]body) error {
	// The body the kind asks for first: "checkpoint: required" says more
	// about a mislabelled envelope than "sample: must be absent".
	for _, b := range bodies {
		if b.kind != e.Kind {
			continue
		}
		if !b.set {
			return fail(string(b.kind), "required for kind %q", e.Kind)
		}
		if err := within(string(b.kind), b.validate()); err != nil {
			return err
		}
	}
	for _, b := range bodies {
		if b.set && b.kind != e.Kind {
			return fail(string(b.kind), "must be absent for kind %q (one body per envelope)", e.Kind)
		}
	}
	return nil
}

// JobRef identifies the Slurm job a wrapper runs in. Lineage is isched's own
// id for a piece of training work: it survives requeues and migrations
// (resubmissions with a new job id), so per-job state is keyed by it.
type JobRef struct {
	Cluster     string `json:"cluster"`
	JobID       uint64 `json:"job_id"`
	ArrayJobID  uint64 `json:"array_job_id,omitempty"`  // set together with ArrayTaskID
	ArrayTaskID *int   `json:"array_task_id,omitempty"` // pointer: task 0 is valid
	StepID      string `json:"step_id,omitempty"`
	Lineage     string `json:"lineage"`
	User        string `json:"user"`
	UID         int    `json:"uid"`
	Partition   string `json:"partition"`
	Node        string `json:"node"`
	Attempt     int    `json:"attempt"` // SLURM_RESTART_COUNT
	Rank        int    `json:"rank"`
	NRanks      int    `json:"nranks,omitempty"`
}

// Validate checks the job reference.
func (j *JobRef) Validate() error {
	if j == nil {
		return fail("", "missing")
	}
	if err := first(
		clusterName("cluster", j.Cluster),
		slurmID("job_id", j.JobID, true),
		slurmID("array_job_id", j.ArrayJobID, false),
		arrayTask("array_job_id", j.ArrayJobID, j.ArrayTaskID),
		token("step_id", j.StepID, 64, false, setToken),
		lineage("lineage", j.Lineage, true),
		printable("user", j.User, maxName, false),
		uid("uid", j.UID),
		printable("partition", j.Partition, maxName, false),
		printable("node", j.Node, maxName, false),
		nonNeg("attempt", j.Attempt),
		nonNeg("rank", j.Rank),
		nonNeg("nranks", j.NRanks),
	); err != nil {
		return err
	}
	if j.NRanks > 0 && j.Rank >= j.NRanks {
		return fail("rank", "must be below nranks %d (got %d)", j.NRanks, j.Rank)
	}
	return nil
}

func clusterName(field, s string) error { return token(field, s, maxName, true, setToken) }

func lineage(field, s string, required bool) error {
	return token(field, s, maxLineage, required, setToken)
}

// arrayTask checks that the array job id and task id come as a pair, as
// Slurm sets SLURM_ARRAY_JOB_ID and SLURM_ARRAY_TASK_ID together.
func arrayTask(field string, jobID uint64, task *int) error {
	switch {
	case task != nil && *task < 0:
		return fail("array_task_id", "must not be negative (got %d)", *task)
	case task != nil && jobID == 0:
		return fail(field, "required with array_task_id")
	case task == nil && jobID != 0:
		return fail("array_task_id", "required with array_job_id")
	}
	return nil
}
