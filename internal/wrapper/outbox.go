package wrapper

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"sync"
	"syscall"
	"time"

	"github.com/isched/isched/internal/report"
)

// record is one signed report waiting to be sent.
type record struct {
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
func (r record) droppable() bool { return r.Kind == report.KindSample }

// outbox is a bounded, ordered queue of reports. While Redis is unreachable
// it also mirrors its content to a spool file (JSON lines) under the job's
// temporary directory, so a post-mortem or a later attempt can tell what was
// never delivered. A spool write error (disk full) is logged once and the
// queue goes on in memory: monitoring never harms training.
type outbox struct {
	mu         sync.Mutex
	q          []record
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

func newOutbox(maxRecords, maxBytes int, spoolPath string, log *slog.Logger) *outbox {
	return &outbox{maxRecords: maxRecords, maxBytes: maxBytes, spoolPath: spoolPath, log: log}
}

// push appends a record, dropping the oldest samples when the queue is full.
// Events are kept even past the bounds (there are few of them).
func (o *outbox) push(r record) {
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

func (o *outbox) dropOldestSample() bool {
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

// takeDropped returns and resets the count of samples dropped since the last call.
func (o *outbox) takeDropped() int {
	o.mu.Lock()
	defer o.mu.Unlock()
	d := o.dropped
	o.dropped = 0
	return d
}

func (o *outbox) len() int {
	o.mu.Lock()
	defer o.mu.Unlock()
	return len(o.q)
}

// head returns up to n records from the front without removing them; they
// are in flight (not dropped) until the next pop.
func (o *outbox) head(n int) []record {
	o.mu.Lock()
	defer o.mu.Unlock()
	if n > len(o.q) {
		n = len(o.q)
	}
	o.inflight = n
	return append([]record(nil), o.q[:n]...)
}

// pop removes the delivered records (the front of the last head) and ends
// their flight. Records pushed meanwhile stay; none of the batch was dropped
// meanwhile, since records in flight never are.
func (o *outbox) pop(delivered []record) {
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

// startSpool begins mirroring to the spool file (called when a send failed).
func (o *outbox) startSpool() {
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
	o.spool, o.spoolBuf = f, bufio.NewWriter(f)
	for _, r := range o.q {
		o.writeSpool(r)
	}
}

// openLockedSpool creates the spool file at path and locks it, held while
// the wrapper lives: a locked spool is nobody's leftover. Between creating
// and locking, a sender of leftovers (another wrapper, --send-spools) may
// take the fresh file for one and remove it; the file is then created
// again, so that the spool is never an unlinked file.
func openLockedSpool(path string, create func(string) (*os.File, error), log *slog.Logger) (*os.File, error) {
	for try := 0; ; try++ {
		f, err := create(path)
		if err != nil {
			return nil, err
		}
		if err := lockFile(f); err != nil {
			if errors.Is(err, syscall.EWOULDBLOCK) && try < 2 {
				// a sender holds the fresh file, about to remove it
				_ = f.Close()
				time.Sleep(50 * time.Millisecond)
				continue
			}
			log.Warn("report spool not locked: another wrapper may take it for a leftover", "path", path, "err", err)
			return f, nil
		}
		if held, err := f.Stat(); err == nil && namesFile(path, held) {
			return f, nil
		}
		_ = f.Close()
		if try == 2 {
			return nil, fmt.Errorf("spool file %s: taken away three times while being locked", path)
		}
	}
}

// namesFile reports whether path still names the file held (no one
// removed it or renamed another over it).
func namesFile(path string, held os.FileInfo) bool {
	named, err := os.Lstat(path)
	return err == nil && os.SameFile(held, named)
}

// createSpool creates (or empties) a spool file, never through a symlink.
func createSpool(path string) (*os.File, error) {
	return os.OpenFile(path, os.O_CREATE|os.O_WRONLY|os.O_TRUNC|syscall.O_NOFOLLOW, 0o600)
}

// rewriteSpool replaces the spool file at path with what write writes, by
// way of path+".tmp" (never taken for a leftover) and a rename: a reader
// finds the old file or the whole new one, never a part.
func rewriteSpool(path string, write func(*bufio.Writer) error) error {
	tmp := path + ".tmp"
	f, err := createSpool(tmp)
	if err != nil {
		return err
	}
	w := bufio.NewWriter(f)
	err = write(w)
	if err == nil {
		err = w.Flush()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp, path)
	}
	if err != nil {
		_ = os.Remove(tmp)
	}
	return err
}

func (o *outbox) writeSpool(r record) {
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

func (o *outbox) spoolFailed(err error) {
	if !o.spoolErr {
		o.log.Warn("report spool unavailable: keeping reports in memory only", "path", o.spoolPath, "err", err)
	}
	o.spoolErr = true
}

func (o *outbox) closeSpool(remove bool) {
	if o.spool == nil {
		return
	}
	_ = o.spool.Close()
	o.spool, o.spoolBuf = nil, nil
	if remove {
		_ = os.Remove(o.spoolPath)
	}
}

// finish leaves the spool file holding exactly the records still queued,
// at exit: the spool mirrors the queue from the first failed send on, and
// records delivered since would otherwise be sent again with the leftover
// (harmless, the coordinator refuses a seen sequence number, but counted
// as replays). Written aside and renamed into place.
func (o *outbox) finish() {
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

// spoolScanner reads a spool file's lines: one record each, a payload of
// up to report.MaxPayload escaped into JSON.
func spoolScanner(r io.Reader) *bufio.Scanner {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 64<<10), report.MaxPayload*2+1024)
	return sc
}

// spoolLine is a record as a spool file line.
func spoolLine(r record) ([]byte, error) {
	b, err := json.Marshal(r)
	return append(b, '\n'), err
}

// readSpool reads a spool file back (for tests and post-mortems).
func readSpool(path string) ([]record, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var out []record
	sc := spoolScanner(f)
	for sc.Scan() {
		var r record
		if err := json.Unmarshal(sc.Bytes(), &r); err != nil {
			return out, fmt.Errorf("spool %s: %w", path, err)
		}
		out = append(out, r)
	}
	return out, sc.Err()
}
