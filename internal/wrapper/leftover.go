package wrapper

import (
	"context"
	"errors"
	"io/fs"
	"path/filepath"

	"github.com/isched/isched/internal/spool"
)

// Leftover spools (see internal/spool). A wrapper whose job ends while
// Redis is unreachable for longer than its exit drain leaves its
// undelivered reports in its spool file. The next wrapper of the same user
// on the node (a requeued attempt, the user's next job) sends them, in
// order, once it reaches Redis, and removes the file.

// streamSink appends to the ingest stream through the reporter's
// connection: the spool.Sink of a replay.
type streamSink struct {
	a      appender
	stream string
	maxLen int64
}

func (s streamSink) Append(ctx context.Context, payload []byte, mac string) error {
	_, err := s.a.Append(ctx, s.stream, payload, mac, s.maxLen)
	return err
}

// replayLeftover sends the records of one leftover spool file to the
// stream, in order, and removes the file (spool.Replayer.Replay).
func (r *reporter) replayLeftover(ctx context.Context, path string, uid int) (sent, bad int, err error) {
	p := spool.Replayer{UID: uid, Cluster: r.job.Cluster, Log: r.log,
		Connect: func(ctx context.Context) (spool.Sink, error) {
			a, err := r.sinkOrConnect(ctx)
			if err != nil {
				return nil, err
			}
			return streamSink{a: a, stream: r.stream, maxLen: r.maxLen}, nil
		}}
	if r.out != nil {
		p.OwnDir = filepath.Dir(r.out.Path())
	}
	return p.Replay(ctx, path)
}

// sendLeftover replays one leftover spool file and logs what came of it.
// The error is spool.ErrSend's when Redis did not take it (worth a
// retry), else nil: sent, a live wrapper's, sent by another wrapper first,
// another cluster's, or unreadable (left as it is, and said).
func (r *reporter) sendLeftover(ctx context.Context, p string) error {
	sent, bad, err := r.replayLeftover(ctx, p, r.uid)
	switch {
	case err == nil:
		r.log.Info("sent the undelivered reports an earlier wrapper left", "spool", p, "reports", sent, "unreadable_lines", bad)
	case errors.Is(err, spool.ErrBusy), errors.Is(err, fs.ErrNotExist), errors.Is(err, spool.ErrForeign):
		// a live wrapper's, another wrapper sent it first, or another
		// cluster's
	case errors.Is(err, spool.ErrSend):
		return err
	default:
		r.log.Warn("leftover spool not readable; left as it is", "spool", p, "err", err)
	}
	return nil
}

// replayLeftovers tries each pending leftover once. The ones Redis did not
// take stay pending, and the first such error is returned (for the
// reporter's backoff); the others are done with.
func (r *reporter) replayLeftovers(ctx context.Context) error {
	r.mu.Lock()
	pending := r.leftovers
	r.leftovers = nil
	r.mu.Unlock()
	var (
		keep    []string
		sendErr error
	)
	for _, p := range pending {
		if sendErr != nil {
			keep = append(keep, p)
			continue
		}
		if err := r.sendLeftover(ctx, p); err != nil {
			keep, sendErr = append(keep, p), err
		}
	}
	r.mu.Lock()
	r.leftovers = append(keep, r.leftovers...)
	r.mu.Unlock()
	return sendErr
}
