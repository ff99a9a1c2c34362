package cli

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"github.com/isched/isched/internal/report"
	"github.com/isched/isched/internal/slurm"
	"github.com/isched/isched/internal/testutil"
)

const fakeIterPattern = `step (?P<step>\d+)/(?P<total>\d+)`

func TestMain(m *testing.M) {
	code := m.Run()
	testutil.RemoveBinaries()
	os.Exit(code)
}

func readProfiled(t *testing.T, path string) []report.Receipt {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var out []report.Receipt
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		var r report.Receipt
		if err := json.Unmarshal(sc.Bytes(), &r); err != nil {
			t.Fatalf("receipt %q: %v", sc.Text(), err)
		}
		out = append(out, r)
	}
	return out
}

// TestProfileLocal profiles the fake trainer at batch 8 and 16 here: the
// receipts are kept, marked profiled and the user's; iteration time and
// memory differ by batch as the fake dictates; the slow warm-up
// iterations are left out; the trainer is gone afterwards; and the
// estimate then says profiled and uses the figures.
func TestProfileLocal(t *testing.T) {
	h := newHarness(t)
	wrapper := testutil.Binary(t, "isched-wrapper", "./wrapper")
	trainer, err := filepath.Abs("testdata/fake_trainer.py")
	if err != nil {
		t.Fatal(err)
	}
	pids := t.TempDir()
	code, _, errOut := h.run("profile", "--model", "testdata/mnist_cnn.json", "--optimizer", "momentum", "--site", "../../examples/site-lab.json",
		"--local", "--node-type", "lab-cpu", "--batches", "16,8", "--window", "2s", "--warmup-iters", "3", "--grace", "3s",
		"--wrapper", wrapper, "--iter-pattern", fakeIterPattern,
		"--", "/usr/bin/python3", trainer, "--batch-size", "{batch}", "--pid-file", filepath.Join(pids, "pid-{batch}"))
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	for _, b := range []string{"batch 8: ", "batch 16: "} {
		if !strings.Contains(errOut, "isched profile: "+b) || !strings.Contains(errOut, "ms/iter") {
			t.Errorf("no progress line for %s:\n%s", b, errOut)
		}
	}
	// the trainers were stopped: nothing left running
	for _, b := range []string{"8", "16"} {
		raw, err := os.ReadFile(filepath.Join(pids, "pid-"+b))
		if err != nil {
			t.Fatalf("batch %s did not run with its batch size: %v", b, err)
		}
		pid, _ := strconv.Atoi(string(raw))
		if err := syscall.Kill(pid, 0); !errors.Is(err, syscall.ESRCH) {
			t.Errorf("batch %s: the trainer (pid %d) is still there (%v)", b, pid, err)
		}
	}
	rs := readProfiled(t, filepath.Join(h.dir, ".local/share/isched/lab/profiled-receipts.jsonl"))
	if len(rs) != 2 {
		t.Fatalf("%d receipts, want 2: %+v", len(rs), rs)
	}
	m, err := loadModel("testdata/mnist_cnn.json")
	if err != nil {
		t.Fatal(err)
	}
	byBatch := map[int]report.Receipt{}
	for _, r := range rs {
		if !r.Profiled || r.UID == nil || *r.UID != 1001 || r.Model != m.Fingerprint()+":momentum:fp32" || r.NodeType != "lab-cpu" {
			t.Errorf("receipt %+v: want alice's profiled receipt of the model on lab-cpu", r)
		}
		// the mean of the window's iterations: their sum is the window
		// (2 s, up to an iteration more); with the 3 x 0.6 s warm-up
		// iterations it would be 1.8 s more
		if sum := r.IterMS * float64(r.Iters); r.Iters < 2 || r.WallS < 2 || sum > 1.2*r.WallS*1000+100 || sum < 0.8*r.WallS*1000-100 || r.WallS > 3.5 {
			t.Errorf("batch %d: %d iterations x %.1f ms over %.2f s: not the 2 s window without the warm-up", r.Batch, r.Iters, r.IterMS, r.WallS)
		}
		byBatch[r.Batch] = r
	}
	r8, r16 := byBatch[8], byBatch[16]
	// the fake: B x 4 ms per iteration, B x 6 MiB held
	if ratio := r16.IterMS / r8.IterMS; ratio < 1.3 || ratio > 3 {
		t.Errorf("ms/iter %.1f at 8, %.1f at 16: want about twice", r8.IterMS, r16.IterMS)
	}
	if d := float64(r16.PeakRSS-r8.PeakRSS) / (1 << 20); d < 30 || d > 70 {
		t.Errorf("peak RSS %d at 8, %d at 16: %.1f MiB apart, want about 48", r8.PeakRSS, r16.PeakRSS, d)
	}
	// the 200 MiB the fake holds while it stops (a checkpoint on SIGTERM)
	// is not its training's memory
	if r16.PeakRSS > 160<<20 {
		t.Errorf("batch 16: peak RSS %.1f MiB counts what the trainer did while it stopped (96 MiB + Python)", float64(r16.PeakRSS)/(1<<20))
	}

	code, out, errOut := h.run("estimate", "--model", "testdata/mnist_cnn.json", "--optimizer", "momentum", "--site", "../../examples/site-lab.json",
		"--samples", "3200", "--batch", "8,32", "--state", "none", "--json")
	if code != 0 {
		t.Fatalf("estimate: exit %d: %s", code, errOut)
	}
	var rows []jsonRow
	if err := json.Unmarshal([]byte(out), &rows); err != nil {
		t.Fatal(err)
	}
	seen := 0
	for _, r := range rows {
		if r.NodeType != "lab-cpu" {
			continue
		}
		seen++
		if r.Source != "profiled" {
			t.Errorf("batch %d: source %s (%s), want profiled", r.Batch, r.Source, r.Basis)
		}
		// the profile's own figures (to rounding: the estimate scales ms to s
		// by multiplying by 1/1000, which is not dividing by 1000 for every value)
		if r.Batch == 8 && (r.MemoryBytes-r.MarginBytes != r8.PeakRSS || r.MarginBytes <= 0 || math.Abs(r.IterSeconds-r8.IterMS/1000) > 1e-12*r8.IterMS) {
			t.Errorf("batch 8: %d bytes (margin %d), %.4f s/iter; the profile measured %d bytes, %.4f s", r.MemoryBytes, r.MarginBytes, r.IterSeconds, r8.PeakRSS, r8.IterMS/1000)
		}
		if r.Batch == 32 && r.MemoryBytes < r16.PeakRSS {
			t.Errorf("batch 32: %d bytes, below batch 16's %d", r.MemoryBytes, r16.PeakRSS)
		}
	}
	if seen != 2 {
		t.Fatalf("%d lab-cpu rows:\n%s", seen, out)
	}
	code, out, _ = h.run("estimate", "--model", "testdata/mnist_cnn.json", "--optimizer", "momentum", "--site", "../../examples/site-lab.json",
		"--samples", "3200", "--batch", "8", "--state", "none")
	if code != 0 || !strings.Contains(out, "2 profiled in ") || !strings.Contains(out, "(profiled, your runs): profiled: ") {
		t.Errorf("the table does not say where its figures come from:\n%s", out)
	}
}

func TestProfileUsage(t *testing.T) {
	h := newHarness(t)
	base := []string{"profile", "--model", "testdata/mnist_cnn.json", "--site", "../../examples/site-lab.json", "--wrapper", "/bin/true"}
	cases := []struct {
		name string
		args []string
		want string
	}{
		{"no command", []string{"--local", "--node-type", "lab-cpu", "--batches", "8,16"}, "no training command"},
		{"one batch size", []string{"--local", "--node-type", "lab-cpu", "--batches", "8", "--", "x"}, "two or more batch sizes"},
		{"twice the same", []string{"--local", "--node-type", "lab-cpu", "--batches", "8,16,8", "--", "x"}, "8 is given twice"},
		{"not a number", []string{"--local", "--node-type", "lab-cpu", "--batches", "8,x", "--", "x"}, "want positive integers"},
		{"zero", []string{"--local", "--node-type", "lab-cpu", "--batches", "0,8", "--", "x"}, "want positive integers"},
		{"neither local nor partition", []string{"--batches", "8,16", "--", "x"}, "--local (here) or --partition P"},
		{"both", []string{"--local", "--partition", "dev", "--batches", "8,16", "--", "x"}, "--local (here) or --partition P"},
		{"local without a node type", []string{"--local", "--batches", "8,16", "--", "x"}, "--local needs --node-type"},
		{"unknown node type", []string{"--local", "--node-type", "nope", "--batches", "8,16", "--", "x"}, "--node-type nope: not in the site catalogue"},
		{"unknown partition", []string{"--partition", "nope", "--batches", "8,16", "--", "x"}, "--partition nope: not in the site catalogue"},
		{"node type not in the partition", []string{"--partition", "dev", "--node-type", "lab-gpu", "--batches", "8,16", "--", "x"}, "partition dev has"},
		{"short window", []string{"--local", "--node-type", "lab-cpu", "--batches", "8,16", "--window", "10ms", "--", "x"}, "--window 10ms: at least 1s"},
		{"hostile partition", []string{"--partition", "dev;rm", "--batches", "8,16", "--", "x"}, "not a partition name"},
		{"NUL byte in the command", []string{"--local", "--node-type", "lab-cpu", "--batches", "8,16", "--", "python3", "a\x00b"}, "contains a NUL byte"},
		{"no model", []string{"--model", "", "--local", "--node-type", "lab-cpu", "--batches", "8,16", "--", "x"}, "--model is required"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			code, _, errOut := h.run(append(append([]string{}, base...), c.args...)...)
			if code != ExitUsage || !strings.Contains(errOut, c.want) {
				t.Errorf("exit %d, stderr %q: want 2 and %q", code, errOut, c.want)
			}
		})
	}
}

// submitHook is a fakeSlurm that lets the test play the job: it gets the
// script at submission and says what the job's record shows.
type submitHook struct {
	*fakeSlurm
	onSubmit func(id string, script []byte)
}

func (s *submitHook) SubmitWith(ctx context.Context, script []byte, spec slurm.SubmitSpec) (string, error) {
	id, err := s.fakeSlurm.SubmitWith(ctx, script, spec)
	if err == nil {
		s.onSubmit(id, script)
	}
	return id, err
}

// TestProfileSlurmScript: with --partition each batch size is one job
// script of submit's, on that partition only, with the batch size in the
// command and ISCHED_BATCH, the wrapper's profile flags and a short time
// limit; the job's summary makes the receipt, and a job that ends without
// one is an error that shows its output.
func TestProfileSlurmScript(t *testing.T) {
	h := newHarness(t)
	work := t.TempDir()
	if err := os.WriteFile(filepath.Join(work, "train.py"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	var scripts []string
	hook := &submitHook{fakeSlurm: h.slurm}
	summaryFor := func(script string) string {
		i := strings.Index(script, "--summary-json ")
		if i < 0 {
			t.Fatalf("no --summary-json in the script:\n%s", script)
		}
		return strings.Fields(script[i:])[1]
	}
	hook.onSubmit = func(id string, script []byte) {
		scripts = append(scripts, string(script))
		batch := len(scripts) * 8 // 8, then 16
		s := fmt.Sprintf(`{"exit_status":143,"signal":"SIGTERM","median_iter_ms":%d,"profile":{"warmup_iters":5,"measured_iters":20,"window_seconds":60.5,"mean_iter_ms":%d,"complete":true,"peak_rss_bytes":%d}}`,
			10*batch, 10*batch+1, batch<<20)
		if err := os.WriteFile(summaryFor(string(script)), []byte(s), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	app := h.app()
	app.Slurm = hook
	app.Getwd = func() (string, error) { return work, nil }
	var out, errb bytes.Buffer
	code := app.Run(context.Background(), []string{"profile", "--model", "testdata/mnist_cnn.json", "--optimizer", "momentum",
		"--site", "../../examples/site-lab.json", "--partition", "dev", "--batches", "8,16", "--window", "1m", "--startup-timeout", "2m",
		"--wrapper", "/opt/isched/bin/isched-wrapper", "--", "python3", "train.py", "--bs={batch}", "it's $(not) a shell"}, &out, &errb)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errb.String())
	}
	if len(scripts) != 2 {
		t.Fatalf("%d jobs submitted, want 2", len(scripts))
	}
	for i, b := range []string{"8", "16"} {
		s := scripts[i]
		for _, want := range []string{"#SBATCH --partition=dev\n", "#SBATCH --time=5\n", "export ISCHED_BATCH=" + b + "\n",
			"--profile-window 1m0s --profile-warmup 5", "--no-report", " -- python3 train.py --bs=" + b + ` 'it'\''s $(not) a shell'` + "\n",
			"#SBATCH --job-name=profile-train-b" + b + "\n"} {
			if !strings.Contains(s, want) {
				t.Errorf("batch %s: the script lacks %q:\n%s", b, want, s)
			}
		}
		if p, _, err := report.ParsePlanComment(h.slurm.specs[i].Comment); err != nil || p.Migrate || len(p.Fallbacks) > 0 || p.Model != "" {
			t.Errorf("batch %s: plan %+v (%v): want no migration, no fallback, no model (no coordinator receipt)", b, p, err)
		}
	}
	rs := readProfiled(t, filepath.Join(h.dir, ".local/share/isched/lab/profiled-receipts.jsonl"))
	if len(rs) != 2 || rs[0].Partition != "dev" || rs[0].NodeType != "lab-dev" || rs[0].IterMS != 81 || rs[1].PeakRSS != 16<<20 || !rs[1].Profiled {
		t.Errorf("receipts %+v", rs)
	}

	// a job that ends without a summary
	hook.onSubmit = func(id string, script []byte) {
		h.slurm.jobs = map[string]*slurm.JobInfo{id: {JobID: id, State: "FAILED", Partition: "dev", NodeList: "dev1"}}
	}
	out.Reset()
	errb.Reset()
	code = app.Run(context.Background(), []string{"profile", "--model", "testdata/mnist_cnn.json", "--site", "../../examples/site-lab.json",
		"--partition", "dev", "--batches", "8,16", "--wrapper", "/opt/isched/bin/isched-wrapper", "--", "python3", "train.py"}, &out, &errb)
	if code != ExitError || !strings.Contains(errb.String(), "ended FAILED without a summary") {
		t.Errorf("exit %d: %s", code, errb.String())
	}
}

// TestProfileLocalNoIterations: a command whose iteration lines the
// pattern does not match is stopped at the limit, leaves nothing running
// and no receipt, and the error says what to check and shows its output.
func TestProfileLocalNoIterations(t *testing.T) {
	h := newHarness(t)
	wrapper := testutil.Binary(t, "isched-wrapper", "./wrapper")
	trainer, err := filepath.Abs("testdata/fake_trainer.py")
	if err != nil {
		t.Fatal(err)
	}
	pids := t.TempDir()
	code, _, errOut := h.run("profile", "--model", "testdata/mnist_cnn.json", "--site", "../../examples/site-lab.json",
		"--local", "--node-type", "lab-cpu", "--batches", "8,16", "--window", "1s", "--startup-timeout", "2s", "--grace", "1s",
		"--wrapper", wrapper, "--iter-pattern", `never (?P<step>\d+)`,
		"--", "/usr/bin/python3", trainer, "--batch-size", "{batch}", "--pid-file", filepath.Join(pids, "pid"))
	if code != ExitError || !strings.Contains(errOut, "batch 8: no window measured within") || !strings.Contains(errOut, "--iter-pattern") ||
		!strings.Contains(errOut, "/100000\n") {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	raw, err := os.ReadFile(filepath.Join(pids, "pid"))
	if err != nil {
		t.Fatal(err)
	}
	pid, _ := strconv.Atoi(string(raw))
	if err := syscall.Kill(pid, 0); !errors.Is(err, syscall.ESRCH) {
		t.Errorf("the trainer (pid %d) is still there (%v)", pid, err)
	}
	if _, err := os.Stat(filepath.Join(h.dir, ".local/share/isched/lab/profiled-receipts.jsonl")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("a receipt was kept: %v", err)
	}
}
