package sim

import (
	"reflect"
	"testing"

	"github.com/isched/isched/internal/policy"
	"github.com/isched/isched/internal/report"
)

// TestSnapshotQuota: the snapshot carries each account's GrpTRES gpu
// quota as the agent publishes an association's (a row per user of the
// account, reason AssocGrpGRES) with the GPUs the account's running jobs
// hold, and the policy reads the room it leaves as the replay's elastic
// model does; the job table names the quota as the reason its account's
// job waits, as squeue does. heavy (quota 3) runs u1's 2-GPU job and u2's 1-GPU job;
// u1's second job is held until u2's ends at 501 s, then runs alone once
// u1's first ends at 1 000 s. light has no quota.
func TestSnapshotQuota(t *testing.T) {
	t.Parallel()
	jobs := []Job{
		{ID: 1, User: "u1", Account: "heavy", Submit: 0, Nodes: 1, CPUs: 1, GPUs: 2, Run: 1000, Limit: 1000, Partition: "gpu"},
		{ID: 2, User: "u2", Account: "heavy", Submit: 1, Nodes: 1, CPUs: 1, GPUs: 1, Run: 500, Limit: 500, Partition: "gpu"},
		{ID: 3, User: "u3", Account: "light", Submit: 2, Nodes: 1, CPUs: 1, GPUs: 1, Run: 100, Limit: 100, Partition: "gpu"},
		{ID: 4, User: "u1", Account: "heavy", Submit: 3, Nodes: 1, CPUs: 1, GPUs: 1, Run: 2000, Limit: 2000, Partition: "gpu"},
	}
	cfg := DefaultConfig(twoNodeSite(t))
	cfg.Variant, cfg.Seed, cfg.Sched = slurm, 1, SlurmSched()
	cfg.Sched.Quota = map[string]int{"heavy": 3}
	s, err := newSim(cfg, jobs)
	if err != nil {
		t.Fatal(err)
	}
	gpu := s.cl.byName["gpu"]
	quota := func(user string, used int64) report.UserLimit {
		return report.UserLimit{User: user, Account: "heavy", DefaultAccount: true, Resource: report.LimitGPU, Max: 3, Used: used, Reason: "AssocGrpGRES"}
	}
	for _, tt := range []struct {
		at         float64
		want       []report.UserLimit
		room1      int    // policy.GPULimitRoom for u1 on gpu
		job4Reason string // squeue's reason for u1's second job
	}{
		{10, []report.UserLimit{quota("u1", 3), quota("u2", 3)}, 0, "AssocGrpGRES"},
		{600, []report.UserLimit{quota("u1", 3), quota("u2", 3)}, 0, ""},
		{1200, []report.UserLimit{quota("u1", 1), quota("u2", 1)}, 2, ""},
	} {
		replayUntil(s, tt.at)
		snap := s.snapshot()
		if !reflect.DeepEqual(snap.Limits, tt.want) {
			t.Errorf("at %g s: limits %+v\nwant %+v", tt.at, snap.Limits, tt.want)
		}
		if r := policy.GPULimitRoom(snap, "u1", "", "", "gpu"); r != tt.room1 || r != s.limitRoomOn(&s.jobs[3], gpu) {
			t.Errorf("at %g s: u1's room %d (replay's elastic model %d), want %d", tt.at, r, s.limitRoomOn(&s.jobs[3], gpu), tt.room1)
		}
		j := s.tableJob(&s.jobs[3])
		if j.Account != "heavy" || j.Reason != tt.job4Reason {
			t.Errorf("at %g s: u1's second job's account %q, reason %q; want heavy, %q", tt.at, j.Account, j.Reason, tt.job4Reason)
		}
		if r := policy.GPULimitRoom(snap, "u3", "", "", "gpu"); r != -1 {
			t.Errorf("at %g s: u3's room %d, want -1 (no quota)", tt.at, r)
		}
	}
}

// TestSnapshotQuotaEASY: the EASY model enforces no quota, so the
// snapshot has none.
func TestSnapshotQuotaEASY(t *testing.T) {
	t.Parallel()
	cfg := DefaultConfig(twoNodeSite(t))
	cfg.Variant, cfg.Seed = slurm, 1
	cfg.Sched.Quota = map[string]int{"heavy": 3}
	s, err := newSim(cfg, []Job{{ID: 1, User: "u1", Account: "heavy", Nodes: 1, CPUs: 1, GPUs: 2, Run: 1000, Limit: 1000, Partition: "gpu"}})
	if err != nil {
		t.Fatal(err)
	}
	replayUntil(s, 10)
	if l := s.snapshot().Limits; len(l) != 0 {
		t.Errorf("limits %+v, want none", l)
	}
}
