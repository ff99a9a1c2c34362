package coordinator

import (
	"github.com/isched/isched/internal/stream"
)

// pipeline overlaps the coordinator's Redis round trips with its work:
// the next entries are read ahead while a round judges the ones it has,
// and a round's writes are written behind while the next one reads and
// judges. It holds what is queued for the next write and what is under
// way; the Coordinator owns it (embedded: the Run goroutine's alone) and
// supplies the reads and writes themselves, so the pipeline knows no
// Redis. Domain state (lineages, sessions, the agent's inputs) is not
// here.
type pipeline struct {
	// batch: writes queued by this round (lineage state and status,
	// series points), sent by flush in one round trip; dirtySessions:
	// sessions whose sequence number moved, written with it. Until the
	// flush that persists them, the entries that caused them are not acked.
	batch         stream.Batch
	dirtySessions map[string]*session
	// touched: the lineages fetched (getLineage, a result's lookup) since
	// the last flush. Only these can have changed outside a tick, whose
	// flush looks at every lineage: an ingest flush looks at these only,
	// not at all 10 000 (that scan was a quarter of the coordinator's CPU
	// at 10 000 jobs).
	touched map[string]*lineage
	// receipts: finished runs' receipts, pushed by the next flush
	receipts [][]byte
	// behind, inflight: an ingest round's batch is written behind — in
	// its own goroutine, while this one reads and judges the next
	// reports — with the XACK of its entries inside the same MULTI/EXEC.
	// behind is the batch being written (the writer's alone until
	// settle), inflight its outcome; at most one write is in flight, and
	// anything that reads Redis state the write changes (a tick, the next
	// flush, forget) settles it first. At 10 000 jobs a round's own write
	// and ack were half its wall time, the coordinator idle in them.
	behind   stream.Batch
	inflight chan error
	// reading: the outcome of a read ahead of the next entries, started
	// when a round has entries to judge (readAhead); nil when none is
	// under way.
	reading chan readResult
}

func newPipeline() pipeline {
	return pipeline{dirtySessions: map[string]*session{}, touched: map[string]*lineage{}}
}

// readResult is what a read ahead returned.
type readResult struct {
	ents []stream.Entry
	err  error
}

// readAhead starts read (a read of the next entries that does not wait
// for new ones) while this round judges the ones it has: the reply's
// round trip overlaps the work instead of following it. The entries it
// takes are pending for this consumer until acked, as any read's;
// readDone hands them over.
func (p *pipeline) readAhead(read func() ([]stream.Entry, error)) {
	done := make(chan readResult, 1)
	p.reading = done
	go func() {
		ents, err := read()
		done <- readResult{ents, err}
	}()
}

// readDone waits for the read ahead and returns what it read.
func (p *pipeline) readDone() ([]stream.Entry, error) {
	r := <-p.reading
	p.reading = nil
	return r.ents, r.err
}

// writeBehind hands the round's batch to a goroutine that writes it with
// write, and keeps an empty one for the next round. The previous write
// must be settled.
func (p *pipeline) writeBehind(write func(*stream.Batch) error) {
	if p.batch.Len() == 0 {
		return
	}
	p.batch, p.behind = p.behind, p.batch
	done := make(chan error, 1)
	p.inflight = done
	b := &p.behind
	go func() { done <- write(b) }()
}

// settle waits for the write in flight, if any, and returns its error
// (a failed round: Run forgets what it holds and reads Redis again).
func (p *pipeline) settle() error {
	if p.inflight == nil {
		return nil
	}
	err := <-p.inflight
	p.inflight = nil
	return err
}

// settleOrDrop settles the write in flight; if it failed, the round's
// queued writes are dropped too (the round fails, and forget reloads).
func (p *pipeline) settleOrDrop() error {
	if err := p.settle(); err != nil {
		p.batch.Reset()
		return err
	}
	return nil
}

// drop lands (or fails) the write in flight and drops what is queued and
// what a read ahead took, unjudged: pending for this consumer, that is
// read again by the next tick (or claimed by the next leader). Queued
// receipts are kept: the next flush pushes them.
func (p *pipeline) drop() {
	_ = p.settle()
	if p.reading != nil {
		_, _ = p.readDone()
	}
	p.dirtySessions = map[string]*session{}
	p.batch.Reset() // their entries are not acked: read again, applied again
	clear(p.touched)
}
