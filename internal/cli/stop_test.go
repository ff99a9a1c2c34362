package cli

import (
	"slices"
	"strings"
	"testing"

	"github.com/isched/isched/internal/report"
)

// TestStop: isched stop cancels the lineage's current job as the user (a
// cancelled run is never continued), refuses another user's, and says why
// when there is nothing it can cancel.
func TestStop(t *testing.T) {
	cases := []struct {
		name      string
		arg       string
		status    func(*report.JobStatus)
		code      int
		out, err  string
		cancelled []string
	}{
		{name: "by lineage: the record's current job", arg: "lab-train-abababab", code: ExitOK,
			out: "cancelled job 42 (lineage lab-train-abababab): a cancelled run is never continued", cancelled: []string{"42"}},
		{name: "by job id", arg: "42", code: ExitOK, cancelled: []string{"42"}},
		{name: "resubmitted: the new job", arg: "lab-train-abababab", status: func(s *report.JobStatus) { s.JobID = 57 }, code: ExitOK, cancelled: []string{"57"}},
		{name: "another user's run", arg: "lab-other-1", code: ExitError, err: "belongs to uid 1002, not to you (uid 1001): not cancelled"},
		{name: "over already", arg: "lab-train-abababab", status: func(s *report.JobStatus) { s.EndedMS, s.State = at(0), "ENDED" }, code: ExitOK,
			out: "is over already (ENDED)"},
		{name: "neither a job nor a lineage", arg: "a b", code: ExitUsage},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			h := newHarness(t)
			h.statusState()
			if c.status != nil {
				st := movedStatus()
				c.status(&st)
				h.setJSON("isched:lab:job:{lab-train-abababab}:status", st)
			}
			code, out, errOut := h.run("stop", c.arg)
			if code != c.code || !strings.Contains(out, c.out) || !strings.Contains(errOut, c.err) {
				t.Errorf("exit %d, out %q, err %q; want %d, ~%q, ~%q", code, out, errOut, c.code, c.out, c.err)
			}
			if !slices.Equal(h.slurm.cancelled, c.cancelled) {
				t.Errorf("cancelled %q, want %q", h.slurm.cancelled, c.cancelled)
			}
		})
	}
}

// Between two attempts (the job ended, isched may continue it) the CLI
// cannot stop the run: it says so and cancels nothing.
func TestStopBetweenAttempts(t *testing.T) {
	h := newHarness(t)
	h.statusState()
	env := report.NewEnvelope(report.KindJobs, now)
	env.Jobs = &report.JobTable{Cluster: "lab", TakenMS: now.UnixMilli(), Jobs: []report.Job{
		{JobID: 42, Name: "train", User: "alice", UID: 1001, Partition: "gpu", State: "COMPLETED",
			Comment: report.Plan{Lineage: "lab-train-abababab", Ideal: "gpu"}.FormatComment()},
	}}
	h.setEnvelope("isched:lab:jobs", env)
	code, _, errOut := h.run("stop", "42")
	if code != ExitError || !strings.Contains(errOut, "has ended (COMPLETED) and isched may be continuing it") || len(h.slurm.cancelled) != 0 {
		t.Errorf("exit %d, err %q, cancelled %q", code, errOut, h.slurm.cancelled)
	}
}
