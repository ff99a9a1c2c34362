package coordinator

import (
	"context"
	"errors"
	"sync"
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
	// the round's batch is written behind: its failure is the round's
	// or, when the write outlives the round, the next settle's
	err := e.c.round(context.Background(), &last)
	if err == nil {
		err = e.c.settle()
	}
	if err == nil {
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

// heldBatch is a Store whose WriteBatch waits for release, and which
// counts writes that overlap (there must be none: one write in flight).
type heldBatch struct {
	Store
	release chan struct{}
	mu      sync.Mutex
	active  int
	overlap int
	calls   int
}

func (h *heldBatch) WriteBatch(ctx context.Context, b *stream.Batch) error {
	h.mu.Lock()
	h.active++
	h.calls++
	if h.active > 1 {
		h.overlap++
	}
	h.mu.Unlock()
	defer func() { h.mu.Lock(); h.active--; h.mu.Unlock() }()
	select {
	case <-h.release:
	case <-ctx.Done():
		return ctx.Err()
	}
	return h.Store.WriteBatch(ctx, b)
}

// An ingest round's batch is written behind: the round returns while its
// write is in flight, and its entries are acked by that write, in the same
// MULTI/EXEC as the state they changed — before it lands, Redis holds
// neither. The next round waits for it (one write in flight), and a tick
// lands it before it reads what is pending.
func TestRoundWritesBehind(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	plan := report.Plan{Lineage: "W1", Ideal: "cpu", Total: 1000}
	e.publish([]report.Job{job(93, 1001, "alice", "RUNNING", "cpu", plan.FormatComment())}, nil)
	w := e.wrapper(93, 1001, "alice", "W1", "cpu")
	e.start(w)
	e.rounds(1)
	before := e.status("W1").Step

	h := &heldBatch{Store: e.c.store, release: make(chan struct{})}
	e.c.store = h
	ctx := context.Background()
	last := time.Now() // no tick in this round
	e.sample(w, 1, 10, 100)
	returned := make(chan error, 1)
	go func() { returned <- e.c.round(ctx, &last) }()
	select {
	case err := <-returned:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(5 * time.Second):
		close(h.release)
		t.Fatal("the round waited for its own write")
	}
	if e.c.inflight == nil {
		t.Fatal("the round returned with no write in flight")
	}
	if st := e.status("W1"); st.Step != before {
		t.Errorf("step %d in Redis before the write landed, want %d", st.Step, before)
	}
	pend, err := e.store.ReadOwnPending(ctx, "isched:lab:ingest", group, "c1", 10)
	if err != nil || len(pend) != 1 {
		t.Fatalf("pending before the write landed: %d entries, %v; want the sample", len(pend), err)
	}

	// the next round that has a report judges it, then waits for the
	// write (the round's read ahead may have run before the sample was
	// sent: then the round after it reads the sample)
	e.sample(w, 11, 10, 100)
	go func() {
		err := e.c.round(ctx, &last)
		if err == nil {
			err = e.c.round(ctx, &last)
		}
		returned <- err
	}()
	select {
	case err := <-returned:
		t.Fatalf("the next round did not wait for the write in flight (err %v)", err)
	case <-time.After(200 * time.Millisecond):
	}
	close(h.release)
	if err := <-returned; err != nil {
		t.Fatal(err)
	}
	// a tick settles before it reads what is pending: nothing is
	// ingested twice (a second ingest would be refused as a replay)
	last = time.Time{}
	if err := e.c.round(ctx, &last); err != nil {
		t.Fatal(err)
	}
	if err := e.c.settle(); err != nil {
		t.Fatal(err)
	}
	if st := e.status("W1"); st.Step != 20 {
		t.Errorf("step %d after the writes landed, want 20", st.Step)
	}
	pend, err = e.store.ReadOwnPending(ctx, "isched:lab:ingest", group, "c1", 10)
	if err != nil || len(pend) != 0 {
		t.Errorf("pending after the writes landed: %d entries, %v; want none", len(pend), err)
	}
	if n := e.counter(RejectReplay); n != 0 {
		t.Errorf("%v reports refused as replays", n)
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.overlap != 0 || h.calls < 2 {
		t.Errorf("%d writes, %d overlapping another: want >= 2, none overlapping", h.calls, h.overlap)
	}
}

// gatedRead is a Store whose reads ahead (ReadGroup without a wait) wait
// for the gate, so a test decides what they find.
type gatedRead struct {
	Store
	gate chan struct{}
}

func (g *gatedRead) ReadGroup(ctx context.Context, stream, group, consumer string, count int64, block time.Duration) ([]stream.Entry, error) {
	if block <= 0 {
		<-g.gate
	}
	return g.Store.ReadGroup(ctx, stream, group, consumer, count, block)
}

// A round with reports reads the next ones ahead while it judges them. The
// next round judges what the read ahead found; a tick judges it before it
// re-reads what is pending; and what a read ahead took when the
// coordinator forgets (a failed round, a lost lead) is pending, read again
// by the next tick: nothing lost, nothing judged twice.
func TestReadAheadLosesAndRepeatsNothing(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	plan := report.Plan{Lineage: "R1", Ideal: "cpu", Total: 1000}
	e.publish([]report.Job{job(94, 1001, "alice", "RUNNING", "cpu", plan.FormatComment())}, nil)
	w := e.wrapper(94, 1001, "alice", "R1", "cpu")
	e.start(w)
	e.rounds(1)
	g := &gatedRead{Store: e.c.store, gate: make(chan struct{}, 8)}
	e.c.store = g
	ctx := context.Background()
	step := func(want int64, when string) {
		t.Helper()
		if err := e.c.settle(); err != nil {
			t.Fatal(err)
		}
		if st := e.status("R1"); st.Step != want {
			t.Fatalf("%s: step %d, want %d", when, st.Step, want)
		}
	}

	// 1. the next round judges what the read ahead found
	noTick := time.Now()
	e.sample(w, 1, 10, 100)
	if err := e.c.round(ctx, &noTick); err != nil {
		t.Fatal(err)
	}
	step(10, "after the first sample")
	if e.c.reading == nil {
		t.Fatal("a round with reports read nothing ahead")
	}
	e.sample(w, 11, 10, 100)
	g.gate <- struct{}{} // the read ahead finds the second sample
	if err := e.c.round(ctx, &noTick); err != nil {
		t.Fatal(err)
	}
	step(20, "after the round that took the read ahead")

	// 2. a tick judges what was read ahead before it re-reads what is pending
	e.sample(w, 21, 10, 100)
	g.gate <- struct{}{}
	tick := time.Time{}
	if err := e.c.round(ctx, &tick); err != nil {
		t.Fatal(err)
	}
	step(30, "after a tick with a read ahead under way")

	// 3. forgotten while a read ahead holds a sample: read again by the tick
	e.sample(w, 31, 10, 100)
	if err := e.c.round(ctx, &noTick); err != nil {
		t.Fatal(err)
	}
	step(40, "after the fourth sample")
	e.sample(w, 41, 10, 100)
	g.gate <- struct{}{}
	e.c.forget()
	if e.c.reading != nil {
		t.Fatal("forget left a read ahead under way")
	}
	step(40, "after forgetting the read ahead's sample")
	close(g.gate)
	tick = time.Time{}
	if err := e.c.round(ctx, &tick); err != nil {
		t.Fatal(err)
	}
	step(50, "after the tick that read the pending sample again")

	if n := e.counter(RejectReplay); n != 0 {
		t.Errorf("%v reports refused as replays: judged twice", n)
	}
	if pend, err := e.store.ReadOwnPending(ctx, "isched:lab:ingest", group, "c1", 10); err != nil || len(pend) != 0 {
		t.Errorf("pending at the end: %d entries, %v; want none", len(pend), err)
	}
}
