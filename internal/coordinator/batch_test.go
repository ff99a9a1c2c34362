package coordinator

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/isched/isched/internal/report"
	"github.com/isched/isched/internal/stream"
)

// failingBatch is a Store whose next `fail` WriteBatch calls fail.
type failingBatch struct {
	Store
	fail  int
	calls int
}

func (f *failingBatch) WriteBatch(ctx context.Context, b *stream.Batch) error {
	f.calls++
	if f.fail > 0 {
		f.fail--
		return errors.New("connection reset")
	}
	return f.Store.WriteBatch(ctx, b)
}

// A round's writes (state, status, the session's sequence number, series
// points) go in one batch before the entries are acked. When that batch
// fails, nothing of it lands: after Run's reload the same reports are
// read again and accepted (not refused as replays of a sequence number
// persisted without the state they changed), and none is lost.
func TestFailedFlushLosesNothing(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	plan := report.Plan{Lineage: "B1", Ideal: "cpu", Total: 1000}
	e.publish([]report.Job{job(91, 1001, "alice", "RUNNING", "cpu", plan.FormatComment())}, nil)
	w := e.wrapper(91, 1001, "alice", "B1", "cpu")
	e.start(w)
	e.sample(w, 1, 10, 100)
	e.rounds(1)
	if st := e.status("B1"); st.Step != 10 {
		t.Fatalf("step %d after the first round, want 10", st.Step)
	}

	fb := &failingBatch{Store: e.c.store, fail: 1}
	e.c.store = fb
	e.now = e.now.Add(5 * time.Second)
	e.sample(w, 11, 10, 100)
	e.sample(w, 21, 10, 100)
	var last time.Time
	if err := e.c.round(context.Background(), &last); err == nil {
		t.Fatal("a round whose batch failed reported no error")
	}
	if fb.calls == 0 {
		t.Fatal("the round never wrote its batch")
	}
	if st := e.status("B1"); st.Step != 10 {
		t.Fatalf("step %d in Redis after the failed batch, want 10 (nothing of it landed)", st.Step)
	}
	e.c.forget() // what Run does after a failed round
	e.rounds(2)
	st := e.status("B1")
	if st.Step != 30 {
		t.Errorf("step %d after recovery, want 30: reports lost", st.Step)
	}
	if n := e.counter(RejectReplay); n != 0 {
		t.Errorf("%v reports refused as replays after the failed batch", n)
	}
	if b := e.c.batch.Len(); b != 0 || len(e.c.dirtySessions) != 0 {
		t.Errorf("after the round: %d queued writes, %d dirty sessions", b, len(e.c.dirtySessions))
	}
}
