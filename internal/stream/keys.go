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

// Job names the coordinator's per-job key `name` for a lineage.
func (k Keys) Job(lineage, name string) string {
	return k.prefix() + "job:{" + lineage + "}:" + name
}

// Coordinator names a coordinator-wide key (leader lock, receipts, ...).
func (k Keys) Coordinator(name string) string { return k.prefix() + "coord:" + name }
