package spool

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"syscall"
	"time"

	"github.com/isched/isched/internal/atomicfile"
	"github.com/isched/isched/internal/report"
)

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

// rewriteSpool replaces the spool file at path with what write writes,
// through a new temporary file beside it (its name ends in ".tmp", never
// taken for a leftover) and a rename: a reader finds the old file or the
// whole new one, never a part.
func rewriteSpool(path string, write func(*bufio.Writer) error) error {
	return atomicfile.Write(path, 0o600, func(f io.Writer) error {
		w := bufio.NewWriter(f)
		if err := write(w); err != nil {
			return err
		}
		return w.Flush()
	})
}

// spoolScanner reads a spool file's lines: one Record each, a payload of
// up to report.MaxPayload escaped into JSON.
func spoolScanner(r io.Reader) *bufio.Scanner {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 64<<10), report.MaxPayload*2+1024)
	return sc
}

// spoolLine is a Record as a spool file line.
func spoolLine(r Record) ([]byte, error) {
	b, err := json.Marshal(r)
	return append(b, '\n'), err
}
