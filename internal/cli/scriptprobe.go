package cli

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/isched/isched/internal/plan"
)

// The script's own fixed cost (issue 46, item 1). The static host memory
// counts the framework's footprint in the user's Python; a script that
// imports more than torch (torchvision's models, scikit-learn, pandas,
// transformers) holds more before its first tensor. Before an estimate of
// a Python training script, isched reads the modules the script imports
// from its source (site_probe.py --list-imports: Python's ast, the script
// does not run) and, unless the user's footprint record of that Python
// already covers them, measures them: the footprint probe in fresh
// children of that Python importing them after torch and training the
// probe's reference networks for three steps (no step of the user's
// training, nothing of the script's own modules imported), within
// scriptProbeTimeout and with its data segment capped at
// scriptProbeDataCap. The record is kept as `isched site probe
// --footprint --import ...` keeps it, for every later estimate; where the
// probe cannot run, the estimate says so and rests on the assumed figure.

const (
	// scriptProbeTimeout bounds one probe on the login host (two repeats
	// of three children: about 15 s on the lab's 2 vCPUs).
	scriptProbeTimeout = 3 * time.Minute
	// scriptProbeRepeats are the children of each kind the probe runs.
	scriptProbeRepeats = 2
	// scriptProbeDataCap caps each child's data segment (RLIMIT_DATA):
	// an import that would hold more is stopped, not the login host.
	scriptProbeDataCap = 8 << 30
	// scriptProbeNodeType names where the record was measured.
	scriptProbeNodeType = "login"
)

// scriptImports is site_probe.py --list-imports' answer.
type scriptImports struct {
	Imports []string `json:"imports"` // to measure
	Local   []string `json:"local"`   // the script's own modules: never imported
	Missing []string `json:"missing"` // not found in this Python
}

// pythonScript is the training script of a Python command line: the first
// argument after the interpreter's own options; "" for -c and -m (no file
// to read) and for a program that is not a Python.
func pythonScript(argv []string) string {
	if len(argv) < 2 || !isPython(argv[0]) {
		return ""
	}
	for i := 1; i < len(argv); i++ {
		switch a := argv[i]; {
		case a == "-c" || a == "-m" || a == "-":
			return ""
		case a == "-W" || a == "-X" || a == "--check-hash-based-pycs":
			i++ // the option's value
		case strings.HasPrefix(a, "-"):
		default:
			return a
		}
	}
	return ""
}

// scriptEnvironment is the record fp (with its note) of the interpreter
// at python, measured again first when the training script imports what
// it does not cover; where the measuring fails, fp and stderr says why.
func (a *App) scriptEnvironment(ctx context.Context, in *inputs, python string, fp *plan.Footprint, note string) (*plan.Footprint, string) {
	if in.script == "" || in.noProbe {
		return fp, note
	}
	script := in.script
	if cwd, err := a.Getwd(); err == nil {
		script = abs(cwd, script)
	}
	got, why := a.probeScriptImports(ctx, python, script, fp)
	if why != "" {
		fmt.Fprintf(a.stderr, "isched: %s\n", why)
		return fp, note
	}
	return got, clean(python) + ": " + got.Describe()
}

// probeScriptImports measures what the script's imports hold in python
// (an absolute path) when fp, the user's footprint record of it (nil for
// none), does not cover them, and returns the record to use with a note
// on it; on any failure fp itself, and a note saying why.
func (a *App) probeScriptImports(ctx context.Context, python, script string, fp *plan.Footprint) (*plan.Footprint, string) {
	probe, err := a.findProbeScript("")
	if err != nil {
		return fp, "the script's imports not measured: " + strings.TrimPrefix(err.Error(), errUsage.Error()+": ")
	}
	b, err := a.Prober.RunProbe(ctx, []string{python, probe, "--list-imports", script}, a.stderr, time.Minute)
	var si scriptImports
	if err == nil {
		err = json.Unmarshal(b, &si)
	}
	if err != nil {
		return fp, fmt.Sprintf("the imports of %s not read: %v", clean(script), err)
	}
	want := slices.DeleteFunc(slices.Clone(si.Imports), func(m string) bool { return !plan.ValidModule(m) })
	if fp != nil && covers(fp.Imports, want) {
		return fp, ""
	}
	if fp != nil {
		want = union(fp.Imports, want) // the record goes on covering what it did
	}
	return a.measureImports(ctx, python, probe, script, want, fp)
}

// measureImports runs the footprint probe of python importing want and
// keeps its record.
func (a *App) measureImports(ctx context.Context, python, probe, script string, want []string, fp *plan.Footprint) (*plan.Footprint, string) {
	out := a.footprintPath(python)
	if out == "" {
		return fp, "the script's imports not measured: nowhere to keep the record (set HOME or XDG_DATA_HOME)"
	}
	what := "torch alone"
	if len(want) > 0 {
		what = strings.Join(want, ", ")
	}
	fmt.Fprintf(a.stderr, "isched: measuring what %s imports (%s) in %s, once (15 s to a minute; --no-probe skips); kept in %s\n", clean(script), what, clean(python), out)
	argv := []string{python, probe, "--footprint", "--environment", python, "--node-type", scriptProbeNodeType,
		"--repeats", strconv.Itoa(scriptProbeRepeats), "--data-limit", strconv.FormatInt(scriptProbeDataCap, 10)}
	for _, m := range want {
		argv = append(argv, "--import", m)
	}
	start := a.Now()
	b, err := a.Prober.RunProbe(ctx, argv, a.stderr, scriptProbeTimeout)
	var got *plan.Footprint
	if err == nil {
		got, err = plan.DecodeFootprint(b)
	}
	if err == nil && got.Environment != python {
		err = fmt.Errorf("the record is of %q", got.Environment)
	}
	if err == nil {
		err = writeFileAtomic(out, b, 0o644)
	}
	if err != nil {
		return fp, fmt.Sprintf("the imports of %s not measured: %v", clean(script), err)
	}
	fmt.Fprintf(a.stderr, "isched: %s: %s (%s)\n", clean(python), got.Describe(), a.Now().Sub(start).Round(time.Second))
	return got, ""
}

// covers: every module of want is in have.
func covers(have, want []string) bool {
	for _, m := range want {
		if !slices.Contains(have, m) {
			return false
		}
	}
	return true
}

// union is a and b's modules, sorted, each once.
func union(a, b []string) []string {
	out := slices.Concat(a, b)
	slices.Sort(out)
	return slices.Compact(out)
}
