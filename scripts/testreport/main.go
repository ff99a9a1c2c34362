// Command testreport reads `go test -json` on stdin and prints what a
// person needs from a long test run: each package's result line (as
// plain `go test` prints it), the whole output of every test that failed,
// and at the end every skipped test with its reason and a timing table
// (packages and the slowest tests). `make test` pipes its Go test run
// through it:
//
//	go test -json ./... | go run ./scripts/testreport -allow .ci/allowed-skips
//
// With -allow, a skip that the file does not list (with a reason) fails
// the run when -strict is set (`make test` sets it under CI=true): a test
// that quietly stops running is a check CI no longer makes.
//
// The exit status is 1 if any test or package failed, a build failed, or
// a strict run had an unlisted skip; 0 otherwise. A line on stdin that is
// not a test2json event is copied to stdout.
package main

import (
	"bufio"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"
)

func main() {
	allow := flag.String("allow", "", "`file` of skips allowed: lines of <package> <test> <reason>; # comments")
	strict := flag.Bool("strict", false, "fail on a skip the -allow file does not list")
	slowest := flag.Int("slowest", 15, "how many of the slowest tests to list")
	flag.Parse()
	var allowed skipList
	if *allow != "" {
		var err error
		if allowed, err = readSkipList(*allow); err != nil {
			fmt.Fprintln(os.Stderr, "testreport:", err)
			os.Exit(2)
		}
	}
	r := newRun(os.Stdout)
	if err := r.read(os.Stdin); err != nil {
		fmt.Fprintln(os.Stderr, "testreport:", err)
		os.Exit(2)
	}
	if !r.summarize(os.Stdout, allowed, *strict, *slowest) {
		os.Exit(1)
	}
}

// event is one line of `go test -json` (cmd/test2json's TestEvent, and the
// build events go test adds since Go 1.24).
type event struct {
	Action     string
	Package    string
	Test       string
	Elapsed    float64
	Output     string
	ImportPath string
}

// read consumes the stream, printing as it goes.
func (r *run) read(in io.Reader) error {
	sc := bufio.NewScanner(in)
	sc.Buffer(make([]byte, 64*1024), 16*1024*1024)
	for sc.Scan() {
		line := sc.Bytes()
		var ev event
		if len(line) == 0 || line[0] != '{' || json.Unmarshal(line, &ev) != nil || ev.Action == "" {
			fmt.Fprintf(r.out, "%s\n", line)
			continue
		}
		r.event(ev)
	}
	if err := sc.Err(); err != nil {
		return fmt.Errorf("reading the test stream: %w", err)
	}
	return nil
}
