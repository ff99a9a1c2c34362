//go:build integration

package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/isched/isched/internal/report"
	"github.com/isched/isched/internal/stream"
	"github.com/isched/isched/internal/testutil"
)

// planOption is the part of `isched plan --json`'s options read here.
type planOption struct {
	Partition string  `json:"partition"`
	NodeType  string  `json:"node_type"`
	WaitKnown bool    `json:"wait_known"`
	WaitS     float64 `json:"wait_s"`
	WaitBasis string  `json:"wait_basis"`
	HeldBy    string  `json:"held_by"`
}

// cpuOption runs isched plan as who and returns its cpu/lab-cpu option.
func cpuOption(t *testing.T, w *world, cli, who string, extra ...string) planOption {
	t.Helper()
	return planOptionOf(t, w, cli, who, "cpu", "lab-cpu", extra...)
}

// planOptionOf runs isched plan as who and returns its option on
// partition and node type.
func planOptionOf(t *testing.T, w *world, cli, who, partition, nodeType string, extra ...string) planOption {
	t.Helper()
	args := append([]string{"plan", "--model", filepath.Join(testutil.RepoRoot(), "internal/cli/testdata/resnet18_128.json"),
		"--samples", "3200", "--batch", "16", "--optimizer", "momentum", "--receipts", "none", "--state", "redis",
		"--site", filepath.Join(testutil.RepoRoot(), "examples/site-lab.json"), "--json"}, extra...)
	out := runCLI(t, w, cli, who, args...)
	var plans []struct {
		Options []planOption `json:"options"`
	}
	if err := json.Unmarshal([]byte(out), &plans); err != nil || len(plans) != 1 {
		t.Fatalf("isched plan --json as %s: %v\n%s", who, err, out)
	}
	for _, o := range plans[0].Options {
		if o.Partition == partition && o.NodeType == nodeType {
			return o
		}
	}
	t.Fatalf("isched plan as %s: no %s/%s option\n%s", who, partition, nodeType, out)
	return planOption{}
}

// snapshotLimit is the snapshot's limit of user under qos on resource,
// ok false when the snapshot has none.
func (w *world) snapshotLimit(user, qos, resource string) (report.UserLimit, bool) {
	snap, ok := w.snapshot()
	if !ok {
		return report.UserLimit{}, false
	}
	for _, l := range snap.Limits {
		if l.User == user && l.QOS == qos && l.Resource == resource {
			return l, true
		}
	}
	return report.UserLimit{}, false
}

// snapshot is the agent's latest snapshot in Redis; false when there is
// none yet or it cannot be read.
func (w *world) snapshot() (*report.Snapshot, bool) {
	env, ok := w.table(stream.Keys.Snapshot)
	if !ok || env.Snapshot == nil {
		return nil, false
	}
	return env.Snapshot, true
}

// table is the agent's latest table under key in Redis (its snapshot or
// its job table); false when there is none yet or it cannot be read.
func (w *world) table(key func(stream.Keys) string) (*report.Envelope, bool) {
	c, err := w.client("coordinator")
	if err != nil {
		return nil, false
	}
	defer c.Close()
	b, err := c.Get(context.Background(), key(c.Keys()))
	if err != nil {
		return nil, false
	}
	env, err := report.DecodeTable(b)
	return env, err == nil
}

// sleeperAs submits a job of who that sleeps, with sbatch options args.
func (w *world) sleeperAs(who string, args ...string) string {
	w.t.Helper()
	return w.sbatchAs(who, append([]string{"-J", "isched-e2e-sleeper", "-o", "/dev/null", "-t", "10", "--mem=100M"},
		append(args, "--wrap", "sleep 600")...)...)
}

// TestUserLimitsAsBob (issue 27) is the use case's Table 1 scenario on the
// lab with accounting (slurmdbd; scripts/dev-cluster's QOS capped allows a
// user 4 CPUs, 1 GPU and 2 running jobs): CPU nodes idle while bob is at
// his QOS cap.
//
//  1. Planning: Slurm holds bob's third capped job (QOSMax...), and isched
//     plan, as bob under capped, does not call cpu idle: it waits for his
//     own jobs, the pending one ahead of it too, naming the limit; for
//     alice cpu is idle now.
//  2. Policy: bob holds the one GPU capped allows; his isched job on cpu,
//     whose ideal partition gpu is idle, is not moved there (it would pend
//     on QOSMaxGRESPerUser) while his GPU job runs; once it ends, the
//     coordinator moves it.
func TestUserLimitsAsBob(t *testing.T) {
	testutil.ClaimPartitions(t, testutil.Partitions...) // it counts bob's jobs anywhere, and other packages run jobs as bob
	w := newWorld(t, fastPolicy)
	cli := testutil.Binary(t, "isched", "./isched")
	// both on cpu1: cpu2 stays an idle node
	s1, s2 := w.sleeperAs("bob", "--qos=capped", "-p", "cpu", "-w", "cpu1", "-c", "2"), w.sleeperAs("bob", "--qos=capped", "-p", "cpu", "-w", "cpu1", "-c", "2")
	waitFor(t, w, time.Minute, "bob's two capped jobs running", func() bool {
		return slurmJob(s1)["JobState"] == "RUNNING" && slurmJob(s2)["JobState"] == "RUNNING"
	})
	third := w.sleeperAs("bob", "--qos=capped", "-p", "cpu", "-c", "1")
	waitFor(t, w, 30*time.Second, "Slurm to hold bob's third capped job on his QOS limit", func() bool {
		s := slurmJob(third)
		return s["JobState"] == "PENDING" && strings.HasPrefix(s["Reason"], "QOSMax")
	})
	t.Logf("Slurm: bob's third capped job pends (%s) while cpu2 is %s", slurmJob(third)["Reason"], nodeState("cpu2"))
	waitFor(t, w, 30*time.Second, "the snapshot to show bob at 4 of 4 capped CPUs", func() bool {
		l, ok := w.snapshotLimit("bob", "capped", report.LimitCPU)
		return ok && l.Used == 4 && l.Max == 4
	})
	bob := cpuOption(t, w, cli, "bob", "--qos", "capped")
	t.Logf("bob's cpu option: %+v", bob)
	// his two 10-minute jobs free the limit's 4 CPUs; his third, queued
	// first, takes 1 of them for its 10 minutes, and a whole node (4 CPUs)
	// fits under the limit only once it ends too
	if bob.HeldBy != "QOSMaxCpuPerUserLimit" || !bob.WaitKnown || bob.WaitS < 18*60 || bob.WaitS > 20*60 ||
		!strings.Contains(bob.WaitBasis, "idle, but you are at your QOS capped limit of 4 CPUs") {
		t.Errorf("bob's plan under capped: %+v; want held by QOSMaxCpuPerUserLimit until his 10-minute jobs and the third after them end", bob)
	}
	if alice := cpuOption(t, w, cli, "alice"); alice.HeldBy != "" || !alice.WaitKnown || alice.WaitS != 0 {
		t.Errorf("alice's plan (default QOS normal): %+v; want cpu idle now", alice)
	}
	for _, id := range []string{s1, s2, third} {
		_ = runCmd("scancel", id)
	}

	// 2. the policy
	gpuHold := w.sleeperAs("bob", "--qos=capped", "-p", "gpu", "--gres=gpu:1", "-c", "1")
	waitFor(t, w, time.Minute, "bob's GPU job running", func() bool { return slurmJob(gpuHold)["JobState"] == "RUNNING" })
	lineage := fmt.Sprintf("lim%d", time.Now().UnixNano()%1e6)
	plan := report.Plan{Lineage: lineage, Ideal: "gpu", IdealGres: "gpu:1", Fallbacks: []string{"cpu"}, Total: 600, Migrate: true}
	job := w.submitTrainerWith(trainOpts{User: "bob"}, plan, []string{"-p", "cpu", "-t", "10", "--qos=capped"},
		"--steps", "600", "--period", "0.2", "--ckpt-every", "0", "--gpu-speedup", "8")
	var from int64
	waitFor(t, w, 90*time.Second, "bob's job training on cpu with an estimate, his GPU held", func() bool {
		st, ok := w.status(lineage)
		l, lok := w.snapshotLimit("bob", "capped", report.LimitGPU)
		from = st.Step
		return ok && st.Partition == "cpu" && st.Step >= 15 && st.IterMS > 0 && lok && l.Used == 1
	})
	// fastPolicy moves such a job within a tick or two of its estimate
	// (TestChaosCoordinatorKilledDuringMigration): 50 more steps (10 s of
	// ticks) without a decision say the limit held it back
	waitFor(t, w, time.Minute, "50 more steps on cpu", func() bool {
		st, _ := w.status(lineage)
		return st.Step >= from+50
	})
	if st, _ := w.status(lineage); len(st.Decisions) != 0 || len(w.actionsFor(lineage)) != 0 || st.Partition != "cpu" {
		t.Fatalf("bob's job was acted on while his QOS's GPU was in use: decisions %v, actions %d, partition %s",
			decisionKinds(st), len(w.actionsFor(lineage)), st.Partition)
	}
	if err := runCmd("scancel", gpuHold); err != nil {
		t.Fatal(err)
	}
	waitFor(t, w, 90*time.Second, "the move once bob's GPU is free", func() bool {
		for _, a := range w.actionsFor(lineage) {
			if a.Type == report.ActionSignal || a.Type == report.ActionRequeue {
				return true
			}
		}
		return false
	})
	s := waitJobEnd(t, w, job.id, 3*time.Minute)
	if s["JobState"] != "COMPLETED" || s["Partition"] != "gpu" || s["UserId"] == "" || !strings.HasPrefix(s["UserId"], "bob(") {
		t.Errorf("bob's job ended %s on %s as %s, want COMPLETED on gpu as bob\n%s", s["JobState"], s["Partition"], s["UserId"], job.output())
	}
}

// TestAccountQuotaOnCluster: a quota on an account's own association
// (GrpTRES=gres/gpu=1 on physics, the way a site caps a group) holds
// every user of the account once any of them fills it. alice's GPU job in
// physics fills it; Slurm holds bob's in physics (AssocGrpGRES). The
// agent publishes the quota as each user's limit with the account's use,
// and isched plan, as bob charging physics, does not call gpu idle: held
// by AssocGrpGRES; charging his default account (research) it is idle.
func TestAccountQuotaOnCluster(t *testing.T) {
	testutil.ClaimPartitions(t, testutil.Partitions...) // it sets a quota on physics, which every user may charge
	testutil.NeedSlurm(t)
	// before the agent starts: it reads the accounting once per
	// -limits-interval
	if out, err := exec.Command("sacctmgr", "-i", "modify", "account", "physics", "where", "cluster=lab", "set", "GrpTRES=gres/gpu=1").CombinedOutput(); err != nil {
		t.Fatalf("sacctmgr: %v: %s", err, out)
	}
	t.Cleanup(func() {
		_ = exec.Command("sacctmgr", "-i", "modify", "account", "physics", "where", "cluster=lab", "set", "GrpTRES=gres/gpu=-1").Run()
	})
	w := newWorld(t, fastPolicy)
	cli := testutil.Binary(t, "isched", "./isched")
	hold := w.sleeperAs("alice", "--account=physics", "-p", "gpu", "--gres=gpu:1", "-c", "1")
	waitFor(t, w, time.Minute, "alice's GPU job in physics running", func() bool { return slurmJob(hold)["JobState"] == "RUNNING" })
	held := w.sleeperAs("bob", "--account=physics", "-p", "gpu", "--gres=gpu:1", "-c", "1")
	waitFor(t, w, 30*time.Second, "Slurm to hold bob's GPU job in physics on the account's quota", func() bool {
		s := slurmJob(held)
		return s["JobState"] == "PENDING" && s["Reason"] == "AssocGrpGRES"
	})
	_ = runCmd("scancel", held)
	var l report.UserLimit
	waitFor(t, w, 30*time.Second, "the snapshot to show physics's quota as bob's limit, filled by alice", func() bool {
		snap, ok := w.snapshot()
		if !ok {
			return false
		}
		for _, x := range snap.Limits {
			if x.User == "bob" && x.Account == "physics" && x.Resource == report.LimitGPU && x.Reason == "AssocGrpGRES" {
				l = x
				return x.Used == 1 && x.Max == 1
			}
		}
		return false
	})
	if l.DefaultAccount {
		t.Errorf("bob's physics limit %+v says physics is his default account (research is)", l)
	}
	bob := planOptionOf(t, w, cli, "bob", "gpu", "lab-gpu", "--account", "physics")
	t.Logf("bob's gpu option charging physics: %+v", bob)
	if bob.HeldBy != "AssocGrpGRES" || !strings.Contains(bob.WaitBasis, "limit of 1 GPUs (AssocGrpGRES, 1 in use)") {
		t.Errorf("bob's plan charging physics: %+v; want held by the account's quota (AssocGrpGRES)", bob)
	}
	if own := planOptionOf(t, w, cli, "bob", "gpu", "lab-gpu"); own.HeldBy != "" {
		t.Errorf("bob's plan in his default account research: %+v; want no limit holding it", own)
	}
}
