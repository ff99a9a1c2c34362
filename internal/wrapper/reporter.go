package wrapper

import (
	"context"
	"log/slog"
	"os"
	"sync"
	"time"

	"github.com/isched/isched/internal/auth"
	"github.com/isched/isched/internal/report"
	"github.com/isched/isched/internal/retry"
	"github.com/isched/isched/internal/spool"
)

// appender is the part of the Redis client the wrapper uses.
type appender interface {
	Append(ctx context.Context, stream string, payload []byte, mac string, maxLen int64) (string, error)
}

// queue is what the reporter needs of its spool.Queue: a bounded, ordered
// queue of signed reports that mirrors itself to a spool file while they
// are undelivered.
type queue interface {
	Push(spool.Record)
	TakeDropped() int // samples dropped since the last call
	Len() int
	Head(n int) []spool.Record // in flight (never dropped) until Pop
	Pop(delivered []spool.Record)
	StartSpooling() // a send failed: mirror to the spool file
	Finish()        // at exit: the spool file holds exactly what is queued
	Path() string   // the spool file
}

// connectFunc opens the Redis connection; it may fail and is retried.
type connectFunc func(ctx context.Context) (appender, error)

// reporter numbers, signs and queues reports, and sends them in order from
// its own goroutine. Nothing it does blocks the caller for long: emit only
// encodes and queues.
type reporter struct {
	job     report.JobRef
	sess    auth.Session
	out     queue
	connect connectFunc
	stream  string
	maxLen  int64
	log     *slog.Logger
	now     func() time.Time

	mu   sync.Mutex
	seq  uint64
	sink appender
	kick chan struct{}

	uid       int      // this wrapper's uid: leftovers must be its own
	leftovers []string // earlier wrappers' spool files still to send

	sent int
}

func newReporter(job report.JobRef, sess auth.Session, out queue, connect connectFunc, stream string, log *slog.Logger) *reporter {
	return &reporter{job: job, sess: sess, out: out, connect: connect, stream: stream, maxLen: 100000,
		log: log, now: time.Now, kick: make(chan struct{}, 1), uid: os.Getuid()}
}

// emit completes an envelope (job, session, sequence), signs it and queues
// it. Events other than samples are sent at once.
func (r *reporter) emit(e *report.Envelope) {
	r.mu.Lock()
	job := r.job
	e.Job = &job
	e.SID = r.sess.SID
	r.seq++
	e.Seq = r.seq
	if e.Kind == report.KindSample && e.Sample != nil {
		e.Sample.Dropped = r.out.TakeDropped()
	}
	b, err := report.Encode(e)
	if err != nil {
		r.seq-- // keep the sequence gap-free: the coordinator counts gaps as loss
		r.mu.Unlock()
		r.log.Error("report not encodable; dropped", "kind", e.Kind, "err", err)
		return
	}
	rec := spool.Record{Seq: e.Seq, Kind: e.Kind, Payload: b, MAC: r.sess.Sign(b)}
	if e.Kind == report.KindSample && e.Sample != nil {
		rec.Carried = e.Sample.Dropped
	}
	r.out.Push(rec)
	r.mu.Unlock()
	if e.Kind != report.KindSample {
		r.wake()
	}
}

func (r *reporter) wake() {
	select {
	case r.kick <- struct{}{}:
	default:
	}
}

// run sends queued reports every interval and on kicks until ctx ends.
// A failed delivery is tried again when its backoff ends, not at the next
// tick: a connection the relay refused or closed (busy, or taken by
// another's socket on this node, issue 44) costs the first report 0.5 s,
// then 1 s, 2 s..., not a report interval (5 s) each.
func (r *reporter) run(ctx context.Context, interval time.Duration) {
	t := time.NewTicker(interval)
	defer t.Stop()
	again := time.NewTimer(interval)
	again.Stop()
	defer again.Stop()
	b := retry.Backoff{Min: 500 * time.Millisecond, Max: 30 * time.Second, Log: r.log, What: "report delivery", Now: r.now}
	var retryAt time.Time
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		case <-r.kick:
		case <-again.C:
		}
		if r.now().Before(retryAt) {
			continue
		}
		if err := r.flush(ctx); err != nil {
			wait := b.Failed(err)
			retryAt = r.now().Add(wait)
			again.Reset(wait)
			continue
		}
		if r.hasLeftovers() {
			if err := r.replayLeftovers(ctx); err != nil {
				retryAt = r.now().Add(b.Failed(err))
				continue
			}
		}
		b.OK()
	}
}

// flush sends everything queued, in order, stopping at the first failure.
func (r *reporter) flush(ctx context.Context) error {
	for {
		if r.out.Len() == 0 {
			return nil
		}
		sink, err := r.sinkOrConnect(ctx)
		if err != nil {
			r.out.StartSpooling()
			return err
		}
		batch := r.out.Head(64) // in flight until pop: not dropped meanwhile
		if len(batch) == 0 {
			return nil
		}
		var done []spool.Record
		for _, rec := range batch {
			cctx, cancel := context.WithTimeout(ctx, 2*time.Second)
			_, err = sink.Append(cctx, r.stream, rec.Payload, rec.MAC, r.maxLen)
			cancel()
			if err != nil {
				break
			}
			done = append(done, rec)
		}
		r.out.Pop(done)
		r.mu.Lock()
		r.sent += len(done)
		r.mu.Unlock()
		if err != nil {
			r.out.StartSpooling()
			return err
		}
	}
}

func (r *reporter) sinkOrConnect(ctx context.Context) (appender, error) {
	r.mu.Lock()
	s := r.sink
	r.mu.Unlock()
	if s != nil {
		return s, nil
	}
	cctx, cancel := context.WithTimeout(ctx, 3*time.Second)
	defer cancel()
	s, err := r.connect(cctx)
	if err != nil {
		return nil, err
	}
	r.mu.Lock()
	r.sink = s
	r.mu.Unlock()
	return s, nil
}

// drain tries to deliver what is left, for at most d, and then the
// leftovers of earlier wrappers; true when its own queue is empty.
func (r *reporter) drain(d time.Duration) bool {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	for {
		if err := r.flush(ctx); err == nil {
			if r.hasLeftovers() {
				_ = r.replayLeftovers(ctx) // best effort, in what is left of d: they stay in their files
			}
			return true
		}
		select {
		case <-ctx.Done():
			return false
		case <-time.After(300 * time.Millisecond):
		}
	}
}

func (r *reporter) hasLeftovers() bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.leftovers) > 0
}

func (r *reporter) delivered() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.sent
}
