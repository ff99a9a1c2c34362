//go:build integration

package e2e

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
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/isched/isched/internal/auth"
	"github.com/isched/isched/internal/plan"
	"github.com/isched/isched/internal/report"
	"github.com/isched/isched/internal/testutil"
)

// TestSquatAndPoisonAsBob: bob, the second Unix user, with a real agent
// and coordinator.
//
// Squatting (issue 18, item 2): bob's job reports into the wrapper's
// default lineages of the next job ids (<cluster>-<id>, predictable)
// before those jobs exist; alice's job, submitted next, then runs with its
// default lineage. Every claim of bob's is refused, alice's job is tracked
// as hers, and `isched status <her job>` shows her job, not bob's.
//
// An unrestricted start credential (item 8): bob seals a session in a
// credential made without --restrict-uid; the coordinator refuses it as
// unrestricted-credential.
//
// Poisoned receipts (item 5): bob runs a tiny trainer under a ResNet-18
// plan comment (batch 16), 20 ms iterations and a few MiB of RSS (4 s:
// the agent's job table, polled every second, must see the job started
// for Slurm to confirm the receipt). The
// coordinator writes a receipt Slurm confirms (it is bob's own job), yet
// alice's `isched estimate` stays at the static figures, while bob's own
// estimate uses his receipt.
func TestSquatAndPoisonAsBob(t *testing.T) {
	w := newWorld(t, fastPolicy)
	cli := testutil.Binary(t, "isched", "./isched")
	base := testutil.WorkDir(t, "isched-squat-")
	aliceDir, aliceUID := userDir(t, base, "alice")
	bobDir, bobUID := userDir(t, base, "bob")
	helper := filepath.Join(testutil.RepoRoot(), "scripts")
	fake := filepath.Join(testutil.RepoRoot(), "internal/wrapper/testdata/fake_trainer.py")
	wrapper := filepath.Join(binDir, "isched-wrapper")
	// the default path: both users' jobs report through isched-relay
	exports := "--export=ALL,ISCHED_HELPER_DIR=" + helper + ",ISCHED_CLUSTER=" + w.cluster + ",ISCHED_RELAY_ADDR=" + w.relay()
	const squats = 6

	// bob claims <cluster>-<his job id + n>, n = 1..squats, one wrapper run each
	script := "#!/bin/bash\nfor n in $(seq 1 " + strconv.Itoa(squats) + "); do\n" +
		"  srun " + shq(wrapper) + " --report-interval 1s --lineage \"" + w.cluster + "-$((SLURM_JOB_ID + n))\" -- /usr/bin/python3 " +
		shq(fake) + " --steps 5 --period 0.05\ndone\n"
	writeAs(t, filepath.Join(bobDir, "squat.sh"), []byte(script), 0o755, bobUID)
	squatJob := w.sbatchAs("bob", "-J", "bob-squat", "-D", bobDir, "-p", "cpu", "-n", "1", "-t", "5", "--mem=500M",
		"-o", filepath.Join(bobDir, "squat.out"), exports, filepath.Join(bobDir, "squat.sh"))
	// alice's job, held until bob's claims are in: no plan, the wrapper's default lineage
	const total = 30
	script = "#!/bin/bash\nexec srun " + shq(wrapper) + " --report-interval 1s -- /usr/bin/python3 " + shq(fake) +
		" --steps " + strconv.Itoa(total) + " --period 0.1\n"
	writeAs(t, filepath.Join(aliceDir, "job.sh"), []byte(script), 0o755, aliceUID)
	aliceJob := w.sbatchAs("alice", "--hold", "-J", "alice-plain", "-D", aliceDir, "-p", "cpu", "-n", "1", "-t", "5", "--mem=500M",
		"-o", filepath.Join(aliceDir, "out.txt"), exports, filepath.Join(aliceDir, "job.sh"))
	if s := waitJobEnd(t, w, squatJob, 3*time.Minute); s["JobState"] != "COMPLETED" {
		out, _ := os.ReadFile(filepath.Join(bobDir, "squat.out"))
		t.Fatalf("bob's squatting job ended %s\n%s", s["JobState"], tail(out, 3000))
	}
	waitFor(t, w, 30*time.Second, "the coordinator to refuse bob's claims", func() bool {
		log, _ := os.ReadFile(filepath.Join(w.dir, "coordinator.log"))
		return bytes.Contains(log, []byte(`"reason":"foreign-lineage"`))
	})
	sq, _ := strconv.Atoi(squatJob)
	aj, _ := strconv.Atoi(aliceJob)
	t.Logf("bob's job %d claimed %s-%d..%d before they existed; alice's job is %d", sq, w.cluster, sq+1, sq+squats, aj)
	if err := runCmd("scontrol", "release", aliceJob); err != nil {
		t.Fatal(err)
	}
	aliceLineage := w.cluster + "-" + aliceJob
	var st report.JobStatus
	waitFor(t, w, 3*time.Minute, "alice's job to end in her lineage", func() bool {
		st, _ = w.status(aliceLineage)
		return st.State == "ENDED"
	})
	if st.JobID != uint64(aj) || st.UID != aliceUID || st.User != "alice" || st.Step != total {
		t.Errorf("%s: job %d uid %d user %q step %d; want alice's job %d (uid %d) at step %d", aliceLineage, st.JobID, st.UID, st.User, st.Step,
			aj, aliceUID, total)
	}
	for n := 1; n <= squats; n++ {
		if s, ok := w.status(fmt.Sprintf("%s-%d", w.cluster, sq+n)); ok && s.UID == bobUID {
			t.Errorf("bob holds %s-%d: job %d", w.cluster, sq+n, s.JobID)
		}
	}
	out := runCLI(t, w, cli, "alice", "status", aliceJob)
	if want := fmt.Sprintf("job %d · lineage %s · user alice", aj, aliceLineage); !strings.Contains(out, want) {
		t.Errorf("isched status %s as alice, want %q:\n%s", aliceJob, want, out)
	}

	// item 8: a start credential bob made without --restrict-uid (anyone
	// could decode it and read the session key), for his own job
	sendUnrestrictedStart(t, w, sq, bobUID)
	waitFor(t, w, 30*time.Second, "the coordinator to refuse bob's unrestricted credential", func() bool {
		log, _ := os.ReadFile(filepath.Join(w.dir, "coordinator.log"))
		return bytes.Contains(log, []byte(`"reason":"unrestricted-credential"`))
	})

	// bob's tiny run under ResNet-18's plan comment (4 s: a run that starts
	// and ends between two job tables is never seen started, and its
	// receipt stays unconfirmed)
	model := filepath.Join(testutil.RepoRoot(), "internal/cli/testdata/resnet18_128.json")
	b, err := os.ReadFile(model)
	if err != nil {
		t.Fatal(err)
	}
	m, err := plan.DecodeModel(b)
	if err != nil {
		t.Fatal(err)
	}
	key := plan.ConfigKey(m, plan.Training{Optimizer: "momentum", Precision: plan.PrecFP32})
	poison := report.Plan{Lineage: fmt.Sprintf("%s-u%d-poison-%d", w.cluster, bobUID, time.Now().UnixNano()%1e6), Cluster: w.cluster,
		Ideal: "cpu", Total: 200, Model: key, Batch: 16}
	script = "#!/bin/bash\nexec srun " + shq(wrapper) + " --report-interval 1s -- /usr/bin/python3 " + shq(fake) + " --steps 200 --period 0.02\n"
	writeAs(t, filepath.Join(bobDir, "poison.sh"), []byte(script), 0o755, bobUID)
	poisonJob := w.sbatchAs("bob", "-J", "bob-poison", "-D", bobDir, "-p", "cpu", "-n", "1", "-t", "5", "--mem=500M",
		"-o", filepath.Join(bobDir, "poison.out"), "--comment", poison.FormatComment(), exports+",ISCHED_LINEAGE="+poison.Lineage,
		filepath.Join(bobDir, "poison.sh"))
	rec := w.waitReceipt(3*time.Minute, "bob's receipt", func(r report.Receipt) bool {
		return r.Model == key && r.UID != nil && *r.UID == bobUID
	})

	t.Logf("bob's job %s left receipt %+v", poisonJob, rec)
	if !rec.Confirmed || rec.User != "bob" || rec.Batch != 16 {
		t.Errorf("bob's receipt: confirmed %v user %q batch %d; want confirmed by Slurm (it is his own job)\n%s", rec.Confirmed, rec.User, rec.Batch, w.logs())
	}
	estimate := []string{"estimate", "--model", model, "--samples", "3200", "--batch", "16", "--optimizer", "momentum",
		"--site", filepath.Join(testutil.RepoRoot(), "examples/site-lab.json"), "--json"}
	static := cpuRow(t, runCLI(t, w, cli, "alice", append(estimate, "--receipts", "none")...))
	got := cpuRow(t, runCLI(t, w, cli, "alice", estimate...))
	if got.Source != plan.Static || got.MemoryBytes != static.MemoryBytes || got.HostBytes != static.HostBytes {
		t.Errorf("alice's estimate after bob's receipt: %s %d bytes (host %d), want the static %d (%s)", got.Source, got.MemoryBytes,
			got.HostBytes, static.MemoryBytes, got.Basis)
	}
	if own := cpuRow(t, runCLI(t, w, cli, "bob", estimate...)); own.Source != plan.Measured || own.MemoryBytes >= static.MemoryBytes {
		t.Errorf("bob's own estimate: %s %d bytes, want measured from his receipt (below the static %d)", own.Source, own.MemoryBytes, static.MemoryBytes)
	}
	poisonUp(t, w, cli, estimate, static, bobDir, bobUID, poison, exports)
}

// poisonUp (issue 44, item 3): bob's second run under the same plan
// comment allocates 2.5 GB; his receipts' median is then far above alice's
// static estimate, which one user may raise by at most
// plan.MaxPooledRaise (before: 542.3 MiB static became 2.53 GiB).
func poisonUp(t *testing.T, w *world, cli string, estimate []string, static estimateRow, bobDir string, bobUID int, poison report.Plan, exports string) {
	t.Helper()
	fake := filepath.Join(testutil.RepoRoot(), "internal/wrapper/testdata/fake_trainer.py")
	wrapper := filepath.Join(binDir, "isched-wrapper")
	poison.Lineage += "-up"
	script := "#!/bin/bash\nexec srun " + shq(wrapper) + " --report-interval 1s -- /usr/bin/python3 " + shq(fake) + " --mb 2500 --steps 200 --period 0.02\n"
	writeAs(t, filepath.Join(bobDir, "poison-up.sh"), []byte(script), 0o755, bobUID)
	job := w.sbatchAs("bob", "-J", "bob-poison-up", "-D", bobDir, "-p", "cpu", "-n", "1", "-t", "5", "--mem=3500M",
		"-o", filepath.Join(bobDir, "poison-up.out"), "--comment", poison.FormatComment(), exports+",ISCHED_LINEAGE="+poison.Lineage,
		filepath.Join(bobDir, "poison-up.sh"))
	rec := w.waitReceipt(3*time.Minute, "bob's 2.5 GB receipt", func(r report.Receipt) bool {
		return r.Model == poison.Model && r.UID != nil && *r.UID == bobUID && r.PeakRSS > 2<<30
	})
	t.Logf("bob's job %s left receipt %+v", job, rec)
	if !rec.Confirmed {
		t.Fatalf("bob's 2.5 GB receipt is not confirmed by Slurm: the cap is not tested\n%s", w.logs())
	}
	top := int64(math.Ceil(float64(static.MemoryBytes) * plan.MaxPooledRaise))
	got := cpuRow(t, runCLI(t, w, cli, "alice", estimate...))
	if got.MemoryBytes > top || got.MemoryBytes < static.MemoryBytes || !strings.Contains(got.Basis, "not above 1.5x the static estimate") {
		t.Errorf("alice's estimate after bob's 2.5 GB receipt: %s %d bytes, want within [%d, %d], capped (%s)", got.Source, got.MemoryBytes,
			static.MemoryBytes, top, got.Basis)
	}
}

// mungeAsBob makes credentials as bob with the munge command, without
// --restrict-uid when restrict is negative.
type mungeAsBob struct{}

func (mungeAsBob) Encode(ctx context.Context, p []byte, restrict int, _ time.Duration) (string, error) {
	args := []string{"-u", "bob", "--", "munge", "--ttl=60"}
	if restrict >= 0 {
		args = append(args, "--restrict-uid="+strconv.Itoa(restrict))
	}
	cmd := exec.CommandContext(ctx, "runuser", args...)
	cmd.Stdin = bytes.NewReader(p)
	out, err := cmd.Output()
	return strings.TrimSpace(string(out)), err
}

func (mungeAsBob) Decode(context.Context, string) (auth.Decoded, error) {
	return auth.Decoded{}, errors.New("not used")
}

// sendUnrestrictedStart appends, with the reporter's login every job has, a
// start report of bob's job sealed in a credential bob made without a uid
// restriction.
func sendUnrestrictedStart(t *testing.T, w *world, job, uid int) {
	t.Helper()
	ctx := context.Background()
	s, err := auth.NewSession()
	if err != nil {
		t.Fatal(err)
	}
	ref := report.JobRef{Cluster: w.cluster, JobID: uint64(job), Lineage: fmt.Sprintf("%s-u%d-open", w.cluster, uid), User: "bob", UID: uid,
		Partition: "cpu", Node: "cpu1"}
	cred, err := auth.Issue(ctx, mungeAsBob{}, s, ref.Cluster, ref.JobID, ref.Lineage, auth.NoRestriction, time.Minute, time.Now())
	if err != nil {
		t.Fatalf("munge as bob: %v", err)
	}
	e := report.NewEnvelope(report.KindStart, time.Now())
	e.Job, e.SID, e.Seq = &ref, s.SID, 1
	e.Start = &report.Start{Argv: []string{"python3", "train.py"}, Host: "cpu1", PID: 1, WrapperVersion: "bob", Cred: cred}
	b, err := report.Encode(e)
	if err != nil {
		t.Fatal(err)
	}
	c, err := w.client("reporter")
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := c.Append(ctx, c.Keys().Ingest(), b, s.Sign(b), 100000); err != nil {
		t.Fatal(err)
	}
}

// runCLI runs the isched CLI as a Unix user with the viewer's Redis login.
func runCLI(t *testing.T, w *world, cli, who string, args ...string) string {
	t.Helper()
	out, errOut, err := runCLIResult(w, cli, who, args...)
	if err != nil {
		t.Fatalf("isched %v as %s: %v: %s", args, who, err, errOut)
	}
	return out
}

// runCLIResult is runCLI for a command that may fail.
func runCLIResult(w *world, cli, who string, args ...string) (stdout, stderr string, err error) {
	cmd := exec.Command("runuser", append([]string{"-u", who, "--", cli}, args...)...)
	cmd.Env = w.env("viewer")
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err = cmd.Run()
	return out.String(), errb.String(), err
}

// estimateRow is the part of `isched estimate --json`'s row read here.
type estimateRow struct {
	NodeType    string      `json:"node_type"`
	MemoryBytes int64       `json:"memory_bytes"`
	HostBytes   int64       `json:"host_memory_bytes"`
	Source      plan.Source `json:"source"`
	Basis       string      `json:"basis"`
}

func cpuRow(t *testing.T, out string) estimateRow {
	t.Helper()
	var rows []estimateRow
	if err := json.Unmarshal([]byte(out), &rows); err != nil {
		t.Fatalf("estimate --json: %v\n%s", err, out)
	}
	for _, r := range rows {
		if r.NodeType == "lab-cpu" {
			return r
		}
	}
	t.Fatalf("no lab-cpu row:\n%s", out)
	return estimateRow{}
}
