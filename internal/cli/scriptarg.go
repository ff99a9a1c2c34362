package cli

import (
	"errors"
	"io/fs"
	"path/filepath"
	"strings"
)

// launchers run a script named among their arguments: `python3 train.py`,
// `torchrun --nproc-per-node 4 train.py`, `bash run.sh`.
var launchers = []string{"python", "torchrun", "accelerate", "deepspeed", "bash", "sh"}

// scriptExts are the script files a launcher's argument may name.
var scriptExts = []string{".py", ".sh"}

// checkScriptArg refuses a command whose launcher would find no script:
// `isched submit -- python3 nosuch.py` was accepted and the job would have
// failed at its start, after its wait in the queue. The script is the
// first argument that is no option and ends in .py or .sh, resolved in the
// job's working directory dir. When dir itself cannot be read here (a
// path of another host), nothing is judged.
func checkScriptArg(argv []string, dir string, stat func(string) (fs.FileInfo, error)) error {
	if len(argv) < 2 || !isLauncher(filepath.Base(argv[0])) {
		return nil
	}
	if _, err := stat(dir); err != nil {
		return nil
	}
	for _, a := range argv[1:] {
		if a == "-m" || a == "-c" {
			return nil // python runs a module or a string
		}
		if strings.HasPrefix(a, "-") || !hasAnySuffix(a, scriptExts) {
			continue
		}
		p := a
		if !filepath.IsAbs(p) {
			p = filepath.Join(dir, p)
		}
		fi, err := stat(p)
		switch {
		case errors.Is(err, fs.ErrNotExist):
			return usageErr("the command's script %s: not found in %s (the job would fail at once; give its path from there)", a, dir)
		case err == nil && fi.IsDir():
			return usageErr("the command's script %s is a directory", p)
		}
		return nil
	}
	return nil
}

func isLauncher(base string) bool {
	for _, l := range launchers {
		if base == l || (l == "python" && strings.HasPrefix(base, "python")) {
			return true
		}
	}
	return false
}

func hasAnySuffix(s string, suffixes []string) bool {
	for _, x := range suffixes {
		if strings.HasSuffix(s, x) {
			return true
		}
	}
	return false
}
