package plan

import (
	"fmt"
	"path/filepath"
	"regexp"
	"strings"
)

// Footprint is the framework's memory footprint in one Python
// environment (an interpreter, a venv, a conda env), as `isched site probe
// --footprint` measured it: a fresh Python of that environment importing
// torch and the modules the user's scripts import besides (--import),
// then training the probe's reference networks. A script that imports
// more than torch holds more besides its tensors: on the issue-30 grid the
// static memory of such a script was under the truth in 11 of 12 cases
// (median 13.8 %). The record is the user's (FootprintPath), keyed by the
// interpreter's path as the user runs it (a venv's bin/python is a
// symbolic link to the system's: resolving it would merge every venv
// into one).
type Footprint struct {
	V           int     `json:"v"`
	Environment string  `json:"environment"` // the interpreter's absolute path, unresolved
	NodeType    string  `json:"node_type"`   // where it was measured
	Host        string  `json:"host"`
	MeasuredAt  string  `json:"measured_at"`
	Framework   string  `json:"framework"`
	Python      string  `json:"python"`
	Threads     int     `json:"threads"`
	LoadAverage float64 `json:"load_average"`
	// Imports are the modules imported besides torch (and torchvision).
	Imports           []string            `json:"imports,omitempty"`
	ImportRSS         ByteStat            `json:"import_rss_bytes"`
	RuntimeRSS        ByteStat            `json:"runtime_rss_bytes"`
	RuntimeReferences map[string]ByteStat `json:"runtime_references,omitempty"`
}

// moduleRE is a dotted Python module name.
var moduleRE = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*$`)

// ValidModule reports whether s is a dotted Python module name (at most
// 128 characters), as --import takes.
func ValidModule(s string) bool { return len(s) <= 128 && moduleRE.MatchString(s) }

// DecodeFootprint reads a footprint record strictly (see DecodeModel).
func DecodeFootprint(b []byte) (*Footprint, error) {
	var f Footprint
	if err := decodeChecked(b, &f, "v", "environment", "node_type", "threads", "import_rss_bytes", "runtime_rss_bytes"); err != nil {
		return nil, err
	}
	return &f, nil
}

// Validate checks a footprint record: its header as a probe record's, its
// byte figures as Probe.Validate does.
func (f *Footprint) Validate() error {
	switch {
	case f.V != ProbeVersion:
		return fieldErr("v", "want %d, got %d", ProbeVersion, f.V)
	case !filepath.IsAbs(f.Environment) || !printable(f.Environment, 4096):
		return fieldErr("environment", "want the interpreter's absolute path, got %q", f.Environment)
	case len(f.Imports) > 64:
		return fieldErr("imports", "at most 64 modules, got %d", len(f.Imports))
	}
	for i, m := range f.Imports {
		if !ValidModule(m) {
			return fieldErr(fmt.Sprintf("imports[%d]", i), "want a dotted module name, got %q", m)
		}
	}
	p := Probe{V: f.V, NodeType: f.NodeType, Host: f.Host, MeasuredAt: f.MeasuredAt, Framework: f.Framework, Python: f.Python,
		Threads: f.Threads, LoadAverage: f.LoadAverage, ImportRSS: f.ImportRSS, RuntimeRSS: f.RuntimeRSS,
		RuntimeReferences: f.RuntimeReferences, Throughput: map[string]RateStat{WorkConv: {1, 1, 1, 1}}}
	return p.Validate()
}

// Bytes is the environment's framework footprint for the static model:
// the largest runtime footprint measured plus the repeat spread, as
// Site.FrameworkBytes takes a probe record's.
func (f *Footprint) Bytes() int64 {
	p := Probe{RuntimeRSS: f.RuntimeRSS, RuntimeReferences: f.RuntimeReferences}
	return f.RuntimeRSS.Max + p.RepeatSpread()
}

// Describe says in words what the record measured.
func (f *Footprint) Describe() string {
	imp := "torch"
	if len(f.Imports) > 0 {
		imp += " + " + strings.Join(f.Imports, ", ")
	}
	return fmt.Sprintf("framework %s (largest %s + repeat spread %s) importing %s, measured %s on %s (%s)",
		FormatBytes(f.Bytes()), FormatBytes(f.RuntimeRSS.Max), FormatBytes(f.Bytes()-f.RuntimeRSS.Max), imp, f.MeasuredAt, f.Host, f.NodeType)
}

// UseEnvironment makes the static model of every node type that keeps
// tensors in host memory count f's footprint where it is larger than the
// node type's own (its probe record's, else the assumed one): the
// environment the user will run imports what it imports on every node,
// and a footprint only ever raises the fixed part, so a record made on
// one node type cannot make another's estimate under-promise. nil clears
// it.
func (s *Site) UseEnvironment(f *Footprint) { s.env = f }

// Environment is the footprint record UseEnvironment gave, or nil.
func (s *Site) Environment() *Footprint { return s.env }
