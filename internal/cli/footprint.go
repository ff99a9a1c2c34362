package cli

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"

	"github.com/isched/isched/internal/plan"
)

// A Python environment's framework footprint (`isched site probe
// --footprint`) is the user's, kept under their data directory, one file
// per interpreter path: estimate, plan and submit count the footprint of
// the environment the training will run in (plan.Site.UseEnvironment).

// footprintPath is where the footprint record of the interpreter at
// python (an absolute path, as the user runs it) is kept:
// $XDG_DATA_HOME/isched/<cluster>/footprints/<sha256 of the path, 16 hex>.json,
// else under $HOME/.local/share; "" when neither is set.
func (a *App) footprintPath(python string) string {
	dir := a.dataDir()
	if dir == "" {
		return ""
	}
	sum := sha256.Sum256([]byte(python))
	return filepath.Join(dir, "footprints", hex.EncodeToString(sum[:8])+".json")
}

// pythonPath is the interpreter the training runs in: --python, else
// python3 in PATH, resolved as submit resolves the command's program,
// absolute; "" when no python3 is found and none was named.
func (a *App) pythonPath(python string) (string, error) {
	name := python
	if name == "" {
		name = "python3"
	}
	cwd, err := a.Getwd()
	if err != nil {
		return "", err
	}
	path, err := lookProgram(name, a.Getenv("PATH"), cwd, a.Stat)
	if err != nil {
		if python == "" {
			return "", nil
		}
		return "", usageErr("--python: %v", err)
	}
	return filepath.Abs(path)
}

// pythonRE is a program name that is a Python interpreter: python,
// python3, python3.11.
var pythonRE = regexp.MustCompile(`^python[0-9.]*$`)

// isPython reports whether a command's program is a Python interpreter.
func isPython(program string) bool { return pythonRE.MatchString(filepath.Base(program)) }

// environment finds the footprint record of the Python the training will
// run in: --python, else python3 in PATH (an activated venv's comes
// first), resolved as submit resolves the command's program (never
// through symbolic links: a venv's python is a link to the system's),
// measured again first where the training script imports what it does not
// cover (scriptEnvironment). note says what was used, "" when the user
// named no interpreter and none has a record (nothing to say); a record
// that does not decode is an error naming its file.
func (a *App) environment(ctx context.Context, in *inputs) (fp *plan.Footprint, note string, err error) {
	path, err := a.pythonPath(in.python)
	if err != nil || path == "" {
		return nil, "", err
	}
	if fp, note, err = a.footprintOf(in.python, path); err != nil {
		return nil, "", err
	}
	fp, note = a.scriptEnvironment(ctx, in, path, fp, note)
	return fp, note, nil
}

// footprintOf reads the footprint record of the interpreter at path (the
// absolute resolution of python, as the user named it: "" for the
// default); nil without one.
func (a *App) footprintOf(python, path string) (fp *plan.Footprint, note string, err error) {
	file := a.footprintPath(path)
	if file == "" {
		return nil, "", nil
	}
	b, err := os.ReadFile(file)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		if python == "" {
			return nil, "", nil
		}
		return nil, fmt.Sprintf("%s: no footprint record (isched site probe --footprint --python %s measures it)", clean(path), clean(path)), nil
	case err != nil:
		return nil, "", fmt.Errorf("footprint record: %w", err)
	}
	if fp, err = plan.DecodeFootprint(b); err != nil {
		return nil, "", fmt.Errorf("footprint record %s: %w", file, err)
	}
	if fp.Environment != path {
		return nil, "", fmt.Errorf("footprint record %s: environment %q, but the file is %s's", file, fp.Environment, path)
	}
	return fp, clean(path) + ": " + fp.Describe(), nil
}
