//go:build integration

package e2e

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/isched/isched/internal/report"
	"github.com/isched/isched/internal/testutil"
)

// startRelay starts an isched-relay for this world's cluster on a free
// loopback port, as this process's user (root: the coordinator's uid), and
// returns its address once it said "started". It is stopped at cleanup.
func (w *world) startRelay() string {
	w.t.Helper()
	// debug: each authenticated connection is logged
	return startRelayProc(w.t, filepath.Join(w.dir, "relay.log"), w.env("reporter"), "-log-level", "debug")
}

// startRelayProc starts isched-relay on a free loopback port with env and
// args, logging to logPath, and returns its address once it says started;
// it is stopped when the test ends.
func startRelayProc(t *testing.T, logPath string, env []string, args ...string) string {
	t.Helper()
	bin := testutil.Binary(t, "isched-relay", "./relay")
	log, err := os.OpenFile(logPath, os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin, append([]string{"-listen", "127.0.0.1:0", "-log-format", "text"}, args...)...)
	cmd.Env, cmd.Stdout, cmd.Stderr = env, log, log
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		_, _ = cmd.Process.Wait()
		_ = log.Close()
	})
	started := regexp.MustCompile(`msg=started listen=(127\.0\.0\.1:[0-9]+)`)
	var addr string
	deadline := time.Now().Add(time.Minute)
	for addr == "" {
		b, _ := os.ReadFile(logPath)
		if m := started.FindSubmatch(b); m != nil {
			addr = string(m[1])
		} else if time.Now().After(deadline) {
			t.Fatalf("isched-relay did not start within a minute:\n%s", b)
		} else {
			time.Sleep(100 * time.Millisecond)
		}
	}
	return addr
}

// relay is the world's isched-relay, started on first use.
func (w *world) relay() string {
	w.t.Helper()
	if w.relayAddr == "" {
		w.relayAddr = w.startRelay()
	}
	return w.relayAddr
}

// optInReporterPass is a copy of the reporter password every user can read,
// in dir: a site that took the documented opt-in (jobs report straight to
// Redis, ISCHED_REPORT_DIRECT=1) and so gave every job user that password.
// The dev cluster's own file is root's alone (the default).
func (w *world) optInReporterPass(dir string) string {
	w.t.Helper()
	b, err := os.ReadFile(w.redis.PasswordFile("reporter"))
	if err != nil {
		w.t.Fatal(err)
	}
	p := filepath.Join(dir, "reporter.pass")
	if err := os.WriteFile(p, b, 0o644); err != nil {
		w.t.Fatal(err)
	}
	if err := os.Chmod(p, 0o644); err != nil { // past the umask
		w.t.Fatal(err)
	}
	return p
}

// TestCoordinatorThroughRelay: the recommended deployment, end to end. A
// training job on the real cluster has no Redis password at all; its
// wrapper reports through isched-relay, and the coordinator follows the
// run as it does one reporting straight to Redis: its progress and
// checkpoints, its end at the loop's total, and a receipt Slurm confirms.
func TestCoordinatorThroughRelay(t *testing.T) {
	besideOthers(t)
	w := newWorld(t, fastPolicy)
	addr := w.startRelay()
	const total = 300
	lineage := "relay" + w.cluster[3:]
	model := "relay-e2e-" + lineage
	plan := report.Plan{Lineage: lineage, Ideal: "cpu", Total: total, Model: model, Batch: 8}
	job := w.submitTrainerWith(trainOpts{Relay: addr}, plan, []string{"-p", "cpu", "-t", "5"},
		"--steps", "300", "--period", "0.05", "--ckpt-every", "50")
	s := waitJobEnd(t, w, job.id, 4*time.Minute)
	if s["JobState"] != "COMPLETED" {
		t.Fatalf("job ended %s, want COMPLETED\n%s", s["JobState"], job.output())
	}
	var st report.JobStatus
	waitFor(t, w, time.Minute, "the run to end in the coordinator's status", func() bool {
		st, _ = w.status(lineage)
		return st.EndedMS != 0
	})
	t.Logf("status: %s, step %d/%d, iteration %.1f ms, last checkpoint %+v", st.State, st.Step, st.TotalIters, st.IterMS, st.LastCheckpoint)
	if st.State != "ENDED" || st.Step != total || st.TotalIters != total || st.ExitStatus == nil || *st.ExitStatus != 0 {
		t.Errorf("status %s at step %d of %d, exit %v; want ENDED at %d of %d, exit 0", st.State, st.Step, st.TotalIters, st.ExitStatus, total, total)
	}
	if st.IterMS < 40 || st.IterMS > 200 {
		t.Errorf("iteration estimate %.1f ms, want about 50", st.IterMS)
	}
	if c := st.LastCheckpoint; c == nil || c.Step == nil || *c.Step < total-50 || !c.Complete {
		t.Errorf("last checkpoint %+v, want a complete one at step %d or later", c, total-50)
	}
	if st.UID != 0 || st.JobID == 0 {
		t.Errorf("status uid %d job %d: want the job's owner (root) from MUNGE", st.UID, st.JobID)
	}
	// the wrapper had no Redis password: the relay carried every report
	if b, _ := os.ReadFile(filepath.Join(w.dir, "relay.log")); !strings.Contains(string(b), "relay connection authenticated") {
		t.Errorf("relay.log shows no authenticated connection:\n%s", b)
	}
	rec := w.waitReceipt(2*time.Minute, "the run's receipt", func(r report.Receipt) bool { return r.Model == model })
	if !rec.Confirmed || rec.Iters != total {
		t.Errorf("receipt %+v: want Slurm-confirmed with %d iterations", rec, total)
	}
}
