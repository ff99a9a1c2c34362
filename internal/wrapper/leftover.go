package wrapper

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/isched/isched/internal/report"
)

// Leftover spools. A wrapper whose job ends while Redis is unreachable for
// longer than its exit drain leaves its undelivered reports in its spool
// file. The next wrapper of the same user on the node (a requeued attempt,
// the user's next job) sends them, in order, once it reaches Redis, and
// removes the file. The records are signed with their own session's key,
// so a replay can neither forge nor move anything: the coordinator checks
// each against its session and refuses a sequence number it has seen.
//
// A live wrapper holds an exclusive flock on its spool file, so a leftover
// is a file nobody holds: the replaying wrapper takes the lock before it
// reads.

// leftoverMinAge: a spool file younger than this is left alone even when
// unlocked (its wrapper may be between creating and locking it).
const leftoverMinAge = 10 * time.Second

// maxLeftoverBytes bounds what one leftover may hold: twice the outbox's
// byte bound (its records are written as JSON lines with their payloads
// escaped).
const maxLeftoverBytes = 2 * 32 << 20

var (
	// errLeftoverBusy: the spool file is locked by a live wrapper.
	errLeftoverBusy = errors.New("spool file in use by a running wrapper")
	// errLeftoverForeign: the spool is another cluster's (its wrapper
	// reported under another ISCHED_CLUSTER); left for one of that cluster.
	errLeftoverForeign = errors.New("spool of another cluster")
	// errLeftoverSend: Redis refused or did not answer; worth a retry.
	errLeftoverSend = errors.New("sending a leftover report")
)

// spoolLayout says where this wrapper's spool file is and where leftovers
// of earlier wrappers are looked for.
type spoolLayout struct {
	path     string   // this wrapper's spool file
	patterns []string // globs of other wrappers' spool files
}

// newSpoolLayout places the spool: with a spool directory (site-wide,
// persistent) one file per job step and rank in it; else reports.spool in
// the wrapper's private tmp directory, whose siblings are the other
// wrappers' (tmpBase is their parent).
func newSpoolLayout(spoolDir, tmp, tmpBase string, job report.JobRef) spoolLayout {
	if spoolDir != "" {
		name := fmt.Sprintf("isched-%s-%d-%s-r%d.spool", job.Cluster, job.JobID, strings.ReplaceAll(job.StepID, "/", "_"), job.Rank)
		return spoolLayout{path: filepath.Join(spoolDir, name), patterns: spoolPatterns(spoolDir, tmpBase)}
	}
	if tmp == "" {
		return spoolLayout{}
	}
	return spoolLayout{path: filepath.Join(tmp, "reports.spool"), patterns: spoolPatterns(spoolDir, tmpBase)}
}

// spoolPatterns are the globs of the spool files wrappers write: in the
// spool directory when there is one, else in their tmp directories under
// tmpBase.
func spoolPatterns(spoolDir, tmpBase string) []string {
	if spoolDir != "" {
		return []string{filepath.Join(spoolDir, "isched-*.spool*")}
	}
	return []string{filepath.Join(tmpBase, "isched-*", "reports.spool*")}
}

// adoptOwn moves a spool file already at this wrapper's path (the previous
// attempt of the same job step and rank on this node) aside, so that
// spooling cannot truncate it, and returns its new path ("" when none).
func adoptOwn(path string, now time.Time) (string, error) {
	if path == "" {
		return "", nil
	}
	st, err := os.Lstat(path)
	if errors.Is(err, fs.ErrNotExist) {
		return "", nil
	}
	if err != nil {
		return "", err
	}
	if !st.Mode().IsRegular() {
		return "", fmt.Errorf("%s: not a regular file", path)
	}
	prev := fmt.Sprintf("%s.prev-%d", path, now.UnixNano())
	if err := os.Rename(path, prev); err != nil {
		return "", err
	}
	return prev, nil
}

// findLeftovers lists the spool files matching patterns that may be
// leftovers of this user's earlier wrappers: regular files (not symlinks)
// owned by uid, not own, older than minAge, not larger than
// maxLeftoverBytes. Whether a live wrapper holds one is known only when
// replaying it.
func findLeftovers(patterns []string, own string, uid int, now time.Time, minAge time.Duration) []string {
	var out []string
	seen := map[string]bool{own: true}
	for _, p := range patterns {
		matches, _ := filepath.Glob(p) // the only error is a bad pattern: ours are fixed
		for _, m := range matches {
			if seen[m] || strings.HasSuffix(m, ".tmp") {
				continue
			}
			seen[m] = true
			st, err := os.Lstat(m)
			if err != nil || !st.Mode().IsRegular() || st.Size() > maxLeftoverBytes || now.Sub(st.ModTime()) < minAge {
				continue
			}
			if sys, ok := st.Sys().(*syscall.Stat_t); !ok || int(sys.Uid) != uid {
				continue
			}
			out = append(out, m)
		}
	}
	return out
}

// lockFile takes an exclusive flock on f without waiting.
func lockFile(f *os.File) error {
	for {
		err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB)
		if !errors.Is(err, syscall.EINTR) {
			return err
		}
	}
}

// testHookLeftoverOpened runs between a sender's open of a leftover and its
// lock (tests put another sender there).
var testHookLeftoverOpened = func(string) {}

// replayLeftover sends the records of one leftover spool file to the
// stream, in order, and removes the file (and its directory, when that is
// an emptied wrapper tmp directory). On a send error the file keeps its
// unsent part, from the record that failed, for the next try. Lines that
// are not records are skipped and counted.
func (r *reporter) replayLeftover(ctx context.Context, path string, uid int) (sent, bad int, err error) {
	f, err := os.OpenFile(path, os.O_RDONLY|syscall.O_NOFOLLOW, 0)
	if err != nil {
		return 0, 0, err
	}
	defer f.Close()
	testHookLeftoverOpened(path)
	if err := lockFile(f); err != nil {
		if errors.Is(err, syscall.EWOULDBLOCK) {
			return 0, 0, errLeftoverBusy
		}
		return 0, 0, fmt.Errorf("lock %s: %w", path, err)
	}
	st, err := f.Stat()
	if err != nil {
		return 0, 0, err
	}
	if sys, ok := st.Sys().(*syscall.Stat_t); !ok || int(sys.Uid) != uid || !st.Mode().IsRegular() {
		return 0, 0, fmt.Errorf("%s: not a regular file of uid %d", path, uid)
	}
	if !namesFile(path, st) {
		// another sender held it between our open and our lock, and sent
		// it (removed) or kept only its unsent part (renamed over it)
		return 0, 0, errLeftoverBusy
	}
	c, err := spoolCluster(f)
	if err != nil {
		return 0, 0, fmt.Errorf("%s: %w", path, err)
	}
	if c != "" && c != r.job.Cluster {
		return 0, 0, fmt.Errorf("%w %q", errLeftoverForeign, c)
	}
	if _, err := f.Seek(0, io.SeekStart); err != nil {
		return 0, 0, err
	}
	sink, err := r.sinkOrConnect(ctx)
	if err != nil {
		return 0, 0, fmt.Errorf("%w: %w", errLeftoverSend, err)
	}
	sc := spoolScanner(f)
	var start, end int64 // the current line's offsets in the file
	sc.Split(func(data []byte, atEOF bool) (int, []byte, error) {
		adv, tok, err := bufio.ScanLines(data, atEOF)
		end += int64(adv)
		return adv, tok, err
	})
	for sc.Scan() {
		line := start
		start = end
		var rec record
		if json.Unmarshal(sc.Bytes(), &rec) != nil || len(rec.Payload) == 0 || rec.MAC == "" {
			bad++
			continue
		}
		cctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		_, err := sink.Append(cctx, r.stream, rec.Payload, rec.MAC, r.maxLen)
		cancel()
		if err != nil {
			if line > 0 {
				// Redis took what came before: the next try starts at this
				// record (which it may have taken too, its reply lost: the
				// coordinator drops that one copy), not at the first
				if kerr := keepFrom(f, path, line); kerr != nil {
					r.log.Warn("leftover spool not cut to its unsent part; the next try repeats the sent reports", "spool", path, "err", kerr)
				}
			}
			return sent, bad, fmt.Errorf("%w: %w", errLeftoverSend, err)
		}
		sent++
	}
	if err := sc.Err(); err != nil {
		// a line longer than any record: the rest of the file cannot be
		// read as records either
		bad++
	}
	if err := os.Remove(path); err != nil {
		return sent, bad, err
	}
	dir := filepath.Dir(path)
	if strings.HasPrefix(filepath.Base(path), "reports.spool") && strings.HasPrefix(filepath.Base(dir), "isched-") &&
		(r.out == nil || dir != filepath.Dir(r.out.spoolPath)) {
		_ = os.Remove(dir) // another wrapper's tmp directory, only when empty
	}
	return sent, bad, nil
}

// keepFrom replaces the spool file at path (held, locked, as f) with its
// part from byte off on.
func keepFrom(f *os.File, path string, off int64) error {
	if _, err := f.Seek(off, io.SeekStart); err != nil {
		return err
	}
	return rewriteSpool(path, func(w *bufio.Writer) error {
		_, err := io.Copy(w, f)
		return err
	})
}

// spoolCluster is the cluster the first readable record of a spool file
// reports to (one file is one wrapper's: one cluster); "" when no record is
// readable (the file is then sent as junk: nothing, and removed).
func spoolCluster(f *os.File) (string, error) {
	sc := spoolScanner(f)
	for sc.Scan() {
		var rec record
		var env struct {
			Job *struct {
				Cluster string `json:"cluster"`
			} `json:"job"`
		}
		if json.Unmarshal(sc.Bytes(), &rec) == nil && json.Unmarshal(rec.Payload, &env) == nil && env.Job != nil {
			return env.Job.Cluster, nil
		}
	}
	if err := sc.Err(); err != nil {
		return "", err
	}
	return "", nil
}

// sendLeftover replays one leftover spool file and logs what came of it.
// The error is errLeftoverSend's when Redis did not take it (worth a
// retry), else nil: sent, a live wrapper's, sent by another wrapper first,
// another cluster's, or unreadable (left as it is, and said).
func (r *reporter) sendLeftover(ctx context.Context, p string) error {
	sent, bad, err := r.replayLeftover(ctx, p, r.uid)
	switch {
	case err == nil:
		r.log.Info("sent the undelivered reports an earlier wrapper left", "spool", p, "reports", sent, "unreadable_lines", bad)
	case errors.Is(err, errLeftoverBusy), errors.Is(err, fs.ErrNotExist), errors.Is(err, errLeftoverForeign):
		// a live wrapper's, another wrapper sent it first, or another
		// cluster's
	case errors.Is(err, errLeftoverSend):
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
