//go:build integration

package wrapper_test

import (
	"context"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/isched/isched/internal/auth"
	"github.com/isched/isched/internal/report"
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

	ents := j1.ingest()
	type perJob struct {
		key   []byte
		seq   uint64
		kinds map[report.Kind]int
	}
	jobs := map[uint64]*perJob{}
	for i, e := range ents {
		env, err := report.Decode(e.Payload)
		if err != nil {
			t.Fatalf("entry %d does not decode: %v", i, err)
		}
		p := jobs[env.Job.JobID]
		if p == nil {
			p = &perJob{kinds: map[report.Kind]int{}}
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
		if env.Seq != p.seq+1 {
			t.Fatalf("entry %d: job %d seq %d after %d: lost, repeated or reordered", i, env.Job.JobID, env.Seq, p.seq)
		}
		p.seq = env.Seq
		p.kinds[env.Kind]++
	}
	if len(jobs) != 2 {
		t.Fatalf("reports of %d jobs in Redis, want 2", len(jobs))
	}
	for id, p := range jobs {
		t.Logf("job %d: %d reports %v", id, p.seq, p.kinds)
		if p.kinds[report.KindStart] != 1 || p.kinds[report.KindEnd] != 1 || p.kinds[report.KindSample] == 0 {
			t.Errorf("job %d delivered %v: want its start, samples and end", id, p.kinds)
		}
	}
	if p := jobs[mustAtoi(t, j1.jobID)]; p == nil || p.kinds[report.KindCheckpoint] != 3 {
		t.Errorf("first job's checkpoints not all delivered: %+v", p)
	}
}

func mustAtoi(t *testing.T, s string) uint64 {
	t.Helper()
	n, err := strconv.ParseUint(s, 10, 64)
	if err != nil {
		t.Fatalf("job id %q: %v", s, err)
	}
	return n
}
