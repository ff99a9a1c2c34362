package layering

import (
	"os"
	"strings"
	"testing"
)

// TestModule: this module's imports keep the rules (CONTRIBUTING.md,
// "Layering"). A failure names the file and line of each import that
// breaks one.
func TestModule(t *testing.T) {
	t.Parallel()
	wd, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	root, err := ModuleRoot(wd)
	if err != nil {
		t.Fatal(err)
	}
	g, err := Graph(root)
	if err != nil {
		t.Fatal(err)
	}
	// the graph is the real one: the CLI's import of the core is in it
	if !hasImport(g, "internal/cli", "internal/plan") || !hasImport(g, "coordinator", "internal/coordinator") {
		t.Fatalf("graph of %d imports misses known ones", len(g))
	}
	for _, v := range Check(g) {
		t.Error(v)
	}
}

func hasImport(g []Import, from, to string) bool {
	for _, im := range g {
		if im.From == from && im.To == to {
			return true
		}
	}
	return false
}

// TestRules: each rule refuses what it names and allows the rest.
func TestRules(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		im   Import
		rule string // "" allowed
	}{
		{Import{From: "internal/cli", To: "internal/coordinator"}, "apps never import each other"},
		{Import{From: "internal/coordinator", To: "internal/agent", Test: true}, ""},
		{Import{From: "internal/coordinator", To: "internal/coordinator", Test: true}, ""},
		{Import{From: "internal/sim", To: "internal/coordinator", Test: true}, "a library never imports an app"},
		{Import{From: "internal/clientconfig", To: "internal/wrapper"}, "a library never imports an app"},
		{Import{From: "internal/daemon", To: "internal/stream"}, ""},
		{Import{From: "internal/policy", To: "internal/estimate"}, ""},
		{Import{From: "internal/sim", To: "internal/stream"}, "the decision core imports only"},
		{Import{From: "internal/sim", To: "internal/coordconfig", Test: true}, ""},
		{Import{From: "internal/report", Path: "github.com/redis/go-redis/v9"}, "the decision core imports only the standard library"},
		{Import{From: "internal/report", Path: "encoding/json"}, ""},
		{Import{From: "internal/stream", Path: "github.com/redis/go-redis/v9"}, ""},
		{Import{From: "internal/agent", To: "internal/testutil"}, "only tests import test-only packages"},
		{Import{From: "internal/agent", To: "internal/testutil", Test: true}, ""},
		{Import{From: "internal/e2e", To: "internal/testutil"}, ""},
		{Import{From: "coordinator", To: "internal/agent"}, ""},
		{Import{From: "scripts/genman", To: "internal/cli", Test: true}, ""},
	} {
		got := broken(tc.im)
		if (tc.rule == "") != (got == "") || !strings.HasPrefix(got, tc.rule) {
			t.Errorf("%s -> %s%s (test %v): rule %q, want %q", tc.im.From, tc.im.To, tc.im.Path, tc.im.Test, got, tc.rule)
		}
	}
}

// TestExceptions: a listed import passes, and a listed one that is gone
// is reported so the list shrinks. The list is empty now; two imports of
// an app by another stand in for it.
func TestExceptions(t *testing.T) {
	t.Parallel()
	exceptions := map[string]string{
		"internal/cli -> internal/relay":     "a test's",
		"internal/wrapper -> internal/relay": "a test's",
	}
	var listed []Import
	for key := range exceptions {
		from, to, _ := strings.Cut(key, " -> ")
		listed = append(listed, Import{From: from, To: to})
	}
	if v := Check(listed); len(v) != len(listed) {
		t.Errorf("without the exceptions, want %d violations: %v", len(listed), v)
	}
	if v := CheckWith(listed, exceptions); len(v) != 0 {
		t.Errorf("every exception present: %v", v)
	}
	v := CheckWith(listed[1:], exceptions)
	if len(v) != 1 || !strings.Contains(v[0].String(), "no longer imported") {
		t.Errorf("one exception gone: %v", v)
	}
}
