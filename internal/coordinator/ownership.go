package coordinator

import (
	"strconv"
	"strings"

	"github.com/isched/isched/internal/report"
)

// A lineage belongs to the first authenticated uid whose job claims it
// (lineage.OwnerUID), but two forms of name are reserved before anyone
// claims them, so that knowing a name in advance does not let another user
// squat it:
//
//   - <cluster>-<job id> and <cluster>-<array job id>_<task id>, the
//     wrapper's default for a job without a lineage, belong to that job
//     only: a user who claimed <cluster>-96 before job 96 existed made
//     every report of job 96 (another user's) a foreign-lineage rejection.
//   - <cluster>-u<uid>-<anything>, what `isched submit` makes (the uid of
//     the submitting user, a random suffix), belongs to that uid only: a
//     lineage id is public once its job is queued (squeue shows comments),
//     and without the uid another user's running job could claim it
//     between the submission and the agent's next job table.
//
// The job's owner is the one in the agent's job table (Slurm's word), and
// the claiming session's uid is MUNGE's (checked against that owner before
// the lineage is looked at). Names of any other form are first come,
// first served.

// reserved says whether a lineage name is reserved for a job or a uid
// other than job j's; why names the reservation for the log.
func reserved(cluster, name string, j report.Job) (foreign bool, why string) {
	rest, ok := strings.CutPrefix(name, cluster+"-")
	if !ok {
		return false, ""
	}
	if id, task, isArray := strings.Cut(rest, "_"); digits(id) && (!isArray || digits(task)) {
		if rest == strconv.FormatUint(j.JobID, 10) || rest == arrayKey(j) {
			return false, ""
		}
		return true, "the wrapper's default name of job " + rest
	}
	if u, _, ok := strings.Cut(rest, "-"); ok && len(u) > 1 && u[0] == 'u' && digits(u[1:]) {
		if u[1:] == strconv.Itoa(j.UID) {
			return false, ""
		}
		return true, "namespaced to uid " + u[1:]
	}
	return false, ""
}

// arrayKey is an array task's <array job id>_<task id>, "" for other jobs.
func arrayKey(j report.Job) string {
	if j.ArrayTaskID == nil {
		return ""
	}
	return strconv.FormatUint(j.ArrayJobID, 10) + "_" + strconv.Itoa(*j.ArrayTaskID)
}

func digits(s string) bool {
	if s == "" || len(s) > 20 {
		return false
	}
	for _, c := range s {
		if c < '0' || c > '9' {
			return false
		}
	}
	return true
}
