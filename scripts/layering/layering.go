// Package layering holds isched's import rules (CONTRIBUTING.md,
// "Layering") and checks a module's real import graph against them; its
// test runs the check on this module, so `make test` fails on an import
// that breaks a rule, naming the file and line.
//
// The graph is read with go/build, every build tag the project uses set,
// so an integration-tagged file's imports count too.
package layering

import (
	"errors"
	"fmt"
	"go/build"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
)

// Module is isched's module path.
const Module = "github.com/isched/isched"

// Kind is what a package is, for the rules.
type Kind int

const (
	// Library: a capability under internal/ named by what it provides.
	// It never imports an app, in its code or its tests.
	Library Kind = iota
	// Core: a library of the decision core. Its code imports only the
	// standard library and other Core packages, so it tests without
	// Redis, Slurm or cgo (its tests may import any library).
	Core
	// App: one binary's logic. Its code imports libraries only, never
	// another app; its tests may drive another app in-process.
	App
	// Command: a binary's thin main (agent/, isched/, ...) or a tool
	// under scripts/: it may import apps and libraries.
	Command
	// TestOnly: test support (internal/testutil) and the packages that
	// hold only tests (internal/e2e, internal/sitelab). Only tests import
	// them; they may import anything.
	TestOnly
)

func (k Kind) String() string {
	return [...]string{"library", "core", "app", "command", "test-only"}[k]
}

// Apps are the app packages, one per binary.
var Apps = []string{"internal/agent", "internal/cli", "internal/coordinator", "internal/relay", "internal/wrapper"}

// CorePackages are the decision core and what it is built on.
var CorePackages = []string{"internal/estimate", "internal/lifecycle", "internal/plan", "internal/policy", "internal/report", "internal/sim", "internal/strictjson"}

// TestOnlyPackages are imported by tests only.
var TestOnlyPackages = []string{"internal/e2e", "internal/sitelab", "internal/testutil"}

// Exceptions are the imports known to break a rule, "from -> to" with
// the reason; each is to be removed, never added to lightly. Check
// reports one that no longer occurs, so the list only shrinks. It is
// empty: the last two (the CLI and the wrapper importing internal/relay
// for its clients) went when the clients and the protocol moved to
// internal/relayproto.
var Exceptions = map[string]string{}

// KindOf classifies a package by its path relative to the module root.
func KindOf(rel string) Kind {
	switch {
	case slices.Contains(Apps, rel):
		return App
	case slices.Contains(CorePackages, rel):
		return Core
	case slices.Contains(TestOnlyPackages, rel):
		return TestOnly
	case strings.HasPrefix(rel, "internal/"):
		return Library
	}
	return Command
}

// Import is one import of one package: from and to relative to the
// module root ("" to for the standard library and third-party modules,
// whose path is in Path).
type Import struct {
	From, To string
	Path     string // the import path as written
	Pos      string // file:line of the import
	Test     bool   // from a _test.go file
}

// Violation is an import that breaks a rule.
type Violation struct {
	Import
	Rule string
}

func (v Violation) String() string {
	return fmt.Sprintf("%s: %s (%s) imports %s: %s", v.Pos, v.From, KindOf(v.From), v.Path, v.Rule)
}

// Check returns the imports that break a rule and are not Exceptions,
// then one violation for each exception that no longer occurs.
func Check(imports []Import) []Violation { return CheckWith(imports, Exceptions) }

// CheckWith is Check with the given exceptions.
func CheckWith(imports []Import, exceptions map[string]string) []Violation {
	var out []Violation
	seen := map[string]bool{}
	for _, im := range imports {
		rule := broken(im)
		if rule == "" {
			continue
		}
		key := im.From + " -> " + im.To
		if _, ok := exceptions[key]; ok {
			seen[key] = true
			continue
		}
		out = append(out, Violation{Import: im, Rule: rule})
	}
	var stale []string
	for key := range exceptions {
		if !seen[key] {
			stale = append(stale, key)
		}
	}
	sort.Strings(stale)
	for _, key := range stale {
		out = append(out, Violation{Import: Import{Pos: "scripts/layering/layering.go", From: "scripts/layering", Path: key},
			Rule: "listed in Exceptions but no longer imported: remove the entry"})
	}
	return out
}

// broken is the rule im breaks, or "".
func broken(im Import) string {
	from := KindOf(im.From)
	if im.To == "" { // standard library or third party
		if from == Core && !im.Test && strings.Contains(strings.SplitN(im.Path, "/", 2)[0], ".") {
			return "the decision core imports only the standard library"
		}
		return ""
	}
	to := KindOf(im.To)
	switch {
	case to == TestOnly && !im.Test && from != TestOnly:
		return "only tests import test-only packages"
	case to == App && (from == Library || from == Core):
		return "a library never imports an app"
	case to == App && from == App && !im.Test && im.From != im.To:
		return "apps never import each other (move what both need into a library)"
	case from == Core && !im.Test && to != Core:
		return "the decision core imports only the standard library and the core"
	}
	return ""
}

// Tags are the build tags under which the graph is read: every tag the
// project's files use, so that no file is left out.
var Tags = []string{"integration", "libmunge", "sitelab", "labreplay", "gpu"}

// Graph reads every import of every package of the module rooted at
// root (test files included; testdata, hidden and bin directories
// skipped).
func Graph(root string) ([]Import, error) {
	ctx := build.Default
	ctx.BuildTags = append(slices.Clone(ctx.BuildTags), Tags...)
	var out []Import
	err := filepath.WalkDir(root, func(dir string, d fs.DirEntry, err error) error {
		if err != nil || !d.IsDir() {
			return err
		}
		name := d.Name()
		if dir != root && (name == "testdata" || name == "bin" || name == "vendor" || strings.HasPrefix(name, ".") || strings.HasPrefix(name, "_")) {
			return filepath.SkipDir
		}
		rel, err := filepath.Rel(root, dir)
		if err != nil {
			return err
		}
		p, err := ctx.ImportDir(dir, 0)
		if errors.As(err, new(*build.NoGoError)) {
			return nil
		}
		if err != nil {
			return fmt.Errorf("%s: %w", rel, err)
		}
		out = append(out, imports(root, filepath.ToSlash(rel), p)...)
		return nil
	})
	return out, err
}

// imports lists p's imports, code and tests, with their positions.
func imports(root, rel string, p *build.Package) []Import {
	var out []Import
	for _, set := range []struct {
		pos  map[string][]token.Position
		test bool
	}{{p.ImportPos, false}, {p.TestImportPos, true}, {p.XTestImportPos, true}} {
		for path, ps := range set.pos {
			to := ""
			if path == Module || strings.HasPrefix(path, Module+"/") {
				to = strings.TrimPrefix(strings.TrimPrefix(path, Module), "/")
			}
			for _, pos := range ps {
				f, err := filepath.Rel(root, pos.Filename)
				if err != nil {
					f = pos.Filename
				}
				out = append(out, Import{From: rel, To: to, Path: path, Pos: fmt.Sprintf("%s:%d", filepath.ToSlash(f), pos.Line), Test: set.test})
			}
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Pos < out[j].Pos })
	return out
}

// ModuleRoot is the directory holding go.mod, from dir upwards.
func ModuleRoot(dir string) (string, error) {
	for d := dir; ; d = filepath.Dir(d) {
		if _, err := os.Stat(filepath.Join(d, "go.mod")); err == nil {
			return d, nil
		}
		if filepath.Dir(d) == d {
			return "", fmt.Errorf("no go.mod above %s", dir)
		}
	}
}
