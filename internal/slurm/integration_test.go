//go:build integration

package slurm_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/isched/isched/internal/report"
	"github.com/isched/isched/internal/slurm"
	"github.com/isched/isched/internal/testutil"
)

// These tests run against the dev cluster (scripts/dev-cluster up). Every
// job they submit is named isched-slurm-test-* and cancelled at the end.

// submit submits script (with #SBATCH lines) through the client and
// cancels the job when the test ends.
func submit(t *testing.T, c *slurm.Client, script, asUser string) string {
	t.Helper()
	testutil.UseLab(t, "cpu") // the tests that move a job to dev or gpu say so first
	id, err := c.SubmitWith(context.Background(), []byte(script), slurm.SubmitSpec{User: asUser})
	if err != nil {
		t.Fatalf("submit: %v", err)
	}
	t.Cleanup(func() { _ = c.Cancel(context.Background(), id) })
	return id
}

func waitState(t *testing.T, c *slurm.Client, id, state string, timeout time.Duration) *slurm.JobInfo {
	t.Helper()
	var last *slurm.JobInfo
	testutil.Eventually(t, timeout, 100*time.Millisecond, fmt.Sprintf("job %s %s (last: %+v)", id, state, last), func() bool {
		j, err := c.ShowJob(context.Background(), id)
		if err != nil {
			t.Logf("show job %s: %v", id, err)
			return false
		}
		last = j
		return j.State == state
	})
	return last
}

// lines waits until file has at least n lines and returns them.
func lines(t *testing.T, path string, n int, timeout time.Duration) []string {
	t.Helper()
	var out []string
	testutil.Eventually(t, timeout, 100*time.Millisecond, fmt.Sprintf("%d lines in %s", n, path), func() bool {
		b, err := os.ReadFile(path)
		if err != nil {
			return false
		}
		out = strings.Split(strings.TrimSpace(string(b)), "\n")
		return len(out) >= n && out[0] != ""
	})
	return out
}

const recordScript = `#!/bin/sh
#SBATCH -J isched-slurm-test-%s
#SBATCH -o /dev/null
#SBATCH --chdir=/tmp
#SBATCH --requeue
%s
echo "${SLURM_RESTART_COUNT:-0} $SLURMD_NODENAME ${CUDA_VISIBLE_DEVICES:-none} $SLURM_JOB_PARTITION" >> %s/out.$SLURM_JOB_ID
exec sleep 600
`

func TestIntegrationSnapshotMatchesSinfoSqueue(t *testing.T) {
	testutil.ClaimPartitions(t, testutil.Partitions...) // sinfo and squeue must not change between the snapshot and them
	testutil.NeedSlurm(t)
	c := &slurm.Client{}
	dir := testutil.WorkDir(t, "isched-slurm-test-")
	ids := map[string]string{}
	for _, p := range []struct{ part, extra string }{
		{"dev", "#SBATCH -p dev -t 10"},
		{"cpu", "#SBATCH -p cpu -t 10"},
		{"gpu", "#SBATCH -p gpu -t 10 --gres=gpu:1"},
	} {
		ids[p.part] = submit(t, c, fmt.Sprintf(recordScript, "snap-"+p.part, p.extra, dir), "")
	}
	// A job that cannot start: over dev's MaxTime.
	pend := submit(t, c, "#!/bin/sh\n#SBATCH -J isched-slurm-test-snap-pending -p dev -t 3:00:00 -o /dev/null --chdir=/tmp\nsleep 600\n", "")
	for part, id := range ids {
		waitState(t, c, id, "RUNNING", 60*time.Second)
		t.Logf("%s job %s running", part, id)
	}

	// Other tests share the cluster, so jobs may start or end between our
	// poll and sinfo/squeue: retry until one pair agrees.
	var lastDiff string
	testutil.Eventually(t, 60*time.Second, 500*time.Millisecond, "snapshot to match sinfo/squeue", func() bool {
		st, err := c.Poll(context.Background())
		if err != nil {
			t.Fatalf("poll: %v", err)
		}
		now := time.Now()
		snap := st.Snapshot("lab", now)
		table := st.JobTable("lab", now)
		lastDiff = compare(t, snap, table)
		if lastDiff != "" {
			t.Logf("retrying: %s", lastDiff)
			return false
		}
		// The envelopes the agent publishes from this poll are valid.
		for _, env := range []*report.Envelope{{V: report.Version, Kind: report.KindSnapshot, TimeMS: now.UnixMilli(), Snapshot: &snap}} {
			if _, err := report.Encode(env); err != nil {
				t.Fatalf("snapshot envelope: %v", err)
			}
		}
		byID := map[string]report.Job{}
		for _, j := range table.Jobs {
			byID[strconv.FormatUint(j.JobID, 10)] = j
		}
		for part, id := range ids {
			j := byID[id]
			if j.State != "RUNNING" || j.Partition != part || j.StartMS == 0 || j.ElapsedS < 0 {
				t.Errorf("job %s in the table: %+v", id, j)
			}
		}
		if g := byID[ids["gpu"]].Gres; g != "gpu:1" {
			t.Errorf("gpu job gres %q", g)
		}
		// the scheduler settles the pending job's reason on a later pass
		// (with accounting, its first one may say PartitionConfig): retry
		if j := byID[pend]; j.State != "PENDING" || j.Reason != "PartitionTimeLimit" || j.TimeLimitMin == nil || *j.TimeLimitMin != 180 {
			lastDiff = fmt.Sprintf("pending job: %+v", j)
			t.Logf("retrying: %s", lastDiff)
			return false
		}
		return true
	})
}

// compare returns "" when the snapshot matches sinfo's and squeue's own
// text output taken right after it, else the first difference.
func compare(t *testing.T, snap report.Snapshot, table report.JobTable) string {
	// %R partition, %F nodes A/I/O/T, %C CPUs A/I/O/T.
	out := testutil.Run(t, 30*time.Second, "sinfo", "--all", "--noheader", "--format=%R %F %C")
	sinfo := map[string][]string{}
	for _, l := range strings.Split(strings.TrimSpace(out), "\n") {
		f := strings.Fields(l)
		sinfo[f[0]] = f[1:]
	}
	pendOut := testutil.Run(t, 30*time.Second, "squeue", "--all", "--noheader", "--states=PD", "--format=%P")
	pending := map[string]int{}
	total := 0
	for _, l := range strings.Split(strings.TrimSpace(pendOut), "\n") {
		if l = strings.TrimSpace(l); l == "" {
			continue
		}
		total++
		for _, p := range strings.Split(l, ",") {
			pending[p]++
		}
	}
	if snap.Pending != total {
		return fmt.Sprintf("pending %d, squeue %d", snap.Pending, total)
	}
	for _, p := range snap.Partitions {
		s, ok := sinfo[p.Name]
		if !ok {
			return "partition " + p.Name + " not in sinfo"
		}
		nodes := fmt.Sprintf("%d/%d/%d/%d", p.NodesAlloc, p.NodesIdle, p.NodesOther, p.NodesTotal)
		if nodes != s[0] {
			return fmt.Sprintf("%s nodes A/I/O/T %s, sinfo %s", p.Name, nodes, s[0])
		}
		cpus := strings.Split(s[1], "/")
		if fmt.Sprint(p.CPUsAlloc) != cpus[0] || fmt.Sprint(p.CPUsIdle) != cpus[1] || fmt.Sprint(p.CPUsTotal) != cpus[3] {
			return fmt.Sprintf("%s cpus %d/%d/-/%d, sinfo %s", p.Name, p.CPUsAlloc, p.CPUsIdle, p.CPUsTotal, s[1])
		}
		if p.PendingJobs != pending[p.Name] {
			return fmt.Sprintf("%s pending %d, squeue %d", p.Name, p.PendingJobs, pending[p.Name])
		}
		// GPUs from sinfo's text GRES columns, per node of the partition.
		gout := testutil.Run(t, 30*time.Second, "sinfo", "--noheader", "--Node", "--partition="+p.Name, "--Format=NodeList:30,Gres:60,GresUsed:60")
		var alloc, tot int
		seen := map[string]bool{}
		for _, l := range strings.Split(strings.TrimSpace(gout), "\n") {
			f := strings.Fields(l)
			if len(f) < 3 || seen[f[0]] {
				continue
			}
			seen[f[0]] = true
			g, _ := slurm.GPUs(f[1])
			u, _ := slurm.GPUs(f[2])
			for _, v := range g {
				tot += v
			}
			for _, v := range u {
				alloc += v
			}
		}
		var snapAlloc, snapTot int
		for _, g := range p.GPUs {
			snapAlloc += g.Alloc
			snapTot += g.Total
		}
		if snapAlloc != alloc || snapTot != tot {
			return fmt.Sprintf("%s GPUs %d/%d, sinfo %d/%d", p.Name, snapAlloc, snapTot, alloc, tot)
		}
	}
	// Job states against squeue's text output.
	qout := testutil.Run(t, 30*time.Second, "squeue", "--all", "--noheader", "--format=%A %T %P")
	states := map[string]string{}
	for _, l := range strings.Split(strings.TrimSpace(qout), "\n") {
		f := strings.Fields(l)
		if len(f) == 3 {
			states[f[0]] = f[1] + " " + f[2]
		}
	}
	for _, j := range table.Jobs {
		id := strconv.FormatUint(j.JobID, 10)
		if want, ok := states[id]; ok && want != j.State+" "+j.Partition {
			return fmt.Sprintf("job %s: %s %s, squeue %s", id, j.State, j.Partition, want)
		}
	}
	return ""
}

func TestIntegrationMoveRunningCPUToGPU(t *testing.T) {
	testutil.UseLab(t, "cpu", "gpu")
	testutil.NeedSlurm(t)
	c := &slurm.Client{}
	dir := testutil.WorkDir(t, "isched-slurm-test-")
	id := submit(t, c, fmt.Sprintf(recordScript, "move-gpu", "#SBATCH -p cpu -t 30", dir), "alice")
	out := filepath.Join(dir, "out."+id)
	first := lines(t, out, 1, 60*time.Second)
	if !strings.HasPrefix(first[0], "0 cpu") || !strings.Contains(first[0], " none cpu") {
		t.Fatalf("first run: %q", first[0])
	}
	start := time.Now()
	res, err := c.Move(context.Background(), id, slurm.MoveSpec{Partition: "gpu", Gres: "gpu:1"})
	if err != nil {
		t.Fatalf("move: %v (%+v)", err, res)
	}
	j := waitState(t, c, id, "RUNNING", 60*time.Second)
	took := time.Since(start)
	got := lines(t, out, 2, 30*time.Second)
	t.Logf("move %s cpu->gpu: pending after %s, move returned after %s, running after %s; runs: %q", id, res.Pending.Round(time.Millisecond), res.Total.Round(time.Millisecond), took.Round(time.Millisecond), got)
	f := strings.Fields(got[1])
	if len(f) != 4 || f[0] != "1" || !strings.HasPrefix(f[1], "gpu") || f[2] == "none" || f[3] != "gpu" {
		t.Errorf("second run %q: want restart 1 on a gpu node with CUDA_VISIBLE_DEVICES set", got[1])
	}
	if j.JobID != id || j.Restarts != 1 || j.Partition != "gpu" || j.User != "alice" {
		t.Errorf("after the move: %+v", j)
	}
	if g := slurm.JobGres(j.TresPerNode, j.TresPerJob); g != "gpu:1" {
		t.Errorf("gres after the move %q", g)
	}
	if took > 20*time.Second {
		t.Errorf("restart took %s (measured ~2 s with StartTime=now+2)", took)
	}
}

func TestIntegrationMoveToDevWithShorterLimit(t *testing.T) {
	testutil.UseLab(t, "cpu", "dev")
	testutil.NeedSlurm(t)
	c := &slurm.Client{}
	dir := testutil.WorkDir(t, "isched-slurm-test-")
	// 3 h is over dev's MaxTime (2 h): the move must shorten it.
	id := submit(t, c, fmt.Sprintf(recordScript, "move-dev", "#SBATCH -p cpu -t 3:00:00", dir), "")
	out := filepath.Join(dir, "out."+id)
	lines(t, out, 1, 60*time.Second)
	start := time.Now()
	if _, err := c.Move(context.Background(), id, slurm.MoveSpec{Partition: "dev", TimeLimit: 90 * time.Minute}); err != nil {
		t.Fatalf("move: %v", err)
	}
	j := waitState(t, c, id, "RUNNING", 60*time.Second)
	got := lines(t, out, 2, 30*time.Second)
	t.Logf("move %s cpu->dev: running after %s; runs %q", id, time.Since(start).Round(time.Millisecond), got)
	if *j.TimeLimit != 90*time.Minute || j.Partition != "dev" || j.NodeList != "dev1" || !strings.HasPrefix(got[1], "1 dev1 none dev") {
		t.Errorf("after the move: %+v, runs %q", j, got)
	}
}

func TestIntegrationMoveFailureReleases(t *testing.T) {
	testutil.NeedSlurm(t)
	c := &slurm.Client{}
	dir := testutil.WorkDir(t, "isched-slurm-test-")
	id := submit(t, c, fmt.Sprintf(recordScript, "move-bad", "#SBATCH -p cpu -t 30", dir), "")
	lines(t, filepath.Join(dir, "out."+id), 1, 60*time.Second)
	res, err := c.Move(context.Background(), id, slurm.MoveSpec{Partition: "no-such-partition"})
	var ee *slurm.ExitError
	if !errors.As(err, &ee) || !strings.Contains(ee.Stderr, "Invalid partition name") || !res.Released {
		t.Fatalf("move to a missing partition: %v, %+v", err, res)
	}
	j := waitState(t, c, id, "RUNNING", 60*time.Second)
	if j.Partition != "cpu" || j.Held() {
		t.Errorf("job after a failed move: %+v", j)
	}
}

func TestIntegrationUpdateTimeLimit(t *testing.T) {
	testutil.NeedSlurm(t)
	c := &slurm.Client{}
	dir := testutil.WorkDir(t, "isched-slurm-test-")
	id := submit(t, c, fmt.Sprintf(recordScript, "timelimit", "#SBATCH -p cpu -t 30", dir), "alice")
	waitState(t, c, id, "RUNNING", 60*time.Second)
	for _, d := range []time.Duration{45 * time.Minute, 20 * time.Minute} { // raise (operator right), then lower
		if err := c.Update(context.Background(), id, slurm.UpdateSpec{TimeLimit: d}); err != nil {
			t.Fatalf("update to %s: %v", d, err)
		}
		text := testutil.Run(t, 10*time.Second, "scontrol", "show", "job", id)
		want := fmt.Sprintf("TimeLimit=%02d:%02d:00", int(d.Hours()), int(d.Minutes())%60)
		if !strings.Contains(text, want) {
			t.Errorf("scontrol show job %s lacks %s:\n%s", id, want, text)
		}
	}
	// Partition of a running job: Slurm refuses, and says why.
	err := c.Update(context.Background(), id, slurm.UpdateSpec{Partition: "gpu"})
	var ee *slurm.ExitError
	if !errors.As(err, &ee) || !strings.Contains(ee.Stderr, "no longer pending") {
		t.Errorf("partition update of a running job: %v", err)
	}
}

func TestIntegrationShellMetacharactersInert(t *testing.T) {
	testutil.NeedSlurm(t)
	c := &slurm.Client{}
	dir := testutil.WorkDir(t, "isched-slurm-test-")
	marker := filepath.Join(dir, "pwned")
	// #SBATCH lines split on spaces and parse quotes, so the payloads use
	// ${IFS} and no quotes.
	name := "isched-slurm-test-$(touch${IFS}" + marker + ");echo${IFS}`touch${IFS}" + marker + "`|&<>*?"
	id := submit(t, c, "#!/bin/sh\n#SBATCH -J "+name+"\n#SBATCH -p cpu -t 5 -o /dev/null --chdir=/tmp\nsleep 600\n", "")
	j := waitState(t, c, id, "RUNNING", 60*time.Second)
	if j.Name != name {
		t.Errorf("scontrol show job name %q, want %q", j.Name, name)
	}
	jobs, err := c.Jobs(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	found := false
	for _, row := range jobs {
		if strconv.FormatUint(row.JobID, 10) == id {
			found = row.Name == name
		}
	}
	if !found {
		t.Errorf("squeue --json does not list job %s named %q", id, name)
	}
	// The name goes through every action path as data, never as code.
	if err := c.Update(context.Background(), id, slurm.UpdateSpec{TimeLimit: 4 * time.Minute}); err != nil {
		t.Fatal(err)
	}
	if err := c.Signal(context.Background(), id, "USR2", false); err != nil {
		t.Fatal(err)
	}
	if err := c.Cancel(context.Background(), id); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(marker); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("marker %s exists: a job name was executed", marker)
	}
	// A hostile id never reaches a command.
	if err := c.Cancel(context.Background(), id+";touch "+marker); !errors.Is(err, slurm.ErrInvalid) {
		t.Errorf("hostile id: %v", err)
	}
}

func TestIntegrationSignalBatch(t *testing.T) {
	testutil.NeedSlurm(t)
	c := &slurm.Client{}
	dir := testutil.WorkDir(t, "isched-slurm-test-")
	out := filepath.Join(dir, "sig")
	id := submit(t, c, fmt.Sprintf("#!/bin/bash\n#SBATCH -J isched-slurm-test-signal -p dev -t 5 -o /dev/null --chdir=/tmp\ntrap 'echo USR1 >> %s' USR1\necho ready >> %s\nwhile true; do sleep 0.2; done\n", out, out), "")
	lines(t, out, 1, 60*time.Second)
	if err := c.Signal(context.Background(), id, "SIGUSR1", true); err != nil {
		t.Fatal(err)
	}
	got := lines(t, out, 2, 10*time.Second)
	if got[1] != "USR1" {
		t.Errorf("batch shell saw %q", got)
	}
}

func TestIntegrationEndedAndUnknownJobs(t *testing.T) {
	testutil.NeedSlurm(t)
	c := &slurm.Client{}
	_, err := c.ShowJob(context.Background(), "4000000000")
	if !errors.Is(err, slurm.ErrNotFound) {
		t.Errorf("unknown job: %v", err)
	}
	id := submit(t, c, "#!/bin/sh\n#SBATCH -J isched-slurm-test-ended -p dev -t 1 -o /dev/null --chdir=/tmp\ntrue\n", "bob")
	j := waitState(t, c, id, "COMPLETED", 60*time.Second)
	if !j.Ended() || j.User != "bob" {
		t.Errorf("%+v", j)
	}
	if _, err := c.Move(context.Background(), id, slurm.MoveSpec{Partition: "gpu"}); !errors.Is(err, slurm.ErrState) {
		t.Errorf("move of an ended job: %v", err)
	}
	if err := c.Signal(context.Background(), id, "USR1", true); err == nil {
		t.Error("signal to an ended job succeeded")
	} else {
		t.Logf("signal to an ended job: %v", err)
	}
}

func TestIntegrationSubmitAsUser(t *testing.T) {
	testutil.NeedSlurm(t)
	c := &slurm.Client{}
	dir := testutil.WorkDir(t, "isched-slurm-test-")
	out := filepath.Join(dir, "id")
	id := submit(t, c, fmt.Sprintf("#!/bin/sh\n#SBATCH -J isched-slurm-test-asuser -p dev -t 1 -o /dev/null --chdir=/tmp\necho \"$(id -un) $(id -gn) $(id -Gn) $HOME\" > %s\n", out), "alice")
	got := lines(t, out, 1, 60*time.Second)
	// Not root's group: sbatch --uid alone would have left gid 0.
	if got[0] != "alice alice alice /home/alice" {
		t.Errorf("job %s ran as %q, want alice's own user, group and environment", id, got[0])
	}
}
