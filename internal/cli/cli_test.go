package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"

	"github.com/isched/isched/internal/report"
	"github.com/isched/isched/internal/slurm"
	"github.com/isched/isched/internal/stream"
)

var update = flag.Bool("update", false, "rewrite the golden files in testdata/")

// now is the fixed clock of every test.
var now = time.Date(2026, 5, 9, 12, 0, 0, 0, time.UTC)

// fakeSlurm answers like a cluster whose controller is unreachable, unless
// told otherwise, and records submissions.
type fakeSlurm struct {
	state     *slurm.State
	jobs      map[string]*slurm.JobInfo
	submitted [][]byte
	specs     []slurm.SubmitSpec
	cancelled []string
	// showErr, when set, is what ShowJob answers for a job it does not
	// hold (default slurm.ErrNotFound: scontrol's "Invalid job id")
	showErr error
	// acct is Slurm's accounting (sacct); nil: the cluster has none
	acct map[string]*slurm.AcctJob
	// partitions is scontrol show partition; nil: it fails
	partitions []slurm.PartitionInfo
}

func (f *fakeSlurm) Partitions(context.Context) ([]slurm.PartitionInfo, error) {
	if f.partitions == nil {
		return nil, errors.New("scontrol: error: Unable to contact slurm controller")
	}
	return f.partitions, nil
}

func (f *fakeSlurm) AcctJob(_ context.Context, id string) (*slurm.AcctJob, error) {
	if f.acct == nil {
		return nil, errors.New("sacct: error: Problem talking to the database: Connection refused")
	}
	if j, ok := f.acct[id]; ok {
		return j, nil
	}
	return nil, fmt.Errorf("sacct: job %s: %w", id, slurm.ErrNotFound)
}

func (f *fakeSlurm) Cancel(_ context.Context, id string) error {
	if _, ok := f.jobs[id]; !ok && f.jobs != nil {
		return fmt.Errorf("%w: scancel: Invalid job id specified", slurm.ErrNotFound)
	}
	f.cancelled = append(f.cancelled, id)
	if j := f.jobs[id]; j != nil && (j.State == "RUNNING" || j.State == "PENDING") {
		j.State = "CANCELLED" // a COMPLETING job ends as it was ending
	}
	return nil
}

func (f *fakeSlurm) SubmitWith(_ context.Context, script []byte, spec slurm.SubmitSpec) (string, error) {
	f.submitted = append(f.submitted, script)
	f.specs = append(f.specs, spec)
	return fmt.Sprint(100 + len(f.submitted)), nil
}

func (f *fakeSlurm) Poll(context.Context) (*slurm.State, error) {
	if f.state == nil {
		return nil, fmt.Errorf("slurm_load_partitions: Unable to contact slurm controller")
	}
	return f.state, nil
}

func (f *fakeSlurm) ShowJob(_ context.Context, id string) (*slurm.JobInfo, error) {
	if j, ok := f.jobs[id]; ok {
		return j, nil
	}
	if f.showErr != nil {
		return nil, f.showErr
	}
	return nil, slurm.ErrNotFound
}

type harness struct {
	t     *testing.T
	mr    *miniredis.Miniredis
	env   map[string]string
	slurm *fakeSlurm
	dir   string
	// shownAddr, when set, is the ISCHED_REDIS_ADDR the app sees (and
	// writes into batch scripts) while it still talks to miniredis.
	shownAddr string
	// onSleep, when set, runs at each App.Sleep (n counts them from 1);
	// no time passes
	onSleep func(n int)
	slept   int
	// homes is the app's /home (Stat and Lstat): alice's working
	// directory, and what a test adds
	homes fakeHomes
}

// fakeHomes is a test's /home, with owners: the directories in it are
// these (harnessStat's files in harnessCwd aside). The harness works in
// harnessCwd as uid 1001; the real /home/alice, where there is one,
// belongs to whichever uid useradd gave alice, and the submissions of
// earlier tests may have left directories of root's in it.
type fakeHomes map[string]ownedFile

// ownedFile is a file of mode owned by uid.
type ownedFile struct {
	mode fs.FileMode
	uid  int
}

func (f ownedFile) Name() string       { return "f" }
func (f ownedFile) Size() int64        { return 1 }
func (f ownedFile) Mode() fs.FileMode  { return f.mode }
func (f ownedFile) ModTime() time.Time { return time.Time{} }
func (f ownedFile) IsDir() bool        { return f.mode.IsDir() }
func (f ownedFile) Sys() any           { return &syscall.Stat_t{Uid: uint32(f.uid)} }

func aliceHome() fakeHomes {
	return fakeHomes{"/home/alice": {fs.ModeDir | 0o755, 1001}, "/home/alice/proj": {fs.ModeDir | 0o755, 1001}}
}

// stat is harnessStat, but for the entries of f (a link there leads
// nowhere) and the rest of /home, where nothing else exists.
func (f fakeHomes) stat(p string) (fs.FileInfo, error) {
	if fi, ok := f[p]; ok && fi.mode&fs.ModeSymlink == 0 {
		return fi, nil
	}
	if strings.HasPrefix(p, "/home/") && !strings.HasPrefix(p, harnessCwd+"/") {
		return nil, &fs.PathError{Op: "stat", Path: p, Err: fs.ErrNotExist}
	}
	return harnessStat(p)
}

// lstat is os.Lstat, but for /home, where only the entries of f exist.
func (f fakeHomes) lstat(p string) (fs.FileInfo, error) {
	if fi, ok := f[p]; ok {
		return fi, nil
	}
	if strings.HasPrefix(p, "/home/") {
		return nil, &fs.PathError{Op: "lstat", Path: p, Err: fs.ErrNotExist}
	}
	return os.Lstat(p)
}

// newHarness starts miniredis with the viewer user and an app environment
// pointing at it; the repository's examples and testdata are reachable as
// relative paths from the package directory.
func newHarness(t *testing.T) *harness {
	t.Helper()
	mr := miniredis.RunT(t)
	mr.RequireUserAuth("viewer", "viewer-secret")
	dir := t.TempDir()
	pw := filepath.Join(dir, "viewer.pass")
	if err := os.WriteFile(pw, []byte("viewer-secret\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	return &harness{t: t, mr: mr, slurm: &fakeSlurm{}, dir: dir, homes: aliceHome(), env: map[string]string{
		"ISCHED_REDIS_ADDR":          mr.Addr(),
		"ISCHED_REDIS_PASSWORD_FILE": pw,
		"ISCHED_RELAY_ADDR":          "relay.lab.example:6395", // the default path: jobs report through it
		"ISCHED_CLUSTER":             "lab",
		"PATH":                       "/usr/bin:/bin",
		"HOME":                       dir,
	}}
}

func (h *harness) app() *App {
	getenv := func(k string) string {
		if k == "ISCHED_REDIS_ADDR" && h.shownAddr != "" {
			return h.shownAddr
		}
		return h.env[k]
	}
	var open func(ctx context.Context) (Store, error)
	if h.shownAddr != "" {
		open = func(ctx context.Context) (Store, error) {
			cfg, err := stream.ConfigFromEnv(func(k string) string { return h.env[k] }, "viewer")
			if err != nil {
				return nil, err
			}
			return stream.Open(ctx, cfg)
		}
	}
	environ := func() []string {
		var kv []string
		for k, v := range h.env {
			kv = append(kv, k+"="+v)
		}
		return kv
	}
	return &App{
		Getenv:     getenv,
		Environ:    environ,
		OpenStore:  open,
		Now:        func() time.Time { return now },
		Slurm:      h.slurm,
		Executable: func() (string, error) { return "/opt/isched/bin/isched", nil },
		Getwd:      func() (string, error) { return harnessCwd, nil },
		Stat:       h.homes.stat,
		Lstat:      h.homes.lstat,
		// a submission's checkpoint directory under /home is made in the
		// fake homes: a test never writes into this machine's /home/alice
		MakeJobDir: func(dir string) error {
			if !strings.HasPrefix(dir, "/home/") {
				return os.MkdirAll(dir, 0o750)
			}
			if _, ok := h.homes[dir]; !ok {
				h.homes[dir] = ownedFile{fs.ModeDir | 0o750, os.Geteuid()}
			}
			return nil
		},
		Username: func() string { return "alice" },
		UID:      func() int { return 1001 },
		Random:   func(n int) []byte { return bytes.Repeat([]byte{0xab}, n) },
		Terminal: func(io.Writer) bool { return false },
		Sleep: func(context.Context, time.Duration) error {
			h.slept++
			if h.onSleep != nil {
				h.onSleep(h.slept)
			}
			return nil
		},
	}
}

// harnessCwd is where the harness's alice works: her training scripts are
// there (harnessStat), whatever this machine's /home holds.
const harnessCwd = "/home/alice/proj"

// harnessStat is os.Stat, but for harnessCwd and the files in it, which
// it says are there (alice's directory, her scripts: 0644 regular files).
func harnessStat(p string) (fs.FileInfo, error) {
	switch {
	case p == harnessCwd:
		return fakeInfo{name: "proj", mode: fs.ModeDir | 0o755}, nil
	case strings.HasPrefix(p, harnessCwd+"/"):
		return fakeInfo{name: filepath.Base(p), mode: 0o644}, nil
	}
	return os.Stat(p)
}

type fakeInfo struct {
	name string
	mode fs.FileMode
}

func (f fakeInfo) Name() string       { return f.name }
func (f fakeInfo) Size() int64        { return 0 }
func (f fakeInfo) Mode() fs.FileMode  { return f.mode }
func (f fakeInfo) ModTime() time.Time { return time.Time{} }
func (f fakeInfo) IsDir() bool        { return f.mode.IsDir() }
func (f fakeInfo) Sys() any           { return nil }

// run runs the CLI and returns exit code, stdout and stderr.
func (h *harness) run(args ...string) (int, string, string) {
	h.t.Helper()
	var out, errb bytes.Buffer
	code := h.app().Run(context.Background(), args, &out, &errb)
	return code, out.String(), errb.String()
}

func (h *harness) setEnvelope(key string, env *report.Envelope) {
	h.t.Helper()
	b, err := report.Encode(env)
	if err != nil {
		h.t.Fatal(err)
	}
	if err := h.mr.Set(key, string(b)); err != nil {
		h.t.Fatal(err)
	}
}

func (h *harness) setJSON(key string, v any) {
	h.t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		h.t.Fatal(err)
	}
	if err := h.mr.Set(key, string(b)); err != nil {
		h.t.Fatal(err)
	}
}

// golden compares got with testdata/name, rewriting it under -update.
func golden(t *testing.T, name, got string) {
	t.Helper()
	path := filepath.Join("testdata", name)
	if *update {
		if err := os.MkdirAll("testdata", 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, []byte(got), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run go test -update to create it)", err)
	}
	if got != string(want) {
		t.Errorf("output differs from %s (go test -update rewrites it):\n--- got\n%s\n--- want\n%s", path, got, want)
	}
}

func i64(v int64) *int64 { return &v }

func intp(v int) *int { return &v }

// setJobs publishes jobs as lab's job table, taken now, as the agent does.
func (h *harness) setJobs(jobs []report.Job) {
	h.t.Helper()
	env := report.NewEnvelope(report.KindJobs, now)
	env.Jobs = &report.JobTable{Cluster: "lab", TakenMS: now.UnixMilli(), Jobs: jobs}
	h.setEnvelope("isched:lab:jobs", env)
}

// labState is the local cluster: gpu full until jobs end (one by its limit
// in 80 min, one predicted by the coordinator to end in 60 min) with one job
// pending ahead, gpu-dev busy, the CPU partitions idle.
// idleGPU2 is labState after bob's job 42 on gpu2 ended: gpu2's two GPUs
// idle; carol's job 44 still waits, or (pending false) was cancelled.
func (h *harness) idleGPU2(pending bool) {
	snap := labSnapshot()
	for i := range snap.Partitions {
		if p := &snap.Partitions[i]; p.Name == "gpu" {
			p.NodesIdle, p.NodesAlloc, p.CPUsIdle, p.GPUs = 1, 1, 4, []report.GPUCount{{Total: 4, Alloc: 2, Idle: 2}}
		}
	}
	env := report.NewEnvelope(report.KindSnapshot, now)
	env.Snapshot = snap
	h.setEnvelope("isched:lab:snapshot", env)
	jobs := &report.JobTable{Cluster: "lab", TakenMS: now.UnixMilli(), Jobs: labJobs()[:1]}
	if pending {
		jobs.Jobs = append(jobs.Jobs, labJobs()[3])
	}
	env = report.NewEnvelope(report.KindJobs, now)
	env.Jobs = jobs
	h.setEnvelope("isched:lab:jobs", env)
}

func labSnapshot() *report.Snapshot {
	return &report.Snapshot{Cluster: "lab", TakenMS: now.Add(-10 * time.Second).UnixMilli(), Partitions: []report.Partition{
		{Name: "dev", State: "UP", NodesTotal: 1, NodesIdle: 1, CPUsTotal: 2, CPUsIdle: 2, MaxTimeMin: i64(120), DefaultTimeMin: i64(30), PriorityTier: 10},
		{Name: "gpu-dev", State: "UP", NodesTotal: 1, NodesAlloc: 1, CPUsTotal: 4, CPUsIdle: 0, GPUs: []report.GPUCount{{Total: 1, Alloc: 1}}, MaxTimeMin: i64(120)},
		{Name: "cpu", State: "UP", Default: true, NodesTotal: 2, NodesIdle: 2, CPUsTotal: 8, CPUsIdle: 8, MaxTimeMin: i64(2880)},
		{Name: "gpu", State: "UP", NodesTotal: 2, NodesAlloc: 2, CPUsTotal: 8, CPUsIdle: 0, GPUs: []report.GPUCount{{Total: 4, Alloc: 4}}, MaxTimeMin: i64(2880)},
		{Name: "scavenger", State: "UP", NodesTotal: 4, NodesIdle: 2, NodesAlloc: 2, CPUsTotal: 16, CPUsIdle: 8, GPUs: []report.GPUCount{{Total: 4, Alloc: 4}},
			MaxTimeMin: i64(1440), PriorityTier: 1},
	}}
}

func labJobs() []report.Job {
	start := now.Add(-40 * time.Minute).UnixMilli()
	plan := report.Plan{Lineage: "lab-blocker-1", Ideal: "gpu", IdealGres: "gpu:2", Total: 1000}
	return []report.Job{
		{JobID: 41, Name: "blocker", User: "bob", UID: 1002, Partition: "gpu", State: "RUNNING", Nodes: "gpu1", NodeCount: 1, CPUs: 4, Gres: "gpu:2",
			TimeLimitMin: i64(120), SubmitMS: start, StartMS: start},
		{JobID: 42, Name: "train", User: "bob", UID: 1002, Partition: "gpu", State: "RUNNING", Nodes: "gpu2", NodeCount: 1, CPUs: 4, Gres: "gpu:2",
			TimeLimitMin: i64(600), SubmitMS: start, StartMS: start, Comment: plan.FormatComment()},
		{JobID: 43, Name: "gdev", User: "bob", UID: 1002, Partition: "gpu-dev", State: "RUNNING", Nodes: "gdev1", NodeCount: 1, CPUs: 4, Gres: "gpu:1",
			TimeLimitMin: i64(120), SubmitMS: start, StartMS: start},
		{JobID: 44, Name: "queued\x1b[31m", User: "carol", UID: 1003, Partition: "gpu", State: "PENDING", Reason: "Resources", NodeCount: 1, CPUs: 2,
			Gres: "gpu:1", TimeLimitMin: i64(30), SubmitMS: start, ExpectedStartMS: now.Add(80 * time.Minute).UnixMilli()},
	}
}

func (h *harness) labState() {
	env := report.NewEnvelope(report.KindSnapshot, now)
	env.Snapshot = labSnapshot()
	h.setEnvelope("isched:lab:snapshot", env)
	jobs := &report.JobTable{Cluster: "lab", TakenMS: now.UnixMilli(), Jobs: labJobs()}
	env = report.NewEnvelope(report.KindJobs, now)
	env.Jobs = jobs
	h.setEnvelope("isched:lab:jobs", env)
	h.setJSON("isched:lab:job:{lab-blocker-1}:status", report.JobStatus{V: 1, Cluster: "lab", Lineage: "lab-blocker-1", JobID: 42,
		State: "RUNNING", Step: 600, TotalIters: 1000, ETAMS: now.Add(60 * time.Minute).UnixMilli()})
}

func TestEstimateSeedTable(t *testing.T) {
	h := newHarness(t)
	for _, tc := range []struct {
		golden, model string
		byHand        []handRow
	}{
		{"estimate_seed_resnet50.txt", "../plan/testdata/resnet50.json", resnet50ByHand},
		{"estimate_seed_resnet50_448.txt", "../plan/testdata/resnet50_448.json", resnet50At448ByHand},
	} {
		code, out, errOut := h.run("estimate", "--model", tc.model, "--samples", "20000", "--epochs", "50", "--batch", "8,16,32,64",
			"--site", "../../examples/site-seed.json", "--receipts", "none", "--state", "none", "--explain")
		if code != 0 {
			t.Fatalf("exit %d: %s", code, errOut)
		}
		golden(t, tc.golden, out)
		checkEstimateByHand(t, h, tc.model, out, tc.byHand)
	}
}

func TestEstimateLabWithStateAndReceipts(t *testing.T) {
	h := newHarness(t)
	h.labState()
	// receipts of two runs of the mnist-like CNN on cpu, batch 8 and 16
	model := "testdata/mnist_cnn.json"
	code, out, errOut := h.run("estimate", "--model", model, "--samples", "3200", "--epochs", "2", "--batch", "8,16,32",
		"--optimizer", "momentum", "--site", "../../examples/site-lab.json", "--receipts", "none", "--json")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	var rows []jsonRow
	if err := json.Unmarshal([]byte(out), &rows); err != nil {
		t.Fatal(err)
	}
	m, err := loadModel(model)
	if err != nil {
		t.Fatal(err)
	}
	key := m.Fingerprint() + ":momentum:fp32"
	alice := 1001 // the harness's user: her own receipts
	for _, b := range []int{8, 16} {
		r := report.Receipt{Model: key, Batch: b, Partition: "cpu", IterMS: 20 + 2*float64(b), PeakRSS: int64(600+b) << 19, Iters: 100, UID: &alice}
		v, _ := json.Marshal(r)
		if _, err := h.mr.RPush("isched:lab:coord:receipts", string(v)); err != nil {
			t.Fatal(err)
		}
	}
	code, out, errOut = h.run("estimate", "--model", model, "--samples", "3200", "--epochs", "2", "--batch", "8,16,32",
		"--optimizer", "momentum", "--site", "../../examples/site-lab.json")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	golden(t, "estimate_lab_receipts.txt", out)
	if !strings.Contains(out, "32     lab-cpu    331.3 MiB RSS") || !strings.Contains(out, "memory 316.0 MiB + margin 15.3 MiB (4.8 %") {
		t.Errorf("batch 32 on lab-cpu is not the fit 300 MiB + 0.5 MiB x 32 and its margin:\n%s", out)
	}
}

func TestPlanLab(t *testing.T) {
	h := newHarness(t)
	h.labState()
	// ResNet-18 on 128x128 images: about 5 h on a lab CPU node, 1.3 h on a
	// (pretend) lab GPU, which frees in an hour
	code, out, errOut := h.run("plan", "--model", "testdata/resnet18_128.json", "--samples", "50000", "--epochs", "10", "--batch", "32",
		"--optimizer", "momentum", "--site", "../../examples/site-lab.json", "--receipts", "none")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	golden(t, "plan_lab.txt", out)
	for _, want := range []string{"after 1 running job(s) end (1 by isched's prediction, 0 by time limit), behind 1 pending",
		"with migration:    start now on", "recommendation:    with migration"} {
		if !strings.Contains(out, want) {
			t.Errorf("plan output lacks %q", want)
		}
	}
}

func TestPlanSeedWithoutState(t *testing.T) {
	h := newHarness(t)
	code, out, errOut := h.run("plan", "--model", "../plan/testdata/resnet50.json", "--samples", "20000", "--epochs", "50", "--batch", "64",
		"--site", "../../examples/site-seed.json", "--receipts", "none", "--state", "none")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	golden(t, "plan_seed_nostate.txt", out)
	checkPlanByHand(t, h, out)
}

func TestUsageAndInputErrors(t *testing.T) {
	h := newHarness(t)
	bad := filepath.Join(h.dir, "bad.json")
	if err := os.WriteFile(bad, []byte(`{"v": 1, "name": "x", "parameters": "many"}`), 0o644); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		args   []string
		code   int
		stderr string
	}{
		{nil, ExitUsage, "usage: isched <command>"},
		{[]string{"frobnicate"}, ExitUsage, `unknown command "frobnicate"`},
		{[]string{"estimate", "--samples", "10", "--batch", "8"}, ExitUsage, "--model is required"},
		{[]string{"estimate", "--model", "nosuch.json", "--samples", "10", "--batch", "8", "--site", "../../examples/site-lab.json"}, ExitError,
			"--model: open nosuch.json: no such file"},
		{[]string{"estimate", "--model", "../plan/testdata/resnet50.json", "--samples", "-100", "--batch", "8"}, ExitUsage,
			"--samples -100: want the training samples per epoch, a positive number"},
		{[]string{"estimate", "--model", bad, "--samples", "10", "--batch", "8", "--site", "../../examples/site-lab.json"}, ExitError,
			`field parameters: want an integer, got a string`},
		{[]string{"estimate", "--model", "../plan/testdata/resnet50.json", "--samples", "10", "--batch", "8,x", "--site", "../../examples/site-lab.json"},
			ExitUsage, `--batch "8,x"`},
		{[]string{"estimate", "--model", "../plan/testdata/resnet50.json", "--samples", "10", "--batch", "8", "--optimizer", "lbfgs",
			"--site", "../../examples/site-lab.json"}, ExitUsage, `optimizer "lbfgs"`},
		{[]string{"estimate", "--model", "../plan/testdata/resnet50.json", "--samples", "10", "--batch", "8"}, ExitUsage, "no site catalogue"},
		{[]string{"submit", "--dry-run"}, ExitUsage, "no training command"},
		// without a --model the counts still make the run's total: refused as with one
		{[]string{"submit", "--dry-run", "--samples", "-100", "--batch", "8", "--", "/usr/bin/python3", "x.py"}, ExitUsage,
			"--samples -100: want the training samples per epoch, a positive number"},
		{[]string{"submit", "--dry-run", "--epochs", "0", "--", "/usr/bin/python3", "x.py"}, ExitUsage, "--epochs 0: must be positive"},
		{[]string{"submit", "--dry-run", "--model", "../plan/testdata/resnet50.json", "--samples", "10", "--batch", "100000", "--receipts", "none",
			"--site", "../../examples/site-lab.json", "--", "/usr/bin/python3", "x.py"}, ExitError,
			"batch size 100000: no partition can run this batch size: dev (lab-dev): memory: needs "},
		{[]string{"submit", "--policy", "soon", "--", "python3", "x.py"}, ExitUsage, `policy "soon"`},
		{[]string{"submit", "--policy", "cheapest", "--", "python3", "x.py"}, ExitUsage, "needs an estimate"},
		{[]string{"status", "a b"}, ExitUsage, "neither a job id nor a lineage"},
		{[]string{"report", "1", "--plot", "x.gif"}, ExitUsage, "want a .png or .svg"},
	}
	for _, tt := range tests {
		code, _, errOut := h.run(tt.args...)
		if code != tt.code || !strings.Contains(errOut, tt.stderr) {
			t.Errorf("isched %q: exit %d, stderr %q; want exit %d and %q", tt.args, code, errOut, tt.code, tt.stderr)
		}
	}
}

// TestHelpAndMistakes: help of every kind goes to stdout with exit 0 and
// nothing on stderr; a mistyped command or flag goes to stderr with exit 2
// and the closest known name.
func TestHelpAndMistakes(t *testing.T) {
	h := newHarness(t)
	cases := []struct {
		args        []string
		code        int
		out, errOut string // want in stdout, stderr ("" : that stream stays empty)
	}{
		{[]string{"-h"}, ExitOK, "usage: isched <command>", ""},
		{[]string{"--help"}, ExitOK, "usage: isched <command>", ""},
		{[]string{"help"}, ExitOK, "usage: isched <command>", ""},
		{[]string{"status", "-h"}, ExitOK, "usage: isched status [JOB|LINEAGE] [--json] [--watch]\n\nflags:\n  -h, --help                help for status\n      --interval duration", ""},
		{[]string{"status", "42", "--help"}, ExitOK, "usage: isched status", ""},
		{[]string{"help", "stop"}, ExitOK, "usage: isched stop JOB|LINEAGE [--wait D]", ""},
		{[]string{"submit", "--help"}, ExitOK, "  -p, --partition-ideal string", ""},
		{[]string{"completion", "bash"}, ExitOK, "complete -o default -F __start_isched isched", ""},
		{[]string{"completion", "--help"}, ExitOK, "usage: isched completion", ""},
		{[]string{"version"}, ExitOK, "isched ", ""},
		{[]string{"--version"}, ExitOK, "isched ", ""},
		{[]string{"site"}, ExitUsage, "", "isched site: want a command: isched site probe\n"},
		{[]string{"site", "prob"}, ExitUsage, "", `isched site: unknown command "prob" (did you mean "probe"?)`},
		{[]string{"report", "-h"}, ExitOK, "usage: isched report JOB|LINEAGE [--plot FILE.png|FILE.svg] [--json]", ""},
		{[]string{"estimate", "-h"}, ExitOK, "usage: isched estimate", ""},
		{[]string{"plan", "-h"}, ExitOK, "usage: isched plan", ""},
		{[]string{"profile", "-h"}, ExitOK, "usage: isched profile", ""},
		{[]string{"site", "-h"}, ExitOK, "usage: isched site probe", ""},
		{[]string{"help", "site", "probe"}, ExitOK, "usage: isched site probe", ""},
		{[]string{"stauts", "42"}, ExitUsage, "", `isched: unknown command "stauts" (did you mean "status"?); 'isched help' lists the commands` + "\n"},
		{[]string{"help", "reprot"}, ExitUsage, "", `(did you mean "report"?)`},
		{[]string{"frobnicate"}, ExitUsage, "", "isched: unknown command \"frobnicate\"; 'isched help' lists the commands\n"},
		{[]string{"submit", "--parition-ideal", "gpu", "--", "python3", "x.py"}, ExitUsage, "",
			"isched submit: unknown flag: --parition-ideal (did you mean --partition-ideal?)\n"},
		// a long flag with one dash, as Go's flag package took it
		{[]string{"status", "-json"}, ExitUsage, "", "isched status: unknown shorthand flag: 'j' in -json (did you mean --json?)\n"},
		// sbatch's attached short value, and the long spelling sbatch has
		{[]string{"submit", "--dry-run", "-pnosuch", "--partition=gpu", "--nosuch"}, ExitUsage, "", "isched submit: unknown flag: --nosuch\n"},
		{[]string{"submit", "--partiton-ideal=gpu", "--", "python3", "x.py"}, ExitUsage, "", "(did you mean --partition-ideal?)\n"},
		{[]string{"stop", "42", "--wiat", "1s"}, ExitUsage, "", "isched stop: unknown flag: --wiat (did you mean --wait?)\n"},
		// the mistake first, then one usage line, not every flag (issue 43)
		{[]string{"status", "--jsn"}, ExitUsage, "", "isched status: unknown flag: --jsn (did you mean --json?)\n" +
			"usage: isched status [JOB|LINEAGE] [--json] [--watch] (isched status --help lists the flags)\n"},
		{[]string{"site", "probe", "--loacl"}, ExitUsage, "", "(did you mean --local?)\n"},
		{[]string{"stop", "--wait", "soon", "42"}, ExitUsage, "", "isched stop: invalid argument \"soon\" for \"--wait\" flag: time: invalid duration \"soon\"\n"},
		{[]string{"stop"}, ExitUsage, "", "isched stop: want one job id or lineage"},
	}
	for _, c := range cases {
		code, out, errOut := h.run(c.args...)
		if code != c.code || !strings.Contains(out, c.out) || !strings.Contains(errOut, c.errOut) ||
			(c.out == "") != (out == "") || (c.errOut == "") != (errOut == "") {
			t.Errorf("isched %q: exit %d, stdout %q, stderr %q; want exit %d, stdout ~%q, stderr ~%q", c.args, code, out, errOut, c.code, c.out, c.errOut)
		}
		if strings.Contains(errOut, "unknown flag") && strings.Contains(errOut, "flags:") {
			t.Errorf("isched %q: every flag listed after a mistake:\n%s", c.args, errOut)
		}
		if strings.Count(errOut, "unknown flag") > 1 {
			t.Errorf("isched %q: the mistake is printed twice:\n%s", c.args, errOut)
		}
	}
}
