package spool

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/isched/isched/internal/report"
)

// LeftoverMinAge: a spool file younger than this is left alone even when
// unlocked (its wrapper may be between creating and locking it).
const LeftoverMinAge = 10 * time.Second

// maxLeftoverBytes bounds what one leftover may hold: twice the wrapper's
// queue byte bound (its records are written as JSON lines with their payloads
// escaped).
const maxLeftoverBytes = 2 * 32 << 20

var (
	// ErrBusy: the spool file is locked by a live wrapper (or another
	// sender took it first).
	ErrBusy = errors.New("spool file in use by a running wrapper")
	// ErrForeign: the spool is another cluster's (its wrapper reported
	// under another ISCHED_CLUSTER); left for one of that cluster.
	ErrForeign = errors.New("spool of another cluster")
	// ErrSend: the sink refused or did not answer; worth a retry.
	ErrSend = errors.New("sending a leftover report")
)

// Layout says where a wrapper's spool file is and where leftovers of
// earlier wrappers are looked for.
type Layout struct {
	Path     string   // this wrapper's spool file
	Patterns []string // globs of other wrappers' spool files
}

// NewLayout places the spool: with a spool directory (site-wide,
// persistent) one file per job step and rank in it; else reports.spool in
// the wrapper's private tmp directory, whose siblings are the other
// wrappers' (tmpBase is their parent).
func NewLayout(spoolDir, tmp, tmpBase string, job report.JobRef) Layout {
	if spoolDir != "" {
		name := fmt.Sprintf("isched-%s-%d-%s-r%d.spool", job.Cluster, job.JobID, strings.ReplaceAll(job.StepID, "/", "_"), job.Rank)
		return Layout{Path: filepath.Join(spoolDir, name), Patterns: Patterns(spoolDir, tmpBase)}
	}
	if tmp == "" {
		return Layout{}
	}
	return Layout{Path: filepath.Join(tmp, "reports.spool"), Patterns: Patterns(spoolDir, tmpBase)}
}

// Patterns are the globs of the spool files wrappers write: in the
// spool directory when there is one, else in their tmp directories under
// tmpBase.
func Patterns(spoolDir, tmpBase string) []string {
	if spoolDir != "" {
		return []string{filepath.Join(spoolDir, "isched-*.spool*")}
	}
	return []string{filepath.Join(tmpBase, "isched-*", "reports.spool*")}
}

// AdoptOwn moves a spool file already at this wrapper's path (the previous
// attempt of the same job step and rank on this node) aside, so that
// spooling cannot truncate it, and returns its new path ("" when none).
func AdoptOwn(path string, now time.Time) (string, error) {
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

// FindLeftovers lists the spool files matching patterns that may be
// leftovers of this user's earlier wrappers: regular files (not symlinks)
// owned by uid, not own, older than minAge, not larger than
// maxLeftoverBytes. Whether a live wrapper holds one is known only when
// replaying it.
func FindLeftovers(patterns []string, own string, uid int, now time.Time, minAge time.Duration) []string {
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

// testHookOpened runs between a sender's open of a leftover and its lock
// (tests put another sender there).
var testHookOpened = func(string) {}

// A Sink takes one signed report (the ingest stream's XADD).
type Sink interface {
	Append(ctx context.Context, payload []byte, mac string) error
}

// Replayer is who replays a leftover.
type Replayer struct {
	UID     int    // the file must be this uid's
	Cluster string // a spool of another cluster is ErrForeign
	// OwnDir is the replaying wrapper's spool directory ("": none), never
	// removed after a leftover in it is sent.
	OwnDir string
	// Connect gives the sink, once the file is locked and found to be the
	// cluster's.
	Connect func(context.Context) (Sink, error)
	Log     *slog.Logger
}

// Replay sends the records of one leftover spool file to the sink, in
// order, and removes the file (and its directory, when that is an emptied
// wrapper tmp directory). On a send error the file keeps its unsent part,
// from the record that failed, for the next try. Lines that are not records
// are skipped and counted.
func (p Replayer) Replay(ctx context.Context, path string) (sent, bad int, err error) {
	f, err := os.OpenFile(path, os.O_RDONLY|syscall.O_NOFOLLOW, 0)
	if err != nil {
		return 0, 0, err
	}
	defer f.Close()
	testHookOpened(path)
	if err := p.check(f, path); err != nil {
		return 0, 0, err
	}
	sink, err := p.Connect(ctx)
	if err != nil {
		return 0, 0, fmt.Errorf("%w: %w", ErrSend, err)
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
		var rec Record
		if json.Unmarshal(sc.Bytes(), &rec) != nil || len(rec.Payload) == 0 || rec.MAC == "" {
			bad++
			continue
		}
		cctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		err := sink.Append(cctx, rec.Payload, rec.MAC)
		cancel()
		if err != nil {
			if line > 0 {
				// the sink took what came before: the next try starts at this
				// record (which it may have taken too, its reply lost: the
				// coordinator drops that one copy), not at the first
				if kerr := keepFrom(f, path, line); kerr != nil {
					p.Log.Warn("leftover spool not cut to its unsent part; the next try repeats the sent reports", "spool", path, "err", kerr)
				}
			}
			return sent, bad, fmt.Errorf("%w: %w", ErrSend, err)
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
	if strings.HasPrefix(filepath.Base(path), "reports.spool") && strings.HasPrefix(filepath.Base(dir), "isched-") && dir != p.OwnDir {
		_ = os.Remove(dir) // another wrapper's tmp directory, only when empty
	}
	return sent, bad, nil
}

// check locks the opened leftover f and says whether it is one to send: a
// regular file of the uid, still named path, of the cluster (or of none).
// It leaves f at its start.
func (p Replayer) check(f *os.File, path string) error {
	if err := lockFile(f); err != nil {
		if errors.Is(err, syscall.EWOULDBLOCK) {
			return ErrBusy
		}
		return fmt.Errorf("lock %s: %w", path, err)
	}
	st, err := f.Stat()
	if err != nil {
		return err
	}
	if sys, ok := st.Sys().(*syscall.Stat_t); !ok || int(sys.Uid) != p.UID || !st.Mode().IsRegular() {
		return fmt.Errorf("%s: not a regular file of uid %d", path, p.UID)
	}
	if !namesFile(path, st) {
		// another sender held it between our open and our lock, and sent
		// it (removed) or kept only its unsent part (renamed over it)
		return ErrBusy
	}
	c, err := spoolCluster(f)
	if err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	if c != "" && c != p.Cluster {
		return fmt.Errorf("%w %q", ErrForeign, c)
	}
	_, err = f.Seek(0, io.SeekStart)
	return err
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
		var rec Record
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
