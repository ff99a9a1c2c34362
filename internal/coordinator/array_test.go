package coordinator

import (
	"context"
	"testing"

	"github.com/isched/isched/internal/report"
)

// TestArrayElementsAreLineagesOfTheirOwn: the elements of `isched submit
// --array` share one plan comment; each is adopted as the comment's
// lineage with "_<task>" (what its script exports to the wrapper), and the
// array's pending rest is no element yet: no lineage is made for it, and
// none for the comment's own lineage.
func TestArrayElementsAreLineagesOfTheirOwn(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	plan := report.Plan{Lineage: "lab-u1001-sweep-0a0b0c0d", Ideal: "cpu", Total: 100}
	task := func(n int) *int { return &n }
	el0 := job(15, 1001, "alice", "RUNNING", "cpu", plan.FormatComment())
	el0.ArrayJobID, el0.ArrayTaskID = 11, task(0)
	el1 := job(16, 1001, "alice", "PENDING", "cpu", plan.FormatComment())
	el1.ArrayJobID, el1.ArrayTaskID = 11, task(1)
	rest := job(11, 1001, "alice", "PENDING", "cpu", plan.FormatComment())
	rest.ArrayTasks = "2-3%2"
	e.publish([]report.Job{el0, el1, rest}, labPartitions(false))
	e.rounds(2)
	if st := e.status(plan.Lineage + "_1"); st.JobID != 16 || st.User != "alice" {
		t.Errorf("element 1's lineage tracks job %d of %q, want 16 of alice", st.JobID, st.User)
	}
	// the running element is followed from its wrapper's reports, under its own lineage
	w := e.wrapper(15, 1001, "alice", plan.Lineage+"_0", "cpu")
	e.start(w)
	e.sample(w, 1, 5, 100)
	e.rounds(1)
	if st := e.status(plan.Lineage + "_0"); st.JobID != 15 || st.Step != 5 {
		t.Errorf("element 0: job %d step %d, want job 15 step 5", st.JobID, st.Step)
	}
	if got := e.counter(RejectForeignLineage); got != 0 {
		t.Errorf("%v reports rejected as foreign, want 0", got)
	}
	for _, name := range []string{plan.Lineage, plan.Lineage + "_2"} {
		if b, err := e.store.Get(context.Background(), "isched:lab:job:{"+name+"}:status"); err == nil && len(b) > 0 {
			t.Errorf("a status for %s, which is no element's: %s", name, b)
		}
	}
}
