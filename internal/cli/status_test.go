package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/isched/isched/internal/report"
	"github.com/isched/isched/internal/slurm"
)

func at(d time.Duration) int64 { return now.Add(d).UnixMilli() }

// movedStatus is a job that started on cpu, was moved to gpu and runs there.
func movedStatus() report.JobStatus {
	step := int64(4000)
	return report.JobStatus{
		V: 1, Cluster: "lab", Lineage: "lab-train-abababab", JobID: 42, User: "alice", UID: 1001, State: "RUNNING",
		Partition: "gpu", Node: "gpu1", Attempt: 1, StartedMS: at(-50 * time.Minute),
		Plan: &report.Plan{Lineage: "lab-train-abababab", Ideal: "gpu", IdealGres: "gpu:1", Fallbacks: []string{"cpu", "dev"}, Total: 15630, Batch: 32, Migrate: true},
		History: []report.Span{
			{JobID: 42, Attempt: 0, Partition: "cpu", Node: "cpu1", StartMS: at(-50 * time.Minute), EndMS: at(-20 * time.Minute), StartStep: 0, EndStep: 4000,
				Reason: "moved to gpu (it freed)"},
			{JobID: 42, Attempt: 1, Partition: "gpu", Node: "gpu1", StartMS: at(-18 * time.Minute), StartStep: 4000, Ranks: 2}, // two ranks there
		},
		Step: 7810, TotalIters: 15630, IterMS: 212, IterLowMS: 198, IterHighMS: 231,
		ETAMS: at(28 * time.Minute), ETALowMS: at(26 * time.Minute), ETAHighMS: at(31 * time.Minute), LimitMS: at(88 * time.Minute),
		Loss: &report.LossStatus{Last: 0.8123, Step: 7800, Min: 0.7991, MinStep: 7650, N: 780, Trend: -0.081, FromStep: 7320,
			Recent: []report.LossPoint{{Step: 7790, Loss: 0.8201}, {Step: 7800, Loss: 0.8123}}},
		RSSBytes: 1200 << 20, PeakRSSBytes: 1400 << 20, MemLimitBytes: 2 << 30,
		GPUBytes: map[string]int64{"GPU-1b2c": 3 << 30}, PeakGPUBytes: map[string]int64{"GPU-1b2c": 3300 << 20},
		LastCheckpoint: &report.Checkpoint{Path: "/home/alice/proj/checkpoints/lab-train-abababab/last.pt", Size: 90 << 20, Step: &step,
			MTimeMS: at(-21 * time.Minute), Complete: true},
		CkptMS: 2300,
		Speeds: []report.PartitionSpeed{{Partition: "cpu", Speed: 1, Prior: 1, N: 12, Users: 3}, {Partition: "dev", Speed: 0.5, Prior: 0.5},
			{Partition: "gpu", Speed: 3.81, Prior: 8, N: 5, Users: 2}},
		Decisions: []report.Decision{
			{AtMS: at(-22 * time.Minute), Kind: "checkpoint", Reason: "gpu frees: checkpoint before the move", ActionID: "a1", Result: "ok"},
			{AtMS: at(-20 * time.Minute), Kind: "migrate", Reason: "gpu is idle: 3.8x faster than cpu,\x1b[2J saves 1.2 h", ActionID: "a2", Result: "ok"},
		},
		Events:    []report.StatusEvent{{AtMS: at(-40 * time.Minute), Kind: "memory-growth", Message: "RSS grew 80 MiB over 1000 iterations"}},
		UpdatedMS: at(-3 * time.Second),
	}
}

func (h *harness) statusState() {
	h.setJSON("isched:lab:job:{lab-train-abababab}:status", movedStatus())
	plan := report.Plan{Lineage: "lab-train-abababab", Ideal: "gpu", IdealGres: "gpu:1", Migrate: true}
	h.setJobs([]report.Job{
		{JobID: 42, Name: "train", User: "alice", UID: 1001, Partition: "gpu", State: "RUNNING", Nodes: "gpu1", NodeCount: 1, CPUs: 2,
			Comment: plan.FormatComment(), SubmitMS: at(-time.Hour), StartMS: at(-18 * time.Minute)},
		{JobID: 43, Name: "other", User: "bob", UID: 1002, Partition: "cpu", State: "PENDING", Reason: "Resources", NodeCount: 1, CPUs: 4,
			Comment: report.Plan{Lineage: "lab-other-1", Ideal: "cpu"}.FormatComment(), SubmitMS: at(-time.Hour)},
		{JobID: 44, Name: "mine-pending", User: "alice", UID: 1001, Partition: "gpu", State: "PENDING", Reason: "Priority", NodeCount: 1, CPUs: 2,
			Comment: report.Plan{Lineage: "lab-pending-2", Ideal: "gpu"}.FormatComment(), SubmitMS: at(-time.Minute),
			ExpectedStartMS: at(30 * time.Minute)},
	})
}

func TestStatus(t *testing.T) {
	h := newHarness(t)
	h.statusState()
	// by job id (lineage from the plan in the comment) and by lineage
	for _, arg := range []string{"42", "lab-train-abababab"} {
		code, out, errOut := h.run("status", arg)
		if code != 0 {
			t.Fatalf("status %s: exit %d: %s", arg, code, errOut)
		}
		golden(t, "status_moved.txt", out)
		if strings.Contains(out, "\x1b") {
			t.Errorf("a control character from a decision reached the terminal")
		}
	}
	code, out, errOut := h.run("status", "42", "--json")
	if code != 0 {
		t.Fatalf("--json: exit %d: %s", code, errOut)
	}
	golden(t, "status_moved.json", out)
	var got statusJSON
	if err := json.Unmarshal([]byte(out), &got); err != nil {
		t.Fatal(err)
	}
	want := movedStatus()
	if got.Step != want.Step || got.ETA == nil || !got.ETA.Equal(time.UnixMilli(want.ETAMS)) || len(got.History) != 2 ||
		got.IterS != 0.212 || got.Ended != nil || got.History[1].End != nil {
		t.Errorf("--json: %+v", got)
	}
	// with no job: the caller's jobs' records, a list in the same style
	code, out, errOut = h.run("status", "--json")
	if code != 0 {
		t.Fatalf("status --json: exit %d: %s", code, errOut)
	}
	// the pending job 44, which the coordinator has not seen, is listed
	// with what Slurm says of it
	var list []statusJSON
	if err := json.Unmarshal([]byte(out), &list); err != nil || len(list) != 2 || list[0].Lineage != want.Lineage ||
		list[0].Source != "coordinator" || list[1].Source != "slurm" || list[1].JobID != 44 || list[1].State != "PENDING" {
		t.Errorf("status --json: %v %+v", err, list)
	}
}

// Between an attempt's last sample (its process gone: RSS 0) and the next
// attempt's first, the memory line says so rather than "RSS 0 B".
func TestStatusBetweenAttempts(t *testing.T) {
	h := newHarness(t)
	h.statusState()
	st := movedStatus()
	st.RSSBytes, st.RSSSlope = 0, 0
	h.setJSON("isched:lab:job:{lab-train-abababab}:status", st)
	code, out, errOut := h.run("status", "42")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	if want := "memory:     no running process sampled yet (peak 1.37 GiB, limit 2.00 GiB)\n"; !strings.Contains(out, want) || strings.Contains(out, "RSS 0 B") {
		t.Errorf("memory line, want %q:\n%s", want, out)
	}
}

func TestStatusNotYetKnown(t *testing.T) {
	h := newHarness(t)
	h.statusState()
	// pending, the coordinator has not seen it
	code, out, _ := h.run("status", "44")
	if code != 0 || !strings.Contains(out, "lineage lab-pending-2 (plan in the job's comment)") ||
		!strings.Contains(out, "slurm: job 44 PENDING on gpu, reason Priority, Slurm expects it to start 12:30:00 (in 30 min)") ||
		!strings.Contains(out, "no isched status yet (key isched:lab:job:{lab-pending-2}:status)") {
		t.Errorf("exit %d:\n%s", code, out)
	}
	// not in the job table: scontrol's comment, else the wrapper's default lineage
	h.slurm.jobs = map[string]*slurm.JobInfo{"77": {JobID: "77", Comment: report.Plan{Lineage: "lab-old-7", Ideal: "cpu"}.FormatComment()}}
	if _, out, _ := h.run("status", "77"); !strings.Contains(out, "lineage lab-old-7 (plan in the job's comment (scontrol))") {
		t.Errorf("scontrol fallback:\n%s", out)
	}
	h.slurm.jobs["999"] = &slurm.JobInfo{JobID: "999", State: "PENDING"} // not an isched job
	if code, out, _ := h.run("status", "999"); code != ExitOK || !strings.Contains(out, "lineage lab-999 (the wrapper's default") {
		t.Errorf("default lineage: exit %d\n%s", code, out)
	}
	// --json: what Slurm says, marked as such
	code, out, errOut := h.run("status", "999", "--json")
	var got slurmStatusJSON
	if err := json.Unmarshal([]byte(out), &got); code != ExitOK || err != nil || got.Source != "slurm" || got.State != "PENDING" ||
		got.JobID != 999 || got.Lineage != "lab-999" || got.Ended != nil || got.ExitStatus != nil || !strings.Contains(got.Note, "no isched status yet") {
		t.Errorf("--json without status: exit %d %v %+v %s", code, err, got, errOut)
	}
	if code, _, errOut := h.run("status", "lab-nobody-1", "--json"); code != ExitError || !strings.Contains(errOut, "no status for lineage lab-nobody-1") ||
		!strings.Contains(errOut, "Slurm does not show it") {
		t.Errorf("--json of a lineage nobody knows: exit %d %q", code, errOut)
	}
}

// TestStatusJSONOfEndedSlurmJob: a job the coordinator never recorded
// that Slurm shows ended carries its end and exit status as a shell
// would show it (128+signal when killed).
func TestStatusJSONOfEndedSlurmJob(t *testing.T) {
	end := time.Date(2026, 11, 28, 16, 0, 0, 0, time.UTC)
	for _, c := range []struct {
		state, code string
		want        int
	}{{"COMPLETED", "0:0", 0}, {"FAILED", "3:0", 3}, {"CANCELLED", "0:9", 137}, {"TIMEOUT", "0:15", 143}} {
		h := newHarness(t)
		h.statusState()
		h.slurm.jobs = map[string]*slurm.JobInfo{"901": {JobID: "901", UID: 1001, User: "alice", State: c.state, EndTime: end,
			Fields: map[string]string{"ExitCode": c.code}}}
		code, out, errOut := h.run("status", "901", "--json")
		var got slurmStatusJSON
		if err := json.Unmarshal([]byte(out), &got); code != ExitOK || err != nil {
			t.Fatalf("%s: exit %d %v %s", c.state, code, err, errOut)
		}
		if got.State != c.state || got.ExitStatus == nil || *got.ExitStatus != c.want || got.Ended == nil || !got.Ended.Equal(end) || got.UID != 1001 {
			t.Errorf("%s %s: %+v", c.state, c.code, got)
		}
	}
	if exitStatus("") != nil || exitStatus("x:0") != nil || exitStatus("1") != nil {
		t.Error("a malformed ExitCode must give no exit status")
	}
}

// TestUnknownJob: a job id that neither Slurm (scontrol: Invalid job id)
// nor isched's records know is an error naming the job, at once (stop
// does not wait --wait for it); a record, a submission or a Slurm that
// cannot tell keeps the old answers.
func TestUnknownJob(t *testing.T) {
	cases := []struct {
		name     string
		args     []string
		setup    func(h *harness)
		code     int
		out, err string
	}{
		{name: "status", args: []string{"status", "999999"}, code: ExitError,
			err: "isched status: job 999999: no such job in Slurm or in isched's records\n"},
		{name: "status --json", args: []string{"status", "999999", "--json"}, code: ExitError, err: "job 999999: no such job"},
		{name: "status --watch", args: []string{"status", "999999", "--watch"}, code: ExitError, err: "job 999999: no such job"},
		{name: "report", args: []string{"report", "999999"}, code: ExitError,
			err: "isched report: job 999999: no such job in Slurm or in isched's records\n"},
		{name: "stop", args: []string{"stop", "999999"}, code: ExitError,
			err: "isched stop: job 999999: no such job in Slurm or in isched's records\n"},
		{name: "stop: a coordinator's record, Slurm forgot the job", args: []string{"stop", "999999"}, setup: func(h *harness) {
			st := movedStatus()
			st.Lineage, st.JobID, st.EndedMS, st.State = "lab-999999", 999999, at(-time.Hour), "ENDED"
			h.setJSON("isched:lab:job:{lab-999999}:status", st)
		}, code: ExitOK, out: "lineage lab-999999 is over already (ENDED)"},
		{name: "status: a coordinator's record, Slurm forgot the job", args: []string{"status", "999999"}, setup: func(h *harness) {
			st := movedStatus()
			st.Lineage, st.JobID = "lab-999999", 999999
			h.setJSON("isched:lab:job:{lab-999999}:status", st)
		}, code: ExitOK, out: "job 999999 · lineage lab-999999"},
		{name: "report: samples, no record", args: []string{"report", "999999"}, setup: func(h *harness) {
			b, _ := json.Marshal(report.SeriesPoint{TMS: at(-time.Minute), Step: 1, RSS: 1 << 20})
			h.mr.RPush("isched:lab:job:{lab-999999}:series", string(b))
		}, code: ExitOK, out: "lineage lab-999999: 1 points"},
		{name: "status: in the submission history", args: []string{"status", "999999"}, setup: func(h *harness) {
			if err := h.app().remember("", "999999", "lab-u1001-train-cdcdcdcd", ""); err != nil {
				t.Fatal(err)
			}
		}, code: ExitOK, out: "lineage lab-u1001-train-cdcdcdcd (from your submission history"},
		{name: "status: only Slurm's accounting has it", args: []string{"status", "999999"}, setup: func(h *harness) {
			h.slurm.acct = map[string]*slurm.AcctJob{"999999": {JobID: "999999", User: "alice", UID: 1001, State: "COMPLETED",
				Partition: "cpu", Elapsed: 95 * time.Second, ExitCode: "0:0",
				Comment:      report.Plan{Lineage: "lab-u1001-old-abababab", Ideal: "cpu"}.FormatComment(),
				AdminComment: "isched: memory 643 MiB of 4.0 GiB asked; ask --mem=1G next time"}}
		}, code: ExitOK, out: "lineage lab-u1001-old-abababab (plan in the job's comment (Slurm accounting))\n" +
			"slurm accounting: job 999999 of alice COMPLETED on cpu after 1m35s, exit 0:0\n" +
			"verdict: isched: memory 643 MiB of 4.0 GiB asked; ask --mem=1G next time\n"},
		{name: "status: accounting without the job", args: []string{"status", "999999"}, setup: func(h *harness) {
			h.slurm.acct = map[string]*slurm.AcctJob{}
		}, code: ExitError, err: "job 999999: no such job in Slurm or in isched's records"},
		{name: "status: Slurm cannot tell", args: []string{"status", "999999"}, setup: func(h *harness) {
			h.slurm.showErr = errors.New("scontrol: Unable to contact slurm controller")
		}, code: ExitOK, out: "lineage lab-999999 (the wrapper's default"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			h := newHarness(t)
			h.statusState()
			h.slurm.jobs = slurmJobs(map[string]string{"42": "RUNNING"})
			if c.setup != nil {
				c.setup(h)
			}
			code, out, errOut := h.run(c.args...)
			if code != c.code || !strings.Contains(out, c.out) || !strings.Contains(errOut, c.err) {
				t.Errorf("exit %d, out %q, err %q; want %d, ~%q, ~%q", code, out, errOut, c.code, c.out, c.err)
			}
			if h.slept != 0 || len(h.slurm.cancelled) != 0 {
				t.Errorf("looked again %d times, cancelled %q: want neither", h.slept, h.slurm.cancelled)
			}
		})
	}
}

func TestStatusList(t *testing.T) {
	h := newHarness(t)
	h.statusState()
	code, out, errOut := h.run("status")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	golden(t, "status_list.txt", out)
	if strings.Contains(out, "lab-other-1") {
		t.Error("another user's job is listed")
	}
}

func TestStatusWatchStopsWhenEnded(t *testing.T) {
	h := newHarness(t)
	st := movedStatus()
	st.State, st.EndedMS, st.ETAMS = "ENDED", at(-time.Minute), 0
	zero := 0
	st.ExitStatus = &zero
	h.setJSON("isched:lab:job:{lab-train-abababab}:status", st)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var out, errb bytes.Buffer
	code := h.app().Run(ctx, []string{"status", "--watch", "--interval", "1s", "lab-train-abababab"}, &out, &errb)
	if code != 0 || ctx.Err() != nil || !strings.Contains(out.String(), "ETA:        ended 11:59:00 (1 min ago), exit status 0") {
		t.Fatalf("exit %d, ctx %v:\n%s%s", code, ctx.Err(), out.String(), errb.String())
	}
}

func TestStatusRedisDown(t *testing.T) {
	h := newHarness(t)
	h.mr.Close()
	code, _, errOut := h.run("status", "42")
	if code != ExitError || !strings.Contains(errOut, "redis:") {
		t.Fatalf("exit %d: %s", code, errOut)
	}
}

// reportSeries stores 120 samples of lab-train-abababab over 40 minutes
// (GPU memory from the 61st on) and one that does not decode.
func (h *harness) reportSeries() {
	h.t.Helper()
	key := "isched:lab:job:{lab-train-abababab}:series"
	for i := 0; i < 120; i++ {
		p := report.SeriesPoint{TMS: at(time.Duration(i-120) * 20 * time.Second), Step: int64(i * 60), IterMS: 200 + float64(i%7), RSS: int64(900+i) << 20}
		if i >= 60 {
			p.GPU = 3 << 30
			p.IterMS = 60 + float64(i%5)
		}
		if i >= 10 { // the loop reports its loss from the 11th sample on
			loss := 2 / (1 + float64(i)/10)
			p.Loss = &loss
		}
		b, _ := json.Marshal(p)
		if _, err := h.mr.RPush(key, string(b)); err != nil {
			h.t.Fatal(err)
		}
	}
	h.mr.RPush(key, "not json")
}

func TestReportPlot(t *testing.T) {
	h := newHarness(t)
	h.statusState()
	h.reportSeries()
	for _, name := range []string{"run.png", "run.svg"} {
		path := filepath.Join(h.dir, name)
		code, out, errOut := h.run("report", "42", "--plot", path)
		if code != 0 {
			t.Fatalf("%s: exit %d: %s", name, code, errOut)
		}
		if !strings.Contains(out, "lineage lab-train-abababab: 120 points over 40 min (1 unreadable skipped)") ||
			!strings.Contains(out, "peak RSS 1019.0 MiB, peak GPU 3.00 GiB") || !strings.Contains(out, "wrote "+path) {
			t.Errorf("%s: output\n%s", name, out)
		}
		b, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		switch {
		case name == "run.png" && !bytes.HasPrefix(b, []byte("\x89PNG\r\n\x1a\n")):
			t.Errorf("%s is not a PNG", name)
		case name == "run.svg" && (!bytes.Contains(b, []byte("<svg")) || !bytes.Contains(b, []byte("iteration time")) ||
			!bytes.Contains(b, []byte("loss (as the training loop reports it)"))):
			t.Errorf("%s is not the SVG plot", name)
		}
		if len(b) < 5000 {
			t.Errorf("%s: only %d bytes", name, len(b))
		}
	}
	code, _, errOut := h.run("report", "lab-nothing-1", "--plot", filepath.Join(h.dir, "x.png"))
	if code != ExitError || !strings.Contains(errOut, "no samples stored for lineage lab-nothing-1 (key isched:lab:job:{lab-nothing-1}:series") {
		t.Errorf("missing series: exit %d %q", code, errOut)
	}
}

// The loop's own total wins over the plan's; a disagreement is shown, and
// the chain of attempts with isched's continuations.
func TestStatusLoopTotalDisagrees(t *testing.T) {
	h := newHarness(t)
	h.statusState()
	st := movedStatus()
	st.Step, st.TotalIters, st.LoopTotal, st.PlanTotal = 233, 3000, 3000, 57
	st.Continuations = 1
	h.setJSON("isched:lab:job:{lab-train-abababab}:status", st)
	code, out, errOut := h.run("status", "42")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	for _, want := range []string{"233/3000 iterations (7.8%)", "total:      3000 (your loop says; the plan computed 57)\n",
		"attempts:   2 (job 42.0 → job 42.1), continued once by isched\n"} {
		if !strings.Contains(out, want) {
			t.Errorf("want %q in:\n%s", want, out)
		}
	}
}

func TestChain(t *testing.T) {
	span := func(job uint64, attempt int) report.Span { return report.Span{JobID: job, Attempt: attempt} }
	cases := []struct {
		name    string
		history []report.Span
		conts   int
		want    string
		resumes int
	}{
		{"one attempt", []report.Span{span(42, 0)}, 0, "", 0},
		{"requeued", []report.Span{span(42, 0), span(42, 1)}, 1, "2 (job 42.0 → job 42.1), continued once by isched", 0},
		{"resubmitted after slurmctld forgot the job", []report.Span{span(42, 0), span(42, 1), span(57, 0)}, 2,
			"3 (job 42.0 → job 42.1 → job 57.0), resubmitted as job 57, continued 2 times by isched", 0},
		{"twice", []report.Span{span(42, 0), span(57, 0), span(61, 0)}, 2,
			"3 (job 42.0 → job 57.0 → job 61.0), resubmitted as job 57, then job 61, continued 2 times by isched", 0},
		{"restarted behind its checkpoint", []report.Span{span(42, 0), span(42, 1)}, 1,
			"2 (job 42.0 → job 42.1), continued once by isched; RESTARTED 1 time(s) behind the checkpoint it was given (see the resume-failed events)", 1},
	}
	for _, c := range cases {
		if got := chain(&report.JobStatus{History: c.history, Continuations: c.conts, ResumeFailures: c.resumes}); got != c.want {
			t.Errorf("%s: %q, want %q", c.name, got, c.want)
		}
	}
}

// TestReportJSON: --json prints the text report's content (and the
// samples) as JSON alone on stdout, in the --json style.
func TestReportJSON(t *testing.T) {
	h := newHarness(t)
	h.statusState()
	h.reportSeries()
	st := movedStatus()
	st.EndedMS, st.State, st.Continuations = at(-time.Minute), "ENDED", 1
	h.setJSON("isched:lab:job:{lab-train-abababab}:status", st)
	code, text, errOut := h.run("report", "42")
	if code != ExitOK {
		t.Fatalf("text: exit %d: %s", code, errOut)
	}
	plot := filepath.Join(h.dir, "run.svg")
	code, out, errOut := h.run("report", "42", "--json", "--plot", plot)
	if code != ExitOK || errOut != "wrote "+plot+"\n" {
		t.Fatalf("exit %d, stderr %q", code, errOut)
	}
	golden(t, "report_moved.json", out)
	var got map[string]any
	if err := json.Unmarshal([]byte(out), &got); err != nil {
		t.Fatalf("stdout is not JSON: %v\n%s", err, out)
	}
	iters, _ := got["iterations"].(map[string]any)
	attempts, _ := got["attempts"].([]any)
	samples, _ := got["samples"].([]any)
	ended, _ := got["ended"].(map[string]any)
	want := map[string]any{
		"lineage": "lab-train-abababab", "points": 120.0, "unreadable": 1.0, "span_s": 2380.0,
		"first_sample": "2026-05-09T11:20:00.000Z", "last_sample": "2026-05-09T11:59:40.000Z",
		"peak_rss_bytes": float64(1019 << 20), "peak_gpu_bytes": float64(3 << 30), "continuations": 1.0,
		"iterations.count": 120.0, "iterations.median_s": 0.2, "iterations.p90_s": 0.205, "iterations.first_step": 0.0, "iterations.last_step": 7140.0,
		"attempts": 2.0, "attempts[1].partition": "gpu", "attempts[0].end": "2026-05-09T11:40:00.000Z", "attempts[1].end": nil,
		"attempts[0].end_step": 4000.0, "attempts[1].end_step": nil,
		"samples": 120.0, "samples[0].time": "2026-05-09T11:20:00.000Z", "samples[0].rss_bytes": float64(900 << 20),
		"ended.state": "ENDED", "ended.at": "2026-05-09T11:59:00.000Z", "ended.step": 7810.0, "ended.total_iters": 15630.0,
	}
	have := map[string]any{
		"lineage": got["lineage"], "points": got["points"], "unreadable": got["unreadable"], "span_s": got["span_s"],
		"first_sample": got["first_sample"], "last_sample": got["last_sample"],
		"peak_rss_bytes": got["peak_rss_bytes"], "peak_gpu_bytes": got["peak_gpu_bytes"], "continuations": got["continuations"],
		"iterations.count": iters["count"], "iterations.median_s": iters["median_s"], "iterations.p90_s": iters["p90_s"], "iterations.first_step": iters["first_step"],
		"iterations.last_step": iters["last_step"], "attempts": float64(len(attempts)), "samples": float64(len(samples)),
		"ended.state": ended["state"], "ended.at": ended["at"], "ended.step": ended["step"], "ended.total_iters": ended["total_iters"],
	}
	if len(attempts) == 2 && len(samples) > 0 {
		a0, a1, s0 := attempts[0].(map[string]any), attempts[1].(map[string]any), samples[0].(map[string]any)
		have["attempts[1].partition"], have["attempts[0].end"], have["attempts[1].end"] = a1["partition"], a0["end"], a1["end"]
		have["attempts[0].end_step"], have["attempts[1].end_step"] = a0["end_step"], a1["end_step"]
		have["samples[0].time"], have["samples[0].rss_bytes"] = s0["time"], s0["rss_bytes"]
	}
	for k, v := range want {
		if have[k] != v {
			t.Errorf("%s = %v, want %v", k, have[k], v)
		}
	}
	// the same numbers as the text report
	for _, line := range []string{"lineage lab-train-abababab: 120 points over 40 min (1 unreadable skipped)",
		"iteration time: median 200 ms, p90 205 ms over 120 iterations (steps 0-7140)", "ended: ENDED at step 7810 of 15630",
		"attempts: 2 (job 42.0 → job 42.1), continued once by isched"} {
		if !strings.Contains(text, line) {
			t.Errorf("text report lacks %q:\n%s", line, text)
		}
	}
	if b, err := os.ReadFile(plot); err != nil || !bytes.Contains(b, []byte("<svg")) {
		t.Errorf("--plot with --json: %v", err)
	}
}

// TestETASays: the ETA line says what an ETA made before the run's own
// first iterations rests on, and why there is none.
func TestETASays(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 11, 27, 12, 0, 0, 0, time.UTC)
	at := now.Add(90 * time.Minute).UnixMilli()
	cases := []struct {
		name string
		s    report.JobStatus
		want string
	}{
		{"own runs", report.JobStatus{Partition: "cpu", ETAMS: at, ETASource: "own", ETAPriorRuns: 3, TotalIters: 10, Step: -1},
			"(before the first iterations: from your 3 earlier run(s) of this model and batch on cpu)"},
		{"others' runs", report.JobStatus{Partition: "cpu", ETAMS: at, ETASource: "pooled", ETAPriorRuns: 2, TotalIters: 10, Step: -1},
			"(before the first iterations: from 2 other user(s)' Slurm-confirmed runs of this model and batch on cpu; none of yours)"},
		{"the run's own", report.JobStatus{Partition: "cpu", ETAMS: at, TotalIters: 10, Step: 4, IterMS: 100}, "13:30:00"},
		{"none", report.JobStatus{Partition: "cpu", TotalIters: 10, Step: -1},
			"unknown: no iteration times yet, and no earlier confirmed run of this model and batch on this partition"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			got := eta(&c.s, now)
			if !strings.Contains(got, c.want) || (c.s.ETASource == "" && strings.Contains(got, "before the first")) {
				t.Errorf("ETA %q, want it to say %q", got, c.want)
			}
		})
	}
}

func TestLossLine(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		l    report.LossStatus
		want string
	}{
		{report.LossStatus{N: 3, Last: 0.5, Step: 30, Min: 0.5, MinStep: 30}, "0.5 at step 30"},
		{report.LossStatus{N: 40, Last: 0.4321, Step: 400, Min: 0.41, MinStep: 380, Trend: -0.123, FromStep: 100},
			"0.4321 at step 400 (lowest 0.41 at step 380), falling 12% since step 100"},
		{report.LossStatus{N: 40, Last: 2, Step: 400, Min: 1, MinStep: 10, Trend: 0.5, FromStep: 100, NonFinite: 2},
			"2 at step 400 (lowest 1 at step 10), rising 50% since step 100; 2 NaN or infinite"},
		{report.LossStatus{N: 40, Last: 1, Step: 400, Min: 1, MinStep: 400, Trend: 0.01, FromStep: 100}, "1 at step 400, flat since step 100"},
		{report.LossStatus{NonFinite: 5}, "5 NaN or infinite"},
	} {
		if got := lossLine(&tc.l); got != tc.want {
			t.Errorf("%+v: %q, want %q", tc.l, got, tc.want)
		}
	}
}

// TestStatusListWithoutJobTable: where no agent publishes the cluster's
// job table, `isched status` lists the user's submissions (the history)
// that Slurm still shows, with what Slurm says of them; a submission
// slurmctld forgot is left out.
func TestStatusListWithoutJobTable(t *testing.T) {
	h := newHarness(t)
	hist := filepath.Join(h.dir, ".cache", "isched", "submitted")
	if err := os.MkdirAll(filepath.Dir(hist), 0o700); err != nil {
		t.Fatal(err)
	}
	lines := "lab 500 lab-u1001-old-1\nlab 501 lab-u1001-fn-2\nlab2 501 lab2-u1001-x-3\nnot a line\n"
	if err := os.WriteFile(hist, []byte(lines), 0o600); err != nil {
		t.Fatal(err)
	}
	h.slurm.jobs = map[string]*slurm.JobInfo{"501": {JobID: "501", User: "alice", UID: 1001, State: "RUNNING", Partition: "cpu", NodeList: "cpu1",
		Comment: report.Plan{Lineage: "lab-u1001-fn-2", Ideal: "cpu"}.FormatComment()}}
	code, out, errOut := h.run("status", "--json")
	var got []slurmStatusJSON
	if err := json.Unmarshal([]byte(out), &got); code != ExitOK || err != nil || len(got) != 1 {
		t.Fatalf("exit %d %v %q %s", code, err, out, errOut)
	}
	if g := got[0]; g.JobID != 501 || g.Lineage != "lab-u1001-fn-2" || g.State != "RUNNING" || g.Source != "slurm" || g.Node != "cpu1" {
		t.Errorf("listed %+v", g)
	}
	if !strings.Contains(errOut, "no job table") || !strings.Contains(errOut, hist) {
		t.Errorf("stderr does not say where the list comes from: %q", errOut)
	}
	if code, out, _ := h.run("status"); code != ExitOK || !strings.Contains(out, "501") || !strings.Contains(out, "lab-u1001-fn-2") || strings.Contains(out, "500") {
		t.Errorf("text list: exit %d\n%s", code, out)
	}
}
