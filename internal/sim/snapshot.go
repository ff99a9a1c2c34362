package sim

import (
	"math"
	"time"

	"github.com/isched/isched/internal/plan"
	"github.com/isched/isched/internal/report"
)

// snapshot is the agent's report.Snapshot of the simulated cluster now.
// A dev partition outside its windows reads DOWN (its nodes are people's).
func (s *sim) snapshot() *report.Snapshot {
	snap := &report.Snapshot{Cluster: "sim", TakenMS: at(s.now).UnixMilli(), Partitions: make([]report.Partition, len(s.cl.parts))}
	for pi := range s.cl.parts {
		p, c := &s.cl.parts[pi], &s.pc[pi]
		state := "UP"
		if !s.partUp(pi) {
			state = "DOWN"
		}
		rp := report.Partition{Name: p.name, State: state, Default: p.spec.Default, NodesIdle: c.nodesIdle,
			NodesAlloc: len(p.nodes) - c.nodesIdle, NodesTotal: len(p.nodes),
			CPUsIdle: c.cpusIdle, CPUsAlloc: p.cpus - c.cpusIdle, CPUsTotal: p.cpus, PriorityTier: p.tier}
		if p.gpus > 0 {
			rp.GPUs = []report.GPUCount{{Type: "", Idle: c.gpusIdle, Alloc: p.gpus - c.gpusIdle, Total: p.gpus}}
		}
		if p.maxTime > 0 {
			m := int64(p.maxTime / 60)
			rp.MaxTimeMin = &m
		}
		if p.tier == 0 {
			rp.PreemptMode = "REQUEUE"
		}
		rp.Mixed = s.mixedRooms(pi)
		snap.Partitions[pi] = rp
	}
	snap.Limits = s.limits()
	return snap
}

// mixedRooms is what is free on partition pi's partly allocated nodes, as
// the agent reports it (internal/slurm mixedRooms; memory is not
// modelled).
func (s *sim) mixedRooms(pi int) []report.Room {
	var count map[report.Room]int
	for _, ni := range s.cl.parts[pi].nodes {
		n := &s.cl.nodes[ni]
		if len(n.jobs) == 0 || n.freeCPU <= 0 {
			continue
		}
		if count == nil {
			count = map[report.Room]int{}
		}
		r := report.Room{CPUs: n.freeCPU}
		if n.freeGPU > 0 {
			count[report.Room{GPUs: n.freeGPU, CPUs: n.freeCPU}]++
		}
		count[r]++
	}
	return report.SortRooms(count)
}

// limits are the limits in use as the agent reads them from accounting
// (slurm.BuildLimits): one association limit per user, partition and
// resource, then the accounts' GPU quotas (quotaRows).
func (s *sim) limits() []report.UserLimit {
	n := 2*len(s.use) + len(s.quotas)
	if n == 0 {
		return nil
	}
	out := make([]report.UserLimit, 0, n)
	for pi := range s.cl.parts {
		l := s.cl.parts[pi].spec.PerUser
		if l == nil {
			continue
		}
		for k, u := range s.use {
			if k.part != pi {
				continue
			}
			name := s.cl.parts[pi].name
			if l.MaxGPUs > 0 {
				out = append(out, report.UserLimit{User: k.user, Partition: name, Resource: report.LimitGPU, Max: int64(l.MaxGPUs), Used: int64(u.gpus), Reason: "AssocMaxGRESPerUser"})
			}
			if l.MaxCPUs > 0 {
				out = append(out, report.UserLimit{User: k.user, Partition: name, Resource: report.LimitCPU, Max: int64(l.MaxCPUs), Used: int64(u.cpus), Reason: "AssocMaxCpuPerUserLimit"})
			}
		}
	}
	for _, q := range s.quotas {
		l := q.row
		l.Used = int64(s.accts.running[q.acct])
		out = append(out, l)
	}
	return out
}

// quotaRow is an account's GPU quota as the snapshot publishes it for one
// of its users: row lacks only the account's use.
type quotaRow struct {
	acct int
	row  report.UserLimit
}

// quotaRows are the accounts' GrpTRES=gres/gpu limits (Sched.Quota) as
// the agent publishes an association's GrpTRES (slurm assocLimits): a row
// for each user of the account, on every partition, reason AssocGrpGRES.
// Its use (limits) is the GPUs the account's running jobs hold, what the
// scheduler holds its jobs by (accounts.held); on Philly, whose accounts
// have one user each, that is the user's own use too, the agent's figure.
// The EASY model enforces no quota: none then.
func quotaRows(a *accounts, sched Sched) []quotaRow {
	if !sched.Backfill {
		return nil
	}
	var out []quotaRow
	for k, q := range a.quota {
		if q <= 0 {
			continue
		}
		for _, user := range a.users[k] {
			// the replay's jobs name no account: each is charged to its
			// user's (a trace's user is in one account: Philly's virtual
			// cluster is both)
			out = append(out, quotaRow{k, report.UserLimit{User: user, Account: a.names[k], DefaultAccount: true, Resource: report.LimitGPU,
				Max: int64(q), Reason: "AssocGrpGRES"}})
		}
	}
	return out
}

// clusterState is what `isched submit` reads to estimate waits: the
// snapshot, the job table and the coordinator's predicted ends. Like the
// agent's, it is refreshed at most every Poll seconds.
func (s *sim) clusterState() plan.ClusterState {
	if s.now-s.csAt < s.cfg.Poll && s.cs.Snapshot != nil {
		return s.cs
	}
	s.csAt = s.now
	tbl := &report.JobTable{Cluster: "sim", TakenMS: at(s.now).UnixMilli()}
	ends := map[uint64]time.Time{}
	for _, i := range s.pending {
		if js := &s.jobs[i]; js.state == stPending {
			tbl.Jobs = append(tbl.Jobs, s.tableJob(js))
		}
	}
	for ni := range s.cl.nodes {
		for _, i := range s.cl.nodes[ni].jobs {
			js := &s.jobs[i]
			if js.alloc[0] != ni {
				continue // a multi-node job once
			}
			tbl.Jobs = append(tbl.Jobs, s.tableJob(js))
			if js.managed {
				if e, ok := s.predictedEnd(js); ok {
					ends[uint64(js.j.ID)+1] = e
				}
			}
		}
	}
	s.cs = plan.ClusterState{Snapshot: s.snapshot(), Jobs: tbl, PredictedEnd: ends}
	return s.cs
}

// tableJob is job js as squeue lists it: a pending job its account's
// GrpTRES holds with that reason, as Slurm shows it.
func (s *sim) tableJob(js *jobState) report.Job {
	id := uint64(js.j.ID) + 1
	if js.twinOf > 0 {
		id = twinJobID + uint64(js.twinOf) // its own job id
	}
	j := report.Job{JobID: id, User: js.j.User, Account: s.accts.names[js.acct], NodeCount: js.j.Nodes, CPUs: js.cpus * js.j.Nodes,
		Gres: gresOf(js.gpus), SubmitMS: at(js.order).UnixMilli()}
	if js.limit > 0 {
		lim := int64(js.limit / 60)
		j.TimeLimitMin = &lim
	}
	if js.state == stRunning {
		j.State, j.Partition, j.StartMS = "RUNNING", s.cl.parts[js.pi].name, at(js.start).UnixMilli()
		j.TimeLimitMin = nil
		if l := s.limitOf(js, js.pi); !math.IsInf(l, 1) {
			m := int64(l / 60)
			j.TimeLimitMin = &m
		}
	} else {
		j.State, j.Partition, j.Reason = "PENDING", s.partList(js), "Resources"
		if s.cfg.Sched.Backfill && s.accts.held(js.acct, js.gpus*js.j.Nodes) {
			j.Reason = "AssocGrpGRES" // as twinReason: the account's quota holds it
		}
	}
	return j
}
