// Command codesize lists the functions of Go packages that are too long or
// too complex to read at once: every function or method of the given
// package directories (test files left out) over -lines lines, counted
// from `func` to the closing brace, or over -cyclo cyclomatic complexity,
// worst first. `make size` runs it:
//
//	go run ./scripts/codesize internal/cli internal/agent internal/coordinator
//
// Complexity is gocyclo's (github.com/fzipp/gocyclo): 1, plus 1 for each
// if, for, range, non-default case clause, non-default select case, && and
// ||; function literals count in the function that holds them. With -fail
// it exits 1 when it lists any function. -allow names functions known to
// be over (make lint's baseline, scripts/codesize/allow.txt): they are not
// listed, and one that is no longer over is, so the baseline only shrinks.
package main

import (
	"flag"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strings"
)

func main() { os.Exit(run(os.Args[1:], os.Stdout, os.Stderr)) }

func run(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("codesize", flag.ContinueOnError)
	fs.SetOutput(stderr)
	maxLines := fs.Int("lines", 60, "list functions over this many lines")
	maxCyclo := fs.Int("cyclo", 20, "list functions over this cyclomatic complexity")
	fail := fs.Bool("fail", false, "exit 1 when any function is listed")
	allowFile := fs.String("allow", "", "file of functions known to be over (`dir name` a line, # comments): not listed; one no longer over is")
	fs.Usage = func() {
		fmt.Fprintln(stderr, "usage: codesize [-lines N] [-cyclo C] [-fail] [-allow FILE] package-dir...")
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if fs.NArg() == 0 {
		fs.Usage()
		return 2
	}
	allowed, err := readAllow(*allowFile)
	if err != nil {
		fmt.Fprintln(stderr, "codesize:", err)
		return 2
	}
	var over []funcSize
	for _, dir := range fs.Args() {
		sizes, err := measureDir(dir)
		if err != nil {
			fmt.Fprintln(stderr, "codesize:", err)
			return 2
		}
		for _, s := range sizes {
			key := filepath.ToSlash(filepath.Clean(dir)) + " " + s.Name
			if _, ok := allowed[key]; ok {
				allowed[key] = s.Lines > *maxLines || s.Cyclo > *maxCyclo
				continue
			}
			if s.Lines > *maxLines || s.Cyclo > *maxCyclo {
				over = append(over, s)
			}
		}
	}
	worstFirst(over, *maxLines, *maxCyclo)
	for _, s := range over {
		fmt.Fprintf(stdout, "%4d lines  %3d cyclo  %s  %s\n", s.Lines, s.Cyclo, s.Pos, s.Name)
	}
	var stale []string
	for key, stillOver := range allowed {
		if !stillOver {
			stale = append(stale, key)
		}
	}
	sort.Strings(stale)
	for _, key := range stale {
		fmt.Fprintf(stdout, "allowed in %s but not over (or gone): %s\n", *allowFile, key)
	}
	if *fail && len(over)+len(stale) > 0 {
		return 1
	}
	return 0
}

// readAllow reads the -allow file: "dir name" a line ("internal/plan
// (*Model).Validate"), blank lines and # comments skipped. Each is false
// until a function it names is found over.
func readAllow(path string) (map[string]bool, error) {
	out := map[string]bool{}
	if path == "" {
		return out, nil
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	for _, line := range strings.Split(string(b), "\n") {
		if line = strings.TrimSpace(line); line != "" && !strings.HasPrefix(line, "#") {
			out[line] = false
		}
	}
	return out, nil
}

// funcSize is one function's measures.
type funcSize struct {
	Name  string // "(*Agent).execute", "run"
	Pos   string // file:line of `func`
	Lines int
	Cyclo int
}

// worstFirst sorts by how far a function is over the worse of its two
// limits, then by position.
func worstFirst(s []funcSize, maxLines, maxCyclo int) {
	ratio := func(f funcSize) float64 {
		return max(float64(f.Lines)/float64(max(maxLines, 1)), float64(f.Cyclo)/float64(max(maxCyclo, 1)))
	}
	sort.SliceStable(s, func(i, j int) bool {
		if ri, rj := ratio(s[i]), ratio(s[j]); ri != rj {
			return ri > rj
		}
		return s[i].Pos < s[j].Pos
	})
}

// measureDir measures every function in the non-test .go files of dir
// (not its subdirectories), whatever their build constraints.
func measureDir(dir string) ([]funcSize, error) {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, err
	}
	fset := token.NewFileSet()
	var out []funcSize
	for _, e := range entries {
		name := e.Name()
		if e.IsDir() || !strings.HasSuffix(name, ".go") || strings.HasSuffix(name, "_test.go") {
			continue
		}
		path := filepath.Join(dir, name)
		f, err := parser.ParseFile(fset, path, nil, parser.SkipObjectResolution)
		if err != nil {
			return nil, err
		}
		out = append(out, measure(fset, f)...)
	}
	return out, nil
}

// measure returns the size of every function declared in f.
func measure(fset *token.FileSet, f *ast.File) []funcSize {
	var out []funcSize
	for _, d := range f.Decls {
		fn, ok := d.(*ast.FuncDecl)
		if !ok || fn.Body == nil {
			continue
		}
		start, end := fset.Position(fn.Pos()), fset.Position(fn.End())
		out = append(out, funcSize{
			Name:  funcName(fn),
			Pos:   fmt.Sprintf("%s:%d", start.Filename, start.Line),
			Lines: end.Line - start.Line + 1,
			Cyclo: cyclo(fn),
		})
	}
	return out
}

// cyclo is gocyclo's cyclomatic complexity of fn.
func cyclo(fn *ast.FuncDecl) int {
	c := 1
	ast.Inspect(fn, func(n ast.Node) bool {
		switch n := n.(type) {
		case *ast.IfStmt, *ast.ForStmt, *ast.RangeStmt:
			c++
		case *ast.CaseClause:
			if n.List != nil { // not default
				c++
			}
		case *ast.CommClause:
			if n.Comm != nil { // not default
				c++
			}
		case *ast.BinaryExpr:
			if n.Op == token.LAND || n.Op == token.LOR {
				c++
			}
		}
		return true
	})
	return c
}

// funcName names fn as gocyclo does: "f", "(T).m" or "(*T).m".
func funcName(fn *ast.FuncDecl) string {
	if fn.Recv == nil || len(fn.Recv.List) == 0 {
		return fn.Name.Name
	}
	return "(" + recvType(fn.Recv.List[0].Type) + ")." + fn.Name.Name
}

func recvType(t ast.Expr) string {
	switch t := t.(type) {
	case *ast.StarExpr:
		return "*" + recvType(t.X)
	case *ast.IndexExpr: // T[P]
		return recvType(t.X)
	case *ast.IndexListExpr: // T[P, Q]
		return recvType(t.X)
	case *ast.Ident:
		return t.Name
	}
	return "?"
}
