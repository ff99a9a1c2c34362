//go:build integration

package wrapper_test

import (
	"bytes"
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/isched/isched/internal/auth"
	"github.com/isched/isched/internal/report"
	"github.com/isched/isched/internal/stream"
	"github.com/isched/isched/internal/testutil"
)

// TestLeftoverSpoolSentByTheNextJob: a job runs and ends while Redis is
// unreachable, so every report it made stays in its file in --spool-dir.
// The same user's next job on the cluster (Redis up) sends them: in the
// real Redis both jobs' reports are complete, each job's in order and signed
// by its own session (opened by its real MUNGE credential), and the spool
// directory is empty.
func TestLeftoverSpoolSentByTheNextJob(t *testing.T) {
	spoolDir := t.TempDir()
	down := newRedisSwitch(t, testutil.NeedRedis(t).Addr) // never switched on
	j1 := submitVia(t, down.ln.Addr().String(), []string{"--spool-dir", spoolDir, "--report-interval", "200ms", "--interval", "200ms"},
		[]string{"--steps", "30", "--period", "0.05", "--ckpt-every", "10"}, true)
	if !strings.Contains(j1.output(), "reports left undelivered at exit") {
		t.Fatalf("first job did not leave its reports:\n%s", j1.output())
	}
	files, _ := filepath.Glob(filepath.Join(spoolDir, "isched-*.spool"))
	if len(files) != 1 {
		t.Fatalf("spool files %v, want the first job's one\n%s", files, j1.output())
	}
	// as if the next job came a minute later (a fresh file may be a live
	// wrapper's that has not locked it yet)
	old := time.Now().Add(-time.Minute)
	if err := os.Chtimes(files[0], old, old); err != nil {
		t.Fatal(err)
	}

	j2 := submitIn(t, j1.cluster, "", []string{"--spool-dir", spoolDir}, []string{"--steps", "10", "--period", "0.05"}, true)
	if j2.exitCode != 0 {
		t.Fatalf("second job exit %d\n%s", j2.exitCode, j2.output())
	}
	if !strings.Contains(j2.output(), "sent the undelivered reports an earlier wrapper left") {
		t.Errorf("second job's wrapper does not say it sent the leftover:\n%s", j2.output())
	}
	if left, _ := filepath.Glob(filepath.Join(spoolDir, "*")); len(left) != 0 {
		t.Errorf("spool directory still holds %v", left)
	}

	jobs := checkDelivered(t, j1.ingest())
	if len(jobs) != 2 {
		t.Fatalf("reports of %d jobs in Redis, want 2", len(jobs))
	}
	if p := jobs[mustAtoi(t, j1.jobID)]; p == nil || p.kinds[report.KindCheckpoint] != 3 {
		t.Errorf("first job's checkpoints not all delivered: %+v", p)
	}
}

// TestSendSpoolsDeliversAnEndedJobsReports: a job ends while Redis is
// unreachable; nobody of its user runs on the node again. `isched-wrapper
// --send-spools` (what a TaskEpilog, a login or cron runs) sends its
// reports: with Redis still away it exits 1 and keeps the file; once Redis
// is back it exits 0, the spool directory is empty, and the real Redis
// holds the job's every report, in order, signed by its session.
func TestSendSpoolsDeliversAnEndedJobsReports(t *testing.T) {
	spoolDir := t.TempDir()
	r := testutil.NeedRedis(t)
	down := newRedisSwitch(t, r.Addr) // never switched on
	j := submitVia(t, down.ln.Addr().String(), []string{"--spool-dir", spoolDir, "--report-interval", "200ms", "--interval", "200ms"},
		[]string{"--steps", "20", "--period", "0.05", "--ckpt-every", "10"}, true)
	if !strings.Contains(j.output(), "reports left undelivered at exit") {
		t.Fatalf("the job did not leave its reports:\n%s", j.output())
	}
	time.Sleep(1500 * time.Millisecond) // past --send-spools' minimum age of a spool file

	send := func(addr string) (int, string) {
		cmd := exec.Command(buildWrapper(t), "--send-spools", "--spool-dir", spoolDir)
		cmd.Env = append(os.Environ(), "ISCHED_REDIS_ADDR="+addr, "ISCHED_REPORT_DIRECT=1", "ISCHED_REDIS_PASSWORD_FILE="+r.PasswordFile("reporter"), "ISCHED_CLUSTER="+j.cluster)
		var out bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &out
		err := cmd.Run()
		var ee *exec.ExitError
		if err != nil && !errors.As(err, &ee) {
			t.Fatal(err)
		}
		return cmd.ProcessState.ExitCode(), out.String()
	}
	if code, out := send(down.ln.Addr().String()); code != 1 || !strings.Contains(out, "files stay for the next try") {
		t.Fatalf("Redis away: exit %d, want 1 and said\n%s", code, out)
	}
	if left, _ := filepath.Glob(filepath.Join(spoolDir, "isched-*.spool")); len(left) != 1 {
		t.Fatalf("after a failed send the spool directory holds %v, want the job's file", left)
	}
	if n := len(j.ingest()); n != 0 {
		t.Fatalf("%d entries in Redis before any send", n)
	}
	code, out := send(r.Addr)
	if code != 0 || !strings.Contains(out, "sent the undelivered reports an earlier wrapper left") {
		t.Fatalf("exit %d, want 0 and the file sent\n%s", code, out)
	}
	if left, _ := filepath.Glob(filepath.Join(spoolDir, "*")); len(left) != 0 {
		t.Errorf("spool directory still holds %v", left)
	}
	jobs := checkDelivered(t, j.ingest())
	p := jobs[mustAtoi(t, j.jobID)]
	if len(jobs) != 1 || p == nil || p.kinds[report.KindCheckpoint] != 2 {
		t.Fatalf("delivered %d jobs' reports, this job's %+v: want its start, samples, 2 checkpoints and end", len(jobs), p)
	}
	if code, out := send(r.Addr); code != 0 || !strings.Contains(out, "no undelivered reports") {
		t.Errorf("nothing left: exit %d, want 0 and said\n%s", code, out)
	}
}

// delivered is what one job's wrapper delivered.
type delivered struct {
	key   []byte
	seq   uint64
	kinds map[report.Kind]int
}

// TestTaskEpilogSendsTheSpool: scripts/isched-task-epilog as the step's
// TaskEpilog (`srun --task-epilog`; slurm.conf's TaskEpilog= runs it for
// every task). The wrapper cannot reach Redis (its own ISCHED_REDIS_ADDR
// names a proxy that refuses) and leaves its reports in ISCHED_SPOOL_DIR;
// Slurm runs the epilog as the job's user right after the task, with the
// task's environment, which names the real Redis: by the job's end the
// spool directory is empty and Redis holds every report, in order, signed.
func TestTaskEpilogSendsTheSpool(t *testing.T) {
	spoolDir := t.TempDir()
	down := newRedisSwitch(t, testutil.NeedRedis(t).Addr) // never switched on
	j := submitSpec(t, jobSpec{
		srunArgs:    []string{"--task-epilog=" + filepath.Join(testutil.RepoRoot(), "scripts", "isched-task-epilog")},
		prefix:      []string{"/usr/bin/env", "ISCHED_REDIS_ADDR=" + down.ln.Addr().String()},
		exports:     []string{"ISCHED_SPOOL_DIR=" + spoolDir, "ISCHED_WRAPPER_BIN=" + buildWrapper(t)},
		wrapperArgs: []string{"--report-interval", "200ms", "--interval", "200ms"},
		trainerArgs: []string{"--steps", "20", "--period", "0.05", "--ckpt-every", "10"},
		wait:        true,
	})
	if j.exitCode != 0 || !strings.Contains(j.output(), "reports left undelivered at exit") {
		t.Fatalf("job exit %d; the wrapper should have left its reports:\n%s", j.exitCode, j.output())
	}
	testutil.Eventually(t, 20*time.Second, 200*time.Millisecond, "the epilog emptied the spool directory", func() bool {
		left, _ := filepath.Glob(filepath.Join(spoolDir, "*"))
		return len(left) == 0
	})
	jobs := checkDelivered(t, j.ingest())
	p := jobs[mustAtoi(t, j.jobID)]
	if len(jobs) != 1 || p == nil || p.kinds[report.KindCheckpoint] != 2 {
		t.Fatalf("delivered %d jobs' reports, this job's %+v: want its start, samples, 2 checkpoints and end", len(jobs), p)
	}
}

// checkDelivered checks the entries of an ingest stream: each decodes, each
// job's start opens with its real MUNGE credential (this uid), each entry
// is signed by its job's session, and each session's sequence numbers are
// 1..N in order, a report there twice only as a retransmitted copy right
// after itself (testutil.FirstCopies). It returns what each job delivered
// (first copies), and wants each job's start, samples and end.
func checkDelivered(t *testing.T, ents []stream.Entry) map[uint64]*delivered {
	t.Helper()
	d := testutil.Delivered(t, ents)
	jobs := map[uint64]*delivered{}
	for _, i := range d.First {
		env, e := d.Envs[i], ents[i]
		p := jobs[env.Job.JobID]
		if p == nil {
			p = &delivered{kinds: map[report.Kind]int{}}
			jobs[env.Job.JobID] = p
		}
		if env.Kind == report.KindStart {
			v, err := auth.Open(context.Background(), auth.ExecMunger{}, env.Start.Cred)
			if err != nil {
				t.Fatalf("job %d start credential: %v", env.Job.JobID, err)
			}
			if v.JobID != env.Job.JobID || v.SID != env.SID || v.UID != os.Getuid() {
				t.Fatalf("job %d: credential claims %+v", env.Job.JobID, v.Claims)
			}
			p.key = v.Key
		}
		if p.key == nil {
			t.Fatalf("entry %d: job %d's %s before its start", i, env.Job.JobID, env.Kind)
		}
		if err := auth.Verify(p.key, e.Payload, e.MAC); err != nil {
			t.Fatalf("entry %d: job %d seq %d: %v", i, env.Job.JobID, env.Seq, err)
		}
		p.seq = env.Seq
		p.kinds[env.Kind]++
	}
	for id, p := range jobs {
		t.Logf("job %d: %d reports %v", id, p.seq, p.kinds)
		if p.kinds[report.KindStart] != 1 || p.kinds[report.KindEnd] != 1 || p.kinds[report.KindSample] == 0 {
			t.Errorf("job %d delivered %v: want its start, samples and end", id, p.kinds)
		}
	}
	return jobs
}

func mustAtoi(t *testing.T, s string) uint64 {
	t.Helper()
	n, err := strconv.ParseUint(s, 10, 64)
	if err != nil {
		t.Fatalf("job id %q: %v", s, err)
	}
	return n
}
