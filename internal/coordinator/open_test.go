package coordinator

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/isched/isched/internal/report"
)

// pairedMunger is the env's MUNGE, whose Decode waits (up to a second) for
// a second Decode to be under way: credentials opened one after another
// never overlap, opened together they do. It counts calls and overlaps.
type pairedMunger struct {
	*fakeMunger
	mu      sync.Mutex
	cond    *sync.Cond
	active  int
	most    int
	decodes int
}

func (p *pairedMunger) Decode(ctx context.Context, cred string) ([]byte, int, int, error) {
	p.mu.Lock()
	p.active++
	p.decodes++
	p.most = max(p.most, p.active)
	p.cond.Broadcast()
	deadline := time.Now().Add(time.Second)
	go func() { time.Sleep(time.Second); p.cond.Broadcast() }()
	for p.most < 2 && time.Now().Before(deadline) {
		p.cond.Wait()
	}
	p.mu.Unlock()
	defer func() { p.mu.Lock(); p.active--; p.mu.Unlock() }()
	return p.fakeMunger.Decode(ctx, cred)
}

// A burst of job starts in one round has its credentials opened several at
// a time, each once: every start is accepted, a start sent twice (its
// copy, same credential) is a duplicate, not a second opening (which MUNGE
// would refuse as a replay).
func TestStartBurstOpensCredentialsTogether(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	pm := &pairedMunger{fakeMunger: e.m}
	pm.cond = sync.NewCond(&pm.mu)
	e.c = New(Config{ID: "c1", Tick: 50 * time.Millisecond, Now: func() time.Time { return e.now }}, e.store, pm, nil)
	const n = 6
	var jobs []report.Job
	var ws []*wrapperSession
	for i := range n {
		id := uint64(200 + i)
		jobs = append(jobs, job(id, 1001, "alice", "RUNNING", "cpu", ""))
		ws = append(ws, e.wrapper(id, 1001, "alice", fmt.Sprintf("S%d", i), "cpu"))
	}
	e.publish(jobs, nil)
	for _, w := range ws {
		b, mac := e.sendStart(w)
		if w == ws[0] {
			e.appendRaw(b, mac) // a retransmitted copy
		}
	}
	e.rounds(1)
	for i := range n {
		if st := e.status(fmt.Sprintf("S%d", i)); st.JobID != uint64(200+i) {
			t.Errorf("job %d: no status (start not accepted): %+v", 200+i, st)
		}
	}
	pm.mu.Lock()
	decodes, most := pm.decodes, pm.most
	pm.mu.Unlock()
	if decodes != n {
		t.Errorf("%d credentials opened, want %d (each once)", decodes, n)
	}
	if most < 2 {
		t.Errorf("at most %d credential opened at once: one after another", most)
	}
	if r := e.counter(RejectBadCred); r != 0 {
		t.Errorf("%v starts refused for their credential", r)
	}
	if d := testutilCounter(e.c.metrics.reports.WithLabelValues("duplicate")); d != 1 {
		t.Errorf("%v duplicates counted, want the one copy", d)
	}
}
