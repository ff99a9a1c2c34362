package spool

import (
	"bufio"
	"log/slog"
	"os"
	"sync"

	"github.com/isched/isched/internal/report"
)

// Record is one signed report waiting to be sent, as a spool file line.
type Record struct {
	Seq     uint64      `json:"seq"`
	Kind    report.Kind `json:"kind"`
	Payload []byte      `json:"m"`
	MAC     string      `json:"mac"`
	// Carried is the drop count this sample reports (its Dropped field):
	// should the sample be dropped in turn, the count passes to the next.
	Carried int `json:"carried,omitempty"`
}

// droppable: samples may be dropped under pressure; start, checkpoint,
// signal and end events never are (the coordinator's decisions and the
// user's timeline depend on them).
func (r Record) droppable() bool { return r.Kind == report.KindSample }

// Queue is a bounded, ordered queue of reports. While Redis is unreachable
// it also mirrors its content to a spool file (JSON lines) under the job's
// temporary directory, so a post-mortem or a later attempt can tell what was
// never delivered. A spool write error (disk full) is logged once and the
// queue goes on in memory: monitoring never harms training.
type Queue struct {
	mu         sync.Mutex
	q          []Record
	bytes      int
	maxRecords int
	maxBytes   int
	dropped    int // samples dropped since the last report of it
	dropTotal  int
	inflight   int // records at the front handed to the sender: never dropped

	spoolPath string
	spool     *os.File
	spoolBuf  *bufio.Writer
	spoolErr  bool
	log       *slog.Logger
}

// NewQueue makes a queue of at most maxRecords records and maxBytes bytes
// of payload and MAC (events may exceed both) that spools to spoolPath ("":
// never).
func NewQueue(maxRecords, maxBytes int, spoolPath string, log *slog.Logger) *Queue {
	return &Queue{maxRecords: maxRecords, maxBytes: maxBytes, spoolPath: spoolPath, log: log}
}

// Push appends a record, dropping the oldest samples when the queue is full.
// Events are kept even past the bounds (there are few of them).
func (o *Queue) Push(r Record) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.q = append(o.q, r)
	o.bytes += len(r.Payload) + len(r.MAC)
	for (len(o.q) > o.maxRecords || o.bytes > o.maxBytes) && o.dropOldestSample() {
	}
	if o.spool != nil {
		o.writeSpool(r)
	}
}

func (o *Queue) dropOldestSample() bool {
	for i, r := range o.q {
		// one being sent may already be in Redis: dropping it would count
		// as lost a report that was delivered
		if i >= o.inflight && r.droppable() {
			o.bytes -= len(r.Payload) + len(r.MAC)
			o.q = append(o.q[:i], o.q[i+1:]...)
			o.dropped += 1 + r.Carried
			o.dropTotal++
			if o.dropTotal == 1 || o.dropTotal%1000 == 0 {
				o.log.Warn("report queue full: dropping oldest samples (events are kept)", "dropped_total", o.dropTotal)
			}
			return true
		}
	}
	return false
}

// TakeDropped returns and resets the count of samples dropped since the last call.
func (o *Queue) TakeDropped() int {
	o.mu.Lock()
	defer o.mu.Unlock()
	d := o.dropped
	o.dropped = 0
	return d
}

// Len is the number of records queued.
func (o *Queue) Len() int {
	o.mu.Lock()
	defer o.mu.Unlock()
	return len(o.q)
}

// Head returns up to n records from the front without removing them; they
// are in flight (not dropped) until the next Pop.
func (o *Queue) Head(n int) []Record {
	o.mu.Lock()
	defer o.mu.Unlock()
	if n > len(o.q) {
		n = len(o.q)
	}
	o.inflight = n
	return append([]Record(nil), o.q[:n]...)
}

// Pop removes the delivered records (the front of the last Head) and ends
// their flight. Records pushed meanwhile stay; none of the batch was dropped
// meanwhile, since records in flight never are.
func (o *Queue) Pop(delivered []Record) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.inflight = 0
	for _, d := range delivered {
		for i, r := range o.q {
			if r.Seq == d.Seq {
				o.bytes -= len(r.Payload) + len(r.MAC)
				o.q = append(o.q[:i], o.q[i+1:]...)
				break
			}
		}
	}
	if len(o.q) == 0 && o.spool != nil {
		o.closeSpool(true)
	}
}

// StartSpooling begins mirroring to the spool file (called when a send failed).
func (o *Queue) StartSpooling() {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.spool != nil || o.spoolErr || o.spoolPath == "" {
		return
	}
	f, err := openLockedSpool(o.spoolPath, createSpool, o.log)
	if err != nil {
		o.spoolFailed(err)
		return
	}
	o.mirror(f)
}

// mirror writes the queue to the spool file f just opened, and keeps it
// as the spool. A failed write (disk full) closes the spool, and
// writeSpool writes nothing to a closed one (CI once saw this loop write
// through the closed spool's nil buffer: the wrapper panicked and took
// the training with it).
func (o *Queue) mirror(f *os.File) {
	o.spool, o.spoolBuf = f, bufio.NewWriter(f)
	for _, r := range o.q {
		o.writeSpool(r)
	}
}

// Path is the queue's spool file ("" when it has none).
func (o *Queue) Path() string { return o.spoolPath }

func (o *Queue) writeSpool(r Record) {
	if o.spoolBuf == nil {
		return // closed after a failed write: memory only
	}
	b, err := spoolLine(r)
	if err == nil {
		_, err = o.spoolBuf.Write(b)
	}
	if err == nil {
		err = o.spoolBuf.Flush()
	}
	if err != nil {
		o.spoolFailed(err)
		o.closeSpool(false)
	}
}

func (o *Queue) spoolFailed(err error) {
	if !o.spoolErr {
		o.log.Warn("report spool unavailable: keeping reports in memory only", "path", o.spoolPath, "err", err)
	}
	o.spoolErr = true
}

func (o *Queue) closeSpool(remove bool) {
	if o.spool == nil {
		return
	}
	_ = o.spool.Close()
	o.spool, o.spoolBuf = nil, nil
	if remove {
		_ = os.Remove(o.spoolPath)
	}
}

// Finish leaves the spool file holding exactly the records still queued,
// at exit: the spool mirrors the queue from the first failed send on, and
// records delivered since would otherwise be sent again with the leftover
// (harmless, the coordinator refuses a seen sequence number, but counted
// as replays). Written aside and renamed into place.
func (o *Queue) Finish() {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.spoolPath == "" || o.spoolErr || len(o.q) == 0 {
		return
	}
	err := rewriteSpool(o.spoolPath, func(w *bufio.Writer) error {
		for _, r := range o.q {
			b, err := spoolLine(r)
			if err != nil {
				return err
			}
			if _, err := w.Write(b); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		o.log.Warn("report spool not rewritten at exit; it may repeat delivered reports", "path", o.spoolPath, "err", err)
	}
	o.closeSpool(false)
}
