package cli

import (
	"slices"
	"strings"
	"testing"

	"github.com/isched/isched/internal/report"
	"github.com/isched/isched/internal/slurm"
)

// slurmJobs is what scontrol show job says of each job id.
func slurmJobs(states map[string]string) map[string]*slurm.JobInfo {
	out := map[string]*slurm.JobInfo{}
	for id, st := range states {
		out[id] = &slurm.JobInfo{JobID: id, State: st}
	}
	return out
}

// TestStop: isched stop cancels the lineage's current job as the user (a
// cancelled run is never continued) and says so once Slurm shows it
// CANCELLED, refuses another user's, and says why when there is nothing it
// can cancel.
func TestStop(t *testing.T) {
	cases := []struct {
		name      string
		arg       string
		args      []string
		status    func(*report.JobStatus)
		slurm     map[string]string
		code      int
		out, err  string
		cancelled []string
		slept     int
	}{
		{name: "by lineage: the record's current job", arg: "lab-train-abababab", code: ExitOK,
			out: "cancelled job 42 (lineage lab-train-abababab): a cancelled run is never continued", cancelled: []string{"42"}, slept: 1},
		{name: "by job id", arg: "42", code: ExitOK, cancelled: []string{"42"}, slept: 1},
		{name: "--wait 0: the cancel sent", arg: "42", args: []string{"--wait", "0"}, code: ExitOK,
			out: "job 42 of lineage lab-train-abababab: cancel sent: a cancelled run is never continued", cancelled: []string{"42"}},
		{name: "resubmitted: the new job", arg: "lab-train-abababab", status: func(s *report.JobStatus) { s.JobID = 57 },
			slurm: map[string]string{"42": "COMPLETED", "57": "RUNNING"}, code: ExitOK, cancelled: []string{"57"}, slept: 1},
		{name: "cancelled already", arg: "42", slurm: map[string]string{"42": "CANCELLED"}, code: ExitOK, out: "is cancelled already"},
		{name: "Slurm does not end it", arg: "42", args: []string{"--wait", "4s"}, slurm: map[string]string{"42": "COMPLETING"}, code: ExitError,
			err: "cancel sent, Slurm shows it COMPLETING (waited 4s)", cancelled: []string{"42"}, slept: 2},
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
			states := c.slurm
			if states == nil {
				states = map[string]string{"42": "RUNNING"}
			}
			h.slurm.jobs = slurmJobs(states)
			code, out, errOut := h.run(append([]string{"stop", c.arg}, c.args...)...)
			if code != c.code || !strings.Contains(out, c.out) || !strings.Contains(errOut, c.err) {
				t.Errorf("exit %d, out %q, err %q; want %d, ~%q, ~%q", code, out, errOut, c.code, c.out, c.err)
			}
			if !slices.Equal(h.slurm.cancelled, c.cancelled) || h.slept != c.slept {
				t.Errorf("cancelled %q after %d looks again, want %q after %d", h.slurm.cancelled, h.slept, c.cancelled, c.slept)
			}
		})
	}
}

// TestStopBetweenAttempts: Slurm shows the job ended (not cancelled) and
// isched may continue the run; the agent's job table, a poll old, still
// shows it running. isched stop waits for the continued job (requeued: the
// same id queued again; resubmitted: a new id in the record) and cancels
// it, stops waiting when the coordinator ends the run, and gives up after
// --wait; --wait 0 refuses at once.
func TestStopBetweenAttempts(t *testing.T) {
	cases := []struct {
		name      string
		args      []string
		change    func(h *harness, n int) // at the nth look again
		code      int
		out, err  string
		cancelled []string
		slept     int
	}{
		{name: "--wait 0 refuses", args: []string{"--wait", "0"}, code: ExitError,
			err: "job 42 of lineage lab-train-abababab has ended (FAILED): isched may be continuing the run"},
		{name: "requeued: the same job queued again", change: func(h *harness, n int) {
			if n == 2 {
				h.slurm.jobs["42"].State = "PENDING"
			}
		}, code: ExitOK, out: "cancelled job 42", cancelled: []string{"42"}, slept: 3,
			err: "waiting up to 3m0s for the continued job"},
		{name: "resubmitted: the new job", change: func(h *harness, n int) {
			if n == 1 {
				st := movedStatus()
				st.JobID = 57
				h.setJSON("isched:lab:job:{lab-train-abababab}:status", st)
				h.slurm.jobs["57"] = &slurm.JobInfo{JobID: "57", State: "PENDING"}
			}
		}, code: ExitOK, out: "cancelled job 57", cancelled: []string{"57"}, slept: 2},
		{name: "the coordinator ends the run", change: func(h *harness, n int) {
			st := movedStatus()
			st.EndedMS, st.State = at(0), "FAILED"
			h.setJSON("isched:lab:job:{lab-train-abababab}:status", st)
		}, code: ExitOK, out: "is over already (FAILED)", slept: 1},
		// CI, 1a37184: the cancel landed while the agent was continuing the
		// run (requeued held, not yet released); the release failed and
		// the coordinator ended the run. Its end is this command's cancel.
		{name: "cancelled mid-continuation, then the run ends", change: func(h *harness, n int) {
			switch n {
			case 1:
				h.slurm.jobs["42"].State = "PENDING"
			case 2:
				h.slurm.jobs["42"].State = "CANCELLED"
				st := movedStatus()
				st.EndedMS, st.State = at(0), "ENDED"
				h.setJSON("isched:lab:job:{lab-train-abababab}:status", st)
			}
		}, code: ExitOK, out: "cancelled job 42 (lineage lab-train-abababab): a cancelled run is never continued", cancelled: []string{"42"}, slept: 2},
		{name: "nothing within --wait", args: []string{"--wait", "10s", "--interval", "2s"}, code: ExitError,
			err: "has ended (FAILED): isched may be continuing the run (waited 10s)", slept: 5},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			h := newHarness(t)
			h.statusState() // the job table shows job 42 RUNNING
			h.slurm.jobs = slurmJobs(map[string]string{"42": "FAILED"})
			if c.change != nil {
				h.onSleep = func(n int) { c.change(h, n) }
			}
			code, out, errOut := h.run(append([]string{"stop", "42"}, c.args...)...)
			if code != c.code || !strings.Contains(out, c.out) || !strings.Contains(errOut, c.err) {
				t.Errorf("exit %d, out %q, err %q; want %d, ~%q, ~%q", code, out, errOut, c.code, c.out, c.err)
			}
			if !slices.Equal(h.slurm.cancelled, c.cancelled) || h.slept != c.slept {
				t.Errorf("cancelled %q after %d looks again, want %q after %d", h.slurm.cancelled, h.slept, c.cancelled, c.slept)
			}
		})
	}
}
