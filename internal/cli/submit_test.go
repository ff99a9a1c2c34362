package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/isched/isched/internal/report"
	"github.com/isched/isched/internal/testutil"
)

// nasty are training arguments a shell would expand if they were not
// quoted right.
var nasty = []string{
	"--name", "$(touch PWNED)", "`touch PWNED`", "a b", "it's", `"double"`, "semi;colon && echo x", "new\nline",
	"$HOME", `back\slash`, "*", "~", "--", "", "!bang", "tab\there", "naïve ✓", "--flag=va'l",
}

func TestSubmitDryRunGolden(t *testing.T) {
	h := newHarness(t)
	h.labState()
	h.shownAddr = "redis.lab.example:6390"
	h.env["ISCHED_COORDINATOR_UID"] = "999"
	tests := []struct {
		golden string
		args   []string
	}{
		// from the estimate: gpu frees in an hour, so start on dev and move
		{"submit_estimate.sh", []string{"submit", "--dry-run", "--model", "testdata/resnet18_128.json", "--samples", "50000", "--epochs", "10",
			"--batch", "32", "--optimizer", "momentum", "--site", "../../examples/site-lab.json", "--receipts", "none",
			"--wrapper", "/opt/isched/bin/isched-wrapper", "--",
			"/usr/bin/python3", "examples/train_mnistlike.py", "--model", "resnet18", "--image-size", "128", "--batch", "32", "--epochs", "10"}},
		// no estimate: the user's partition, time and memory
		{"submit_plain.sh", []string{"submit", "--dry-run", "--partition-ideal", "cpu", "--time", "30", "--mem", "2G", "--cpus", "2",
			"--checkpoint-dir", "ckpt", "--wrapper", "/opt/isched/bin/isched-wrapper", "--wrapper-arg=--iter-pattern=tqdm", "--",
			"python3", "train.py", "--lr", "0.1", "$(rm -rf ~)", "it's"}},
	}
	for _, tt := range tests {
		code, out, errOut := h.run(tt.args...)
		if code != 0 {
			t.Fatalf("%s: exit %d: %s", tt.golden, code, errOut)
		}
		golden(t, tt.golden, out)
		if !strings.Contains(errOut, "dry run, not submitted") {
			t.Errorf("%s: stderr %q", tt.golden, errOut)
		}
		if len(h.slurm.submitted) != 0 {
			t.Fatalf("dry run submitted")
		}
	}
}

// TestScriptQuoting runs the generated script with a fake srun and checks
// that the training command arrives byte for byte, with nothing expanded.
func TestScriptQuoting(t *testing.T) {
	dir := t.TempDir()
	pwned := filepath.Join(dir, "PWNED")
	args := append([]string{"/usr/bin/python3", "train.py"}, nasty...)
	args = append(args, "$(touch "+pwned+")", "`touch "+pwned+"`")
	s := Script{JobName: "t", Partitions: []string{"cpu"}, Output: filepath.Join(dir, "out"), Chdir: dir, Comment: "isched:v1 lineage=x ideal=cpu",
		Env: [][2]string{{"ISCHED_LINEAGE", "x"}, {"ISCHED_REDIS_ADDR", "host:1 $(touch " + pwned + ")"}}, Unset: []string{"ISCHED_REDIS_USER"},
		Wrapper: "/opt/isched wrapper/isched-wrapper", WrapperArgs: []string{"--checkpoint-dir", dir + "/ck pt"}, Argv: args}
	b, err := s.Render()
	if err != nil {
		t.Fatal(err)
	}
	record := filepath.Join(dir, "argv")
	fake := filepath.Join(dir, "srun")
	if err := os.WriteFile(fake, []byte("#!/bin/bash\nprintf '%s\\0' \"$ISCHED_REDIS_ADDR\" \"$@\" > "+ShellQuote(record)+"\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	script := strings.Replace(string(b), "exec srun ", "exec "+ShellQuote(fake)+" ", 1)
	path := filepath.Join(dir, "job.sh")
	if err := os.WriteFile(path, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	testutil.Run(t, 20*time.Second, "/bin/bash", path)
	got, err := os.ReadFile(record)
	if err != nil {
		t.Fatal(err)
	}
	fields := strings.Split(strings.TrimSuffix(string(got), "\x00"), "\x00")
	want := append([]string{s.Env[1][1], s.Wrapper}, s.WrapperArgs...)
	want = append(want, "--")
	want = append(want, args...)
	if len(fields) != len(want) {
		t.Fatalf("srun got %d arguments, want %d:\n%q\n%q", len(fields), len(want), fields, want)
	}
	for i := range want {
		if fields[i] != want[i] {
			t.Errorf("argument %d: got %q, want %q", i, fields[i], want[i])
		}
	}
	if _, err := os.Stat(pwned); err == nil {
		t.Fatal("an argument was executed by the shell")
	}
}

func TestScriptRefusesDirectiveInjection(t *testing.T) {
	t.Parallel()
	for _, s := range []Script{
		{JobName: "x\nrm -rf ~", Wrapper: "/w", Argv: []string{"a"}},
		{Output: "/tmp/a\"b", Wrapper: "/w", Argv: []string{"a"}},
		{Chdir: "/tmp/a\\", Wrapper: "/w", Argv: []string{"a"}},
		{Wrapper: "/w", Argv: []string{"a\x00b"}},
		{Env: [][2]string{{"BAD NAME", "v"}}, Wrapper: "/w", Argv: []string{"a"}},
	} {
		if b, err := s.Render(); err == nil {
			t.Errorf("rendered %+v:\n%s", s, b)
		}
	}
	s := Script{Chdir: "/home/a b/p", Wrapper: "/w", Argv: []string{"a"}}
	b, err := s.Render()
	if err != nil || !bytes.Contains(b, []byte(`#SBATCH --chdir="/home/a b/p"`)) {
		t.Errorf("a path with a space: %v\n%s", err, b)
	}
}

func TestSubmitSubmits(t *testing.T) {
	h := newHarness(t)
	h.labState()
	ck := filepath.Join(h.dir, "ck")
	code, out, errOut := h.run("submit", "--model", "testdata/resnet18_128.json", "--samples", "50000", "--epochs", "10", "--batch", "32",
		"--optimizer", "momentum", "--site", "../../examples/site-lab.json", "--receipts", "none", "--policy", "ideal",
		"--checkpoint-dir", ck, "--wrapper", "/opt/isched/bin/isched-wrapper", "--", "python3", "train.py")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	if out != "Submitted batch job 101\n" || !strings.Contains(errOut, "isched status 101") {
		t.Fatalf("stdout %q stderr %q", out, errOut)
	}
	if len(h.slurm.submitted) != 1 {
		t.Fatalf("%d submissions", len(h.slurm.submitted))
	}
	spec := h.slurm.specs[0]
	p, ok, err := report.ParsePlanComment(spec.Comment)
	if !ok || err != nil {
		t.Fatalf("comment %q: %v", spec.Comment, err)
	}
	// policy ideal: wait for gpu, no migration
	if p.Ideal != "gpu" || p.IdealGres != "gpu:1" || p.Migrate || p.Batch != 32 || p.Total != 15630 || !strings.HasSuffix(p.Model, ":momentum:fp32") {
		t.Errorf("plan %+v", p)
	}
	script := string(h.slurm.submitted[0])
	for _, want := range []string{"#SBATCH --partition=gpu\n", "#SBATCH --gres=gpu:1\n", "#SBATCH --requeue\n", "#SBATCH --signal=USR1@135\n",
		"#SBATCH --open-mode=append\n", "--checkpoint-signal file", "--total-iters 15630", "export ISCHED_LINEAGE=" + p.Lineage + "\n"} {
		if !strings.Contains(script, want) {
			t.Errorf("script lacks %q:\n%s", want, script)
		}
	}
	if fi, err := os.Stat(ck); err != nil || !fi.IsDir() {
		t.Errorf("checkpoint directory not created: %v", err)
	}
	// the job left Slurm and the job table: the history still knows it
	if _, out, _ := h.run("status", "101"); !strings.Contains(out, "lineage "+p.Lineage+" (from your submission history") {
		t.Errorf("status of a forgotten job:\n%s", out)
	}
}

// TestSubmitReportPath: the generated script sends the job's reports
// through isched-relay, the default path (no Redis password in the job);
// straight to Redis only when the site or the user asks (--report-direct,
// report_direct); with neither, isched submit refuses rather than start a
// run nobody will follow.
func TestSubmitReportPath(t *testing.T) {
	for _, tc := range []struct {
		name      string
		relay     string
		directEnv string
		flags     []string
		want      []string // lines the script holds
		not       []string // lines it must not
		err       string
	}{
		{name: "relay configured", relay: "relay.site:6395",
			want: []string{"export ISCHED_RELAY_ADDR=relay.site:6395"},
			not:  []string{"ISCHED_REDIS_ADDR", "ISCHED_REPORT_DIRECT", "ISCHED_REDIS_PASSWORD_DIR"}},
		{name: "no relay, no opt-in", err: "no isched-relay configured"},
		{name: "the opt-in flag", flags: []string{"--report-direct"},
			want: []string{"export ISCHED_REPORT_DIRECT=1", "export ISCHED_REDIS_ADDR=redis.site:6390", "export ISCHED_REDIS_PASSWORD_DIR=/etc/isched/redis"},
			not:  []string{"ISCHED_RELAY_ADDR"}},
		{name: "the site's opt-in", directEnv: "1",
			want: []string{"export ISCHED_REPORT_DIRECT=1"}},
		{name: "the flag beats a relay", relay: "relay.site:6395", flags: []string{"--report-direct"},
			want: []string{"export ISCHED_REPORT_DIRECT=1"}, not: []string{"ISCHED_RELAY_ADDR"}},
		{name: "the site's opt-in turned off by the user", directEnv: "0", err: "no isched-relay configured"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := newHarness(t)
			h.shownAddr = "redis.site:6390"
			h.env["ISCHED_RELAY_ADDR"] = tc.relay
			h.env["ISCHED_REPORT_DIRECT"] = tc.directEnv
			h.env["ISCHED_REDIS_PASSWORD_DIR"] = "/etc/isched/redis"
			args := append([]string{"submit", "--dry-run", "--partition-ideal", "cpu", "--time", "30", "--wrapper", "/opt/isched/bin/isched-wrapper"}, tc.flags...)
			if tc.err != "" {
				// a real submission is refused; a dry run shows the script
				// and says what a real one needs
				code, _, errOut := h.run(append(args[:1:1], append(args[2:], "--", "python3", "train.py")...)...)
				if code != 1 || !strings.Contains(errOut, tc.err) || len(h.slurm.submitted) != 0 {
					t.Fatalf("exit %d, stderr %q: want exit 1 saying %q, nothing submitted", code, errOut, tc.err)
				}
				code, out, errOut := h.run(append(args, "--", "python3", "train.py")...)
				if code != 0 || !strings.Contains(errOut, "a real submission needs: "+tc.err) || !strings.Contains(out, "export ISCHED_RELAY_ADDR=none-configured\n") {
					t.Fatalf("dry run: exit %d, stderr %q, script:\n%s", code, errOut, out)
				}
				return
			}
			code, out, errOut := h.run(append(args, "--", "python3", "train.py")...)
			if code != 0 {
				t.Fatalf("exit %d: %s", code, errOut)
			}
			for _, l := range tc.want {
				if !strings.Contains(out, "\n"+l+"\n") {
					t.Errorf("script lacks %q:\n%s", l, out)
				}
			}
			for _, s := range tc.not {
				if strings.Contains(out, s) {
					t.Errorf("script holds %q:\n%s", s, out)
				}
			}
		})
	}
}

// fileAt is harnessStat that finds the regular files in files too, and
// nothing else.
func fileAt(files ...string) func(string) (fs.FileInfo, error) {
	return func(p string) (fs.FileInfo, error) {
		if slices.Contains(files, p) {
			return os.Stat("submit_test.go") // any regular file
		}
		return harnessStat(p)
	}
}

// TestSubmitHelperDir: the job's script finds the isched Python package
// where the site installed it (issue 25's first-time user: the packaged
// example stopped with "the isched package was not found"): helper_dir
// from isched.conf or the environment, else share/isched beside isched;
// none when neither exists.
func TestSubmitHelperDir(t *testing.T) {
	for _, tc := range []struct {
		name, env, want string
		files           []string
	}{
		{name: "installed beside isched", files: []string{"/opt/isched/share/isched/isched/__init__.py"}, want: "/opt/isched/share/isched"},
		{name: "the module alone", files: []string{"/opt/isched/share/isched/isched.py"}, want: "/opt/isched/share/isched"},
		{name: "helper_dir wins", env: "/site/isched", files: []string{"/opt/isched/share/isched/isched.py"}, want: "/site/isched"},
		{name: "none installed"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := newHarness(t)
			h.env["ISCHED_HELPER_DIR"] = tc.env
			app := h.app()
			app.Stat = fileAt(tc.files...)
			var out, errb bytes.Buffer
			code := app.Run(context.Background(), []string{"submit", "--dry-run", "--partition-ideal", "cpu", "--time", "30",
				"--wrapper", "/opt/isched/bin/isched-wrapper", "--", "/usr/bin/python3", "train.py"}, &out, &errb)
			if code != 0 {
				t.Fatalf("exit %d: %s", code, errb.String())
			}
			got := strings.Count(out.String(), "export ISCHED_HELPER_DIR=")
			switch {
			case tc.want == "" && got != 0:
				t.Errorf("a helper directory that does not exist is exported:\n%s", out.String())
			case tc.want != "" && (got != 1 || !strings.Contains(out.String(), "\nexport ISCHED_HELPER_DIR="+tc.want+"\n")):
				t.Errorf("want one export ISCHED_HELPER_DIR=%s, got %d:\n%s", tc.want, got, out.String())
			}
		})
	}
}

// TestSubmitSaysWhereTheJobWent: --json gives a program what it needs to
// follow the job (id, lineage, output and error files, checkpoints);
// --parsable the id alone, as sbatch; --error puts stderr apart, under the
// same ownership checks as --output; neither goes with a dry run.
func TestSubmitSaysWhereTheJobWent(t *testing.T) {
	h := newHarness(t)
	h.labState()
	errFile := filepath.Join(h.dir, "logs", "fn.err")
	if err := os.MkdirAll(filepath.Dir(errFile), 0o700); err != nil {
		t.Fatal(err)
	}
	common := []string{"--site", "../../examples/site-lab.json", "--receipts", "none", "--partition-ideal", "cpu", "--output", filepath.Join(h.dir, "logs", "fn.out"), "--wrapper", "/opt/isched/bin/isched-wrapper"}
	code, out, errOut := h.run(append(append([]string{"submit", "--json", "-e", errFile, "--checkpoint-dir", filepath.Join(h.dir, "ck")}, common...), "--", "python3", "train.py")...)
	if code != 0 {
		t.Fatalf("--json: exit %d: %s", code, errOut)
	}
	var got submitJSON
	if err := json.Unmarshal([]byte(out), &got); err != nil {
		t.Fatalf("--json: %v\n%s", err, out)
	}
	p, _, _ := report.ParsePlanComment(h.slurm.specs[0].Comment)
	if got.JobID != 101 || got.Cluster != "lab" || got.Lineage != p.Lineage || got.Output != filepath.Join(h.dir, "logs", "fn.out") ||
		got.Error == nil || *got.Error != errFile || got.CheckpointDir != filepath.Join(h.dir, "ck") || len(got.Partitions) == 0 {
		t.Errorf("--json: %+v", got)
	}
	if script := string(h.slurm.submitted[0]); !strings.Contains(script, "#SBATCH --error="+errFile+"\n") {
		t.Errorf("no --error line:\n%s", script)
	}
	// (the fake sbatch runs as root: each submission its own checkpoint directory)
	code, out, errOut = h.run(append(append([]string{"submit", "--parsable", "--checkpoint-dir", filepath.Join(h.dir, "ck2")}, common...), "--", "python3", "train.py")...)
	if code != 0 || out != "102\n" {
		t.Fatalf("--parsable: exit %d %q %s", code, out, errOut)
	}
	if script := string(h.slurm.submitted[1]); strings.Contains(script, "--error") {
		t.Errorf("an --error line without --error:\n%s", script)
	}
	for _, args := range [][]string{{"--json", "--dry-run"}, {"--parsable", "--dry-run"}, {"--json", "--parsable"}} {
		if code, _, errOut := h.run(append(append(append([]string{"submit"}, args...), common...), "--", "python3", "train.py")...); code != ExitUsage ||
			!strings.Contains(errOut, "--json") {
			t.Errorf("%v: exit %d %s", args, code, errOut)
		}
	}
	// a link planted at the error file is refused as at the output
	link := filepath.Join(h.dir, "logs", "planted.err")
	if err := os.Symlink("/etc/passwd", link); err != nil {
		t.Fatal(err)
	}
	if code, _, errOut := h.run(append(append([]string{"submit", "--error", link}, common...), "--", "python3", "train.py")...); code != ExitUsage ||
		!strings.Contains(errOut, "--error "+link) {
		t.Errorf("a linked --error: exit %d %s", code, errOut)
	}
}
