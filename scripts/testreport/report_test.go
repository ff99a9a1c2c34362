package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestReportOnRealStream: testdata/stream.json is what `go test -json
// -count=1 ./...` (Go 1.26) printed for a module of three packages: a (a
// pass, a skip with a reason, a failure with two log lines, a subtest
// skipped), b (a pass and a panic), c (a build error).
func TestReportOnRealStream(t *testing.T) {
	f, err := os.Open("testdata/stream.json")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var out bytes.Buffer
	r := newRun(&out)
	if err := r.read(f); err != nil {
		t.Fatal(err)
	}
	list := filepath.Join(t.TempDir(), "skips")
	if err := os.WriteFile(list, []byte("# reviewed\ntr/a TestSkip no pty in the CI container\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	allowed, err := readSkipList(list)
	if err != nil {
		t.Fatal(err)
	}
	if r.summarize(&out, allowed, false, 5) {
		t.Error("a run with failures passed")
	}
	got := out.String()
	for _, want := range []string{
		"a_test.go:7: context line\n", "a_test.go:7: want 2, got 3\n", "--- FAIL: TestFail", // a failure whole
		"panic: assignment to entry in nil map", "FAIL\texample.com/tr/b\t", // a panic and its package
		"c/c_test.go:5:33: undefined: undefined", "FAIL\texample.com/tr/c [build failed]", // the build error
		"== 3 packages, 6 tests run, 2 skipped",
		"   SKIP example.com/tr/a TestSkip: no pty here\n",       // listed: no mark
		"!! SKIP example.com/tr/a TestSub/skipped: needs root\n", // not listed
	} {
		if !strings.Contains(got, want) {
			t.Errorf("output lacks %q:\n%s", want, got)
		}
	}
	for _, unwanted := range []string{"noise", "=== RUN   TestOK", "--- PASS", "=== RUN   TestSkip"} {
		if strings.Contains(got, unwanted) {
			t.Errorf("output has %q, from a test that passed or skipped:\n%s", unwanted, got)
		}
	}
}

// TestStrictSkips: under -strict an unlisted skip fails a run whose tests
// all passed; a listed one does not.
func TestStrictSkips(t *testing.T) {
	stream := `{"Action":"output","Package":"m/p","Test":"TestX","Output":"    x_test.go:3: no GPU\n"}
{"Action":"skip","Package":"m/p","Test":"TestX","Elapsed":0.01}
{"Action":"pass","Package":"m/p","Test":"TestY","Elapsed":2.5}
not json: copied through
{"Action":"output","Package":"m/p","Output":"ok  \tm/p\t2.6s\n"}
{"Action":"pass","Package":"m/p","Elapsed":2.6}
`
	for _, c := range []struct {
		name    string
		allowed skipList
		strict  bool
		pass    bool
	}{
		{"not strict", skipList{}, false, true},
		{"strict, unlisted", skipList{}, true, false},
		{"strict, listed by module path", skipList{{"p", "TestX"}: "no GPU in CI"}, true, true},
		{"strict, other test listed", skipList{{"p", "TestZ"}: "r"}, true, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			var out bytes.Buffer
			r := newRun(&out)
			if err := r.read(strings.NewReader(stream)); err != nil {
				t.Fatal(err)
			}
			if got := r.summarize(&out, c.allowed, c.strict, 5); got != c.pass {
				t.Errorf("pass = %v, want %v:\n%s", got, c.pass, out.String())
			}
			for _, want := range []string{"not json: copied through\n", "ok  \tm/p\t2.6s\n", "SKIP m/p TestX: no GPU\n", "2.5s 100.0%  m/p TestY"} {
				if !strings.Contains(out.String(), want) {
					t.Errorf("output lacks %q:\n%s", want, out.String())
				}
			}
		})
	}
}

func TestSkipListRefusesLinesWithoutReason(t *testing.T) {
	p := filepath.Join(t.TempDir(), "skips")
	for content, want := range map[string]string{
		"internal/gpu TestX\n":      "skips:1: want <package> <test> <reason>",
		"a T r\n\n# c\na T again\n": "skips:4: a T listed twice",
	} {
		if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
		if _, err := readSkipList(p); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%q: error %v, want %q", content, err, want)
		}
	}
}
