package stream

import (
	"fmt"
	"regexp"
)

// Keys names every Redis key of one cluster. All keys start with
// "isched:<cluster>:" so two clusters share one Redis; per-job keys put the
// lineage in a hash tag ({...}) so one job's keys land on one Redis Cluster slot.
type Keys struct{ Cluster string }

var nameRE = regexp.MustCompile(`^[A-Za-z0-9._-]{1,64}$`)

// ValidName reports whether s may appear as a cluster, lineage or key suffix.
func ValidName(s string) bool { return nameRE.MatchString(s) }

// NewKeys validates the cluster name.
func NewKeys(cluster string) (Keys, error) {
	if !ValidName(cluster) {
		return Keys{}, fmt.Errorf("stream: cluster name %q: want 1-64 of [A-Za-z0-9._-]", cluster)
	}
	return Keys{Cluster: cluster}, nil
}

func (k Keys) prefix() string { return "isched:" + k.Cluster + ":" }

// Ingest is the stream wrappers append reports to (ACL user reporter: XADD only).
func (k Keys) Ingest() string { return k.prefix() + "ingest" }

// Actions is the stream the coordinator writes and the agent reads.
func (k Keys) Actions() string { return k.prefix() + "actions" }

// Results is the stream of action results the agent writes.
func (k Keys) Results() string { return k.prefix() + "results" }

// Snapshot is the key of the agent's latest cluster snapshot.
func (k Keys) Snapshot() string { return k.prefix() + "snapshot" }

// Jobs is the key of the agent's latest job table.
func (k Keys) Jobs() string { return k.prefix() + "jobs" }

// Agent names the agent's private state key `name`.
func (k Keys) Agent(name string) string { return k.prefix() + "agent:" + name }

// AgentCursor is the agent's place in the actions stream.
func (k Keys) AgentCursor() string { return k.Agent("cursor") }

// AgentDone is the agent's hash of executed actions and their results.
func (k Keys) AgentDone() string { return k.Agent("done") }

// AgentInflight is the action the agent is executing (its write-ahead).
func (k Keys) AgentInflight() string { return k.Agent("inflight") }

// Job names the coordinator's per-job key `name` for a lineage; JobState,
// JobStatus and JobSeries are the three there are.
func (k Keys) Job(lineage, name string) string {
	return k.prefix() + "job:{" + lineage + "}:" + name
}

// JobState is a lineage's coordinator state (status and estimators).
func (k Keys) JobState(lineage string) string { return k.Job(lineage, "state") }

// JobStatus is a lineage's report.JobStatus, read by `isched status`.
func (k Keys) JobStatus(lineage string) string { return k.Job(lineage, "status") }

// JobSeries is a lineage's bounded list of report.SeriesPoint, read by
// `isched report`.
func (k Keys) JobSeries(lineage string) string { return k.Job(lineage, "series") }

// JobKeys are a lineage's keys: JobState, JobStatus, JobSeries.
func (k Keys) JobKeys(lineage string) []string {
	return []string{k.JobState(lineage), k.JobStatus(lineage), k.JobSeries(lineage)}
}

// Coordinator names a coordinator-wide key; Leader, Sessions, Lineages and
// Receipts are the ones there are.
func (k Keys) Coordinator(name string) string { return k.prefix() + "coord:" + name }

// Leader is the coordinator's leader lock.
func (k Keys) Leader() string { return k.Coordinator("leader") }

// Sessions is the hash of wrapper sessions the coordinator accepted.
func (k Keys) Sessions() string { return k.Coordinator("sessions") }

// Lineages is the hash of lineages the coordinator tracks.
func (k Keys) Lineages() string { return k.Coordinator("lineages") }

// Receipts is the list of the coordinator's receipts (moves and their
// outcomes), read by `isched status`.
func (k Keys) Receipts() string { return k.Coordinator("receipts") }
