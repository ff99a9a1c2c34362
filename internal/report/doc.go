// Package report is the versioned wire schema shared by the wrapper, agent,
// coordinator and CLI. Everything they exchange through Redis is one JSON
// [Envelope]: a schema version, a [Kind], a timestamp and exactly one body
// matching the kind.
//
// # Who sends what
//
//	kind        sender       stream/key                body
//	start       wrapper      isched:<c>:ingest         Start
//	sample      wrapper      isched:<c>:ingest         Sample
//	checkpoint  wrapper      isched:<c>:ingest         Checkpoint
//	signal      wrapper      isched:<c>:ingest         SignalEvent
//	end         wrapper      isched:<c>:ingest         End
//	snapshot    agent        isched:<c>:snapshot       Snapshot
//	jobs        agent        isched:<c>:jobs           JobTable
//	action      coordinator  isched:<c>:actions        Action
//	result      agent        isched:<c>:results        Result
//
// Wrapper kinds (start, sample, checkpoint, signal, end) also carry the job
// they describe ([JobRef]), a session id and a per-session sequence number;
// the other kinds must not. Ordering and replay of sequence numbers are
// checked by the consumer (internal/auth, internal/stream), not here: a
// single envelope cannot know its predecessor.
//
// # Strict decoding
//
// The ingest stream is writable by every job on the cluster, so [Decode]
// treats its input as hostile and rejects anything it does not know:
//
//   - input larger than [MaxPayload] is refused before it is parsed;
//   - the input must be one valid UTF-8 JSON object and nothing after it;
//   - the version ("v") is read before anything else, so a newer sender
//     gets [ErrVersion] rather than a confusing unknown-field error;
//   - keys must match exactly: unknown keys, keys that differ only in case
//     (encoding/json would otherwise accept "KIND" for "kind") and duplicate
//     keys are rejected;
//   - every field without omitempty must be present (null is allowed only
//     for pointers, slices and maps), so a field renamed on one side shows
//     up as an error instead of a silent zero;
//   - numbers must fit their Go type exactly (no 1.5 into an int, no -1
//     into a uint64, nothing that overflows a float64);
//   - finally [Envelope.Validate] checks ranges, formats and per-kind rules.
//
// Every rejection wraps [ErrInvalid], [ErrVersion] or [ErrTooLarge]; field
// problems are a [*FieldError] whose Field is the JSON path of the value
// ("sample.iters[3].step"), so a log line says what to fix.
//
// [Encode] validates before marshalling, so a component can never publish
// an envelope its peers would refuse.
//
// # Evolving the schema
//
// Because readers reject unknown fields, adding a field is safe only if
// every reader is upgraded before any writer; a new field must be
// omitempty so that old writers stay valid. Removing or renaming a field,
// or changing a type, unit or meaning, bumps [Version]. Decode accepts
// exactly one version: during a rollout the reader keeps both decoders.
//
// The package imports only the standard library, so it tests without
// Redis, Slurm or cgo.
package report
