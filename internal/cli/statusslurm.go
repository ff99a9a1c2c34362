package cli

import (
	"strconv"
	"strings"

	"github.com/isched/isched/internal/slurm"
)

// slurmStatusJSON is `isched status --json` for a job the coordinator has
// no record of (it has not seen the job start, or no coordinator follows
// the cluster): what Slurm says of it, marked "source": "slurm", so that
// a program waiting on the job (the Python Job) sees it pending, running
// and ended without the stack. Every other field of the coordinator's
// record is absent: not known.
type slurmStatusJSON struct {
	V          int       `json:"v"`
	Source     string    `json:"source"` // "slurm"
	Cluster    string    `json:"cluster"`
	Lineage    string    `json:"lineage"`
	JobID      uint64    `json:"job_id"`
	User       string    `json:"user"`
	UID        int       `json:"uid"`
	State      string    `json:"state"` // Slurm's: PENDING, RUNNING, COMPLETED, FAILED, ...
	Reason     string    `json:"reason"`
	Partition  string    `json:"partition"`
	Node       string    `json:"node"`
	Started    *jsonTime `json:"started"`
	Ended      *jsonTime `json:"ended"`
	ExitStatus *int      `json:"exit_status,omitempty"` // known once Slurm shows the job ended
	Note       string    `json:"note"`                  // why there is no coordinator record
}

// Sources of a status record (the "source" field of status --json).
const (
	sourceCoordinator = "coordinator"
	sourceSlurm       = "slurm"
)

// slurmStatus is the Slurm-side record of a target: from scontrol (info),
// else the agent's job table, else accounting; false when none knows it.
func slurmStatus(t target, cluster, note string) (slurmStatusJSON, bool) {
	v := slurmStatusJSON{V: 1 /* the status record's version */, Source: sourceSlurm, Cluster: cluster, Lineage: t.lineage, UID: -1, Note: note}
	switch {
	case t.info != nil:
		i := t.info
		v.JobID, _ = strconv.ParseUint(i.JobID, 10, 64)
		v.User, v.UID, v.State, v.Reason, v.Partition, v.Node = i.User, i.UID, i.State, i.Reason, i.Partition, i.NodeList
		v.Started = timeOrNil(i.StartTime)
		if i.Ended() {
			v.Ended = timeOrNil(i.EndTime)
			v.ExitStatus = exitStatus(i.Fields["ExitCode"])
		}
	case t.job != nil:
		j := t.job
		v.JobID, v.User, v.UID, v.State, v.Reason, v.Partition, v.Node = j.JobID, j.User, j.UID, j.State, j.Reason, j.Partition, j.Nodes
		v.Started, v.Ended = msTimeOrNil(j.StartMS), msTimeOrNil(j.EndMS)
	case t.acct != nil:
		j := t.acct
		v.JobID, _ = strconv.ParseUint(strings.SplitN(j.JobID, ".", 2)[0], 10, 64)
		v.User, v.UID, v.Partition, v.State = j.User, j.UID, j.Partition, j.State
		if slurm.Ended(j.State) {
			v.ExitStatus = exitStatus(j.ExitCode)
		}
	default:
		return v, false
	}
	if v.Reason == "None" {
		v.Reason = ""
	}
	return v, true
}

// exitStatus reads Slurm's "status:signal" ExitCode as a shell would show
// it: the status, or 128+signal for a job killed by one; nil when the
// field is missing or malformed.
func exitStatus(code string) *int {
	st, sig, ok := strings.Cut(code, ":")
	s, err1 := strconv.Atoi(st)
	g, err2 := strconv.Atoi(sig)
	if !ok || err1 != nil || err2 != nil || s < 0 || g < 0 {
		return nil
	}
	if g > 0 {
		s = 128 + g
	}
	return &s
}
