// Command fakeslurm stands in for squeue, sinfo and scontrol in the ingest
// benchmark (scripts/bench/ingest -agent real): one binary, linked under each
// name into a directory the real isched-agent uses (-slurm-bin-dir). It
// serves what the benchmark wrote beside it
// (scripts/bench/internal/bench.FakeSlurm):
//
//	squeue ... --json           squeue.json
//	squeue ... --start ...      start.txt
//	sinfo ... --json            sinfo.json
//	scontrol ... show partition partitions.txt
//
// and appends every invocation, served or not, as one line to calls.log, so
// that the benchmark counts Slurm commands. Anything else (scancel, sbatch,
// other scontrol verbs) fails with exit 1: the benchmark's jobs do not opt in
// to actions, so the agent has no reason to run them.
package main

import (
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
)

func main() { os.Exit(run(os.Args, os.Stdout, os.Stderr)) }

func run(argv []string, stdout, stderr io.Writer) int {
	exe, err := os.Executable()
	if err != nil {
		fmt.Fprintf(stderr, "fakeslurm: %v\n", err)
		return 1
	}
	dir := filepath.Dir(exe)
	name := filepath.Base(argv[0])
	args := argv[1:]
	if err := record(filepath.Join(dir, "calls.log"), name, args); err != nil {
		fmt.Fprintf(stderr, "fakeslurm: %v\n", err)
		return 1
	}
	has := func(a string) bool { return slices.Contains(args, a) }
	var file string
	switch {
	case name == "squeue" && has("--start"):
		file = "start.txt"
	case name == "squeue" && has("--json"):
		file = "squeue.json"
	case name == "sinfo" && has("--json"):
		file = "sinfo.json"
	case name == "scontrol" && has("show") && has("partition"):
		file = "partitions.txt"
	default:
		fmt.Fprintf(stderr, "fakeslurm: %s %s: not simulated\n", name, strings.Join(args, " "))
		return 1
	}
	f, err := os.Open(filepath.Join(dir, file))
	if err != nil {
		fmt.Fprintf(stderr, "fakeslurm: %v\n", err)
		return 1
	}
	defer f.Close()
	if _, err := io.Copy(stdout, f); err != nil {
		fmt.Fprintf(stderr, "fakeslurm: %v\n", err)
		return 1
	}
	return 0
}

// record appends one line; O_APPEND writes this small are atomic, so
// concurrent invocations do not interleave.
func record(path, name string, args []string) error {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o644)
	if err != nil {
		return err
	}
	line := name + " " + strings.Join(args, " ") + "\n"
	_, err = f.WriteString(line)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	return err
}
