package cli

import (
	"errors"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
)

// venvLogin is a login shell with a venv activated, a conda env's
// variables, an Lmod module loaded, and what isched and Slurm put there.
var venvLogin = []string{
	"HOME=/home/alice", "USER=alice", "LOGNAME=alice", "SHELL=/bin/bash", "PWD=/home/alice/proj", "OLDPWD=/home/alice", "SHLVL=2",
	"_=/usr/bin/isched", "TERM=xterm-256color", "SSH_AUTH_SOCK=/tmp/ssh-x/agent.1", "DISPLAY=localhost:10.0",
	"PATH=/home/alice/venv/bin:/opt/conda/envs/ml/bin:/usr/bin:/bin", "VIRTUAL_ENV=/home/alice/venv",
	"CONDA_PREFIX=/opt/conda/envs/ml", "LD_LIBRARY_PATH=/opt/cuda/12.4/lib64", "CUDA_HOME=/opt/cuda/12.4",
	"PYTHONPATH=/home/alice/lib", "LOADEDMODULES=cuda/12.4", "BASH_FUNC_module%%=() {  eval $($LMOD_CMD bash \"$@\")\n}",
	"BASH_FUNC_ml%%=() {  eval $($LMOD_DIR/ml_cmd \"$@\")\n}", "WANDB_MODE=offline", "QUOTED=it's $HOME `x`",
	"ISCHED_REDIS_USER=viewer", "ISCHED_REDIS_PASSWORD_FILE=/var/lib/isched/viewer.pass", "ISCHED_CLUSTER=lab", "REDISCLI_AUTH=s3cret",
	"SLURM_JOB_ID=41", "SLURM_CPUS_ON_NODE=4", "SBATCH_ACCOUNT=phys", "SHELLOPTS=braceexpand", "IFS= ", "EUID=1001",
}

func TestJobEnvOf(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name     string
		export   string
		want     []string // NAME=value, sorted
		wantNote []string
	}{
		{"all: the software environment, no session, identity, isched, Slurm or shell variables", "", []string{
			"CONDA_PREFIX=/opt/conda/envs/ml", "CUDA_HOME=/opt/cuda/12.4", "LD_LIBRARY_PATH=/opt/cuda/12.4/lib64", "LOADEDMODULES=cuda/12.4",
			"PATH=/home/alice/venv/bin:/opt/conda/envs/ml/bin:/usr/bin:/bin", "PYTHONPATH=/home/alice/lib", "QUOTED=it's $HOME `x`",
			"VIRTUAL_ENV=/home/alice/venv", "WANDB_MODE=offline"}, []string{"shell functions not passed (ml, module)"}},
		{"none: nothing (the login environment)", "NONE", nil, nil},
		{"a list: those names, and those set", "PATH,WANDB_MODE,MISSING,SLURM_JOB_ID,EXTRA=1,WANDB_MODE=online", []string{
			"EXTRA=1", "PATH=/home/alice/venv/bin:/opt/conda/envs/ml/bin:/usr/bin:/bin", "WANDB_MODE=online"},
			[]string{"not passed (Slurm's, the shell's or the login session's own): SLURM_JOB_ID"}},
		{"all plus one set", "ALL,CUDA_HOME=/opt/cuda/11.8", []string{
			"CONDA_PREFIX=/opt/conda/envs/ml", "CUDA_HOME=/opt/cuda/11.8", "LD_LIBRARY_PATH=/opt/cuda/12.4/lib64", "LOADEDMODULES=cuda/12.4",
			"PATH=/home/alice/venv/bin:/opt/conda/envs/ml/bin:/usr/bin:/bin", "PYTHONPATH=/home/alice/lib", "QUOTED=it's $HOME `x`",
			"VIRTUAL_ENV=/home/alice/venv", "WANDB_MODE=offline"}, []string{"shell functions"}},
	}
	for _, tt := range tests {
		spec, err := parseExport(tt.export)
		if err != nil {
			t.Fatalf("%s: %v", tt.name, err)
		}
		env, note := jobEnvOf(venvLogin, spec)
		var got []string
		for _, kv := range env {
			got = append(got, kv[0]+"="+kv[1])
		}
		if !slices.Equal(got, tt.want) {
			t.Errorf("%s: got\n%q\nwant\n%q", tt.name, got, tt.want)
		}
		for _, w := range tt.wantNote {
			if !strings.Contains(note, w) {
				t.Errorf("%s: note %q, want %q in it", tt.name, note, w)
			}
		}
		if len(tt.wantNote) == 0 && note != "" {
			t.Errorf("%s: note %q, want none", tt.name, note)
		}
	}
}

func TestParseExportRefuses(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct{ in, why string }{
		{"NONE,PATH", "NONE cannot be combined"},
		{"ALL,1X", `"1X" is not a variable name`},
		{"ISCHED_REDIS_PASSWORD_FILE", "isched's own"},
		{"REDISCLI_AUTH=x", "isched's own"},
		{"PATH,", `"" is not a variable name`},
	} {
		_, err := parseExport(tt.in)
		if !errors.Is(err, errUsage) || !strings.Contains(err.Error(), tt.why) {
			t.Errorf("--export=%s: %v, want a usage error with %q", tt.in, err, tt.why)
		}
	}
	if e, err := parseExport("ALL,A=x=y,B"); err != nil || e.String() != "ALL,B,A=x=y" {
		t.Errorf("ALL,A=x=y,B: %q %v", e.String(), err)
	}
}

// TestJobEnvRunsInBash: the export lines of a whole hostile environment
// run under `bash` with `set -eu` and give the job exactly those values
// (a read-only variable such as SHELLOPTS would end the script).
func TestJobEnvRunsInBash(t *testing.T) {
	t.Parallel()
	bash, err := exec.LookPath("bash")
	if err != nil {
		t.Fatal(err)
	}
	spec, _ := parseExport("")
	env, _ := jobEnvOf(append(slices.Clone(venvLogin), "NL=a\nb", "BS=\\", "UNI=é€"), spec)
	s := Script{JobName: "x", Partitions: []string{"cpu"}, UserEnv: env, UserExport: "ALL", Env: [][2]string{{"ISCHED_LINEAGE", "l"}}, Argv: []string{"env", "-0"}}
	b, err := s.Render()
	if err != nil {
		t.Fatal(err)
	}
	body := strings.Replace(string(b), "exec srun ", "exec ", 1)
	cmd := exec.Command(bash, "-c", body)
	cmd.Env = venvLogin
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("script: %v\n%s", err, body)
	}
	got := map[string]string{}
	for _, kv := range strings.Split(string(out), "\x00") {
		k, v, _ := strings.Cut(kv, "=")
		got[k] = v
	}
	for _, kv := range env {
		if got[kv[0]] != kv[1] {
			t.Errorf("%s: the job has %q, want %q", kv[0], got[kv[0]], kv[1])
		}
	}
	if got["NL"] != "a\nb" || got["UNI"] != "é€" {
		t.Errorf("NL %q UNI %q", got["NL"], got["UNI"])
	}
}

type fakeFile struct {
	mode fs.FileMode
}

func (f fakeFile) Name() string       { return "f" }
func (f fakeFile) Size() int64        { return 1 }
func (f fakeFile) Mode() fs.FileMode  { return f.mode }
func (f fakeFile) ModTime() time.Time { return time.Time{} }
func (f fakeFile) IsDir() bool        { return f.mode.IsDir() }
func (f fakeFile) Sys() any           { return nil }

func TestLookProgram(t *testing.T) {
	t.Parallel()
	files := map[string]fs.FileMode{
		"/home/alice/venv/bin/python": 0o755, "/usr/bin/python3": 0o755, "/usr/bin/python": 0o755,
		"/home/alice/proj/train.sh": 0o644, "/home/alice/proj/run.sh": 0o700, "/opt/bin/python": fs.ModeDir | 0o755,
	}
	stat := func(p string) (fs.FileInfo, error) {
		if m, ok := files[p]; ok {
			return fakeFile{m}, nil
		}
		return nil, fs.ErrNotExist
	}
	for _, tt := range []struct{ prog, path, want, err string }{
		{"python", "/home/alice/venv/bin:/usr/bin", "/home/alice/venv/bin/python", ""},
		{"python", "/opt/bin:/usr/bin", "/usr/bin/python", ""}, // a directory is not the program
		{"python", ".:/usr/local/bin", "", `"python" not found in PATH .:/usr/local/bin`},
		{"./run.sh", "/usr/bin", "/home/alice/proj/run.sh", ""},
		{"train.sh", "/home/alice/proj", "", "not found"},
		{"./train.sh", "/usr/bin", "", "not an executable file"},
		{"/usr/bin/python3", "", "/usr/bin/python3", ""},
		{"/nope/python", "/usr/bin", "", "does not exist"},
	} {
		got, err := lookProgram(tt.prog, tt.path, "/home/alice/proj", stat)
		switch {
		case tt.err == "" && (err != nil || got != tt.want):
			t.Errorf("%s in %s: %q %v, want %q", tt.prog, tt.path, got, err, tt.want)
		case tt.err != "" && (err == nil || !strings.Contains(err.Error(), tt.err)):
			t.Errorf("%s in %s: %q %v, want an error with %q", tt.prog, tt.path, got, err, tt.err)
		}
	}
	// the real file system, as the CLI looks
	dir := t.TempDir()
	p := filepath.Join(dir, "python")
	if err := os.WriteFile(p, []byte("#!/bin/sh\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	if got, err := lookProgram("python", dir+":/usr/bin", "/", os.Stat); err != nil || got != p {
		t.Errorf("real file system: %q %v, want %q", got, err, p)
	}
}

// TestSubmitEnvironment: isched submit records the shell's environment,
// says where the program resolved, refuses one the job could not run,
// and honours --export=NONE, SBATCH_EXPORT and --as-user.
func TestSubmitEnvironment(t *testing.T) {
	h := newHarness(t)
	h.labState()
	venv := t.TempDir()
	py := filepath.Join(venv, "python")
	if err := os.WriteFile(py, []byte("#!/bin/sh\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	h.env["PATH"] = venv + ":/usr/bin:/bin"
	h.env["VIRTUAL_ENV"] = venv
	h.env["ISCHED_REDIS_USER"] = "viewer"
	h.env["ISCHED_RELAY_ADDR"] = "relay.lab.example:6395"
	h.env["ISCHED_RELAY_UID"] = "998"
	base := []string{"submit", "--dry-run", "--partition-ideal", "cpu", "--time", "30", "--wrapper", "/opt/isched/bin/isched-wrapper"}
	code, out, errOut := h.run(append(base, "--", "python", "train.py")...)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	for _, want := range []string{"export VIRTUAL_ENV=" + venv + "\n", "export PATH=" + venv + ":/usr/bin:/bin\n", "(--export=ALL)",
		"export ISCHED_RELAY_ADDR=relay.lab.example:6395\n", "export ISCHED_RELAY_UID=998\n"} {
		if !strings.Contains(out, want) {
			t.Errorf("script without %q:\n%s", want, out)
		}
	}
	if strings.Contains(out, "viewer") || strings.Contains(out, "PASSWORD_FILE=") {
		t.Errorf("the CLI's Redis login reached the script:\n%s", out)
	}
	if want := "isched: python → " + py; !strings.Contains(errOut, want) {
		t.Errorf("stderr %q, want %q", errOut, want)
	}

	// a program the job would not find: refused before the queue
	code, _, errOut = h.run(append(base, "--", "pythn", "train.py")...)
	if code != ExitUsage || !strings.Contains(errOut, `"pythn" not found in PATH`) || !strings.Contains(errOut, "exit 127") {
		t.Errorf("pythn: exit %d, stderr %q; want a usage error naming it", code, errOut)
	}

	// NONE (flag or SBATCH_EXPORT) and --as-user: no recorded environment,
	// and an unresolved program is only a warning (the login PATH is not known)
	for _, tt := range []struct {
		args []string
		env  string
	}{
		{[]string{"--export=NONE"}, ""},
		{nil, "NONE"},
		{[]string{"--as-user", "bob"}, ""},
	} {
		h.env["SBATCH_EXPORT"] = tt.env
		code, out, errOut = h.run(append(append(slices.Clone(base), tt.args...), "--", "pythn", "train.py")...)
		if code != 0 || strings.Contains(out, "VIRTUAL_ENV") || strings.Contains(out, "export PATH=") || !strings.Contains(errOut, "warning: the command's program") {
			t.Errorf("%v SBATCH_EXPORT=%q: exit %d, stderr %q, script:\n%s", tt.args, tt.env, code, errOut, out)
		}
	}
}

// TestSubmitSbatchSpellings: a Slurm user's short options mean what they
// mean to sbatch.
func TestSubmitSbatchSpellings(t *testing.T) {
	h := newHarness(t)
	h.labState()
	code, out, errOut := h.run("submit", "--dry-run", "-p", "gpu", "-t", "2:00:00", "-c", "4", "-N", "1", "-n", "1", "-J", "myjob",
		"--gpus", "1", "-A", "phys", "-q", "normal", "-o", "out.txt", "-C", "v100", "--wrapper", "/opt/isched/bin/isched-wrapper",
		"--", "/usr/bin/python3", "train.py")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	for _, want := range []string{"--partition=gpu\n", "--time=120\n", "--cpus-per-task=4\n", "--nodes=1\n", "--ntasks=1\n",
		"--job-name=myjob\n", "--gres=gpu:1\n", "--account=phys\n", "--qos=normal\n", "--output=/home/alice/proj/out.txt\n", "--constraint=v100\n"} {
		if !strings.Contains(out, "#SBATCH "+want) {
			t.Errorf("no #SBATCH %q in:\n%s", strings.TrimSpace(want), out)
		}
	}
	// sbatch's attached spellings (getopt): -pgpu -t2:00:00 -c4 -Jmyjob
	code, out, errOut = h.run("submit", "--dry-run", "-pgpu", "-t2:00:00", "-c4", "-N1", "-Jmyjob", "--gpus", "1",
		"--wrapper", "/opt/isched/bin/isched-wrapper", "--", "/usr/bin/python3", "train.py", "-c8")
	if code != 0 {
		t.Fatalf("attached: exit %d: %s", code, errOut)
	}
	for _, want := range []string{"--partition=gpu\n", "--time=120\n", "--cpus-per-task=4\n", "--nodes=1\n", "--job-name=myjob\n"} {
		if !strings.Contains(out, "#SBATCH "+want) {
			t.Errorf("attached: no #SBATCH %q in:\n%s", strings.TrimSpace(want), out)
		}
	}
	if !strings.Contains(out, "train.py -c8") {
		t.Errorf("attached: the command's own -c8 changed:\n%s", out)
	}
	_, helpOut, helpErr := h.run("submit", "-h")
	// sbatch's one-letter spellings (man sbatch) of the flags isched takes
	for _, al := range [][2]string{{"p", "partition-ideal"}, {"t", "time"}, {"c", "cpus"}, {"N", "nodes"}, {"n", "ntasks"}, {"G", "gpus"},
		{"J", "job-name"}, {"A", "account"}, {"q", "qos"}, {"o", "output"}, {"e", "error"}, {"C", "constraint"}, {"a", "array"}} {
		if !strings.Contains(helpOut+helpErr, "  -"+al[0]+", --"+al[1]+" ") {
			t.Errorf("-%s is not the shorthand of --%s in isched submit -h", al[0], al[1])
		}
	}
	// sbatch's long spellings mean the isched flag
	code, out, errOut = h.run("submit", "--dry-run", "--partition=gpu", "--cpus-per-task", "3", "--gpus", "1",
		"--wrapper", "/opt/isched/bin/isched-wrapper", "--", "/usr/bin/python3", "train.py")
	if code != 0 || !strings.Contains(out, "#SBATCH --partition=gpu\n") || !strings.Contains(out, "#SBATCH --cpus-per-task=3\n") {
		t.Errorf("--partition, --cpus-per-task: exit %d %s\n%s", code, errOut, out)
	}
	if code, _, errOut := h.run("submit", "--dry-run", "--gpus", "1", "--gres", "gpu:2", "--", "/usr/bin/python3", "x.py"); code != ExitUsage ||
		!strings.Contains(errOut, "--gpus and --gres") {
		t.Errorf("--gpus with --gres: exit %d %q", code, errOut)
	}
}
