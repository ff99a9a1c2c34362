package wrapper

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/isched/isched/internal/report"
)

func TestAttemptsOf(t *testing.T) {
	ours := report.Plan{Lineage: "run-a", Ideal: "gpu", Total: 10}.FormatComment()
	theirs := report.Plan{Lineage: "run-b", Ideal: "gpu", Total: 10}.FormatComment()
	out := strings.Join([]string{
		"101 " + ours,   // the twin's predecessor
		"102 " + ours,   // self
		"103 " + theirs, // another run
		"104 (null)",    // no comment
		"105 isched-lineage=run-a but no plan",
		"12_3 " + ours, // an array task
		"garbage",
		"",
	}, "\n")
	if got := attemptsOf([]byte(out), "run-a", 102); !slices.Equal(got, []uint64{101}) {
		t.Errorf("attemptsOf = %v, want [101]", got)
	}
}

// fakeAttempts answers Running from a script of answers, the last one
// repeated, and records when the command started (calls so far).
type fakeAttempts struct {
	mu      sync.Mutex
	answers [][]uint64
	err     error
	calls   int
}

func (f *fakeAttempts) Running(_ context.Context, uid int, lineage string, self uint64) ([]uint64, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.calls++
	if f.err != nil {
		return nil, f.err
	}
	if lineage != "lin-1" || self != 77 {
		return nil, errors.New("asked about the wrong job")
	}
	return f.answers[min(f.calls, len(f.answers))-1], nil
}

// handoverRun runs a command that records that it ran, with attempts and
// --handover-wait wait; it returns the exit status, whether the command
// ran and the wrapper's stderr.
func handoverRun(t *testing.T, a Attempts, wait time.Duration) (code int, ran bool, stderr string) {
	t.Helper()
	dir := t.TempDir()
	mark := filepath.Join(dir, "ran")
	env := map[string]string{"SLURM_JOB_ID": "77", "ISCHED_CLUSTER": "t", "TMPDIR": dir}
	getenv := func(k string) string { return env[k] }
	opts, err := ParseArgs([]string{"--no-report", "--lineage", "lin-1", "--", "/usr/bin/touch", mark}, getenv, &bytes.Buffer{})
	if err != nil {
		t.Fatal(err)
	}
	opts.HandoverWait, opts.handoverPoll = wait, time.Millisecond
	var errb bytes.Buffer
	code = Run(context.Background(), opts, Deps{Getenv: getenv, Stdout: &bytes.Buffer{}, Stderr: &errb, Attempts: a,
		Logger: slog.New(slog.NewTextHandler(&errb, nil))})
	_, statErr := os.Stat(mark)
	return code, statErr == nil, errb.String()
}

// The command waits for the lineage's other running job, then starts.
func TestHandoverWaitsForTheOtherAttempt(t *testing.T) {
	f := &fakeAttempts{answers: [][]uint64{{55}, {55}, nil}}
	code, ran, stderr := handoverRun(t, f, time.Hour)
	if code != 0 || !ran || f.calls != 3 {
		t.Fatalf("exit %d, ran %v after %d checks; want 0, ran after 3\n%s", code, ran, f.calls, stderr)
	}
	for _, want := range []string{"another job of the lineage is running", "jobs=[55]", "the lineage's other job ended: the command starts"} {
		if !strings.Contains(stderr, want) {
			t.Errorf("stderr lacks %q:\n%s", want, stderr)
		}
	}
}

// Still running after --handover-wait: the command never starts.
func TestHandoverGivesUp(t *testing.T) {
	f := &fakeAttempts{answers: [][]uint64{{55, 56}}}
	code, ran, stderr := handoverRun(t, f, time.Nanosecond)
	if code != ExitHandoverTimeout || ran {
		t.Fatalf("exit %d, ran %v; want %d without running\n%s", code, ran, ExitHandoverTimeout, stderr)
	}
	if !strings.Contains(stderr, "job(s) 55,56 of lineage lin-1 still running after --handover-wait 1ns: the command does not start") {
		t.Errorf("stderr:\n%s", stderr)
	}
}

// Slurm cannot be asked, no other attempt, or the check off: the command
// starts at once.
func TestHandoverStartsAtOnce(t *testing.T) {
	for name, tc := range map[string]struct {
		a     *fakeAttempts
		wait  time.Duration
		calls int
		log   string
	}{
		"squeue fails":     {&fakeAttempts{err: errors.New("squeue: not found")}, time.Hour, 1, "other jobs of the lineage not checked"},
		"no other attempt": {&fakeAttempts{answers: [][]uint64{nil}}, time.Hour, 1, ""},
		"check off":        {&fakeAttempts{answers: [][]uint64{{55}}}, 0, 0, ""},
	} {
		t.Run(name, func(t *testing.T) {
			code, ran, stderr := handoverRun(t, tc.a, tc.wait)
			if code != 0 || !ran || tc.a.calls != tc.calls || !strings.Contains(stderr, tc.log) {
				t.Errorf("exit %d, ran %v, %d checks; want 0, ran, %d checks, log %q\n%s", code, ran, tc.a.calls, tc.calls, tc.log, stderr)
			}
		})
	}
}
