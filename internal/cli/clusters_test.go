package cli

import (
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/isched/isched/internal/report"
)

// lab2State is the second cluster's agent's snapshot: both partitions
// idle, no job.
func (h *harness) lab2State() {
	snap := &report.Snapshot{Cluster: "lab2", TakenMS: now.Add(-5 * time.Second).UnixMilli(), Partitions: []report.Partition{
		{Name: "cpu", State: "UP", Default: true, NodesTotal: 1, NodesIdle: 1, CPUsTotal: 4, CPUsIdle: 4, MaxTimeMin: i64(2880)},
		{Name: "gpu", State: "UP", NodesTotal: 1, NodesIdle: 1, CPUsTotal: 4, CPUsIdle: 4, GPUs: []report.GPUCount{{Total: 2, Idle: 2}}, MaxTimeMin: i64(2880)},
	}}
	env := report.NewEnvelope(report.KindSnapshot, now)
	env.Snapshot = snap
	h.setEnvelope("isched:lab2:snapshot", env)
	env = report.NewEnvelope(report.KindJobs, now)
	env.Jobs = &report.JobTable{Cluster: "lab2", TakenMS: now.UnixMilli()}
	h.setEnvelope("isched:lab2:jobs", env)
}

// withLab2 names lab2 in the clusters setting, with the isched.conf its
// login nodes would have.
func (h *harness) withLab2() {
	site, err := filepath.Abs("../../examples/site-lab2.json")
	if err != nil {
		h.t.Fatal(err)
	}
	conf := filepath.Join(h.dir, "lab2.conf")
	text := "# lab2's login nodes' isched.conf\ncluster = lab2\nsite = " + site + "\nrelay_addr = relay.lab2.example:6395\ncoordinator_uid = 998\n"
	if err := os.WriteFile(conf, []byte(text), 0o644); err != nil {
		h.t.Fatal(err)
	}
	h.env["ISCHED_CLUSTERS"] = "lab2=" + conf
}

// TestSeveralClusters: lab's gpu partition is full for an hour, lab2's is
// idle. The plan compares both clusters' partitions, submit sends the job
// to lab2 (sbatch --clusters) with lab2's own partition names, cluster and
// lineage, and status follows the lineage on lab2's keys.
func TestSeveralClusters(t *testing.T) {
	h := newHarness(t)
	h.labState()
	h.lab2State()
	h.withLab2()
	est := []string{"--model", "testdata/mnist_cnn.json", "--samples", "3200", "--epochs", "20", "--batch", "16", "--optimizer", "momentum",
		"--site", "../../examples/site-lab.json", "--receipts", "none"}

	code, out, errOut := h.run(append([]string{"plan"}, est...)...)
	if code != 0 {
		t.Fatalf("plan: exit %d: %s", code, errOut)
	}
	t.Logf("plan:\n%s", out)
	for _, want := range []string{"gpu@lab2", "cpu@lab2", "lab2: agent snapshot in Redis, 5s old"} {
		if !strings.Contains(out, want) {
			t.Errorf("plan output lacks %q", want)
		}
	}

	code, _, errOut = h.run(append(append([]string{"submit"}, est...), "--wrapper", "/opt/isched/bin/isched-wrapper", "--", "python3", "train.py")...)
	if code != 0 {
		t.Fatalf("submit: exit %d: %s", code, errOut)
	}
	if len(h.slurm.specs) != 1 || h.slurm.specs[0].Cluster != "lab2" {
		t.Fatalf("submitted %+v, want one job to cluster lab2", h.slurm.specs)
	}
	script := string(h.slurm.submitted[0])
	const lineage = "lab2-u1001-train-abababab"
	for _, want := range []string{"#SBATCH --partition=gpu\n", "ISCHED_CLUSTER=lab2", "lineage=" + lineage, "cluster=lab2",
		"ISCHED_RELAY_ADDR=relay.lab2.example:6395", "ISCHED_COORDINATOR_UID=998"} {
		if !strings.Contains(script, want) {
			t.Errorf("script lacks %q:\n%s", want, script)
		}
	}
	for _, line := range strings.Split(script, "\n") {
		if strings.HasPrefix(line, "#SBATCH") && strings.Contains(line, "@lab2") {
			t.Errorf("%s: a partition named with its cluster; sbatch --clusters wants lab2's own names", line)
		}
	}
	if strings.Contains(script, "relay.lab.example") {
		t.Errorf("the job on lab2 was given lab's relay, which takes lab's reports only:\n%s", script)
	}
	if !strings.Contains(script, "# plan: runs on gpu of cluster lab2;") {
		t.Errorf("the script's header does not say where the job runs:\n%s", script)
	}
	if !strings.Contains(errOut, "follow it with: isched status "+lineage) {
		t.Errorf("submit's message: %s", errOut)
	}

	h.setJSON("isched:lab2:job:{"+lineage+"}:status", report.JobStatus{V: 1, Cluster: "lab2", Lineage: lineage, JobID: 101, UID: 1001,
		State: "RUNNING", Partition: "gpu", Step: 40, TotalIters: 100})
	// the list: lab's jobs, then the user's jobs on lab2, JOB@CLUSTER
	env := report.NewEnvelope(report.KindJobs, now)
	p := report.Plan{Lineage: lineage, Cluster: "lab2", Ideal: "gpu"}
	env.Jobs = &report.JobTable{Cluster: "lab2", TakenMS: now.UnixMilli(), Jobs: []report.Job{{JobID: 101, User: "alice", UID: 1001, Partition: "gpu",
		State: "RUNNING", Comment: p.FormatComment()}}}
	h.setEnvelope("isched:lab2:jobs", env)
	code, out, errOut = h.run("status")
	if code != 0 || !regexpLine(out, `^101@lab2\s+`+lineage+`\s+RUNNING\s+gpu\s+40/100`) {
		t.Errorf("status (the list): exit %d\n%s%s", code, out, errOut)
	}
	for _, arg := range []string{lineage, "101"} { // the job id: lab doesn't know it, the submission history says lab2
		code, out, errOut = h.run("status", arg)
		if code != 0 || !strings.Contains(out, "RUNNING") || !strings.Contains(out, "40/100") {
			t.Errorf("status %s: exit %d\n%s%s", arg, code, out, errOut)
		}
	}
}

func TestSeveralClustersRefused(t *testing.T) {
	est := []string{"--model", "testdata/mnist_cnn.json", "--samples", "3200", "--epochs", "20", "--batch", "16", "--optimizer", "momentum",
		"--site", "../../examples/site-lab.json", "--receipts", "none", "--dry-run", "--wrapper", "/opt/isched/bin/isched-wrapper"}
	for _, tc := range []struct {
		name     string
		clusters string
		args     []string
		want     string
	}{
		{"the home cluster listed", "lab=/x.conf", nil, "names lab, the home cluster"},
		{"a file not there", "lab2=/nonexistent/lab2.conf", nil, "cluster lab2: stat /nonexistent/lab2.conf"},
		{"an unknown cluster", "", []string{"--partition-ideal", "gpu@lab3"}, "cluster lab3 is not one of the clusters setting's"},
		{"a fallback on another cluster", "", []string{"--partition-ideal", "gpu@lab2", "--fallback", "cpu"}, "a job runs on one cluster"},
		{"no relay on lab2", "norelay", []string{"--partition-ideal", "gpu@lab2"}, "cluster lab2: its isched.conf (the clusters setting) sets no relay_addr"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := newHarness(t)
			h.labState()
			h.lab2State()
			h.withLab2()
			switch tc.clusters {
			case "":
			case "norelay":
				conf := strings.TrimPrefix(h.env["ISCHED_CLUSTERS"], "lab2=")
				b, _ := os.ReadFile(conf)
				_ = os.WriteFile(conf, []byte(strings.ReplaceAll(string(b), "relay_addr", "# relay_addr")), 0o644)
			default:
				h.env["ISCHED_CLUSTERS"] = tc.clusters
			}
			if tc.clusters == "norelay" { // a dry run says what is missing: submit for real
				est = slices.DeleteFunc(slices.Clone(est), func(a string) bool { return a == "--dry-run" })
			}
			args := append(append(append([]string{"submit"}, est...), tc.args...), "--", "python3", "train.py")
			code, _, errOut := h.run(args...)
			if code == 0 || !strings.Contains(errOut, tc.want) {
				t.Errorf("exit %d, stderr %q: want a failure naming %q", code, errOut, tc.want)
			}
		})
	}
}

func regexpLine(out, pattern string) bool {
	return regexp.MustCompile(`(?m)` + pattern).MatchString(out)
}
