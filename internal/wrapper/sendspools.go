package wrapper

import (
	"context"
	"log/slog"
	"os"
	"time"

	"github.com/isched/isched/internal/auth"
	"github.com/isched/isched/internal/report"
	"github.com/isched/isched/internal/spool"
	"github.com/isched/isched/internal/stream"
)

// sendSpoolsMinAge: `--send-spools` takes a spool file only once it is
// this old (its wrapper may be between creating and locking it; a wrapper
// that finds its new file taken opens another). It
// waits for a younger file rather than leave it: a TaskEpilog runs
// milliseconds after its task wrote the file.
const sendSpoolsMinAge = time.Second

// SendSpools is `isched-wrapper --send-spools`: it sends, in order, the
// reports that this user's ended wrappers left in their spool files (a job
// that ended while Redis was unreachable for longer than the exit drain)
// and removes the files, as a wrapper does at its start. It runs no
// command. It returns 0 when nothing is left to send, 1 when Redis did not
// take a file (it stays for the next try). Each record is sent as it was
// signed by its own wrapper's session: the sender vouches for nothing, and
// the coordinator refuses a record it has seen.
func SendSpools(ctx context.Context, opts Options, d Deps) int {
	log := d.Logger
	if log == nil {
		log = slog.New(slog.NewTextHandler(d.Stderr, nil))
	}
	log = log.With("component", "wrapper", "mode", "send-spools")
	cluster := clusterName(d.Getenv)
	if cluster == "" {
		log.Error("undelivered reports not sent", "err", errNoCluster)
		return 1
	}
	patterns := spool.Patterns(opts.SpoolDir, tmpBase(d.Getenv))
	files := spool.FindLeftovers(patterns, "", os.Getuid(), time.Now(), 0)
	// at most sendSpoolsMinAge, even for a file stamped in the future
	if wait := min(sendSpoolsMinAge-youngest(files, time.Now()), sendSpoolsMinAge); len(files) > 0 && wait > 0 {
		select {
		case <-ctx.Done():
			return 1
		case <-time.After(wait):
		}
	}
	if len(files) == 0 {
		log.Info("no undelivered reports left by an ended wrapper", "patterns", patterns)
		return 0
	}
	connect := func(ctx context.Context) (appender, error) { return d.Connect(ctx, cluster) }
	r := newReporter(report.JobRef{Cluster: cluster}, auth.Session{}, nil, connect, stream.Keys{Cluster: cluster}.Ingest(), log)
	for i, p := range files {
		if err := r.sendLeftover(ctx, p); err != nil {
			log.Warn("Redis did not take the undelivered reports; the files stay for the next try", "spool", p, "files_left", len(files)-i, "err", err)
			return 1
		}
	}
	return 0
}

// youngest is the age of the most recently changed of files (a file gone
// meanwhile does not count).
func youngest(files []string, now time.Time) time.Duration {
	y := time.Duration(1<<63 - 1)
	for _, f := range files {
		if st, err := os.Lstat(f); err == nil {
			y = min(y, now.Sub(st.ModTime()))
		}
	}
	return y
}
