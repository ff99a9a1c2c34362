package coordinator

import (
	"strings"
	"testing"
	"time"

	"github.com/isched/isched/internal/report"
)

// TestOrderQueuedJobs is rule 7 through the coordinator: two of alice's
// isched jobs pend on cpu, the longer one (3 h limit) ahead of the
// shorter (20 min); the coordinator exchanges their priorities through
// their nice values, once: a table that predates the exchange, and one
// that shows it, ask for nothing more. A job outside isched is not
// touched.
func TestOrderQueuedJobs(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.c.cfg.Policy.OrderByRemaining = true
	long := job(10, 1001, "alice", "PENDING", "cpu", report.Plan{Lineage: "o-long", Ideal: "cpu"}.FormatComment())
	short := job(11, 1001, "alice", "PENDING", "cpu", report.Plan{Lineage: "o-short", Ideal: "cpu"}.FormatComment())
	other := job(12, 1002, "bob", "PENDING", "cpu", "")
	lim3h, lim20 := int64(180), int64(20)
	long.TimeLimitMin, short.TimeLimitMin = &lim3h, &lim20
	long.Priority, short.Priority, other.Priority = 300, 100, 200
	long.SubmitMS, short.SubmitMS, other.SubmitMS = e.now.Add(-time.Hour).UnixMilli(), e.now.UnixMilli(), e.now.UnixMilli()
	e.publish([]report.Job{long, short, other}, nil)
	e.rounds(1)
	acts := e.actions()
	nice := map[uint64]int64{}
	for _, a := range acts {
		if a.Type != report.ActionUpdate || a.Nice == nil || a.Partition != "" || a.TimeLimitMin != 0 {
			t.Fatalf("action %+v, want a nice-only update", a)
		}
		nice[a.JobID] = *a.Nice
	}
	if len(acts) != 2 || nice[10] != 200 || nice[11] != -200 {
		t.Fatalf("nice values %v over %d actions, want job 10 → 200 (priority 100) and job 11 → -200 (priority 300)", nice, len(acts))
	}
	st := e.status("o-short")
	if d := st.Decisions[len(st.Decisions)-1]; d.Kind != "reorder" || !strings.Contains(d.Reason, "20m left, place 1 of 2; priority 100 → 300 (nice 0 → -200)") {
		t.Errorf("decision %+v", d)
	}
	for _, a := range acts {
		e.result(a.ID, report.StatusOK)
	}
	e.now = e.now.Add(time.Second)
	e.rounds(1) // the table still shows the priorities before the exchange
	if n := len(e.actions()); n != 2 {
		t.Fatalf("%d actions after a round on the old table, want still 2", n)
	}
	long.Priority, long.Nice, short.Priority, short.Nice = 100, 200, 300, -200
	e.now = e.now.Add(time.Second)
	e.publish([]report.Job{long, short, other}, nil)
	e.rounds(1)
	if n := len(e.actions()); n != 2 {
		t.Errorf("%d actions once Slurm shows the exchange, want still 2", n)
	}
	if l := e.lineage("o-short"); l.Moves != 0 || l.LastMoveMS != 0 {
		t.Errorf("a reorder counted as a move: moves %d last move %d", l.Moves, l.LastMoveMS)
	}
}

// TestOrderOffByDefault: without order_by_remaining nothing is reniced.
func TestOrderOffByDefault(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	long := job(10, 1001, "alice", "PENDING", "cpu", report.Plan{Lineage: "o-long", Ideal: "cpu"}.FormatComment())
	short := job(11, 1001, "alice", "PENDING", "cpu", report.Plan{Lineage: "o-short", Ideal: "cpu"}.FormatComment())
	lim20 := int64(20)
	short.TimeLimitMin = &lim20
	long.Priority, short.Priority = 300, 100
	e.publish([]report.Job{long, short}, nil)
	e.rounds(2)
	if acts := e.actions(); len(acts) != 0 {
		t.Errorf("actions %+v with rule 7 off", acts)
	}
}
