//go:build integration

package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/isched/isched/internal/cli"
	"github.com/isched/isched/internal/report"
	"github.com/isched/isched/internal/stream"
	"github.com/isched/isched/internal/testutil"
)

// binDir holds the binaries under test (testutil.Binary builds them once).
// It is set once, by the first bins call: parallel tests read it.
var (
	binDir  string
	binOnce sync.Once
)

// bins builds isched-wrapper, isched-agent and isched-coordinator.
func bins(t *testing.T) string {
	t.Helper()
	var dir string
	for name, pkg := range map[string]string{"isched-wrapper": "./wrapper", "isched-agent": "./agent", "isched-coordinator": "./coordinator"} {
		dir = filepath.Dir(testutil.Binary(t, name, pkg))
	}
	binOnce.Do(func() { binDir = dir })
	return binDir
}

// world is one test's isched deployment: an agent and a coordinator on a
// cluster name of its own (so tests share Redis without seeing each other).
type world struct {
	t       *testing.T
	cluster string
	dir     string
	redis   testutil.Redis
	coord   *exec.Cmd
	agent   *exec.Cmd
	started time.Time
	jobs    []string
	config  string
	// coordArgs and agentArgs are added to the daemons' command lines
	// (after the harness's own: a flag given again wins).
	coordArgs, agentArgs []string
	// slurmConf, when set, is the slurm.conf of the Slurm cluster this
	// world's daemons serve (SLURM_CONF: lab2, newWorldOnCluster); its
	// jobs are cancelled there (scancel --clusters).
	slurmConf, slurmCluster string
	// relayAddr is this world's isched-relay, started on the first job of
	// a test user (world.relay).
	relayAddr string
}

// besideOthers runs a test that needs the cpu partition only (a job or two
// there, nothing it fills or counts) in parallel with the others like it
// and the conventions. Call it first: a test that pauses for its parallel
// turn holding a lease would keep an OwnLab test waiting for it forever.
func besideOthers(t *testing.T) {
	t.Parallel()
	testutil.UseLab(t, "cpu")
}

func newWorld(t *testing.T, policyJSON string) *world {
	t.Helper()
	return newWorldOn(t, policyJSON, testutil.NeedRedis)
}

// newWorldOn is newWorld on the Redis that need returns (testutil.NeedRedis,
// or testutil.NeedRedisCluster: the daemons and the jobs' wrappers then
// get the cluster's master addresses, comma-separated).
func newWorldOn(t *testing.T, policyJSON string, need func(testing.TB) testutil.Redis) *world {
	t.Helper()
	return newWorldWith(t, policyJSON, need, &world{cluster: fmt.Sprintf("e2e%d", time.Now().UnixNano()%1e9)})
}

// newWorldOnCluster is a world for the lab's second Slurm cluster (lab2,
// scripts/dev-cluster): its agent talks to that cluster's slurmctld, and
// its isched cluster is the Slurm cluster's name, as the CLI's clusters
// setting makes it (sbatch --clusters=NAME, Redis keys isched:NAME:…).
func newWorldOnCluster(t *testing.T, policyJSON, slurmCluster string) *world {
	t.Helper()
	conf := filepath.Join(testutil.DevDir(), slurmCluster, "slurm.conf")
	out, err := exec.Command("env", "SLURM_CONF="+conf, "scontrol", "ping").CombinedOutput()
	if err != nil || !strings.Contains(string(out), "is UP") {
		t.Fatalf("Slurm cluster %s (%s): scontrol ping: %v: %s (scripts/dev-cluster up starts it)", slurmCluster, conf, err, out)
	}
	return newWorldWith(t, policyJSON, testutil.NeedRedis, &world{cluster: slurmCluster, slurmConf: conf, slurmCluster: slurmCluster})
}

func newWorldWith(t *testing.T, policyJSON string, need func(testing.TB) testutil.Redis, w *world) *world {
	t.Helper()
	if !testutil.Leased(t) {
		// a test that declared nothing starts jobs on cpu, beside other
		// packages' jobs, and moves them to the gpu partition, whose state
		// it sets up (blockGPU): that is its alone. A test that uses
		// another partition claims it first.
		testutil.ClaimPartitions(t, "gpu")
		testutil.UseLab(t, "cpu")
	}
	testutil.NeedSlurm(t)
	r := need(t)
	bins(t)
	dir := t.TempDir()
	if os.Getenv("ISCHED_E2E_KEEP") != "" {
		// keep job outputs, trainer facts and daemon logs for a post-mortem
		dir, _ = os.MkdirTemp("", "isched-e2e-"+strings.ReplaceAll(t.Name(), "/", "_")+"-")
		t.Logf("ISCHED_E2E_KEEP: files kept in %s", dir)
	}
	w.t, w.redis, w.dir, w.started = t, r, dir, time.Now()
	_ = os.Chmod(w.dir, 0o755)
	w.config = filepath.Join(w.dir, "coordinator.json")
	// leader_ttl 2s: a SIGKILLed coordinator's successor leads 2 s later
	cfg := fmt.Sprintf(`{"cluster": %q, "tick": "1s", "stale_after": "15s", "leader_ttl": "2s", "policy": %s}`, w.cluster, policyJSON)
	if err := os.WriteFile(w.config, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	w.startAgent()
	w.startCoordinator()
	t.Cleanup(func() {
		for _, id := range w.jobs {
			if w.slurmCluster != "" {
				_ = exec.Command("scancel", "--clusters="+w.slurmCluster, id).Run()
			} else {
				_ = exec.Command("scancel", id).Run()
			}
		}
		for _, c := range []*exec.Cmd{w.coord, w.agent} {
			if c != nil && c.Process != nil {
				_ = c.Process.Signal(syscall.SIGTERM)
				_, _ = c.Process.Wait()
			}
		}
		w.dropRedisKeys()
		t.Logf("%s took %s", t.Name(), time.Since(w.started).Round(time.Second))
	})
	return w
}

func (w *world) env(user string) []string {
	env := append(os.Environ(), "ISCHED_CLUSTER="+w.cluster, "ISCHED_REDIS_ADDR="+w.redis.Addr,
		"ISCHED_REDIS_USER="+user, "ISCHED_REDIS_PASSWORD_FILE="+w.redis.PasswordFile(user))
	if w.slurmConf != "" {
		env = append(env, "SLURM_CONF="+w.slurmConf)
	}
	return env
}

func (w *world) startAgent() {
	w.t.Helper()
	// append: a test that restarts the agent keeps every run's log
	log, _ := os.OpenFile(filepath.Join(w.dir, "agent.log"), os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
	w.agent = exec.Command(filepath.Join(binDir, "isched-agent"), append([]string{"-cluster", w.cluster, "-poll", "1s", "-log-format", "text",
		"-script-dir", filepath.Join(w.dir, "agent-scripts")}, w.agentArgs...)...)
	w.agent.Env, w.agent.Stdout, w.agent.Stderr = w.env("agent"), log, log
	if err := w.agent.Start(); err != nil {
		w.t.Fatal(err)
	}
}

func (w *world) startCoordinator() {
	w.t.Helper()
	log, _ := os.OpenFile(filepath.Join(w.dir, "coordinator.log"), os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
	w.coord = exec.Command(filepath.Join(binDir, "isched-coordinator"), append([]string{"-config", w.config, "-metrics-listen", ""}, w.coordArgs...)...)
	w.coord.Env, w.coord.Stdout, w.coord.Stderr = w.env("coordinator"), log, log
	if err := w.coord.Start(); err != nil {
		w.t.Fatal(err)
	}
}

// killCoordinator SIGKILLs the coordinator (no goodbye) and starts a new one.
func (w *world) restartCoordinator() {
	_ = w.coord.Process.Kill()
	_, _ = w.coord.Process.Wait()
	w.startCoordinator()
}

func (w *world) logs() string {
	var b strings.Builder
	for _, f := range []string{"coordinator.log", "agent.log"} {
		data, _ := os.ReadFile(filepath.Join(w.dir, f))
		lines := strings.Split(string(data), "\n")
		if len(lines) > 40 {
			lines = lines[len(lines)-40:]
		}
		fmt.Fprintf(&b, "--- %s (tail)\n%s\n", f, strings.Join(lines, "\n"))
	}
	b.WriteString(testutil.SlurmQueue(w.slurmConf))
	return b.String()
}

func (w *world) client(user string) (*stream.Client, error) {
	env := map[string]string{"ISCHED_REDIS_ADDR": w.redis.Addr, "ISCHED_REDIS_PASSWORD_FILE": w.redis.PasswordFile(user), "ISCHED_CLUSTER": w.cluster}
	cfg, err := stream.ConfigFromEnv(func(k string) string { return env[k] }, user)
	if err != nil {
		return nil, err
	}
	return stream.Open(context.Background(), cfg)
}

func (w *world) status(lineage string) (report.JobStatus, bool) {
	c, err := w.client("coordinator")
	if err != nil {
		return report.JobStatus{}, false
	}
	defer c.Close()
	b, err := c.Get(context.Background(), c.Keys().JobStatus(lineage))
	if err != nil {
		return report.JobStatus{}, false
	}
	var st report.JobStatus
	if json.Unmarshal(b, &st) != nil {
		return report.JobStatus{}, false
	}
	return st, true
}

// sbatch submits a job and returns its id.
func (w *world) sbatch(args ...string) string {
	w.t.Helper()
	var out, errb bytes.Buffer
	if !hasOutputFlag(args) {
		// without -o Slurm writes slurm-<id>.out into the package directory
		args = append([]string{"-o", filepath.Join(w.dir, "slurm-%j.out")}, args...)
	}
	cmd := exec.Command("sbatch", append([]string{"--parsable"}, args...)...)
	// in the environment, not in --export: a Redis Cluster's address list
	// has commas, which --export splits on (--export=ALL passes it on)
	cmd.Env = append(os.Environ(), "ISCHED_REDIS_ADDR="+w.redis.Addr)
	cmd.Stdout, cmd.Stderr = &out, &errb
	if err := cmd.Run(); err != nil {
		w.t.Fatalf("sbatch %v: %v: %s", args, err, errb.String())
	}
	id := strings.TrimSpace(strings.Split(out.String(), ";")[0])
	w.jobs = append(w.jobs, id)
	return id
}

type trainJob struct {
	id, lineage, dir, facts, ckdir string
}

// submitTrainer submits the fake trainer under the wrapper with a plan.
func (w *world) submitTrainer(plan report.Plan, sbatchArgs []string, trainerArgs ...string) trainJob {
	w.t.Helper()
	return w.submitTrainerWith(trainOpts{}, plan, sbatchArgs, trainerArgs...)
}

// trainOpts vary how the job script launches the wrapper.
type trainOpts struct {
	// Rank0Delay holds rank 0 back before it starts its wrapper, so the
	// other ranks' reports reach the coordinator first (srun starts ranks
	// in no particular order; this makes the unlucky order certain).
	Rank0Delay time.Duration
	// After keeps the job alive this long after its step ended (the
	// wrapper's end report reaches the coordinator while Slurm still runs
	// the job).
	After time.Duration
	// Relay is an isched-relay's address (world.startRelay): the wrapper
	// reports through it and gets no Redis password at all.
	Relay string
	// User submits the job as this test user (sbatch --uid, from root):
	// the job and its files are theirs, and so are their Slurm limits. A
	// user's job reports through the world's relay (the default path: no
	// user can read the reporter password).
	User string
	// Argv is the training command (default: the fake trainer); it is
	// given --facts FILE (the job's facts file), then trainerArgs.
	Argv []string
	// Env are more NAME=value pairs for the job's environment.
	Env []string
	// Elastic launches one task per GPU of each attempt, as isched
	// submit's script of an elastic run does (cli.Script.Elastic).
	Elastic bool
	// InScript writes the job's name, output, requeue and memory as
	// #SBATCH lines and its environment as exports in the script, as
	// isched submit's scripts do: the script alone runs the job, so the
	// agent can submit it again (a twin, a resubmission: sbatch
	// --export=NONE).
	InScript bool
}

func (w *world) submitTrainerWith(o trainOpts, plan report.Plan, sbatchArgs []string, trainerArgs ...string) trainJob {
	w.t.Helper()
	if plan.Cluster == "" {
		plan.Cluster = w.cluster // only this test's coordinator may act on the job
	}
	parent := w.dir
	if o.User != "" { // under a directory the user can reach
		parent = testutil.WorkDir(w.t, "isched-e2e-"+o.User+"-")
	}
	dir, _ := os.MkdirTemp(parent, "job")
	_ = os.Chmod(dir, 0o755)
	j := trainJob{lineage: plan.Lineage, dir: dir, facts: filepath.Join(dir, "facts.json"), ckdir: filepath.Join(dir, "ckpt")}
	_ = os.MkdirAll(j.ckdir, 0o755)
	// the wrapper's per-task directory (progress file, control file, spool)
	// goes under TMPDIR and is never removed: keep it inside the test's dir
	tmp := filepath.Join(dir, "tmp")
	_ = os.MkdirAll(tmp, 0o755)
	args := []string{filepath.Join(binDir, "isched-wrapper"), "--report-interval", "1s", "--checkpoint-dir", j.ckdir,
		"--checkpoint-debounce", "300ms", "--checkpoint-signal", "file", "--grace", "10s", "--"}
	if o.Argv == nil {
		o.Argv = []string{"/usr/bin/python3", filepath.Join(testutil.RepoRoot(), "internal/wrapper/testdata/fake_trainer.py")}
	}
	args = append(append(append(args, o.Argv...), "--facts", j.facts), trainerArgs...)
	q := make([]string, len(args))
	for i, a := range args {
		q[i] = cli.ShellQuote(a)
	}
	script := filepath.Join(dir, "job.sh")
	launch := "exec srun " + strings.Join(q, " ")
	if o.Elastic {
		launch = "n=\"${SLURM_GPUS_ON_NODE:-1}\"\nexec srun --ntasks=\"$(( n * ${SLURM_JOB_NUM_NODES:-1} ))\" --ntasks-per-node=\"$n\" " + strings.Join(q, " ")
	}
	if o.Rank0Delay > 0 {
		launch = fmt.Sprintf("exec srun /bin/bash -c '[ \"$SLURM_PROCID\" = 0 ] && sleep %.1f; exec \"$@\"' rank0-delay %s",
			o.Rank0Delay.Seconds(), strings.Join(q, " "))
	}
	if o.After > 0 {
		launch = strings.TrimPrefix(launch, "exec ") + fmt.Sprintf("\nsleep %.0f", o.After.Seconds())
	}
	if o.User != "" && o.Relay == "" {
		o.Relay = w.relay() // a user cannot read the reporter password: the default path
	}
	env := jobEnv(w, o, tmp, plan.Lineage)
	header := "#!/bin/bash\n"
	if o.InScript {
		// the script alone has what the job needs, the Redis address too
		header += inScriptHeader(plan.Lineage, filepath.Join(dir, "out.txt"), append(env, "ISCHED_REDIS_ADDR="+w.redis.Addr))
	}
	if err := os.WriteFile(script, []byte(header+launch+"\n"), 0o755); err != nil {
		w.t.Fatal(err)
	}
	// the Redis address comes with w.sbatch's environment (--export=ALL):
	// a Redis Cluster's list has commas, which --export splits on
	sb := append([]string{"-J", "isched-e2e-" + plan.Lineage, "--requeue", "--open-mode=append", "--mem=1G",
		"-o", filepath.Join(dir, "out.txt"), "--comment", plan.FormatComment(), "--export=ALL," + strings.Join(env, ",")},
		sbatchArgs...)
	if o.InScript {
		sb = append([]string{"--comment", plan.FormatComment()}, sbatchArgs...)
	}
	if o.User != "" {
		sb = append(sb, w.ownedBy(o.User, dir)...)
	}
	j.id = w.sbatch(append(sb, script)...)
	return j
}

// jobEnv is the environment submitTrainerWith gives a job besides the
// Redis address, NAME=value pairs: it reports through o.Relay, else (root's
// jobs may take the opt-in, docs/threat-model.md: root reads the reporter
// password, and the harness's many jobs need no relay) straight to Redis.
func jobEnv(w *world, o trainOpts, tmp, lineage string) []string {
	env := []string{"TMPDIR=" + tmp, "ISCHED_HELPER_DIR=" + filepath.Join(testutil.RepoRoot(), "scripts"), "ISCHED_LINEAGE=" + lineage,
		"ISCHED_CLUSTER=" + w.cluster}
	if o.Relay != "" {
		env = append(env, "ISCHED_RELAY_ADDR="+o.Relay, "ISCHED_REDIS_PASSWORD_FILE=/nonexistent", "ISCHED_REDIS_PASSWORD_DIR=/nonexistent")
	} else {
		env = append(env, "ISCHED_REPORT_DIRECT=1", "ISCHED_REDIS_PASSWORD_FILE="+w.redis.PasswordFile("reporter"))
	}
	return append(env, o.Env...)
}

// inScriptHeader is a self-contained job script's #SBATCH lines and
// exports (the values quoted for the shell).
func inScriptHeader(lineage, out string, env []string) string {
	var b strings.Builder
	fmt.Fprintf(&b, "#SBATCH -J isched-e2e-%s\n#SBATCH --requeue\n#SBATCH --open-mode=append\n#SBATCH --mem=1G\n#SBATCH -o %s\n", lineage, out)
	for _, kv := range env {
		k, v, _ := strings.Cut(kv, "=")
		fmt.Fprintf(&b, "export %s=%s\n", k, cli.ShellQuote(v))
	}
	b.WriteString("export SLURM_EXPORT_ENV=ALL\n")
	return b.String()
}

// ownedBy hands dir's tree to a test user and returns the sbatch options
// that submit as them.
func (w *world) ownedBy(who, dir string) []string {
	w.t.Helper()
	u, err := user.Lookup(who)
	if err != nil {
		w.t.Fatalf("test user %s: %v (scripts/dev-cluster up creates alice and bob)", who, err)
	}
	uid, _ := strconv.Atoi(u.Uid)
	gid, _ := strconv.Atoi(u.Gid)
	err = filepath.Walk(dir, func(p string, _ os.FileInfo, err error) error {
		if err != nil {
			return err
		}
		return os.Chown(p, uid, gid)
	})
	if err != nil {
		w.t.Fatal(err)
	}
	return []string{"--uid=" + u.Uid, "--gid=" + u.Gid}
}

func (j trainJob) readFacts(t *testing.T) map[string]any {
	t.Helper()
	b, err := os.ReadFile(j.facts)
	if err != nil {
		out, _ := os.ReadFile(filepath.Join(j.dir, "out.txt"))
		t.Fatalf("trainer facts: %v\njob output:\n%s", err, out)
	}
	var m map[string]any
	if err := json.Unmarshal(b, &m); err != nil {
		t.Fatal(err)
	}
	return m
}

// slurmJob reads `scontrol show job -o` fields.
func slurmJob(id string) map[string]string {
	out, err := exec.Command("scontrol", "show", "job", "-o", id).Output()
	m := map[string]string{}
	if err != nil {
		return m
	}
	for _, f := range strings.Fields(string(out)) {
		if k, v, ok := strings.Cut(f, "="); ok {
			m[k] = v
		}
	}
	return m
}

func waitFor(t *testing.T, w *world, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %s waiting for %s\n%s", timeout, what, w.logs())
		}
		time.Sleep(500 * time.Millisecond)
	}
}

func runCmd(name string, args ...string) error {
	out, err := exec.Command(name, args...).CombinedOutput()
	if err != nil {
		return fmt.Errorf("%s %v: %w: %s", name, args, err, out)
	}
	return nil
}
