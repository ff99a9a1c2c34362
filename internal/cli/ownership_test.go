package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"strings"
	"testing"

	"github.com/isched/isched/internal/plan"
	"github.com/isched/isched/internal/report"
)

// TestStatusNotShadowedBySquatter: bob's job 90 held the wrapper's default
// lineage of job 96 (lab-96) before job 96, alice's, existed, and reported
// into it (what a coordinator without the reserved names let happen).
// `isched status 96` must not show bob's job as job 96: it says whose
// record the lineage holds and fails, and the lineage asked for by name
// does not borrow a job line from another user's comment.
func TestStatusNotShadowedBySquatter(t *testing.T) {
	h := newHarness(t)
	squat := movedStatus()
	squat.Lineage, squat.JobID, squat.User, squat.UID, squat.Plan = "lab-96", 90, "bob", 1002, nil
	h.setJSON("isched:lab:job:{lab-96}:status", squat)
	h.setJobs([]report.Job{
		{JobID: 90, Name: "squat", User: "bob", UID: 1002, Partition: "cpu", State: "RUNNING"},
		{JobID: 96, Name: "train", User: "alice", UID: 1001, Partition: "cpu", State: "RUNNING"},
		// bob's job 91 names alice's lineage in its comment
		{JobID: 91, Name: "copy", User: "bob", UID: 1002, Partition: "cpu", State: "PENDING",
			Comment: report.Plan{Lineage: "lab-train-abababab", Ideal: "cpu"}.FormatComment()},
	})
	code, out, errOut := h.run("status", "96")
	if code != ExitError || strings.Contains(out, "user bob") ||
		!strings.Contains(errOut, "lineage lab-96 tracks job 90 of uid 1002, but job 96 belongs to uid 1001: not shown as job 96's status") {
		t.Errorf("status 96: exit %d\n%s\n%s", code, out, errOut)
	}
	// same owner, another job (a default name is one job's only)
	squat.UID, squat.User = 1001, "alice"
	h.setJSON("isched:lab:job:{lab-96}:status", squat)
	if code, _, errOut := h.run("status", "96", "--json"); code != ExitError || !strings.Contains(errOut, "lineage lab-96 tracks job 90, not job 96") {
		t.Errorf("status 96 --json: exit %d %s", code, errOut)
	}
	// the real record shows; by name, bob's job 91 is not shown beside it
	h.setJSON("isched:lab:job:{lab-train-abababab}:status", movedStatus())
	code, out, errOut = h.run("status", "lab-train-abababab")
	if code != 0 || !strings.Contains(out, "job 42 · lineage lab-train-abababab · user alice") || strings.Contains(out, "job table lists this lineage as job 91") {
		t.Errorf("status by lineage: exit %d\n%s%s", code, out, errOut)
	}
}

// TestEstimateNotPoisonedByAnotherUser: bob ran a tiny job under a
// ResNet-18 plan comment and it reported 1 MiB and 2 ms (the coordinator
// wrote a Slurm-confirmed receipt: it was his own job). Alice's estimate
// stays at the static figures (one user cannot take it below them); bob's
// own estimate uses his receipt; unconfirmed receipts of others and
// receipts without an owner are not used at all.
func TestEstimateNotPoisonedByAnotherUser(t *testing.T) {
	h := newHarness(t)
	h.labState()
	model := "testdata/resnet18_128.json"
	args := []string{"estimate", "--model", model, "--samples", "3200", "--epochs", "1", "--batch", "16",
		"--optimizer", "momentum", "--site", "../../examples/site-lab.json", "--json"}
	rowsOf := func(out string) map[string]jsonRow {
		var rows []jsonRow
		if err := json.Unmarshal([]byte(out), &rows); err != nil {
			t.Fatalf("%v: %s", err, out)
		}
		m := map[string]jsonRow{}
		for _, r := range rows {
			m[r.NodeType] = r
		}
		return m
	}
	code, out, errOut := h.run(append(args, "--receipts", "none")...)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	static := rowsOf(out)["lab-cpu"]
	m, err := loadModel(model)
	if err != nil {
		t.Fatal(err)
	}
	key := m.Fingerprint() + ":momentum:fp32"
	bob := 1002
	for i, r := range []report.Receipt{
		{Model: key, Batch: 16, Partition: "cpu", IterMS: 2, PeakRSS: 1 << 20, Iters: 100, User: "bob", UID: &bob, Confirmed: true},
		{Model: key, Batch: 16, Partition: "cpu", IterMS: 2, PeakRSS: 1 << 20, Iters: 100, User: "bob", UID: &bob},
		{Model: key, Batch: 16, Partition: "cpu", IterMS: 2, PeakRSS: 1 << 20, Iters: 100, User: "alice", Confirmed: true},
	} {
		v, _ := json.Marshal(r)
		if _, err := h.mr.RPush("isched:lab:coord:receipts", string(v)); err != nil {
			t.Fatal(i, err)
		}
	}
	for _, extra := range [][]string{nil, {"--pooled=false"}} {
		code, out, errOut = h.run(append(args, extra...)...)
		if code != 0 {
			t.Fatalf("exit %d: %s", code, errOut)
		}
		if got := rowsOf(out)["lab-cpu"]; got.MemoryBytes != static.MemoryBytes || got.HostBytes != static.HostBytes ||
			got.IterSeconds != static.IterSeconds || got.Source != plan.Static {
			t.Errorf("alice %v: %s %d bytes (host %d) %.4f s, want the static %d bytes %.4f s (%s)", extra, got.Source, got.MemoryBytes,
				got.HostBytes, got.IterSeconds, static.MemoryBytes, static.IterSeconds, got.Basis)
		}
	}
	a := h.app()
	a.UID, a.Username = func() int { return bob }, func() string { return "bob" }
	var o, e bytes.Buffer
	if code := a.Run(context.Background(), args, &o, &e); code != 0 {
		t.Fatalf("bob: exit %d: %s", code, e.String())
	}
	if got := rowsOf(o.String())["lab-cpu"]; got.MemoryBytes-got.MarginBytes != 1<<20 || got.MarginBytes <= 0 || got.Source != plan.Measured {
		t.Errorf("bob's own receipts: %s %d bytes (margin %d), want measured 1 MiB + a margin", got.Source, got.MemoryBytes, got.MarginBytes)
	}
}
