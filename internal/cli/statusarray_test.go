package cli

import (
	"encoding/json"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/isched/isched/internal/report"
	"github.com/isched/isched/internal/slurm"
)

// arrayState: alice's array 50 (--array=0-4, lineage L): elements 0 and 1
// run as jobs 51 and 52, element 2 ended and left the job table (the
// coordinator keeps its record), elements 3 and 4 are the array's pending rest.
func (h *harness) arrayState(t *testing.T) string {
	t.Helper()
	const base = "lab-u1001-sweep-0a0b0c0d"
	comment := report.Plan{Lineage: base, Ideal: "cpu", Total: 100}.FormatComment()
	h.setJobs([]report.Job{
		{JobID: 51, ArrayJobID: 50, ArrayTaskID: intp(0), Name: "sweep", User: "alice", UID: 1001, Partition: "cpu", State: "RUNNING", Comment: comment},
		{JobID: 52, ArrayJobID: 50, ArrayTaskID: intp(1), Name: "sweep", User: "alice", UID: 1001, Partition: "cpu", State: "RUNNING", Comment: comment},
		{JobID: 50, ArrayTasks: "3-4", Name: "sweep", User: "alice", UID: 1001, Partition: "cpu", State: "PENDING", Comment: comment},
		{JobID: 60, ArrayJobID: 60, ArrayTaskID: intp(0), Name: "other", User: "alice", UID: 1001, Partition: "cpu", State: "RUNNING",
			Comment: report.Plan{Lineage: "lab-u1001-other-01020304", Ideal: "cpu"}.FormatComment()},
	})
	for task, st := range map[int]report.JobStatus{
		0: {V: 1, Cluster: "lab", Lineage: base + "_0", JobID: 51, User: "alice", UID: 1001, State: "RUNNING", Partition: "cpu", Step: 40, TotalIters: 100, ETAMS: at(10 * time.Minute)},
		2: {V: 1, Cluster: "lab", Lineage: base + "_2", JobID: 53, User: "alice", UID: 1001, State: "ENDED", Partition: "cpu", Step: 100, TotalIters: 100,
			EndedMS: at(-time.Minute)},
	} {
		h.setJSON("isched:lab:job:{"+report.ElementLineage(base, task)+"}:status", st)
	}
	if err := h.app().remember("", "50", base, "0-4"); err != nil {
		t.Fatal(err)
	}
	return base
}

// TestStatusArray: `isched status ARRAY_ID` and `isched status LINEAGE`
// show an array's elements together, each under its own lineage,
// including the one that left the job table; `isched status A_T` is one
// element's run.
func TestStatusArray(t *testing.T) {
	h := newHarness(t)
	base := h.arrayState(t)
	for _, arg := range []string{"50", base} {
		code, out, errOut := h.run("status", arg)
		if code != 0 {
			t.Fatalf("status %s: exit %d: %s", arg, code, errOut)
		}
		for _, want := range []string{
			"array job 50 (--array=0-4), lineage " + base + ": element <task> is lineage " + base + "_<task>\n",
			"50_0  " + base + "_0      RUNNING  cpu        40/100",
			"50_1  " + base + "_1      RUNNING  cpu        -",
			"50_2  " + base + "_2      ENDED    cpu        100/100",
			"50_[3-4]  " + base + "_[3-4]  PENDING",
		} {
			if !strings.Contains(strings.Join(strings.Fields(out), " "), strings.Join(strings.Fields(want), " ")) {
				t.Errorf("status %s lacks %q:\n%s", arg, want, out)
			}
		}
		if strings.Contains(out, "other") {
			t.Errorf("status %s lists another array's element:\n%s", arg, out)
		}
	}
	code, out, errOut := h.run("status", "50", "--json")
	var rows []statusJSON
	if err := json.Unmarshal([]byte(out), &rows); code != 0 || err != nil || len(rows) != 4 {
		t.Fatalf("--json: exit %d, %v, %d rows (want the 2 elements with a record, element 1 and the pending rest from Slurm): %s%s", code, err, len(rows), out, errOut)
	}
	var lineages []string
	for _, r := range rows {
		lineages = append(lineages, r.Lineage+" "+r.Source)
	}
	if got, want := strings.Join(lineages, ","), base+"_0 coordinator,"+base+"_1 slurm,"+base+"_[3-4] slurm,"+base+"_2 coordinator"; got != want {
		t.Errorf("--json rows %s, want %s", got, want)
	}
	code, out, errOut = h.run("status", "50_0")
	if code != 0 || !strings.Contains(out, "lineage "+base+"_0") || strings.Contains(out, "50_1") {
		t.Errorf("status 50_0: exit %d: %s%s", code, out, errOut)
	}
	// an element still in the pending rest: Slurm shows the rest's record
	h.slurm.jobs = map[string]*slurm.JobInfo{"50_4": {JobID: "50", ArrayJobID: "50", ArrayTaskID: "3-4", State: "PENDING", UID: 1001,
		Comment: report.Plan{Lineage: base, Ideal: "cpu"}.FormatComment()}}
	code, out, errOut = h.run("status", "50_4")
	if code != 0 || !strings.Contains(out, "lineage "+base+"_4 (plan in the job's comment (scontrol))") {
		t.Errorf("status 50_4 (pending in the rest): exit %d: %s%s", code, out, errOut)
	}
}

// TestReportArray: a report is of one run: an array's id is refused,
// naming its elements' lineages; an element's is reported.
func TestReportArray(t *testing.T) {
	h := newHarness(t)
	base := h.arrayState(t)
	code, _, errOut := h.run("report", "50")
	if code != ExitUsage || !strings.Contains(errOut, "50 is array job 50 (--array=0-4): a report is of one run, an element's ("+base+"_0, "+base+"_1, ...)") {
		t.Errorf("report 50: exit %d: %s", code, errOut)
	}
	b, _ := json.Marshal(report.SeriesPoint{TMS: at(-time.Minute), Step: 100, RSS: 1 << 20})
	h.mr.RPush("isched:lab:job:{"+base+"_2}:series", string(b))
	if code, out, errOut := h.run("report", base+"_2"); code != 0 || !strings.Contains(out, base+"_2") {
		t.Errorf("report of element 2: exit %d: %s%s", code, out, errOut)
	}
}

// TestStopArray: `isched stop ARRAY_ID` cancels the array (its pending
// rest with it, as scancel does) and stops each element's run, as `isched
// stop` stops one: a cancelled run is never continued; an element over
// already is said so.
func TestStopArray(t *testing.T) {
	h := newHarness(t)
	base := h.arrayState(t)
	// element 1 has no record yet: stopped by its id in the table, 50_1
	// element 0's record names its job 51, cancelled by its element key
	h.slurm.jobs = slurmJobs(map[string]string{"50": "PENDING", "50_0": "RUNNING", "50_1": "RUNNING", "53": "COMPLETED"})
	code, out, errOut := h.run("stop", base)
	if code != 0 {
		t.Fatalf("exit %d: %s%s", code, out, errOut)
	}
	if !slices.Equal(h.slurm.cancelled, []string{"50", "50_0", "50_1"}) {
		t.Errorf("cancelled %q, want the array 50, then elements 0 and 1's jobs", h.slurm.cancelled)
	}
	for _, want := range []string{"cancelled array job 50 (lineage " + base + "_<task>)", "cancelled job 50_0 (lineage " + base + "_0)",
		"cancelled job 50_1 (lineage " + base + "_1)", "lineage " + base + "_2 is over already (ENDED)"} {
		if !strings.Contains(out, want) {
			t.Errorf("stop lacks %q:\n%s", want, out)
		}
	}
}

// TestStopElementWithTheArraysID: an element that runs under the array's
// own id (Slurm gives it to one element) is cancelled as A_T: scancel of
// the bare id would cancel every element of the array.
func TestStopElementWithTheArraysID(t *testing.T) {
	h := newHarness(t)
	const base = "lab-u1001-sweep-0e0e0e0e"
	comment := report.Plan{Lineage: base, Ideal: "cpu", Total: 100}.FormatComment()
	h.setJobs([]report.Job{
		{JobID: 71, ArrayJobID: 70, ArrayTaskID: intp(0), Name: "sweep", User: "alice", UID: 1001, Partition: "cpu", State: "RUNNING", Comment: comment},
		{JobID: 70, ArrayJobID: 70, ArrayTaskID: intp(2), Name: "sweep", User: "alice", UID: 1001, Partition: "cpu", State: "RUNNING", Comment: comment},
	})
	h.setJSON("isched:lab:job:{"+report.ElementLineage(base, 2)+"}:status", report.JobStatus{V: 1, Cluster: "lab", Lineage: base + "_2", JobID: 70,
		User: "alice", UID: 1001, State: "RUNNING", Partition: "cpu", Step: 40, TotalIters: 100, ETAMS: at(10 * time.Minute)})
	h.slurm.jobs = slurmJobs(map[string]string{"70": "RUNNING", "70_2": "RUNNING", "71": "RUNNING"})
	code, out, errOut := h.run("stop", "--wait", "0", "70_2")
	if code != 0 {
		t.Fatalf("exit %d: %s%s", code, out, errOut)
	}
	if !slices.Equal(h.slurm.cancelled, []string{"70_2"}) {
		t.Errorf("cancelled %q, want 70_2 alone", h.slurm.cancelled)
	}
}
