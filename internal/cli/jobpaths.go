package cli

import (
	"fmt"
	"os"
	"path/filepath"
	"syscall"
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
	for _, p := range []struct {
		path           *string
		flag           string
		def, inPrivate string
	}{
		{&o.ckptDir, "--checkpoint-dir", filepath.Join("checkpoints", o.lineage), "checkpoints"},
		{&o.output, "--output", "isched-" + o.lineage + ".out", "isched-" + o.lineage + ".out"},
	} {
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
	return nil
}

func abs(cwd, p string) string {
	if filepath.IsAbs(p) {
		return filepath.Clean(p)
	}
	return filepath.Join(cwd, p)
}

// checkOwnDir checks that dir (just made or found) is the user's own and
// not writable by others: a directory another user made first is not one
// to resume from.
func checkOwnDir(dir string, uid int) error {
	fi, err := os.Lstat(dir)
	if err != nil {
		return err
	}
	st, ok := fi.Sys().(*syscall.Stat_t)
	switch {
	case !fi.IsDir():
		return fmt.Errorf("%s is not a directory (a symlink?)", dir)
	case ok && int(st.Uid) != uid:
		return fmt.Errorf("%s belongs to uid %d, not to you (uid %d): choose another --checkpoint-dir", dir, st.Uid, uid)
	case fi.Mode().Perm()&0o002 != 0:
		return fmt.Errorf("%s is writable by every user: choose another --checkpoint-dir", dir)
	}
	return nil
}
