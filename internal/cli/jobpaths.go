package cli

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"

	"github.com/isched/isched/internal/ownership"
)

// The job's files out of shared directories (docs/threat-model.md,
// "Predictable paths in shared directories").
//
// Slurm opens a job's output as the user and follows symlinks; the lineage
// in its name is public (squeue shows the job's comment). In a directory
// every user may write to (/tmp, /var/tmp, a 1777 scratch), another user
// who sees the job pending can plant a symlink at its output path and have
// the job append to a file of the owner's choosing, or plant a checkpoint
// directory (and a resume record in it) that the owner cannot replace.
// So, submitted from such a directory, the defaults go to a private
// directory of the user's instead, and an --output or --checkpoint-dir
// there is refused.
//
// The same holds in a directory of another user, shared or not (issue 44,
// item 5): its owner can create, replace or link any entry in it. So the
// checkpoint directory must be the user's own (checkOwnDir), and the
// directory holding it or the output file (the nearest existing one) the
// user's or root's; an existing output file must not be a link, nor
// another user's (ownPaths).

// sharedDir reports whether dir is writable by every user.
func (a *App) sharedDir(dir string) bool {
	fi, err := a.Stat(dir)
	return err == nil && fi.IsDir() && fi.Mode().Perm()&0o002 != 0
}

// privateJobDir is where a job submitted from a shared directory keeps
// its output and checkpoints: $XDG_CACHE_HOME/isched/jobs/<lineage>, else
// ~/.cache/isched/jobs/<lineage> (the compute nodes must see it, as they
// see the user's home). It is made 0700 unless dryRun.
func (a *App) privateJobDir(lineage string, dryRun bool) (string, error) {
	base := a.Getenv("XDG_CACHE_HOME")
	if !filepath.IsAbs(base) {
		home := a.Getenv("HOME")
		if !filepath.IsAbs(home) {
			return "", fmt.Errorf("no private directory for the job's output: HOME %q is not an absolute path (give --output and --checkpoint-dir)", home)
		}
		base = filepath.Join(home, ".cache")
	}
	dir := filepath.Join(base, "isched", "jobs", lineage)
	if dryRun {
		return dir, nil
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return "", fmt.Errorf("private job directory: %w", err)
	}
	return dir, os.Chmod(dir, 0o700)
}

// jobPaths sets the output and checkpoint directory of a submission,
// relative to cwd: the flags' (refused in a shared directory), else the
// defaults (in cwd, or in privateJobDir when cwd is shared).
func (a *App) jobPaths(o *submitOpts, cwd string) error {
	var private string
	if (o.ckptDir == "" || o.output == "") && a.sharedDir(cwd) {
		var err error
		if private, err = a.privateJobDir(o.lineage, o.dryRun); err != nil {
			return err
		}
		fmt.Fprintf(a.stderr, "isched: %s is writable by every user: the job's output and checkpoints go to %s (--output and --checkpoint-dir choose)\n", cwd, private)
	}
	out := "isched-" + o.lineage + ".out"
	if o.array != "" {
		out = "isched-" + o.lineage + "_%a.out" // Slurm's %a: the element's task id
	}
	for _, p := range []struct {
		path           *string
		flag           string
		def, inPrivate string
	}{
		{&o.ckptDir, "--checkpoint-dir", filepath.Join("checkpoints", o.lineage), "checkpoints"},
		{&o.output, "--output", out, out},
		{&o.errPath, "--error", "", ""},
	} {
		if *p.path == "" && p.def == "" {
			continue // no default: the file is optional
		}
		if *p.path == "" {
			if private != "" {
				*p.path = filepath.Join(private, p.inPrivate)
				continue
			}
			*p.path = p.def
		} else if parent := filepath.Dir(abs(cwd, *p.path)); a.sharedDir(parent) {
			return usageErr("%s %s: %s is writable by every user, who could plant a symlink or directory there before the job starts; choose a directory of yours", p.flag, *p.path, parent)
		}
		*p.path = abs(cwd, *p.path)
	}
	return a.ownPaths(o)
}

// ownPaths refuses a checkpoint directory or output file (given or by
// default) that another user could replace before or while the job runs:
// see the comment at the top of this file.
func (a *App) ownPaths(o *submitOpts) error {
	if o.asUser != "" {
		return nil // root's choice for another user (as send's checkOwnDir)
	}
	uid := a.UID()
	for _, p := range []struct {
		flag, path string
		leaf       func(string, fs.FileInfo, int) error
	}{
		{"--checkpoint-dir", o.ckptDir, ownDir},
		{"--output", o.output, ownOutput},
		{"--error", o.errPath, ownOutput},
	} {
		if p.path == "" {
			continue
		}
		fi, err := a.Lstat(p.path)
		switch {
		case err == nil:
			if err := p.leaf(p.path, fi, uid); err != nil {
				return usageErr("%s %s: %v", p.flag, p.path, err)
			}
		case !errors.Is(err, fs.ErrNotExist) && !errors.Is(err, fs.ErrPermission):
			return fmt.Errorf("%s %s: %w", p.flag, p.path, err)
		}
		holder, hfi, err := ownership.Holder(p.path, a.Stat)
		if err != nil {
			return fmt.Errorf("%s: %w", p.flag, err)
		}
		if owner, foreign := ownership.Foreign(hfi, uid); foreign {
			return usageErr("%s %s: %s is owned by %s, not by you (uid %d): its owner can replace or link any entry in it before or while the job runs; choose a directory of yours",
				p.flag, p.path, holder, ownership.Name(owner), uid)
		}
	}
	return nil
}

// ownOutput says why the existing output file (fi, not followed) is not to
// be appended to: a link (Slurm follows it), or a file of another user's.
func ownOutput(path string, fi fs.FileInfo, uid int) error {
	if fi.Mode()&fs.ModeSymlink != 0 {
		return fmt.Errorf("%s is a symbolic link: Slurm would write where it points; give the file itself", path)
	}
	if owner, foreign := ownership.Foreign(fi, uid); foreign {
		return fmt.Errorf("%s is owned by %s, not by you (uid %d): choose another --output", path, ownership.Name(owner), uid)
	}
	return nil
}

func abs(cwd, p string) string {
	if filepath.IsAbs(p) {
		return filepath.Clean(p)
	}
	return filepath.Join(cwd, p)
}

// checkOwnDir checks that dir (just made or found, as lstat shows it) is
// the user's own and not writable by others: a directory another user made
// first is not one to resume from.
func checkOwnDir(lstat func(string) (fs.FileInfo, error), dir string, uid int) error {
	fi, err := lstat(dir)
	if err != nil {
		return err
	}
	return ownDir(dir, fi, uid)
}

// ownDir is checkOwnDir on dir's Lstat fi.
func ownDir(dir string, fi fs.FileInfo, uid int) error {
	owner, ok := ownership.Of(fi)
	switch {
	case !fi.IsDir():
		return fmt.Errorf("%s is not a directory (a symlink?)", dir)
	case ok && owner != uid:
		return fmt.Errorf("%s belongs to %s, not to you (uid %d): its owner can replace or plant checkpoints in it; choose another --checkpoint-dir", dir, ownership.Name(owner), uid)
	case fi.Mode().Perm()&0o002 != 0:
		return fmt.Errorf("%s is writable by every user: choose another --checkpoint-dir", dir)
	}
	return nil
}
