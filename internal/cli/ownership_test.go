package cli

import (
	"strings"
	"testing"

	"github.com/isched/isched/internal/report"
)

// TestStatusNotShadowedBySquatter: bob's job 90 held the wrapper's default
// lineage of job 96 (lab-96) before job 96, alice's, existed, and reported
// into it (what a coordinator without the reserved names let happen).
// `isched status 96` must not show bob's job as job 96: it says whose
// record the lineage holds and fails, and the lineage asked for by name
// does not borrow a job line from another user's comment.
func TestStatusNotShadowedBySquatter(t *testing.T) {
	h := newHarness(t)
	squat := movedStatus()
	squat.Lineage, squat.JobID, squat.User, squat.UID, squat.Plan = "lab-96", 90, "bob", 1002, nil
	h.setJSON("isched:lab:job:{lab-96}:status", squat)
	env := report.NewEnvelope(report.KindJobs, now)
	env.Jobs = &report.JobTable{Cluster: "lab", TakenMS: now.UnixMilli(), Jobs: []report.Job{
		{JobID: 90, Name: "squat", User: "bob", UID: 1002, Partition: "cpu", State: "RUNNING"},
		{JobID: 96, Name: "train", User: "alice", UID: 1001, Partition: "cpu", State: "RUNNING"},
		// bob's job 91 names alice's lineage in its comment
		{JobID: 91, Name: "copy", User: "bob", UID: 1002, Partition: "cpu", State: "PENDING",
			Comment: report.Plan{Lineage: "lab-train-abababab", Ideal: "cpu"}.FormatComment()},
	}}
	h.setEnvelope("isched:lab:jobs", env)
	code, out, errOut := h.run("status", "96")
	if code != ExitError || strings.Contains(out, "user bob") ||
		!strings.Contains(errOut, "lineage lab-96 tracks job 90 of uid 1002, but job 96 belongs to uid 1001: not shown as job 96's status") {
		t.Errorf("status 96: exit %d\n%s\n%s", code, out, errOut)
	}
	// same owner, another job (a default name is one job's only)
	squat.UID, squat.User = 1001, "alice"
	h.setJSON("isched:lab:job:{lab-96}:status", squat)
	if code, _, errOut := h.run("status", "96", "--json"); code != ExitError || !strings.Contains(errOut, "lineage lab-96 tracks job 90, not job 96") {
		t.Errorf("status 96 --json: exit %d %s", code, errOut)
	}
	// the real record shows; by name, bob's job 91 is not shown beside it
	h.setJSON("isched:lab:job:{lab-train-abababab}:status", movedStatus())
	code, out, errOut = h.run("status", "lab-train-abababab")
	if code != 0 || !strings.Contains(out, "job 42 · lineage lab-train-abababab · user alice") || strings.Contains(out, "job table lists this lineage as job 91") {
		t.Errorf("status by lineage: exit %d\n%s%s", code, out, errOut)
	}
}
