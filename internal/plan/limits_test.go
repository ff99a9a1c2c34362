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
