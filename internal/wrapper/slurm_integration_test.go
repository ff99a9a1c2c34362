//go:build integration

package wrapper_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/isched/isched/internal/auth"
	"github.com/isched/isched/internal/report"
	"github.com/isched/isched/internal/stream"
	"github.com/isched/isched/internal/testutil"
)

// buildWrapper builds isched-wrapper once for the package's tests.
func buildWrapper(t *testing.T) string {
	t.Helper()
	return testutil.Binary(t, "isched-wrapper", "./wrapper")
}

type jobRun struct {
	t        *testing.T
	dir      string
	ckdir    string
	facts    string
	cluster  string
	redis    testutil.Redis
	jobID    string
	exitCode int
}

// submit starts a batch job whose step is `srun isched-wrapper ... -- fake trainer`.
func submit(t *testing.T, wrapperArgs, trainerArgs []string, wait bool) *jobRun {
	t.Helper()
	return submitVia(t, "", wrapperArgs, trainerArgs, wait)
}

// submitVia is submit with the wrappers told to reach Redis at addr (a
// proxy the test controls) instead of the real address.
func submitVia(t *testing.T, addr string, wrapperArgs, trainerArgs []string, wait bool) *jobRun {
	t.Helper()
	return submitIn(t, "", addr, wrapperArgs, trainerArgs, wait)
}

// submitIn is submitVia with the cluster name in the Redis keys given
// (default: one of the test's own).
func submitIn(t *testing.T, cluster, addr string, wrapperArgs, trainerArgs []string, wait bool) *jobRun {
	t.Helper()
	return submitSpec(t, jobSpec{cluster: cluster, addr: addr, wrapperArgs: wrapperArgs, trainerArgs: trainerArgs, wait: wait})
}

// jobSpec is a test job: `srun [srunArgs] [prefix] isched-wrapper
// [wrapperArgs] -- fake_trainer [trainerArgs]`, with ISCHED_* and exports
// in the job's environment.
type jobSpec struct {
	cluster, addr            string
	srunArgs, prefix         []string
	exports                  []string // NAME=value
	wrapperArgs, trainerArgs []string
	wait                     bool
}

func submitSpec(t *testing.T, spec jobSpec) *jobRun {
	t.Helper()
	testutil.UseLab(t, "cpu")
	cluster, addr, wrapperArgs, trainerArgs, wait := spec.cluster, spec.addr, spec.wrapperArgs, spec.trainerArgs, spec.wait
	testutil.NeedSlurm(t)
	r := testutil.NeedRedis(t)
	bin := buildWrapper(t)
	dir := t.TempDir()
	_ = os.Chmod(dir, 0o755)
	j := &jobRun{t: t, dir: dir, ckdir: filepath.Join(dir, "ckpt"), facts: filepath.Join(dir, "facts.json"), redis: r,
		cluster: fmt.Sprintf("wt%d%s", time.Now().UnixNano()%1e9, strings.NewReplacer("/", "", "_", "").Replace(t.Name()))}
	if len(j.cluster) > 60 {
		j.cluster = j.cluster[:60]
	}
	if cluster != "" {
		j.cluster = cluster
	}
	if err := os.MkdirAll(j.ckdir, 0o755); err != nil {
		t.Fatal(err)
	}
	args := append(slices.Clone(spec.srunArgs), spec.prefix...)
	args = append(args, bin, "--report-interval", "1s", "--checkpoint-dir", j.ckdir, "--checkpoint-debounce", "300ms")
	args = append(args, wrapperArgs...)
	args = append(args, "--", "/usr/bin/python3", filepath.Join(testutil.RepoRoot(), "internal/wrapper/testdata/fake_trainer.py"), "--facts", j.facts)
	args = append(args, trainerArgs...)
	quoted := make([]string, len(args))
	for i, a := range args {
		quoted[i] = "'" + strings.ReplaceAll(a, "'", `'\''`) + "'"
	}
	script := "#!/bin/bash\nexec srun " + strings.Join(quoted, " ") + "\n"
	path := filepath.Join(dir, "job.sh")
	if err := os.WriteFile(path, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	if addr == "" {
		addr = r.Addr
	}
	sb := []string{"--parsable", "-J", "isched-wrapper-test", "-p", "cpu", "--mem=1G", "-t", "5", "-o", filepath.Join(dir, "out.txt"),
		"--export=ALL,ISCHED_HELPER_DIR=" + filepath.Join(testutil.RepoRoot(), "scripts") + ",ISCHED_REDIS_ADDR=" + addr +
			",ISCHED_REPORT_DIRECT=1,ISCHED_REDIS_PASSWORD_FILE=" + r.PasswordFile("reporter") + ",ISCHED_CLUSTER=" + j.cluster}
	for _, e := range spec.exports {
		sb[len(sb)-1] += "," + e
	}
	if wait {
		sb = append(sb, "--wait")
	}
	cmd := exec.Command("sbatch", append(sb, path)...)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	j.jobID = strings.TrimSpace(strings.Split(out.String(), ";")[0])
	var ee *exec.ExitError
	switch {
	case errors.As(err, &ee):
		j.exitCode = ee.ExitCode()
	case err != nil:
		t.Fatalf("sbatch: %v: %s", err, errb.String())
	}
	t.Cleanup(func() { _ = exec.Command("scancel", j.jobID).Run() })
	t.Logf("job %s (cluster key %s) sbatch exit %d", j.jobID, j.cluster, j.exitCode)
	return j
}

func (j *jobRun) output() string {
	b, _ := os.ReadFile(filepath.Join(j.dir, "out.txt"))
	return string(b)
}

func (j *jobRun) factsMap() map[string]any {
	j.t.Helper()
	b, err := os.ReadFile(j.facts)
	if err != nil {
		j.t.Fatalf("trainer facts: %v\njob output:\n%s", err, j.output())
	}
	var m map[string]any
	if err := json.Unmarshal(b, &m); err != nil {
		j.t.Fatal(err)
	}
	return m
}

type received struct {
	envs   []*report.Envelope // first copies, in order
	copies int                // retransmitted copies (see testutil.FirstCopies)
}

// ingest reads the whole ingest stream of the job's cluster as the
// coordinator; the stream is deleted when the test ends.
func (j *jobRun) ingest() []stream.Entry {
	t := j.t
	t.Helper()
	env := map[string]string{"ISCHED_REDIS_ADDR": j.redis.Addr, "ISCHED_REDIS_PASSWORD_FILE": j.redis.PasswordFile("coordinator"), "ISCHED_CLUSTER": j.cluster}
	cfg, err := stream.ConfigFromEnv(func(k string) string { return env[k] }, "coordinator")
	if err != nil {
		t.Fatal(err)
	}
	c, err := stream.Open(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	t.Cleanup(func() {
		if c2, err := stream.Open(context.Background(), cfg); err == nil {
			_ = c2.Del(context.Background(), c2.Keys().Ingest())
			_ = c2.Close()
		}
	})
	ents, err := c.Range(context.Background(), c.Keys().Ingest(), "-", "+", 100000)
	if err != nil {
		t.Fatal(err)
	}
	return ents
}

// reports reads the job's ingest stream as the coordinator, checks every
// entry decodes, is signed by the session whose MUNGE credential opened, and
// that sequence numbers are 1..N in order: nothing lost, nothing reordered;
// a report may be there twice only as an identical copy right after itself,
// the retransmission of a report whose XADD reply was lost, which the
// coordinator drops as a duplicate (testutil.FirstCopies).
func (j *jobRun) reports() received {
	t := j.t
	t.Helper()
	ents := j.ingest()
	d := testutil.Delivered(t, ents)
	rec := received{copies: d.Copies}
	var key []byte
	for _, i := range d.First {
		env, e := d.Envs[i], ents[i]
		if env.Kind == report.KindStart {
			v, err := auth.Open(context.Background(), auth.ExecMunger{}, env.Start.Cred)
			if err != nil {
				t.Fatalf("start credential: %v", err)
			}
			if v.UID != os.Getuid() || v.JobID != env.Job.JobID || v.SID != env.SID {
				t.Errorf("credential claims %+v uid %d for job %d sid %s", v.Claims, v.UID, env.Job.JobID, env.SID)
			}
			key = v.Key
		}
		if key == nil {
			t.Fatalf("entry %d (%s) before any start", i, env.Kind)
		}
		if err := auth.Verify(key, e.Payload, e.MAC); err != nil {
			t.Errorf("entry %d (%s, seq %d): %v", i, env.Kind, env.Seq, err)
		}
		rec.envs = append(rec.envs, env)
	}
	if len(rec.envs) == 0 {
		t.Fatalf("no reports in Redis\njob output:\n%s", j.output())
	}
	if sids := len(rec.kinds(report.KindStart)); sids != 1 {
		t.Fatalf("%d sessions in the job's stream, want 1", sids)
	}
	return rec
}

func (r received) kinds(k report.Kind) []*report.Envelope {
	var out []*report.Envelope
	for _, e := range r.envs {
		if e.Kind == k {
			out = append(out, e)
		}
	}
	return out
}

func (r received) end(t *testing.T) *report.End {
	t.Helper()
	ends := r.kinds(report.KindEnd)
	if len(ends) != 1 {
		t.Fatalf("%d end reports, want 1", len(ends))
	}
	if r.envs[len(r.envs)-1].Kind != report.KindEnd {
		t.Errorf("last report is %s, want end", r.envs[len(r.envs)-1].Kind)
	}
	return ends[0].End
}

// TestWrapperMeasuresAndReports: peak RSS within 5%, median iteration time
// within 2% of the truth, one checkpoint event per renamed file, exit status.
func TestWrapperMeasuresAndReports(t *testing.T) {
	j := submit(t, nil, []string{"--mb", "300", "--steps", "40", "--period", "0.1", "--ckpt-every", "10"}, true)
	if j.exitCode != 0 {
		t.Fatalf("job exit %d\n%s", j.exitCode, j.output())
	}
	facts := j.factsMap()
	rec := j.reports()
	end := rec.end(t)
	truth := facts["VmHWM"].(float64)
	var peak int64
	for _, s := range rec.kinds(report.KindSample) {
		if s.Sample.CPU != nil {
			peak = max(peak, s.Sample.CPU.PeakRSSBytes)
		}
	}
	if e := math.Abs(float64(end.PeakRSSBytes)-truth) / truth; e > 0.05 {
		t.Errorf("peak RSS %d vs trainer's VmHWM %.0f: error %.1f%% > 5%%", end.PeakRSSBytes, truth, 100*e)
	}
	if peak != end.PeakRSSBytes {
		t.Errorf("samples' peak %d != end peak %d", peak, end.PeakRSSBytes)
	}
	// against the trainer's own clock over the same steps, not the nominal
	// 100 ms a busy machine may not keep
	own := facts["median_step_ms"].(float64)
	if e := math.Abs(end.MedianIterMS-own) / own; e > 0.02 {
		t.Errorf("median iteration %.2f ms vs the trainer's own %.2f ms: error %.1f%% > 2%%", end.MedianIterMS, own, 100*e)
	}
	if end.Iters != 40 {
		t.Errorf("iterations %d, want 40", end.Iters)
	}
	var paths []string
	for _, c := range rec.kinds(report.KindCheckpoint) {
		paths = append(paths, filepath.Base(c.Checkpoint.Path))
		if !c.Checkpoint.Complete || c.Checkpoint.Size == 0 {
			t.Errorf("checkpoint %+v not complete", c.Checkpoint)
		}
	}
	sort.Strings(paths)
	want := []string{"ckpt-step10.pt", "ckpt-step20.pt", "ckpt-step30.pt", "ckpt-step40.pt"}
	if !slices.Equal(paths, want) {
		t.Errorf("checkpoint events %v, want %v (one per file)", paths, want)
	}
	if end.ExitCode != 0 || end.Checkpoints != 4 {
		t.Errorf("end %+v", end)
	}
	st := rec.kinds(report.KindStart)[0]
	if st.Job.Partition != "cpu" || !strings.HasPrefix(st.Job.Node, "cpu") || st.Job.Lineage == "" {
		t.Errorf("identity %+v", st.Job)
	}
	t.Logf("peak RSS %d (truth %.0f), median %.2f ms, %d reports", end.PeakRSSBytes, truth, end.MedianIterMS, len(rec.envs))
}

// TestWrapperExitStatus: the wrapper exits with the child's exact status,
// and so does the job.
func TestWrapperExitStatus(t *testing.T) {
	cases := []struct {
		name   string
		args   []string
		status int
		signal string
	}{
		{"exit 3", []string{"--exit", "3"}, 3, ""},
		{"sigkill", []string{"--kill-self"}, 137, "SIGKILL"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			j := submit(t, nil, append([]string{"--steps", "5", "--period", "0.05"}, tc.args...), true)
			end := j.reports().end(t)
			if end.ExitCode != tc.status || end.Signal != tc.signal {
				t.Errorf("end report exit %d signal %q, want %d %q", end.ExitCode, end.Signal, tc.status, tc.signal)
			}
			if j.exitCode != tc.status {
				t.Errorf("job (srun) exit %d, want %d\n%s", j.exitCode, tc.status, j.output())
			}
		})
	}
}

func waitJobEnd(t *testing.T, id string, timeout time.Duration) {
	t.Helper()
	testutil.Eventually(t, timeout, 300*time.Millisecond, "job "+id+" to end", func() bool {
		out, _ := exec.Command("squeue", "-h", "-j", id, "-o", "%T").Output()
		s := strings.TrimSpace(string(out))
		return s == "" || s == "COMPLETED" || s == "FAILED" || s == "CANCELLED"
	})
}

func waitReports(t *testing.T, j *jobRun, pred func(received) bool, what string) {
	t.Helper()
	env := map[string]string{"ISCHED_REDIS_ADDR": j.redis.Addr, "ISCHED_REDIS_PASSWORD_FILE": j.redis.PasswordFile("coordinator"), "ISCHED_CLUSTER": j.cluster}
	cfg, _ := stream.ConfigFromEnv(func(k string) string { return env[k] }, "coordinator")
	testutil.Eventually(t, 60*time.Second, 200*time.Millisecond, what, func() bool {
		c, err := stream.Open(context.Background(), cfg)
		if err != nil {
			return false
		}
		defer c.Close()
		ents, err := c.Range(context.Background(), c.Keys().Ingest(), "-", "+", 100000)
		if err != nil {
			return false
		}
		var r received
		for _, e := range ents {
			if env, err := report.Decode(e.Payload); err == nil {
				r.envs = append(r.envs, env)
			}
		}
		return pred(r)
	})
}

// TestCheckpointSignal: `scancel --signal=USR1` reaches the trainer as the
// control file, and its checkpoint is reported before the job ends.
func TestCheckpointSignal(t *testing.T) {
	j := submit(t, []string{"--checkpoint-signal", "file"}, []string{"--wait-request", "--steps", "1", "--period", "0.1"}, false)
	waitReports(t, j, func(r received) bool { return len(r.kinds(report.KindSample)) > 0 }, "first sample")
	testutil.Run(t, 10*time.Second, "scancel", "--signal=USR1", j.jobID)
	waitJobEnd(t, j.jobID, 60*time.Second)
	facts := j.factsMap()
	if facts["requested"] != true {
		t.Fatalf("trainer never saw the checkpoint request: %v", facts)
	}
	rec := j.reports()
	sigs := rec.kinds(report.KindSignal)
	if len(sigs) == 0 || sigs[0].Signal.Signal != "SIGUSR1" || !strings.HasPrefix(sigs[0].Signal.Forwarded, "file:") {
		t.Fatalf("signal reports %+v", sigs)
	}
	want := facts["requested_ckpt"].(string)
	found := -1
	for i, e := range rec.envs {
		if e.Kind == report.KindCheckpoint && e.Checkpoint.Path == want {
			found = i
		}
	}
	if found < 0 {
		t.Fatalf("checkpoint %s not reported", want)
	}
	if end := rec.end(t); end.ExitCode != 0 {
		t.Errorf("end %+v", end)
	}
}

// TestRedisOutage: redis-server stopped mid-job and restarted: the job
// finishes normally and every report arrives exactly once, in order. The
// trainer holds at step 40 until Redis answers again, so the wrapper (not a
// later leftover replay) delivers what it queued during the outage however
// long the server takes to replay its append-only file.
func TestRedisOutage(t *testing.T) {
	testutil.OwnLab(t) // it stops the lab's Redis
	gate := t.TempDir()
	_ = os.Chmod(gate, 0o755)
	resume := filepath.Join(gate, "resume")
	j := submit(t, nil, []string{"--steps", "80", "--period", "0.1", "--ckpt-every", "20", "--pause-at", "40", "--resume-file", resume}, false)
	waitReports(t, j, func(r received) bool { return len(r.kinds(report.KindSample)) >= 1 }, "first sample")
	pidFile := filepath.Join(testutil.DevDir(), "redis", "run", "redis.pid")
	testutil.StopDaemon(t, pidFile, "redis-server", syscall.SIGTERM)
	time.Sleep(3 * time.Second) // an outage of a few seconds, not a blip
	out, err := exec.Command(filepath.Join(testutil.RepoRoot(), "scripts/dev-cluster"), "up").CombinedOutput()
	if err != nil {
		t.Fatalf("dev-cluster up: %v\n%s", err, out)
	}
	t.Log("redis restarted")
	if err := os.WriteFile(resume, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	waitJobEnd(t, j.jobID, 90*time.Second)
	rec := j.reports() // checks seq 1..N exactly once, in order
	end := rec.end(t)
	if end.ExitCode != 0 || end.Iters != 80 {
		t.Errorf("end %+v", end)
	}
	if n := len(rec.kinds(report.KindCheckpoint)); n != 4 {
		t.Errorf("%d checkpoint reports, want 4", n)
	}
	if !strings.Contains(j.output(), "fake trainer done at step 80") {
		t.Errorf("trainer output: %s", j.output())
	}
}

func TestMain(m *testing.M) {
	code := m.Run()
	testutil.RemoveBinaries()
	os.Exit(code)
}
