//go:build integration

package coordinator

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/isched/isched/internal/auth"
	"github.com/isched/isched/internal/report"
	"github.com/isched/isched/internal/stream"
	"github.com/isched/isched/internal/testutil"
)

// openAs opens a stream client as a Redis user of the dev cluster.
func openAs(t *testing.T, r testutil.Redis, user, cluster string, private bool, maxEntry int) *stream.Client {
	t.Helper()
	env := map[string]string{"ISCHED_REDIS_ADDR": r.Addr, "ISCHED_REDIS_PASSWORD_FILE": r.PasswordFile(user), "ISCHED_CLUSTER": cluster}
	cfg, err := stream.ConfigFromEnv(func(k string) string { return env[k] }, user)
	if err != nil {
		t.Fatal(err)
	}
	cfg.Private, cfg.MaxEntry = private, maxEntry
	c, err := stream.Open(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// asBob runs redis-cli as the Unix user bob with what every job has (the
// reporter's password: world-readable by design), stdin as the last
// argument when given (-x): a job user attacking the ingest stream.
func asBob(t *testing.T, r testutil.Redis, stdin []byte, args ...string) string {
	t.Helper()
	host, port, _ := strings.Cut(r.Addr, ":")
	argv := []string{"-u", "bob", "--", "redis-cli", "--no-auth-warning", "-h", host, "-p", port, "--user", "reporter"}
	if stdin != nil {
		argv = append(argv, "-x")
	}
	cmd := exec.Command("runuser", append(argv, args...)...)
	cmd.Env = append(os.Environ(), "REDISCLI_AUTH="+r.Password(t, "reporter"))
	cmd.Stdin = bytes.NewReader(stdin)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("as bob: redis-cli %s: %v: %s", args[0], err, out)
	}
	return strings.TrimSpace(string(out))
}

// TestHostileWriterCannotBlindTheCoordinator (issue 18, item 1): bob, a job
// user with the reporter's password, appends entries of 2 MB to the
// ingest stream, then one with the last possible id, which exhausts the
// stream (every wrapper's XADD then fails) and, once read, moves the
// coordinator's group to the end. On the real Redis: the large entries
// are deleted inside Redis and never sent to the coordinator (rejected as
// oversize); the coordinator deletes the entry from the future, sets the
// stream's and its group's ids back, and alice's wrapper, retrying as its
// outbox does, reports again and is heard.
func TestHostileWriterCannotBlindTheCoordinator(t *testing.T) {
	r := testutil.NeedRedis(t)
	ctx := context.Background()
	cluster := fmt.Sprintf("hostin%d", os.Getpid())
	st := openAs(t, r, "coordinator", cluster, true, report.MaxPayload)
	rep := openAs(t, r, "reporter", cluster, false, 0)
	k := st.Keys()
	t.Cleanup(func() {
		_ = st.Del(context.Background(), k.Ingest(), k.Jobs(), k.Leader(), k.Sessions(), k.Lineages(),
			k.JobStatus("lin-77"), k.JobState("lin-77"), k.JobSeries("lin-77"))
	})
	jobs := report.NewEnvelope(report.KindJobs, time.Now())
	jobs.Jobs = &report.JobTable{Cluster: cluster, TakenMS: time.Now().UnixMilli(), Jobs: []report.Job{job(77, 1001, "alice", "RUNNING", "cpu", "")}}
	b, err := report.Encode(jobs)
	if err != nil {
		t.Fatal(err)
	}
	if err := st.Set(ctx, k.Jobs(), b, 0); err != nil {
		t.Fatal(err)
	}
	m := &fakeMunger{}
	metrics := NewMetrics()
	c := New(Config{ID: "hostile", Tick: 100 * time.Millisecond, StaleAfter: time.Hour}, st, m, metrics)
	c.Start(ctx)
	t.Cleanup(func() { _ = c.Close(context.Background()) })

	// alice's wrapper
	sess, _ := auth.NewSession()
	cred, err := auth.Issue(ctx, mungeAs{m, 1001}, sess, cluster, 77, "lin-77", 0, time.Hour, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	seq := uint64(0)
	// send appends one of alice's reports, retrying as the wrapper's
	// outbox does until Redis takes it
	send := func(env *report.Envelope) {
		t.Helper()
		seq++
		env.Job = &report.JobRef{Cluster: cluster, JobID: 77, Lineage: "lin-77", User: "alice", UID: 1001, Partition: "cpu", Node: "cpu1"}
		env.SID, env.Seq = sess.SID, seq
		b, err := report.Encode(env)
		if err != nil {
			t.Fatal(err)
		}
		testutil.Eventually(t, 20*time.Second, 50*time.Millisecond, "alice's report appended", func() bool {
			_, err := rep.Append(ctx, k.Ingest(), b, sess.Sign(b), 100000)
			return err == nil
		})
	}
	step := int64(0)
	sample := func() {
		env := report.NewEnvelope(report.KindSample, time.Now())
		env.Sample = &report.Sample{CPU: &report.CPUStat{RSSBytes: 1 << 20, Procs: 1}}
		step++
		env.Sample.Iters = []report.Iter{{Step: step, AtMS: time.Now().UnixMilli(), DurMS: 10, Source: report.SourceFile}}
		send(env)
	}
	heard := func(want int64) {
		t.Helper()
		testutil.Eventually(t, 30*time.Second, 50*time.Millisecond, fmt.Sprintf("alice's step %d in her status", want), func() bool {
			b, err := st.Get(ctx, k.JobStatus("lin-77"))
			var s report.JobStatus
			return err == nil && json.Unmarshal(b, &s) == nil && s.Step >= want
		})
	}
	start := report.NewEnvelope(report.KindStart, time.Now())
	start.Start = &report.Start{Argv: []string{"python3", "train.py"}, Host: "cpu1", PID: 1, Cred: cred, GPUs: []string{}}
	send(start)
	sample()
	heard(1)

	// 2 MB entries: deleted inside Redis, never sent to the coordinator
	big := bytes.Repeat([]byte("A"), 2<<20)
	for range 3 {
		asBob(t, r, big, "XADD", k.Ingest(), "*", "m")
	}
	sample()
	heard(2)
	if got := testutilCounter(metrics.rejected.WithLabelValues(RejectOversize)); got != 3 {
		t.Errorf("oversize entries rejected: %v, want 3", got)
	}
	if ents, err := st.Range(ctx, k.Ingest(), "-", "+", 1000); err != nil {
		t.Fatal(err)
	} else {
		for _, e := range ents {
			if len(e.Payload) > report.MaxPayload {
				t.Errorf("entry %s of %d bytes still in the stream", e.ID, len(e.Payload))
			}
		}
	}

	// the last possible id: the stream is exhausted until the coordinator repairs it
	out := asBob(t, r, nil, "XADD", k.Ingest(), "18446744073709551615-18446744073709551615", "m", "x", "mac", "y")
	if !strings.HasPrefix(out, "18446744073709551615-") {
		t.Fatalf("bob's XADD with the last id: %q (the attack did not happen)", out)
	}
	sample()
	heard(3)
	sample()
	heard(4)
	if got := testutilCounter(metrics.repairs.WithLabelValues("future-ids")); got < 1 {
		t.Errorf("future-id repairs counted: %v, want >= 1", got)
	}

	// the stream deleted (an admin's mistake, a restore): created again
	if err := st.Del(ctx, k.Ingest()); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, 20*time.Second, 50*time.Millisecond, "the stream recreated", func() bool {
		return testutilCounter(metrics.repairs.WithLabelValues("recreated-stream")) >= 1
	})
	sample()
	heard(5)
}
