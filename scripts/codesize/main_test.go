package main

import (
	"bytes"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// src's functions each say their gocyclo complexity and line count.
const src = `package p

func straight() {} // 1, 1 line

func branches(a, b bool, xs []int, ch chan int) int { // 1
	if a && b || !a { // +1 if, +1 &&, +1 ||
		return 1
	}
	for i := 0; i < 3; i++ { // +1
	}
	for range xs { // +1
	}
	switch { // the switch itself counts nothing
	case a: // +1
	case b, !b: // +1: one clause, however many expressions
	default: // +0
	}
	select {
	case <-ch: // +1
	default: // +0
	}
	f := func() bool { return a && b } // +1: literals count in their function
	_ = f
	return 0
}

type T[P any] struct{}

func (t *T[P]) method(x int) int {
	switch x {
	case 1:
		return 1
	}
	return 0
}

func (T[P]) value() {
	if true {
	}
}
`

func TestMeasure(t *testing.T) {
	t.Parallel()
	fset := token.NewFileSet()
	f, err := parser.ParseFile(fset, "p.go", src, 0)
	if err != nil {
		t.Fatal(err)
	}
	want := []funcSize{
		{Name: "straight", Pos: "p.go:3", Lines: 1, Cyclo: 1},
		{Name: "branches", Pos: "p.go:5", Lines: 21, Cyclo: 10},
		{Name: "(*T).method", Pos: "p.go:29", Lines: 7, Cyclo: 2},
		{Name: "(T).value", Pos: "p.go:37", Lines: 4, Cyclo: 2},
	}
	got := measure(fset, f)
	if len(got) != len(want) {
		t.Fatalf("measure = %+v, want %+v", got, want)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("function %d = %+v, want %+v", i, got[i], want[i])
		}
	}
}

func TestRun(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	for name, text := range map[string]string{
		"p.go":      src,
		"p_test.go": "package p\n\nfunc huge() {\n\tif true && true {\n\t}\n}\n", // test files are left out
	} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	tests := []struct {
		args []string
		code int
		want []string // names listed, in order
	}{
		{args: []string{dir}, code: 0},
		{args: []string{"-fail", dir}, code: 0},
		{args: []string{"-cyclo", "1", "-lines", "6", dir}, code: 0, want: []string{"branches", "(*T).method", "(T).value"}},
		{args: []string{"-fail", "-cyclo", "5", dir}, code: 1, want: []string{"branches"}},
		{args: []string{"-fail", "-lines", "20", dir}, code: 1, want: []string{"branches"}},
		{args: []string{"-fail", "-cyclo", "5", "-allow", allow(t, dir+" branches"), dir}, code: 0},
		{args: []string{"-fail", "-cyclo", "5", "-allow", allow(t, "# known\n"+dir+" branches\n"+dir+" straight"), dir}, code: 1, want: []string{"straight"}},
		{args: []string{"-fail", "-allow", filepath.Join(dir, "none.txt"), dir}, code: 2},
		{args: []string{}, code: 2},
		{args: []string{filepath.Join(dir, "missing")}, code: 2},
	}
	for _, tt := range tests {
		var stdout, stderr bytes.Buffer
		if code := run(tt.args, &stdout, &stderr); code != tt.code {
			t.Errorf("run(%q) = %d, want %d (stderr %q)", tt.args, code, tt.code, stderr.String())
		}
		var names []string
		for _, line := range strings.Split(strings.TrimSpace(stdout.String()), "\n") {
			if f := strings.Fields(line); len(f) > 0 {
				names = append(names, f[len(f)-1])
			}
		}
		if strings.Join(names, " ") != strings.Join(tt.want, " ") {
			t.Errorf("run(%q) listed %q, want %q", tt.args, names, tt.want)
		}
	}
}

// allow writes an -allow file and returns its path.
func allow(t *testing.T, text string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "allow.txt")
	if err := os.WriteFile(p, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}
