package cli

import (
	"bytes"
	"context"
	"errors"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/isched/isched/internal/plan"
	"github.com/isched/isched/internal/slurm"
)

const fakeProbeRecord = `{"v": 1, "node_type": "lab-cpu", "host": "n1", "measured_at": "2026-11-26T05:41:31Z",
 "framework": "pytorch 1.13.0", "python": "3.11.2", "threads": 2, "load_average": 0.5,
 "import_rss_bytes": {"median": 250000000, "min": 249000000, "max": 252000000, "repeats": 3},
 "runtime_rss_bytes": {"median": 268000000, "min": 267000000, "max": 270000000, "repeats": 3},
 "throughput": {"conv": {"median": 3e10, "min": 2e10, "max": 4e10, "repeats": 6},
  "elementwise": {"median": 1e9, "min": 1e9, "max": 1e9, "repeats": 6}}}`

// fakeProber records the argv it was given and answers out, err.
type fakeProber struct {
	argv    []string
	timeout time.Duration
	out     string
	err     error
}

func (f *fakeProber) RunProbe(_ context.Context, argv []string, stderr io.Writer, timeout time.Duration) ([]byte, error) {
	f.argv, f.timeout = argv, timeout
	_, _ = io.WriteString(stderr, "probe progress\n")
	return []byte(f.out), f.err
}

// siteCopy copies the lab catalogue into a fresh folder: the probe record
// goes to probes/ beside it.
func siteCopy(t *testing.T) string {
	t.Helper()
	b, err := os.ReadFile("../../examples/site-lab.json")
	if err != nil {
		t.Fatal(err)
	}
	p := filepath.Join(t.TempDir(), "site.json")
	if err := os.WriteFile(p, b, 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

func runWithProber(h *harness, p ProbeRunner, args ...string) (int, string, string) {
	h.t.Helper()
	app := h.app()
	app.Prober = p
	var out, errb bytes.Buffer
	code := app.Run(context.Background(), args, &out, &errb)
	return code, out.String(), errb.String()
}

// TestSiteProbe: the record the script writes is checked, kept beside the
// catalogue, and the estimate then says probed for that node type and
// assumed for the others, with the probed framework footprint.
func TestSiteProbe(t *testing.T) {
	h := newHarness(t)
	site := siteCopy(t)
	f := &fakeProber{out: fakeProbeRecord}
	code, out, errOut := runWithProber(h, f, "site", "probe", "--local", "--node-type", "lab-cpu", "--site", site,
		"--script", "/opt/x/site_probe.py", "--threads", "2", "--repeats", "3", "--timeout", "2m")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	want := []string{"/usr/bin/python3", "/opt/x/site_probe.py", "--node-type", "lab-cpu", "--repeats", "3", "--threads", "2"}
	if !slices.Equal(f.argv, want) || f.timeout != 2*time.Minute {
		t.Errorf("probe argv %q timeout %s, want %q 2m", f.argv, f.timeout, want)
	}
	if !strings.Contains(errOut, "probe progress") || !strings.Contains(out, "lab-cpu: probed") || !strings.Contains(out, "import 238.4 MiB") {
		t.Errorf("output:\n%s\nstderr:\n%s", out, errOut)
	}
	kept, err := os.ReadFile(filepath.Join(filepath.Dir(site), "probes", "lab-cpu.json"))
	if err != nil || string(kept) != fakeProbeRecord {
		t.Fatalf("kept record %q, %v", kept, err)
	}
	code, out, errOut = h.run("estimate", "--model", "testdata/mnist_cnn.json", "--site", site, "--batch", "8", "--samples", "1000", "--epochs", "1", "--state", "none", "--receipts", "none", "--explain")
	if code != 0 {
		t.Fatalf("estimate: exit %d: %s", code, errOut)
	}
	for _, s := range []string{"static model on lab-cpu: probed 2026-11-26T05:41:31Z on n1 (2 threads): framework 260.4 MiB (largest 257.5 MiB + repeat spread 2.86 MiB)",
		"static model on lab-dev,lab-gdev,lab-gpu: assumed (framework 300.0 MiB",
		"on lab-cpu: weights", "Python+torch (probed) 260.4 MiB", "on lab-dev: weights", "Python+torch (assumed) 300.0 MiB"} {
		if !strings.Contains(out, s) {
			t.Errorf("estimate output lacks %q:\n%s", s, out)
		}
	}
}

// TestSiteProbeErrors: a bad record, a record of another node type and a
// failed run are errors that keep nothing; bad flags are usage errors.
func TestSiteProbeErrors(t *testing.T) {
	h := newHarness(t)
	tests := []struct {
		name     string
		prober   *fakeProber
		args     []string
		code     int
		contains string
	}{
		{"malformed record", &fakeProber{out: `{"v": 1, "node_type": "lab-cpu"`}, nil, ExitError, "probe record from /opt/x/site_probe.py"},
		{"unknown field", &fakeProber{out: strings.Replace(fakeProbeRecord, `"host"`, `"hots"`, 1)}, nil, ExitError, "field hots: unknown field"},
		{"another node type", &fakeProber{out: strings.Replace(fakeProbeRecord, `"lab-cpu"`, `"lab-dev"`, 1)}, nil, ExitError, `node_type "lab-dev", want "lab-cpu"`},
		{"run failed", &fakeProber{err: errors.New("site_probe.py: exit status 2")}, nil, ExitError, "probe: site_probe.py: exit status 2"},
		{"not local", &fakeProber{}, []string{"site", "probe", "--node-type", "lab-cpu"}, ExitUsage, "--local (this machine, a node of the type) or --partition P"},
		{"no node type", &fakeProber{}, []string{"site", "probe", "--local"}, ExitUsage, "--node-type is required"},
		{"unknown node type", &fakeProber{}, []string{"site", "probe", "--local", "--node-type", "nope"}, ExitUsage, "--node-type nope: not in the site catalogue"},
		{"relative python", &fakeProber{}, []string{"site", "probe", "--local", "--node-type", "lab-cpu", "--python", "python3"}, ExitUsage, "absolute path"},
		{"no subcommand", &fakeProber{}, []string{"site"}, ExitUsage, "isched site probe"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			site := siteCopy(t)
			args := tt.args
			if args == nil {
				args = []string{"site", "probe", "--local", "--node-type", "lab-cpu"}
			}
			args = append(args, "--site", site, "--script", "/opt/x/site_probe.py")
			if len(tt.args) == 1 {
				args = tt.args
			}
			code, _, errOut := runWithProber(h, tt.prober, args...)
			if code != tt.code || !strings.Contains(errOut, tt.contains) {
				t.Fatalf("exit %d, stderr %q; want exit %d containing %q", code, errOut, tt.code, tt.contains)
			}
			if _, err := os.Stat(filepath.Join(filepath.Dir(site), "probes")); !errors.Is(err, os.ErrNotExist) {
				t.Errorf("probes/ written after a failure: %v", err)
			}
		})
	}
}

// TestSiteProbeReal runs scripts/site_probe.py with /usr/bin/python3 and
// torch (Debian's python3-torch) through the real runner: the record
// decodes, the framework footprint and every rate are positive. Nothing
// about speed is asserted.
func TestSiteProbeReal(t *testing.T) {
	if _, err := os.Stat("/usr/bin/python3"); err != nil {
		t.Fatalf("/usr/bin/python3 with python3-torch is needed: %v", err)
	}
	h := newHarness(t)
	site := siteCopy(t)
	script, err := filepath.Abs("../../scripts/site_probe.py")
	if err != nil {
		t.Fatal(err)
	}
	code, out, errOut := h.run("site", "probe", "--local", "--node-type", "lab-dev", "--site", site, "--script", script,
		"--threads", "1", "--repeats", "1", "--timeout", "5m")
	if code != 0 {
		t.Fatalf("exit %d: %s\n%s", code, out, errOut)
	}
	b, err := os.ReadFile(plan.ProbePath(filepath.Dir(site), "lab-dev"))
	if err != nil {
		t.Fatal(err)
	}
	p, err := plan.DecodeProbe(b)
	if err != nil {
		t.Fatalf("the script's record: %v\n%s", err, b)
	}
	if p.NodeType != "lab-dev" || p.Threads != 1 || p.ImportRSS.Median < 20<<20 || p.RuntimeRSS.Max < p.ImportRSS.Median {
		t.Errorf("record %+v", p)
	}
	for _, k := range []string{plan.WorkConv, plan.WorkDepthwise, plan.WorkLinear, plan.WorkElementwise, plan.WorkOptimizer} {
		if r := p.Throughput[k]; r.Median <= 0 || r.Repeats != 2 {
			t.Errorf("%s: %+v (want a positive rate over 2 sizes x 1 repeat)", k, r)
		}
	}
}

// TestExecProbe: the real runner returns the child's stdout, and says why
// when it fails, is killed past its timeout, or writes too much.
func TestExecProbe(t *testing.T) {
	t.Parallel()
	py := func(code string) []string { return []string{"/usr/bin/python3", "-c", code} }
	tests := []struct {
		name    string
		argv    []string
		timeout time.Duration
		out     string
		err     string
	}{
		{"stdout", py(`print("{}")`), time.Minute, "{}\n", ""},
		{"exit status", py(`import sys; sys.exit(3)`), time.Minute, "", "exit status 3"},
		{"killed", py(`import os, signal; os.kill(os.getpid(), signal.SIGKILL)`), time.Minute, "", "killed by signal 9 (killed)"},
		{"timeout", py(`import time; time.sleep(600)`), 500 * time.Millisecond, "", "did not finish within 500ms"},
		{"too much", py(`import sys; sys.stdout.write("x" * (2 << 20))`), time.Minute, "", "wrote more than"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			out, err := execProbe{}.RunProbe(context.Background(), tt.argv, io.Discard, tt.timeout)
			if tt.err == "" {
				if err != nil || string(out) != tt.out {
					t.Fatalf("out %q, err %v; want %q", out, err, tt.out)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tt.err) {
				t.Fatalf("err %v, want one containing %q", err, tt.err)
			}
		})
	}
}

// probeJob is a submit hook for a probe job: it keeps the script, writes
// record() where the job's command says -o, and marks the job completed.
func probeJob(t *testing.T, h *harness, scripts *[]string, record func() string) func(id string, script []byte) {
	return func(id string, script []byte) {
		*scripts = append(*scripts, string(script))
		f := strings.Fields(string(script)[strings.Index(string(script), "exec srun"):])
		i := slices.Index(f, "-o")
		if i < 0 {
			t.Fatalf("no -o in the job's command:\n%s", script)
		}
		if err := os.WriteFile(f[i+1], []byte(record()), 0o600); err != nil {
			t.Fatal(err)
		}
		h.slurm.jobs = map[string]*slurm.JobInfo{id: {JobID: id, State: "COMPLETED", Partition: "dev", NodeList: "dev1"}}
	}
}

// TestSiteProbeSlurm: with --partition the probe is one short job of
// `isched site probe --local` on that partition (no wrapper), for the
// partition's node type; the record the job writes is checked and kept
// beside the catalogue. A job that ends without a record is an error that
// keeps nothing; hostile names are refused before anything is submitted.
func TestSiteProbeSlurm(t *testing.T) {
	h := newHarness(t)
	work := t.TempDir()
	var scripts []string
	hook := &submitHook{fakeSlurm: h.slurm}
	record := strings.Replace(fakeProbeRecord, `"lab-cpu"`, `"lab-dev"`, 1)
	hook.onSubmit = probeJob(t, h, &scripts, func() string { return record })
	app := h.app()
	app.Slurm = hook
	app.Getwd = func() (string, error) { return work, nil }
	run := func(args ...string) (int, string, string) {
		var out, errb bytes.Buffer
		code := app.Run(context.Background(), args, &out, &errb)
		return code, out.String(), errb.String()
	}
	site := siteCopy(t)
	code, out, errOut := run("site", "probe", "--partition", "dev", "--site", site, "--script", "/opt/x/site_probe.py",
		"--isched", "/opt/isched/bin/isched", "--repeats", "2", "--threads", "1", "--timeout", "5m")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	if len(scripts) != 1 {
		t.Fatalf("%d jobs submitted, want 1", len(scripts))
	}
	for _, want := range []string{"#SBATCH --partition=dev\n", "#SBATCH --time=7\n", "#SBATCH --job-name=isched-probe-lab-dev\n",
		"exec srun /opt/isched/bin/isched site probe --local --node-type lab-dev --site " + site + " -o " + work + "/isched-",
		"--python /usr/bin/python3 --script /opt/x/site_probe.py --repeats 2 --timeout 5m0s --threads 1\n"} {
		if !strings.Contains(scripts[0], want) {
			t.Errorf("the script lacks %q:\n%s", want, scripts[0])
		}
	}
	if strings.Contains(scripts[0], " -- ") {
		t.Errorf("the probe job runs under a wrapper:\n%s", scripts[0])
	}
	if !strings.Contains(out, "lab-dev: probed") || !strings.Contains(errOut, "done on dev/dev1") {
		t.Errorf("output:\n%s\nstderr:\n%s", out, errOut)
	}
	kept, err := os.ReadFile(filepath.Join(filepath.Dir(site), "probes", "lab-dev.json"))
	if err != nil || string(kept) != record {
		t.Fatalf("kept record %q, %v", kept, err)
	}
	if left, _ := filepath.Glob(filepath.Join(work, "*.probe.json")); len(left) != 0 {
		t.Errorf("the job's record file is left: %q", left)
	}

	for _, tt := range []struct {
		name     string
		args     []string
		onSubmit func(id string, script []byte)
		code     int
		contains string
	}{
		{"job failed", []string{"--partition", "dev"}, func(id string, _ []byte) {
			h.slurm.jobs = map[string]*slurm.JobInfo{id: {JobID: id, State: "FAILED", Partition: "dev", NodeList: "dev1"}}
		}, ExitError, "ended FAILED without a record"},
		{"record of another node type", []string{"--partition", "dev"}, hook.onSubmit, ExitError, `node_type "lab-cpu", want "lab-dev"`},
		{"hostile partition", []string{"--partition", "dev;rm -rf /"}, nil, ExitUsage, `--partition "dev;rm -rf /": not a partition name`},
		{"hostile node type", []string{"--partition", "dev", "--node-type", "lab-dev$(id)"}, nil, ExitUsage, `--node-type "lab-dev$(id)": not a node type name`},
		{"node type not of the partition", []string{"--partition", "dev", "--node-type", "lab-cpu"}, nil, ExitUsage, "partition dev has lab-dev"},
		{"both places", []string{"--partition", "dev", "--local", "--node-type", "lab-dev"}, nil, ExitUsage, "one of them"},
		{"neither place", []string{"--node-type", "lab-dev"}, nil, ExitUsage, "one of them"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			record = fakeProbeRecord // lab-cpu's, where the job measures lab-dev
			scripts = nil
			hook.onSubmit = tt.onSubmit
			if hook.onSubmit == nil {
				hook.onSubmit = func(string, []byte) { t.Error("submitted") }
			}
			site := siteCopy(t)
			code, _, errOut := run(append(append([]string{"site", "probe"}, tt.args...), "--site", site, "--script", "/opt/x/site_probe.py", "--isched", "/opt/isched/bin/isched")...)
			if code != tt.code || !strings.Contains(errOut, tt.contains) {
				t.Fatalf("exit %d, stderr %q; want exit %d containing %q", code, errOut, tt.code, tt.contains)
			}
			if _, err := os.Stat(filepath.Join(filepath.Dir(site), "probes")); !errors.Is(err, os.ErrNotExist) {
				t.Errorf("probes/ written after a failure: %v", err)
			}
		})
	}
}

// fakeFootprint is what site_probe.py --footprint writes for
// /usr/bin/python3 importing transformers: 385.3 MiB with its repeat
// spread.
const fakeFootprint = `{"v": 1, "environment": "/usr/bin/python3", "node_type": "lab-cpu", "host": "n1",
 "measured_at": "2026-11-27T09:00:00Z", "framework": "pytorch 1.13.0", "python": "3.11.2", "threads": 2, "load_average": 0.5,
 "imports": ["transformers"],
 "import_rss_bytes": {"median": 380000000, "min": 379000000, "max": 381000000, "repeats": 3},
 "runtime_rss_bytes": {"median": 399000000, "min": 398000000, "max": 402000000, "repeats": 6},
 "runtime_references": {"wide": {"median": 398500000, "min": 398000000, "max": 399000000, "repeats": 3},
  "residual": {"median": 401000000, "min": 400000000, "max": 402000000, "repeats": 3}}}`

// TestSiteProbeFootprint: --footprint measures the --python environment
// with the user's imports and keeps the record in the user's data
// directory (no site file); estimate then counts it for the python3 in
// PATH, or the --python named, on host-memory node types.
func TestSiteProbeFootprint(t *testing.T) {
	h := newHarness(t)
	site := siteCopy(t)
	f := &fakeProber{out: fakeFootprint}
	code, out, errOut := runWithProber(h, f, "site", "probe", "--footprint", "--import", "transformers, pandas.core", "--local", "--node-type", "lab-cpu",
		"--site", site, "--script", "/opt/x/site_probe.py", "--repeats", "3")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	want := []string{"/usr/bin/python3", "/opt/x/site_probe.py", "--node-type", "lab-cpu", "--repeats", "3", "--footprint",
		"--environment", "/usr/bin/python3", "--import", "transformers", "--import", "pandas.core"}
	if !slices.Equal(f.argv, want) {
		t.Errorf("probe argv %q, want %q", f.argv, want)
	}
	if !strings.Contains(out, "/usr/bin/python3: framework 385.3 MiB (largest 383.4 MiB + repeat spread 1.91 MiB) importing torch + transformers") {
		t.Errorf("output:\n%s", out)
	}
	kept := h.app().footprintPath("/usr/bin/python3")
	if b, err := os.ReadFile(kept); err != nil || string(b) != fakeFootprint || !strings.HasPrefix(kept, filepath.Join(h.dir, ".local", "share", "isched", "lab", "footprints")) {
		t.Fatalf("kept %s: %q, %v", kept, b, err)
	}
	if _, err := os.Stat(filepath.Join(filepath.Dir(site), "probes")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("a footprint wrote the site's probes/: %v", err)
	}
	est := []string{"estimate", "--model", "testdata/mnist_cnn.json", "--site", site, "--batch", "8", "--samples", "1000", "--epochs", "1",
		"--state", "none", "--receipts", "none", "--explain"}
	cases := []struct {
		name     string
		python   []string
		code     int
		contains []string
	}{
		{"python3 in PATH has a record", nil, 0, []string{"python:   /usr/bin/python3: framework 385.3 MiB", "on lab-cpu: weights", "Python+torch+imports (your environment's footprint record) 385.3 MiB",
			"on lab-dev: weights", "on lab-gpu: weights"}},
		{"another python: none", []string{"--python", "/bin/sh"}, 0, []string{"python:   /bin/sh: no footprint record (isched site probe --footprint --python /bin/sh", "Python+torch (assumed) 300.0 MiB"}},
		{"not found", []string{"--python", "/nonexistent/python3"}, ExitUsage, []string{"--python: /nonexistent/python3"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			code, out, errOut := h.run(append(slices.Clone(est), c.python...)...)
			if code != c.code {
				t.Fatalf("exit %d, want %d: %s", code, c.code, errOut)
			}
			for _, s := range c.contains {
				if !strings.Contains(out+errOut, s) {
					t.Errorf("output lacks %q:\n%s%s", s, out, errOut)
				}
			}
		})
	}
	// a record whose environment is not its file's is refused, naming it
	if err := os.WriteFile(kept, []byte(strings.Replace(fakeFootprint, `"/usr/bin/python3"`, `"/opt/venv/bin/python"`, 1)), 0o644); err != nil {
		t.Fatal(err)
	}
	if code, _, errOut := h.run(est...); code != ExitError || !strings.Contains(errOut, "footprint record "+kept+`: environment "/opt/venv/bin/python"`) {
		t.Errorf("exit %d: %s", code, errOut)
	}
}

// TestSiteProbeFootprintErrors: bad --import and records that are not
// this environment's are refused and keep nothing.
func TestSiteProbeFootprintErrors(t *testing.T) {
	h := newHarness(t)
	tests := []struct {
		name     string
		out      string
		args     []string
		code     int
		contains string
	}{
		{"import without footprint", fakeFootprint, []string{"--import", "transformers"}, ExitUsage, "--import needs --footprint"},
		{"bad module", fakeFootprint, []string{"--footprint", "--import", "transformers,os;rm"}, ExitUsage, `"os;rm" is not a module name`},
		{"another environment", strings.Replace(fakeFootprint, `"/usr/bin/python3"`, `"/opt/venv/bin/python"`, 1), []string{"--footprint"}, ExitError,
			`environment "/opt/venv/bin/python"; want "lab-cpu", "/usr/bin/python3"`},
		{"a probe record", fakeProbeRecord, []string{"--footprint"}, ExitError, "footprint record from /opt/x/site_probe.py"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			site := siteCopy(t)
			args := append([]string{"site", "probe", "--local", "--node-type", "lab-cpu", "--site", site, "--script", "/opt/x/site_probe.py"}, tt.args...)
			code, _, errOut := runWithProber(h, &fakeProber{out: tt.out}, args...)
			if code != tt.code || !strings.Contains(errOut, tt.contains) {
				t.Fatalf("exit %d, stderr %q; want exit %d containing %q", code, errOut, tt.code, tt.contains)
			}
			if _, err := os.Stat(h.app().footprintPath("/usr/bin/python3")); !errors.Is(err, os.ErrNotExist) {
				t.Errorf("a record kept after a failure: %v", err)
			}
		})
	}
}

// TestSiteProbeFootprintSlurm: --footprint --partition forwards the
// footprint flags to the job's own `isched site probe --local` and keeps
// the record the job wrote in the user's data directory.
func TestSiteProbeFootprintSlurm(t *testing.T) {
	h := newHarness(t)
	work := t.TempDir()
	var scripts []string
	hook := &submitHook{fakeSlurm: h.slurm}
	record := strings.Replace(fakeFootprint, `"lab-cpu"`, `"lab-dev"`, 1)
	hook.onSubmit = probeJob(t, h, &scripts, func() string { return record })
	app := h.app()
	app.Slurm = hook
	app.Getwd = func() (string, error) { return work, nil }
	var out, errb bytes.Buffer
	code := app.Run(context.Background(), []string{"site", "probe", "--footprint", "--import", "transformers", "--partition", "dev", "--site", siteCopy(t),
		"--script", "/opt/x/site_probe.py", "--isched", "/opt/isched/bin/isched", "--repeats", "2"}, &out, &errb)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errb.String())
	}
	if want := "--repeats 2 --timeout 15m0s --footprint --import transformers\n"; len(scripts) != 1 || !strings.Contains(scripts[0], want) {
		t.Errorf("the scripts lack %q:\n%s", want, scripts)
	}
	if b, err := os.ReadFile(app.footprintPath("/usr/bin/python3")); err != nil || string(b) != record {
		t.Errorf("kept %q, %v", b, err)
	}
}
