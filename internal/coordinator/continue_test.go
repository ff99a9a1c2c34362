package coordinator

import (
	"testing"

	"github.com/isched/isched/internal/report"
)

// sampleTotal sends n iterations from fromStep, each carrying the loop's
// own total.
func (e *env) sampleTotal(w *wrapperSession, fromStep, n, total int64) {
	env := report.NewEnvelope(report.KindSample, e.now)
	env.Sample = &report.Sample{}
	for i := int64(0); i < n; i++ {
		env.Sample.Iters = append(env.Sample.Iters, report.Iter{Step: fromStep + i, AtMS: e.now.UnixMilli(), DurMS: 100,
			Source: report.SourcePattern, Total: total})
	}
	e.send(w, env)
}

// The loop's own total (step N/T) wins over the one the plan computed from
// --samples/--epochs/--batch; both stay in the status.
func TestLoopTotalWinsOverThePlans(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	const lin = "lab-60"
	plan := report.Plan{Lineage: lin, Ideal: "cpu", Total: 57}
	e.publish([]report.Job{job(60, 1001, "alice", "RUNNING", "cpu", plan.FormatComment())}, nil)
	w := e.attemptWrapper(60, lin, 0)
	e.start(w)
	e.sample(w, 1, 10, 100)
	e.rounds(1)
	if st := e.status(lin); st.TotalIters != 57 || st.PlanTotal != 57 || st.LoopTotal != 0 {
		t.Fatalf("before the loop says: total %d plan %d loop %d, want the plan's 57", st.TotalIters, st.PlanTotal, st.LoopTotal)
	}
	e.sampleTotal(w, 11, 223, 3000)
	e.rounds(1)
	st := e.status(lin)
	if st.TotalIters != 3000 || st.PlanTotal != 57 || st.LoopTotal != 3000 {
		t.Errorf("total %d plan %d loop %d, want the loop's 3000 (plan 57)", st.TotalIters, st.PlanTotal, st.LoopTotal)
	}
	if st.Step != 233 {
		t.Errorf("step %d, want 233", st.Step)
	}
}
