package main

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"sort"
	"strings"
	"time"
)

// key names one test of one package; Test is "" for the package itself.
type key struct{ Package, Test string }

// result is what became of one test or package.
type result struct {
	key
	Action  string // pass, fail, skip
	Elapsed time.Duration
	Reason  string // a skip's last output line
}

// run gathers the stream: output is held per test until its end, and
// dropped for a test that passed.
type run struct {
	out      io.Writer
	pending  map[key][]string
	results  []result
	failed   bool
	packages int
}

func newRun(out io.Writer) *run {
	return &run{out: out, pending: map[key][]string{}}
}

func (r *run) event(ev event) {
	k := key{ev.Package, ev.Test}
	switch ev.Action {
	case "build-output":
		fmt.Fprint(r.out, ev.Output)
	case "build-fail": // the package's own "FAIL ... [build failed]" follows
		r.failed = true
	case "output":
		r.pending[k] = append(r.pending[k], ev.Output)
	case "pass", "fail", "skip":
		r.end(k, ev)
	}
}

// end closes a test or a package: a failure's output is printed whole, a
// package's result line always.
func (r *run) end(k key, ev event) {
	lines := r.pending[k]
	delete(r.pending, k)
	res := result{key: k, Action: ev.Action, Elapsed: time.Duration(ev.Elapsed * float64(time.Second))}
	if ev.Action == "skip" {
		res.Reason = skipReason(lines)
	}
	r.results = append(r.results, res)
	if ev.Action == "fail" {
		r.failed = true
	}
	if k.Test != "" {
		if ev.Action == "fail" {
			for _, l := range lines {
				fmt.Fprint(r.out, l)
			}
		}
		return
	}
	r.packages++
	// the package's own output: its result line ("ok ...", "FAIL ...",
	// "? ... [no test files]"), and, when it failed, what it printed
	// outside any test (a panic, a timeout, TestMain)
	for _, l := range lines {
		if ev.Action == "fail" || isResultLine(l) {
			fmt.Fprint(r.out, l)
		}
	}
	// a test still open when its package ended: a panic or timeout in it
	for pk, pl := range r.pending {
		if pk.Package == k.Package {
			if ev.Action == "fail" {
				fmt.Fprintf(r.out, "--- unfinished: %s\n", pk.Test)
				for _, l := range pl {
					fmt.Fprint(r.out, l)
				}
			}
			delete(r.pending, pk)
		}
	}
}

func isResultLine(l string) bool {
	for _, p := range []string{"ok  \t", "ok \t", "FAIL\t", "?   \t", "--- FAIL", "FAIL\n", "PASS\n"} {
		if strings.HasPrefix(l, p) {
			return l != "PASS\n"
		}
	}
	return false
}

// skipReason is what a skipped test said: its output after the "--- SKIP"
// line, or before it, without testing's "file.go:12: " prefix.
func skipReason(lines []string) string {
	var said []string
	for _, l := range lines {
		t := strings.TrimSpace(l)
		if t == "" || strings.HasPrefix(t, "=== ") || strings.HasPrefix(t, "--- SKIP") {
			continue
		}
		if i := strings.Index(t, ": "); i > 0 && strings.Contains(t[:i], ".go:") {
			t = t[i+2:]
		}
		said = append(said, t)
	}
	if len(said) == 0 {
		return "(no reason given)"
	}
	return said[len(said)-1]
}

// skipList is the reviewed list of skips CI accepts.
type skipList map[key]string

// readSkipList reads lines of "<package> <test> <reason>"; a package is
// its import path or the path under the module (internal/gpu). A line
// without a reason is an error: the list is where the reasons live.
func readSkipList(path string) (skipList, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("skip list: %w", err)
	}
	defer f.Close()
	l := skipList{}
	sc := bufio.NewScanner(f)
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		fields := strings.Fields(line)
		if len(fields) < 3 {
			return nil, fmt.Errorf("%s:%d: want <package> <test> <reason>, got %q", path, n, line)
		}
		k := key{fields[0], fields[1]}
		if _, dup := l[k]; dup {
			return nil, fmt.Errorf("%s:%d: %s %s listed twice", path, n, k.Package, k.Test)
		}
		l[k] = strings.Join(fields[2:], " ")
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return l, nil
}

// allows reports whether the list names the test, by whole import path or
// by its path under the module.
func (l skipList) allows(k key) bool {
	for lk := range l {
		if lk.Test == k.Test && (lk.Package == k.Package || strings.HasSuffix(k.Package, "/"+lk.Package)) {
			return true
		}
	}
	return false
}

// summarize prints the skips and the timing table; it reports whether the
// run passes.
func (r *run) summarize(w io.Writer, allowed skipList, strict bool, slowest int) bool {
	ok := !r.failed
	var skips, tests, pkgs []result
	for _, res := range r.results {
		switch {
		case res.Test == "":
			pkgs = append(pkgs, res)
		case res.Action == "skip":
			skips = append(skips, res)
		default:
			tests = append(tests, res)
		}
	}
	fmt.Fprintf(w, "\n== %d packages, %d tests run, %d skipped\n", len(pkgs), len(tests), len(skips))
	for _, s := range skips {
		mark := "  "
		if allowed != nil && !allowed.allows(s.key) {
			mark = "!!"
			if strict {
				ok = false
			}
		}
		fmt.Fprintf(w, "%s SKIP %s %s: %s\n", mark, s.Package, s.Test, s.Reason)
	}
	if strict && !ok && !r.failed {
		fmt.Fprintln(w, "FAIL: the skips marked !! are not in the reviewed list (testreport -allow): run them, or list them with a reason")
	}
	printSlowest(w, "packages", pkgs, slowest)
	printSlowest(w, "tests", tests, slowest)
	return ok
}

func printSlowest(w io.Writer, what string, rs []result, n int) {
	sort.SliceStable(rs, func(i, j int) bool { return rs[i].Elapsed > rs[j].Elapsed })
	var total time.Duration
	for _, r := range rs {
		total += r.Elapsed
	}
	fmt.Fprintf(w, "\n== slowest %s (of %d, %s in all)\n", what, len(rs), total.Round(100*time.Millisecond))
	for i, r := range rs {
		if i == n || r.Elapsed < time.Second {
			break
		}
		name := r.Package
		if r.Test != "" {
			name += " " + r.Test
		}
		fmt.Fprintf(w, "%8.1fs %5.1f%%  %s\n", r.Elapsed.Seconds(), 100*r.Elapsed.Seconds()/total.Seconds(), name)
	}
}
