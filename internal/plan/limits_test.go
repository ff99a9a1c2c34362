package plan

import (
	"strings"
	"testing"
	"time"

	"github.com/isched/isched/internal/report"
)

// TestWaitHeldByUserLimit is the use case's Table 1 scenario: cpu has
// idle CPUs, but bob is at his QOS limit. bob's two running capped jobs
// (1 CPU each) end at +20 and +45 min by their time limits; one under
// normal does not count against capped. The lab-cpu job needs 4 CPUs
// (NeedOf: a whole node), so capped's MaxTRESPerUser cpu=2 can never
// hold it; the table uses a 1-CPU need for bob's capped cases.
func TestWaitHeldByUserLimit(t *testing.T) {
	t.Parallel()
	site := mustSite(t, "../../examples/site-lab.json")
	bobJob := func(id uint64, qos string, cpus int, started time.Time, limitMin int64) report.Job {
		j := running(id, "cpu", "cpu1", cpus, "", started, limitMin)
		j.User, j.QOS = "bob", qos
		return j
	}
	jobs := &report.JobTable{Jobs: []report.Job{
		bobJob(1, "capped", 1, t0.Add(-40*time.Minute), 60), // ends +20 min
		bobJob(2, "capped", 1, t0.Add(-15*time.Minute), 60), // ends +45 min
		bobJob(3, "normal", 2, t0.Add(-15*time.Minute), 24*60),
	}}
	limits := []report.UserLimit{
		{User: "bob", QOS: "capped", Default: true, Resource: "cpu", Max: 2, Used: 2, Reason: "QOSMaxCpuPerUserLimit"},
		{User: "bob", QOS: "capped", Default: true, Resource: "jobs", Max: 3, Used: 2, Reason: "QOSMaxJobsPerUserLimit"},
		{User: "bob", Resource: "cpu", Max: 6, Used: 4, Reason: "AssocGrpCpuLimit"},
		{User: "alice", QOS: "capped", Resource: "cpu", Max: 2, Used: 2, Reason: "QOSMaxCpuPerUserLimit"},
	}
	snap := labSnapshot(8, 4)
	snap.Limits = limits
	state := ClusterState{Snapshot: snap, Jobs: jobs}
	one := func(user, qos string) Need { return Need{CPUs: 1, User: user, QOS: qos} }
	// as the agent lists them: a QOS's per-user limit once per
	// association of the user's (bob's research and physics), his jobs
	// charged to research
	acctJobs := &report.JobTable{}
	for _, j := range jobs.Jobs {
		j.Account = "research"
		acctJobs.Jobs = append(acctJobs.Jobs, j)
	}
	perAssoc := labSnapshot(8, 4)
	for _, acct := range []string{"research", "physics"} {
		l := limits[0]
		l.Account, l.DefaultAccount = acct, acct == "research"
		perAssoc.Limits = append(perAssoc.Limits, l)
	}
	tests := []struct {
		name   string
		state  ClusterState
		need   Need
		idle   bool
		known  bool
		wait   time.Duration
		heldBy string
		reason string
	}{
		// 2 + 1 > 2: held until job 1 ends at +20 min
		{"bob, default QOS capped: held by its CPU limit", state, one("bob", ""), false, true, 20 * time.Minute, "QOSMaxCpuPerUserLimit",
			"idle, but you are at your QOS capped limit of 2 CPUs (QOSMaxCpuPerUserLimit, 2 in use): your jobs free enough in 20 min"},
		// 2 CPUs more: both capped jobs must end, +45 min
		{"bob needs two: both capped jobs end", state, Need{CPUs: 2, User: "bob"}, false, true, 45 * time.Minute, "QOSMaxCpuPerUserLimit", "in 45 min"},
		// under normal the QOS limits do not apply; the association's 4 + 1 <= 6 fits
		{"bob under normal: idle", state, one("bob", "normal"), true, true, 0, "", "idle now"},
		// under normal with 3 CPUs: the association's 4 + 3 > 6 holds it
		// until 1 CPU is free: job 1's, at +20 min
		{"bob under normal, 3 CPUs: the association's limit", state, Need{CPUs: 3, User: "bob", QOS: "normal"}, false, true, 20 * time.Minute,
			"AssocGrpCpuLimit", "at your association's limit of 6 CPUs (AssocGrpCpuLimit, 4 in use)"},
		// alice's capped is not her default: a job naming no QOS is free
		{"alice, default QOS not capped", state, one("alice", ""), true, true, 0, "", "idle now"},
		{"no user: no limits", state, one("", ""), true, true, 0, "", "idle now"},
		// a whole lab-cpu node is 4 CPUs, over capped's 2 whatever bob runs
		{"more than the limit allows at all", state, Need{CPUs: 4, User: "bob"}, false, false, 0, "QOSMaxCpuPerUserLimit",
			"never under your QOS capped limit of 2 CPUs (QOSMaxCpuPerUserLimit): the job needs 4"},
		// physics's copy of capped's limit counts his research jobs too:
		// a QOS's per-user limit is the same in every account
		{"a QOS's limit listed per association", ClusterState{Snapshot: perAssoc, Jobs: acctJobs}, one("bob", ""), false, true, 20 * time.Minute,
			"QOSMaxCpuPerUserLimit", "your jobs free enough in 20 min"},
		{"held, and no job table to say when it frees", ClusterState{Snapshot: snap}, one("bob", ""), false, false, 0, "QOSMaxCpuPerUserLimit",
			"your jobs end is unknown"},
	}
	for _, tt := range tests {
		w := site.EstimateWait(tt.state, "cpu", tt.need, t0)
		if w.IdleNow != tt.idle || w.Known != tt.known || w.Wait != tt.wait || w.HeldBy != tt.heldBy || !strings.Contains(w.Reason, tt.reason) {
			t.Errorf("%s: idle %v known %v wait %s held by %q, reason %q\nwant idle %v known %v wait %s held by %q, reason with %q",
				tt.name, w.IdleNow, w.Known, w.Wait, w.HeldBy, w.Reason, tt.idle, tt.known, tt.wait, tt.heldBy, tt.reason)
		}
	}
}

// TestWaitHeldByAccountQuota: account ml's GrpTRES of 3 GPUs (reason
// AssocGrpGRES, published once per user of the account with the account's
// use) holds a GPU job however idle gpu is, until the account's own jobs
// free enough: alice's 2 GPUs at +30 min and bob's 1 at +60 by their time
// limits, alice's 2-GPU job pending ahead taking the first 2. Her job in
// account other ends at +10 min and frees nothing of ml's quota.
func TestWaitHeldByAccountQuota(t *testing.T) {
	t.Parallel()
	site := mustSite(t, "../../examples/site-lab.json")
	job := func(id uint64, user, account, state, gres string, started time.Time, limitMin int64) report.Job {
		j := running(id, "gpu", "gpu1", 2, gres, started, limitMin)
		j.User, j.Account, j.State = user, account, state
		if state == "PENDING" {
			j.Reason, j.StartMS, j.Nodes = "AssocGrpGRES", 0, ""
		}
		return j
	}
	jobs := &report.JobTable{Jobs: []report.Job{
		job(1, "alice", "ml", "RUNNING", "gpu:2", t0.Add(-30*time.Minute), 60), // ends +30 min
		job(2, "bob", "ml", "RUNNING", "gpu:1", t0, 60),                        // ends +60 min
		job(3, "alice", "ml", "PENDING", "gpu:2", t0.Add(-5*time.Minute), 120),
		job(4, "alice", "other", "RUNNING", "gpu:1", t0.Add(-50*time.Minute), 60), // ends +10 min
		job(5, "carol", "cv", "RUNNING", "gpu:1", t0.Add(-15*time.Minute), 60),    // ends +45 min
	}}
	quota := func(user, account string, max, used int64) report.UserLimit {
		// each user's default account (the needs below name none)
		return report.UserLimit{User: user, Account: account, DefaultAccount: true, Resource: report.LimitGPU, Max: max, Used: used, Reason: "AssocGrpGRES"}
	}
	perUser := report.UserLimit{User: "alice", Partition: "gpu", Resource: report.LimitGPU, Max: 3, Used: 3, Reason: "AssocMaxGRESPerUser"}
	capped := report.UserLimit{User: "alice", QOS: "capped", Default: true, Resource: report.LimitGPU, Max: 1, Used: 1, Reason: "QOSMaxGRESPerUser"}
	state := func(gpuIdle int, lims ...report.UserLimit) ClusterState {
		snap := labSnapshot(8, gpuIdle)
		snap.Limits = lims
		return ClusterState{Snapshot: snap, Jobs: jobs}
	}
	gpu := func(user string, n int) Need { return Need{CPUs: 2, GPUs: n, User: user} }
	ml := []report.UserLimit{quota("alice", "ml", 3, 3), quota("bob", "ml", 3, 3), quota("carol", "cv", 1, 1)}
	tests := []struct {
		name   string
		state  ClusterState
		part   string
		need   Need
		idle   bool
		known  bool
		wait   time.Duration
		heldBy string
		reason string
	}{
		// alice's own jobs hold 2 of ml's 3: the quota is the account's;
		// +30 min: job 3 takes alice's 2, +60: bob's 1 is hers
		{"alice: the account's jobs, and hers pending ahead", state(4, ml...), "gpu", gpu("alice", 1), false, true, 60 * time.Minute, "AssocGrpGRES",
			"idle, but you are at your association's limit of 3 GPUs (AssocGrpGRES, 3 in use): your account's jobs free enough in 1.0 h"},
		// bob's job is behind alice's pending one too: +60 min
		{"bob: the same quota", state(4, ml...), "gpu", gpu("bob", 1), false, true, 60 * time.Minute, "AssocGrpGRES", "account's jobs free enough in 1.0 h"},
		// carol's own job fills cv's quota: it frees at +45 min
		{"carol: her own job fills her account's quota", state(4, ml...), "gpu", gpu("carol", 1), false, true, 45 * time.Minute, "AssocGrpGRES", "(AssocGrpGRES, 1 in use): your jobs free enough in 45 min"},
		// a CPU job adds no GPU: the quota does not hold it
		// charged to her other account: ml's quota does not hold it
		{"another account's quota", state(4, ml...), "gpu", Need{CPUs: 2, GPUs: 1, User: "alice", Account: "other"}, true, true, 0, "", "idle now"},
		{"a CPU job is not held by a GPU quota", state(4, ml...), "cpu", Need{CPUs: 4, User: "alice"}, true, true, 0, "", "idle now"},
		{"under the quota: idle", state(4, quota("alice", "ml", 8, 3)), "gpu", gpu("alice", 1), true, true, 0, "", "idle now"},
		// the per-partition limit frees at +30 min, the quota at +60: the
		// quota decides, whichever is listed first
		{"two limits hold it: the later frees", state(4, perUser, quota("alice", "ml", 3, 3), quota("bob", "ml", 3, 3)), "gpu", gpu("alice", 1),
			false, true, 60 * time.Minute, "AssocGrpGRES", "AssocGrpGRES, 3 in use"},
		// gpu busy: job 4's GPU at +10 min would do, but the quota waits
		// for +60
		{"busy partition frees first: the quota decides", state(0, ml...), "gpu", gpu("alice", 1), false, true, 60 * time.Minute, "AssocGrpGRES",
			"busy, but you are at your association's limit"},
		// a QOS limit none of whose jobs is in the table: when it frees is
		// unknown, later than any known time
		{"an unknown end beats a known one", state(4, quota("alice", "ml", 3, 3), quota("bob", "ml", 3, 3), capped), "gpu", gpu("alice", 1),
			false, false, 0, "QOSMaxGRESPerUser", "at your QOS capped limit of 1 GPUs (QOSMaxGRESPerUser, 1 in use): when your jobs end is unknown"},
		{"more than the quota at all", state(4, ml...), "gpu", gpu("alice", 4), false, false, 0, "AssocGrpGRES",
			"never under your association's limit of 3 GPUs (AssocGrpGRES): the job needs 4"},
	}
	for _, tt := range tests {
		w := site.EstimateWait(tt.state, tt.part, tt.need, t0)
		if w.IdleNow != tt.idle || w.Known != tt.known || w.Wait != tt.wait || w.HeldBy != tt.heldBy || !strings.Contains(w.Reason, tt.reason) {
			t.Errorf("%s: idle %v known %v wait %s held by %q, reason %q\nwant idle %v known %v wait %s held by %q, reason with %q",
				tt.name, w.IdleNow, w.Known, w.Wait, w.HeldBy, w.Reason, tt.idle, tt.known, tt.wait, tt.heldBy, tt.reason)
		}
	}
}
