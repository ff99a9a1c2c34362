package wrapper

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"syscall"

	"github.com/isched/isched/internal/ownership"
	"github.com/isched/isched/internal/report"
)

// Files and directories the wrapper trusts must be the job user's: a second
// user on the node can pre-create a predictable name in a shared directory
// (/tmp, a 1777 checkpoint directory) and wait (issue 18, items 6 and 7).

// checkOwned says why fi (of path, not followed: from Lstat or an
// O_NOFOLLOW open) is not to be trusted: not of kind want (fs.ModeDir, or
// 0 for a regular file), not owned by uid, or with a permission bit of
// forbid set.
func checkOwned(path string, fi fs.FileInfo, want fs.FileMode, uid int, forbid fs.FileMode) error {
	switch {
	case fi.Mode()&fs.ModeSymlink != 0:
		return fmt.Errorf("%s is a symbolic link", path)
	case fi.Mode().Type() != want:
		return fmt.Errorf("%s is a %s, want a %s", path, kindName(fi.Mode().Type()), kindName(want))
	}
	owner, ok := ownership.Of(fi)
	if !ok {
		return fmt.Errorf("%s: owner unknown", path)
	}
	if owner != uid {
		return fmt.Errorf("%s is owned by uid %d, not by this job's user (uid %d)", path, owner, uid)
	}
	if fi.Mode().Perm()&forbid != 0 {
		return fmt.Errorf("%s has mode %#o: others than its owner may change it", path, fi.Mode().Perm())
	}
	return nil
}

func kindName(m fs.FileMode) string {
	switch m {
	case 0:
		return "regular file"
	case fs.ModeDir:
		return "directory"
	case fs.ModeSymlink:
		return "symbolic link"
	}
	return "special file"
}

// jobTmpDir is a private directory for this task's progress file, control
// file and spool: under TMPDIR (Slurm's per-job one where the site sets
// it), named after the job so a later attempt finds the spool an earlier
// one left. created is false when it existed already (a previous
// attempt's). An existing directory that is not the job user's with mode
// 0700 (another user may have made it, to read or feed the job's progress)
// is refused, logged, and replaced by a new directory with a random name:
// the training runs the same, only a leftover spool there is not adopted.
func jobTmpDir(getenv func(string) string, job report.JobRef, inSlurm bool, log *slog.Logger) (dir string, created bool) {
	base := tmpBase(getenv)
	if !inSlurm {
		return privateTmp(base, log)
	}
	dir = filepath.Join(base, fmt.Sprintf("isched-%d-%s-r%d", job.JobID, strings.ReplaceAll(job.StepID, "/", "_"), job.Rank))
	err := os.Mkdir(dir, 0o700)
	if errors.Is(err, fs.ErrNotExist) {
		if err = os.MkdirAll(base, 0o700); err == nil {
			err = os.Mkdir(dir, 0o700)
		}
	}
	if err == nil {
		return dir, true
	}
	if !errors.Is(err, fs.ErrExist) {
		log.Warn("job temporary directory not created; no progress file or control file", "dir", dir, "err", err)
		return "", false
	}
	fi, err := os.Lstat(dir)
	if err == nil {
		err = checkOwned(dir, fi, fs.ModeDir, os.Getuid(), 0o077)
	}
	if err != nil {
		log.Error("job temporary directory refused: it is not this user's private directory (another user may have made it); using a new one",
			"dir", dir, "err", err)
		return privateTmp(base, log)
	}
	return dir, false
}

// privateTmp makes a new 0700 directory with a random name under base.
func privateTmp(base string, log *slog.Logger) (string, bool) {
	dir, err := os.MkdirTemp(base, "isched-")
	if err != nil {
		log.Warn("no job temporary directory; no progress file or control file", "base", base, "err", err)
		return "", false
	}
	return dir, true
}

// readOwnedFile reads a file that must be the job user's regular file, not
// writable by group or others, opened without following a link (and
// without blocking on a planted FIFO), at most max bytes.
func readOwnedFile(path string, max int64) ([]byte, error) {
	f, err := os.OpenFile(path, os.O_RDONLY|syscall.O_NOFOLLOW|syscall.O_NONBLOCK, 0)
	if err != nil {
		if errors.Is(err, syscall.ELOOP) {
			return nil, fmt.Errorf("%s is a symbolic link", path)
		}
		return nil, err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return nil, err
	}
	if err := checkOwned(path, fi, 0, os.Getuid(), 0o022); err != nil {
		return nil, err
	}
	if fi.Size() > max {
		return nil, fmt.Errorf("%s: %d bytes, more than %d", path, fi.Size(), max)
	}
	return io.ReadAll(io.LimitReader(f, max))
}

// foreignCkptDir says why the checkpoint directory dir is not to be
// trusted with the lineage's resume points (issue 44, item 5): it, or the
// directory holding it (the nearest existing one above it), belongs to a
// user other than uid and root, who can rename, replace or link any entry
// in it. Nil when it is the job user's or root's, or cannot be seen (the
// watcher then says so).
func foreignCkptDir(dir string, uid int) error {
	fi, err := os.Stat(dir)
	if err == nil {
		if owner, foreign := ownership.Foreign(fi, uid); foreign {
			return fmt.Errorf("%s is owned by %s, not by this job's user (uid %d) or root: its owner can replace, rename or link any entry in it", dir, ownership.Name(owner), uid)
		}
	}
	holder, hfi, err := ownership.Holder(dir, os.Stat)
	if err != nil {
		return nil
	}
	if owner, foreign := ownership.Foreign(hfi, uid); foreign {
		return fmt.Errorf("%s is in %s, owned by %s, not by this job's user (uid %d) or root: its owner can replace, rename or link any entry in it", dir, holder, ownership.Name(owner), uid)
	}
	return nil
}
