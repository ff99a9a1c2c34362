//go:build integration

package e2e

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/isched/isched/internal/report"
	"github.com/isched/isched/internal/testutil"
)

// lmodInit is Debian's Lmod (package lmod) start-up file for bash.
const lmodInit = "/usr/share/lmod/lmod/init/bash"

// envFacts are what a job's fake trainer records of its environment.
type envFacts struct {
	Executable string             `json:"executable"`
	Prefix     string             `json:"prefix"`
	Env        map[string]*string `json:"env"`
	End        int64              `json:"end"`
	Start      int64              `json:"start"`
}

// TestUserEnvironmentOnCluster (issue 25, item 1): alice submits from her
// own shell, started clean as a login shell would be, with what ML users
// train from, and the job runs in that environment:
//   - a venv (`python3 -m venv --system-site-packages`) activated: the job
//     runs the venv's python, in its first attempt and in the attempt the
//     coordinator continues after the trainer dies (the environment is in
//     the script, so every attempt has it);
//   - a conda-like prefix on PATH and an Lmod module loaded (`module use`,
//     `module load`): the prefix's python runs and the module's variable
//     reaches the job;
//   - `--export=NONE`: the venv is not passed; the job gets alice's login
//     environment.
//
// Each submission says where its program resolved (`python →`). The conda
// job's shell names isched-relay (ISCHED_RELAY_ADDR) and no usable Redis
// password directory: the script passes the relay on, and the run is
// followed through it (relay.log shows alice's uid authenticated).
func TestUserEnvironmentOnCluster(t *testing.T) {
	besideOthers(t)
	if _, err := os.Stat(lmodInit); err != nil {
		t.Fatalf("Lmod: %v (make deps installs Debian's lmod)", err)
	}
	w := newWorld(t, fastPolicy)
	cli := testutil.Binary(t, "isched", "./isched")
	base := testutil.WorkDir(t, "isched-userenv-")
	home, uid := userDir(t, base, "alice")
	fake := filepath.Join(testutil.RepoRoot(), "internal/wrapper/testdata/fake_trainer.py")
	asAlice(t, home, "/usr/bin/python3 -m venv --without-pip --system-site-packages venv && mkdir -p conda/envs/ml/bin modules/mlenv &&"+
		" ln -s /usr/bin/python3 conda/envs/ml/bin/python")
	writeAs(t, filepath.Join(home, "modules/mlenv/1.0.lua"), []byte(`setenv("MLENV_HOME", "/opt/mlenv/1.0")`+"\n"+
		`prepend_path("PYTHONPATH", "/opt/mlenv/1.0/lib")`+"\n"), 0o644, uid)

	// submit runs isched submit as alice after setup, the fake trainer as
	// the command, run by program
	submit := func(name, setup, program string, steps int, cliArgs, trainerArgs string) (lineage, facts string) {
		t.Helper()
		facts = filepath.Join(home, name+".facts")
		cmd := setup + " && exec " + shq(cli) + " submit --job-name " + name + " --partition-ideal cpu --time 5 --mem 500M --wrapper " +
			shq(filepath.Join(binDir, "isched-wrapper")) + " --total-iters " + strconv.Itoa(steps) + " " + cliArgs + " -- " + program + " " +
			shq(fake) + " --steps " + strconv.Itoa(steps) + " --facts " + shq(facts) + " --env-facts VIRTUAL_ENV,CONDA_PREFIX,MLENV_HOME,PYTHONPATH,LOADEDMODULES " +
			trainerArgs
		return submitAsAlice(t, w, home, name, program, cmd), facts
	}
	// the venv's trainer dies at step 3 in its first attempt: the
	// coordinator continues the run from the step-2 checkpoint
	venvLineage, venvFacts := submit("venv", "source venv/bin/activate", "python", 8, "", "--ckpt-every 2 --crash-at 3")
	relay := w.relay()
	condaLineage, condaFacts := submit("conda", "export ISCHED_RELAY_ADDR="+relay+" ISCHED_REDIS_PASSWORD_DIR=/nonexistent"+
		" CONDA_PREFIX=$PWD/conda/envs/ml CONDA_DEFAULT_ENV=ml PATH=$PWD/conda/envs/ml/bin:$PATH"+
		" && source "+lmodInit+" && module use $PWD/modules && module load mlenv/1.0", "python", 4, "", "")
	// NONE: the login environment has no python, only /usr/bin/python3
	noneLineage, noneFacts := submit("none", "source venv/bin/activate", "/usr/bin/python3", 4, "--export=NONE", "")

	for _, l := range []string{venvLineage, condaLineage, noneLineage} {
		var st report.JobStatus
		waitFor(t, w, 3*time.Minute, "lineage "+l+" to end", func() bool {
			st, _ = w.status(l)
			return st.State == "ENDED"
		})
		if st.ExitStatus == nil || *st.ExitStatus != 0 {
			t.Errorf("%s ended with exit %v at step %d: %s\n%s", l, st.ExitStatus, st.Step, spansText(st), w.logs())
		}
	}
	venvPy := filepath.Join(home, "venv/bin/python")
	for attempt, path := range []string{venvFacts + ".attempt0", venvFacts + ".attempt1"} {
		f := readEnvFacts(t, path)
		if f.Executable != venvPy || f.Prefix != filepath.Join(home, "venv") || str(f.Env["VIRTUAL_ENV"]) != filepath.Join(home, "venv") {
			t.Errorf("venv, attempt %d: ran %s (prefix %s, VIRTUAL_ENV %q), want the venv's %s", attempt, f.Executable, f.Prefix,
				str(f.Env["VIRTUAL_ENV"]), venvPy)
		}
	}
	if f := readEnvFacts(t, venvFacts+".attempt1"); f.Start == 0 || f.End != 8 {
		t.Errorf("venv, attempt 1: steps %d..%d, want a resumed run to step 8", f.Start, f.End)
	}
	f := readEnvFacts(t, condaFacts)
	if want := filepath.Join(home, "conda/envs/ml/bin/python"); f.Executable != want || str(f.Env["CONDA_PREFIX"]) != filepath.Join(home, "conda/envs/ml") {
		t.Errorf("conda: ran %s with CONDA_PREFIX %q, want %s", f.Executable, str(f.Env["CONDA_PREFIX"]), want)
	}
	if str(f.Env["MLENV_HOME"]) != "/opt/mlenv/1.0" || !strings.Contains(str(f.Env["LOADEDMODULES"]), "mlenv/1.0") ||
		!strings.HasPrefix(str(f.Env["PYTHONPATH"]), "/opt/mlenv/1.0/lib") {
		t.Errorf("Lmod module: MLENV_HOME %q, LOADEDMODULES %q, PYTHONPATH %q in the job; want the module's", str(f.Env["MLENV_HOME"]),
			str(f.Env["LOADEDMODULES"]), str(f.Env["PYTHONPATH"]))
	}
	relayLog, _ := os.ReadFile(filepath.Join(w.dir, "relay.log"))
	if !slices.ContainsFunc(strings.Split(string(relayLog), "\n"), func(l string) bool {
		return strings.Contains(l, "relay connection authenticated") && strings.Contains(l, "uid="+strconv.Itoa(uid))
	}) {
		t.Errorf("relay.log shows no connection of alice's (uid %d): the conda job did not report through isched-relay\n%s", uid, relayLog)
	}
	f = readEnvFacts(t, noneFacts)
	if f.Executable != "/usr/bin/python3" || f.Env["VIRTUAL_ENV"] != nil {
		t.Errorf("--export=NONE: ran %s with VIRTUAL_ENV %q, want the login environment's /usr/bin/python3 and no venv", f.Executable,
			str(f.Env["VIRTUAL_ENV"]))
	}
}

// asAlice runs a bash command as alice in dir.
func asAlice(t *testing.T, dir, command string) {
	t.Helper()
	cmd := exec.Command("runuser", "-u", "alice", "--", "bash", "-c", "cd "+shq(dir)+" && "+command)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("as alice: %s: %v\n%s", command, err, out)
	}
}

var lineageRE = regexp.MustCompile(`isched: lineage (\S+) on `)

// submitAsAlice runs `isched submit` (command) in a bash started as alice
// with a clean login-like environment (no variable of the test's own)
// plus the CLI's settings, and returns the lineage it made.
func submitAsAlice(t *testing.T, w *world, dir, name, program, command string) string {
	t.Helper()
	env := []string{"HOME=" + dir, "USER=alice", "LOGNAME=alice", "SHELL=/bin/bash", "PATH=/usr/local/bin:/usr/bin:/bin",
		"ISCHED_CLUSTER=" + w.cluster, "ISCHED_REDIS_ADDR=" + w.redis.Addr, "ISCHED_REDIS_USER=viewer",
		"ISCHED_REDIS_PASSWORD_FILE=" + w.redis.PasswordFile("viewer"), "ISCHED_HELPER_DIR=" + filepath.Join(testutil.RepoRoot(), "scripts"),
		"ISCHED_RELAY_ADDR=" + w.relay()} // as a site's isched.conf gives it: alice can read no reporter password
	cmd := exec.Command("runuser", "-u", "alice", "--", "env", "-i")
	cmd.Args = append(cmd.Args, env...)
	cmd.Args = append(cmd.Args, "bash", "-c", "cd "+shq(dir)+" && "+command)
	out, err := cmd.CombinedOutput()
	t.Logf("%s: isched submit as alice:\n%s", name, out)
	if err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	if want := program + " → "; !strings.Contains(string(out), want) {
		t.Errorf("%s: isched submit did not say where %s resolved (%q)", name, program, want)
	}
	m := lineageRE.FindSubmatch(out)
	if m == nil {
		t.Fatalf("%s: no lineage in isched submit's output", name)
	}
	return string(m[1])
}

func readEnvFacts(t *testing.T, path string) envFacts {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("facts: %v", err)
	}
	var f envFacts
	if err := json.Unmarshal(b, &f); err != nil {
		t.Fatalf("facts %s: %v", path, err)
	}
	return f
}

func str(p *string) string {
	if p == nil {
		return ""
	}
	return *p
}

// TestOutputNotInSharedDirAsBob (issue 26, item 5): alice submits from a
// directory every user may write to (1777, as /tmp). While her job is
// pending, bob reads its lineage from squeue and plants, at the default
// paths in that directory, a symlink for its output (to a file of
// alice's) and a checkpoint directory of his own. Her job's output and
// checkpoints are in her private directory instead: the file bob aimed at
// is untouched, nothing of bob's is used, and the run ends complete.
func TestOutputNotInSharedDirAsBob(t *testing.T) {
	w := newWorld(t, fastPolicy)
	cli := testutil.Binary(t, "isched", "./isched")
	base := testutil.WorkDir(t, "isched-shared-")
	home, uid := userDir(t, base, "alice")
	shared := filepath.Join(base, "tmp")
	if err := os.Mkdir(shared, 0o777); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(shared, 0o1777); err != nil {
		t.Fatal(err)
	}
	victim := filepath.Join(home, "victim.txt")
	writeAs(t, victim, []byte("alice's notes\n"), 0o644, uid)
	fake := filepath.Join(testutil.RepoRoot(), "internal/wrapper/testdata/fake_trainer.py")
	const total = 6
	cmd := "cd " + shq(shared) + " && exec " + shq(cli) + " submit --job-name shared --partition-ideal cpu --time 5 --mem 500M --total-iters " +
		strconv.Itoa(total) + " --sbatch-arg=--hold --wrapper " + shq(filepath.Join(binDir, "isched-wrapper")) + " -- /usr/bin/python3 " +
		shq(fake) + " --steps " + strconv.Itoa(total) + " --ckpt-every 2"
	lineage := submitAsAlice(t, w, home, "shared", "/usr/bin/python3", cmd)

	// bob, from squeue's view of the pending job (its comment names the lineage)
	out, err := exec.Command("runuser", "-u", "bob", "--", "squeue", "-h", "-u", "alice", "-o", "%i %k").Output()
	if err != nil || !strings.Contains(string(out), "lineage="+lineage) {
		t.Fatalf("bob's squeue: %v %q, want alice's pending job with lineage %s", err, out, lineage)
	}
	job := strings.Fields(string(out))[0]
	// the checkpoint directory: only if alice's submit did not make it first
	plant := "ln -s " + shq(victim) + " " + shq(filepath.Join(shared, "isched-"+lineage+".out")) + " && { mkdir -p -m 777 " +
		shq(filepath.Join(shared, "checkpoints", lineage)) + " || true; }"
	if out, err := exec.Command("runuser", "-u", "bob", "--", "bash", "-c", plant).CombinedOutput(); err != nil {
		t.Fatalf("bob's plant: %v %s", err, out)
	}
	if err := runCmd("scontrol", "release", job); err != nil {
		t.Fatal(err)
	}
	var st report.JobStatus
	waitFor(t, w, 3*time.Minute, "alice's run to end", func() bool {
		st, _ = w.status(lineage)
		return st.State == "ENDED"
	})
	if st.Step != total || st.ExitStatus == nil || *st.ExitStatus != 0 {
		t.Errorf("alice's run ended at step %d, exit %v; want %d, 0\n%s", st.Step, st.ExitStatus, total, w.logs())
	}
	if b, _ := os.ReadFile(victim); string(b) != "alice's notes\n" {
		t.Errorf("bob's symlink wrote into %s: %q", victim, tail(b, 500))
	}
	private := filepath.Join(home, ".cache/isched/jobs", lineage)
	if b, err := os.ReadFile(filepath.Join(private, "isched-"+lineage+".out")); err != nil || !strings.Contains(string(b), "isched: lineage "+lineage) {
		t.Errorf("alice's output in her private directory: %v %q", err, tail(b, 500))
	}
	if ents, _ := os.ReadDir(filepath.Join(private, "checkpoints")); len(ents) == 0 {
		t.Errorf("no checkpoint in alice's private %s/checkpoints", private)
	}
	if ents, _ := os.ReadDir(filepath.Join(shared, "checkpoints", lineage)); len(ents) != 0 {
		t.Errorf("alice's job wrote into bob's planted directory: %v", ents)
	}
}

// TestConfigFileOnlyOnCluster (issue 25, item 2): alice has no ISCHED_*
// variable at all, only her configuration file (the site's has the same
// format and sits under it): isched config shows where each setting comes
// from, and she estimates, submits (the job reports through isched-relay,
// from relay_addr) and follows the run to its end.
func TestConfigFileOnlyOnCluster(t *testing.T) {
	besideOthers(t)
	w := newWorld(t, fastPolicy)
	cli := testutil.Binary(t, "isched", "./isched")
	base := testutil.WorkDir(t, "isched-conf-")
	home, uid := userDir(t, base, "alice")
	relay := w.startRelay()
	root := testutil.RepoRoot()
	conf := "# alice's own\ncluster = " + w.cluster + "\nredis_addr = " + w.redis.Addr + "\nredis_user = viewer\nredis_password_file = " +
		w.redis.PasswordFile("viewer") + "\nrelay_addr = " + relay + "\nsite = " + filepath.Join(root, "examples/site-lab.json") +
		"\nhelper_dir = " + filepath.Join(root, "scripts") + "\n"
	confPath := writeUserConf(t, home, uid, conf)
	run := aliceCLI(t, home, cli)
	out := run("config")
	t.Logf("isched config:\n%s", out)
	// her file sets every value a built-in default had: what it leaves is "unset"
	for _, want := range []string{confPath + ":2", "relay_addr", relay, "unset"} {
		if !strings.Contains(out, want) {
			t.Errorf("isched config without %q", want)
		}
	}
	out = run("estimate", "--model", filepath.Join(root, "internal/cli/testdata/resnet18_128.json"), "--samples", "3200", "--batch", "16,32",
		"--optimizer", "momentum")
	if !strings.Contains(out, "cpu") {
		t.Errorf("isched estimate from the file's site catalogue:\n%s", out)
	}
	const total = 5
	out = run("submit", "-p", "cpu", "-t", "5", "--mem", "500M", "--total-iters", strconv.Itoa(total), "--wrapper", filepath.Join(binDir, "isched-wrapper"),
		"--", "/usr/bin/python3", filepath.Join(root, "internal/wrapper/testdata/fake_trainer.py"), "--steps", strconv.Itoa(total))
	m := lineageRE.FindStringSubmatch(out)
	if m == nil || !strings.Contains(out, "Submitted batch job ") {
		t.Fatalf("isched submit:\n%s", out)
	}
	job := strings.Fields(out[strings.Index(out, "Submitted batch job ")+len("Submitted batch job "):])[0]
	var st report.JobStatus
	waitFor(t, w, 3*time.Minute, "alice's run to end", func() bool {
		st, _ = w.status(m[1])
		return st.State == "ENDED"
	})
	if st.Step != total {
		t.Errorf("run ended at step %d, want %d", st.Step, total)
	}
	out = run("status", job)
	if !strings.Contains(out, "lineage "+m[1]) || !strings.Contains(out, fmt.Sprintf("%d/%d", total, total)) {
		t.Errorf("isched status %s:\n%s", job, out)
	}
	relayLog, _ := os.ReadFile(filepath.Join(w.dir, "relay.log"))
	if !strings.Contains(string(relayLog), "uid="+strconv.Itoa(uid)) {
		t.Errorf("the job did not report through the relay named in the file:\n%s", relayLog)
	}
}

// TestLabConfigInLoginShell (issue 25, item 2): the lab's settings come
// from a site file, as a site's do, not from built-in defaults:
// scripts/dev-cluster writes $ISCHED_DEV_DIR/isched.conf and names it in
// /etc/profile.d (ISCHED_CONF), so alice's own login shell, with no
// ISCHED_* variable of her own, reads it: isched config shows the file and
// where each setting comes from, the relay jobs report through among them.
func TestLabConfigInLoginShell(t *testing.T) {
	besideOthers(t)
	testutil.NeedSlurm(t)
	cli := testutil.Binary(t, "isched", "./isched")
	conf := filepath.Join(testutil.DevDir(), "isched.conf")
	out, err := exec.Command("runuser", "-l", "alice", "-c", shq(cli)+" config").CombinedOutput()
	if err != nil {
		t.Fatalf("isched config in alice's login shell: %v\n%s", err, out)
	}
	t.Logf("isched config as alice (login shell):\n%s", out)
	for _, want := range []string{"configuration files read: [" + conf, "relay_addr", "127.0.0.1:6395", conf + ":4"} {
		if !strings.Contains(string(out), want) {
			t.Errorf("isched config in alice's login shell lacks %q", want)
		}
	}
}

// TestOwnScriptReportsThroughLabRelay (issue 25 item 2, issue 26 item 1):
// alice's own batch script, not one isched submit wrote (`srun
// isched-wrapper -- python3 …`, submitted with plain sbatch from her login
// shell), names no relay and holds no Redis password: its wrapper finds
// the relay in the lab's isched.conf (ISCHED_CONF, from her login
// environment through sbatch's --export=ALL), and her reports reach the
// lab's ingest stream through it.
func TestOwnScriptReportsThroughLabRelay(t *testing.T) {
	besideOthers(t)
	r := testutil.NeedRedis(t)
	testutil.NeedSlurm(t)
	base := testutil.WorkDir(t, "isched-ownscript-")
	home, uid := userDir(t, base, "alice")
	wrapper := testutil.Binary(t, "isched-wrapper", "./wrapper")
	// a loop of her own: progress lines the wrapper's tqdm-like preset reads
	script := "#!/bin/bash\nsrun " + shq(wrapper) + " --report-interval 1s --iter-pattern isched -- /bin/sh -c " +
		shq(`for i in 1 2 3 4 5; do echo "isched1 step=$i total=5"; sleep 0.3; done`) + "\n"
	writeAs(t, filepath.Join(home, "own.sh"), []byte(script), 0o755, uid)
	out, err := exec.Command("runuser", "-l", "alice", "-c", "cd "+shq(home)+" && sbatch --parsable -p cpu -t 2 --mem=500M -o own.out own.sh").CombinedOutput()
	if err != nil {
		t.Fatalf("sbatch as alice from her login shell: %v\n%s", err, out)
	}
	job := strings.TrimSpace(strings.Split(string(out), ";")[0])
	t.Cleanup(func() { _ = exec.Command("scancel", job).Run() })
	deadline := time.Now().Add(2 * time.Minute)
	for st := slurmJob(job)["JobState"]; st != "COMPLETED"; st = slurmJob(job)["JobState"] {
		if time.Now().After(deadline) || st == "FAILED" || st == "CANCELLED" {
			o, _ := os.ReadFile(filepath.Join(home, "own.out"))
			t.Logf("job script:\n%s", script)
			t.Fatalf("alice's own job %s: %s\n%s", job, st, o)
		}
		time.Sleep(500 * time.Millisecond)
	}
	o, _ := os.ReadFile(filepath.Join(home, "own.out"))
	if strings.Contains(string(o), "not reported") {
		t.Fatalf("the wrapper found no relay:\n%s", o)
	}
	c := r.Client(t, "admin", "lab")
	id, _ := strconv.ParseUint(job, 10, 64)
	var kinds []string
	testutil.Eventually(t, 30*time.Second, 200*time.Millisecond, "alice's reports in isched:lab:ingest", func() bool {
		ents, err := c.Range(context.Background(), c.Keys().Ingest(), "-", "+", 100000)
		if err != nil {
			t.Fatal(err)
		}
		kinds = kinds[:0]
		for _, e := range ents {
			if env, err := report.Decode(e.Payload); err == nil && env.Job != nil && env.Job.JobID == id && env.Job.UID == uid {
				kinds = append(kinds, string(env.Kind))
			}
		}
		return slices.Contains(kinds, string(report.KindEnd))
	})
	t.Logf("alice's job %s through the lab's relay: %v\n%s", job, kinds, o)
}

// writeUserConf writes a test user's own isched.conf
// (~/.config/isched/isched.conf under home, owned by uid) and returns its path.
func writeUserConf(t *testing.T, home string, uid int, conf string) string {
	t.Helper()
	if err := os.MkdirAll(filepath.Join(home, ".config/isched"), 0o755); err != nil {
		t.Fatal(err)
	}
	_ = os.Chown(filepath.Join(home, ".config"), uid, uid)
	_ = os.Chown(filepath.Join(home, ".config/isched"), uid, uid)
	path := filepath.Join(home, ".config/isched/isched.conf")
	writeAs(t, path, []byte(conf), 0o644, uid)
	return path
}

// aliceCLI runs the isched CLI as alice in home with an empty environment
// (only her own isched.conf speaks) but for env (NAME=value: what her
// login sets), failing the test on an error.
func aliceCLI(t *testing.T, home, cli string, env ...string) func(args ...string) string {
	return func(args ...string) string {
		t.Helper()
		argv := append(append([]string{"-u", "alice", "--", "env", "-i", "HOME=" + home, "USER=alice", "PATH=/usr/bin:/bin"}, env...), cli)
		cmd := exec.Command("runuser", append(argv, args...)...)
		cmd.Dir = home
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("isched %s: %v\n%s", strings.Join(args, " "), err, out)
		}
		return string(out)
	}
}

// TestDirsOfAnotherUserRefusedAsAlice (issue 44, item 5): bob makes a
// directory of his, 0755 (not writable by alice, not by every user); alice's
// `isched submit --dry-run` from her login shell with a --checkpoint-dir or
// an --output in it is refused, exit 2, naming the flag, the directory and
// bob; the same submission with her own directory is accepted (so the
// refusals are not some other failure of the dry run).
func TestDirsOfAnotherUserRefusedAsAlice(t *testing.T) {
	besideOthers(t)
	testutil.NeedSlurm(t)
	cli := testutil.Binary(t, "isched", "./isched")
	wrapper := testutil.Binary(t, "isched-wrapper", "./wrapper")
	base := testutil.WorkDir(t, "isched-owndirs-")
	home, _ := userDir(t, base, "alice")
	bobHome, bobUID := userDir(t, base, "bob")
	shared := filepath.Join(bobHome, "shared")
	if out, err := exec.Command("runuser", "-u", "bob", "--", "mkdir", "-m", "0755", shared).CombinedOutput(); err != nil {
		t.Fatalf("bob's mkdir: %v %s", err, out)
	}
	submit := func(flags string) (int, string) {
		t.Helper()
		line := "cd " + shq(home) + " && " + shq(cli) + " submit --dry-run --partition-ideal cpu --time 5 --mem 500M --wrapper " +
			shq(wrapper) + " " + flags + " -- /bin/true"
		out, err := exec.Command("runuser", "-l", "alice", "-c", line).CombinedOutput()
		code := exitCode(err)
		if code < 0 {
			t.Fatalf("runuser: %v %s", err, out)
		}
		return code, string(out)
	}
	bob := "bob (uid " + strconv.Itoa(bobUID) + ")"
	for _, tc := range []struct{ flags, want string }{
		{"--checkpoint-dir " + shq(filepath.Join(shared, "ckpt")), "--checkpoint-dir " + filepath.Join(shared, "ckpt") + ": " + shared + " is owned by " + bob},
		{"--output " + shq(filepath.Join(shared, "run.out")), "--output " + filepath.Join(shared, "run.out") + ": " + shared + " is owned by " + bob},
	} {
		code, out := submit(tc.flags)
		t.Logf("alice: isched submit --dry-run %s: exit %d\n%s", tc.flags, code, out)
		if code != 2 || !strings.Contains(out, tc.want) {
			t.Errorf("%s: exit %d, want 2 and %q", tc.flags, code, tc.want)
		}
	}
	code, out := submit("--checkpoint-dir " + shq(filepath.Join(home, "ckpt")) + " --output " + shq(filepath.Join(home, "run.out")))
	if code != 0 || !strings.Contains(out, "dry run, not submitted") {
		t.Errorf("alice's own directory: exit %d\n%s", code, out)
	}
}

// exitCode is the exit status err (from exec's Run) stands for: 0 for nil.
func exitCode(err error) int {
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		return ee.ExitCode()
	}
	if err != nil {
		return -1
	}
	return 0
}
