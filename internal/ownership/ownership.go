// Package ownership says whether a user may trust a directory with a job's
// files. Whoever owns a directory can create, replace, rename or link any
// entry in it, so a job's checkpoint directory, and the directory holding
// its output, must be the job user's own or root's (root is trusted):
// docs/threat-model.md, "Directories of another user".
package ownership

import (
	"errors"
	"fmt"
	"io/fs"
	"os/user"
	"path/filepath"
	"strconv"
	"syscall"
)

// Of is the uid owning fi; ok is false where the platform does not say.
func Of(fi fs.FileInfo) (uid int, ok bool) {
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok {
		return 0, false
	}
	return int(st.Uid), true
}

// Name is how a message names the owner uid: "bob (uid 1002)", or
// "uid 1002" when the user database does not know it.
func Name(uid int) string {
	if u, err := user.LookupId(strconv.Itoa(uid)); err == nil && u.Username != "" {
		return fmt.Sprintf("%s (uid %d)", u.Username, uid)
	}
	return fmt.Sprintf("uid %d", uid)
}

// Holder is the nearest existing directory above path, as stat (which
// follows links) sees it: the one that holds path, or would hold the first
// of its missing parents. A parent stat cannot read (no search
// permission above it), or one that is not a directory (nothing can be
// made under it), counts as missing: the walk goes on up.
func Holder(path string, stat func(string) (fs.FileInfo, error)) (string, fs.FileInfo, error) {
	dir := filepath.Clean(path)
	for {
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", nil, fmt.Errorf("%s: no existing directory above it", path)
		}
		dir = parent
		fi, err := stat(dir)
		if err == nil && fi.IsDir() {
			return dir, fi, nil
		}
		if err == nil {
			continue
		}
		if !errors.Is(err, fs.ErrNotExist) && !errors.Is(err, fs.ErrPermission) {
			return "", nil, fmt.Errorf("%s: %w", dir, err)
		}
	}
}

// Foreign reports the owner of fi (of path) when it is neither uid nor
// root: a user who could replace what the job keeps there. ok is false
// when the owner is trusted or unknown.
func Foreign(fi fs.FileInfo, uid int) (owner int, ok bool) {
	owner, known := Of(fi)
	if !known || owner == uid || owner == 0 {
		return owner, false
	}
	return owner, true
}
