package policy

import (
	"strings"
	"testing"
	"time"

	"github.com/isched/isched/internal/estimate"
	"github.com/isched/isched/internal/lifecycle"
	"github.com/isched/isched/internal/report"
)

var now = time.Date(2025, 3, 1, 14, 0, 0, 0, time.UTC)

func minutes(m int64) *int64 { return &m }

// lab is the dev cluster's partitions, everything idle; mods change it.
func lab(mods ...func(map[string]*report.Partition)) *report.Snapshot {
	s := &report.Snapshot{Cluster: "lab", TakenMS: now.UnixMilli(), Partitions: []report.Partition{
		{Name: "dev", State: "UP", NodesIdle: 1, NodesTotal: 1, CPUsIdle: 2, CPUsTotal: 2, GPUs: []report.GPUCount{}, MaxTimeMin: minutes(120)},
		{Name: "gpu-dev", State: "UP", NodesIdle: 1, NodesTotal: 1, CPUsIdle: 4, CPUsTotal: 4,
			GPUs: []report.GPUCount{{Idle: 1, Total: 1}}, MaxTimeMin: minutes(120)},
		{Name: "cpu", State: "UP", Default: true, NodesIdle: 2, NodesTotal: 2, CPUsIdle: 8, CPUsTotal: 8, GPUs: []report.GPUCount{}, MaxTimeMin: minutes(2880)},
		{Name: "gpu", State: "UP", NodesIdle: 2, NodesTotal: 2, CPUsIdle: 8, CPUsTotal: 8,
			GPUs: []report.GPUCount{{Idle: 4, Total: 4}}, MaxTimeMin: minutes(2880)},
		{Name: "scavenger", State: "UP", NodesIdle: 4, NodesTotal: 4, CPUsIdle: 16, CPUsTotal: 16,
			GPUs: []report.GPUCount{{Idle: 4, Total: 4}}, MaxTimeMin: minutes(1440), PreemptMode: "REQUEUE"},
	}}
	m := map[string]*report.Partition{}
	for i := range s.Partitions {
		m[s.Partitions[i].Name] = &s.Partitions[i]
	}
	for _, f := range mods {
		f(m)
	}
	return s
}

// withLimits adds per-user limits to a snapshot.
func withLimits(s *report.Snapshot, lims ...report.UserLimit) *report.Snapshot {
	s.Limits = lims
	return s
}

// full marks partitions as fully allocated.
func full(names ...string) func(map[string]*report.Partition) {
	return func(m map[string]*report.Partition) {
		for _, n := range names {
			p := m[n]
			p.NodesAlloc, p.NodesIdle, p.CPUsAlloc, p.CPUsIdle = p.NodesTotal, 0, p.CPUsTotal, 0
			for i := range p.GPUs {
				p.GPUs[i].Alloc, p.GPUs[i].Idle = p.GPUs[i].Total, 0
			}
		}
	}
}

// labCfg is the defaults plus the lab's partitions (examples/coordinator-lab.json).
func labCfg() Config {
	c := DefaultConfig()
	c.Speed = map[string]float64{"gpu": 8, "gpu-dev": 8, "cpu": 1, "dev": 1, "scavenger": 1}
	c.DevPartitions = []string{"dev", "gpu-dev"}
	return c
}

var steady = estimate.IterEstimate{MS: 100, LowMS: 90, HighMS: 120, N: 500}

// gpuPlan: ideal gpu with one GPU, may start on cpu or gpu-dev, migration allowed.
func gpuPlan() *report.Plan {
	return &report.Plan{Lineage: "l1", Ideal: "gpu", IdealGres: "gpu:1", Fallbacks: []string{"cpu", "gpu-dev"}, Total: 100000, Migrate: true}
}

// cpuPlan: ideal cpu, may use dev chunks.
func cpuPlan() *report.Plan {
	return &report.Plan{Lineage: "l2", Ideal: "cpu", Fallbacks: []string{"dev"}, Total: 100000, Migrate: true}
}

// onGPU is a job running on its ideal partition with a 2 h limit whose
// checkpoint deadline (limit − 20 s checkpoint − 60 s margin) is now:
// 60 000 steps left × 120 ms at worst = 2 h, far past the limit.
func onGPU() Job {
	return Job{
		JobID: 42, User: "alice", Lineage: "l1", State: StateRunning, Partition: "gpu", Gres: "gpu:1", Plan: gpuPlan(),
		StartedAt: now.Add(-2*time.Hour + 80*time.Second), TimeLimit: 2 * time.Hour,
		Step: 40000, Total: 100000, Iter: steady, HaveIter: true, CkptDur: 20 * time.Second,
		LastCkptStep: 35000, LastCkptAt: now.Add(-10 * time.Minute),
	}
}

// onCPU is a GPU-plan job running on its cpu fallback (8× slower), early
// in a 48 h allocation.
func onCPU() Job {
	return Job{
		JobID: 43, User: "alice", Lineage: "l1", State: StateRunning, Partition: "cpu", Plan: gpuPlan(),
		StartedAt: now.Add(-30 * time.Minute), TimeLimit: 48 * time.Hour,
		Step: 1000, Total: 100000, Iter: estimate.IterEstimate{MS: 800, LowMS: 750, HighMS: 900, N: 500}, HaveIter: true,
		CkptDur: 20 * time.Second,
	}
}

// pendingGPU is a GPU job waiting for the gpu partition.
func pendingGPU() Job {
	return Job{
		JobID: 44, User: "bob", Lineage: "l3", State: StatePending, Partition: "gpu", Gres: "gpu:1", PendingReason: "Resources",
		Plan: gpuPlan(), PendingSince: now.Add(-5 * time.Minute), CkptDur: 20 * time.Second,
	}
}

type check struct {
	want   Decision // Reason ignored
	reason []string // substrings of Reason
}

func (c check) verify(t *testing.T, got Decision) {
	t.Helper()
	r := got.Reason
	got.Reason = ""
	if got != c.want {
		t.Errorf("decision\n got %+v\nwant %+v\nreason: %s", got, c.want, r)
	}
	for _, s := range c.reason {
		if !strings.Contains(r, s) {
			t.Errorf("reason %q\ndoes not contain %q", r, s)
		}
	}
	if r == "" {
		t.Error("empty reason")
	}
}

func TestDecideTimeLimit(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		cfg  func(*Config)
		job  func(*Job)
		snap *report.Snapshot
		now  time.Time
		check
	}{
		{
			name: "finishes before the limit",
			job:  func(j *Job) { j.Step = 99000 }, // 1000 × 120 ms = 2 min at worst, limit in 80 s... so give it time:
			now:  now.Add(-10 * time.Minute),
			check: check{want: Decision{Kind: None}, reason: []string{
				"time limit: predicted end 13:51:40 (at worst 13:52:00; 1000 of 100000 iterations left at 100.0 ms each) is before the time limit 14:01:20 less the margin 1m",
				"migration: on its ideal partition gpu"}},
		},
		{
			name: "not due yet",
			now:  now.Add(-time.Minute),
			check: check{want: Decision{Kind: None}, reason: []string{
				"predicted end 15:39:00 (at worst 15:59:00", "time limit 14:01:20: will checkpoint at 14:00:00 (limit − checkpoint 20s − margin 1m)"}},
		},
		{
			name: "due: checkpoint then requeue on the same partition",
			check: check{want: Decision{Kind: Checkpoint, Rule: RuleTimeLimit, Then: Requeue, Target: "gpu", TimeLimit: 2*time.Hour + 2*time.Minute},
				reason: []string{
					"predicted end 15:40:00 (at worst 16:00:00; 60000 of 100000 iterations left at 100.0 ms each)",
					"the time limit is 14:01:20 (2h from 12:01:20); a checkpoint takes ~20s and the margin is 1m, so checkpointing now",
					"then requeue onto the same partition gpu, time limit 2h2m (60000 iterations at worst 120.0 ms each there, plus restart 15s, checkpoint 20s and margin 1m)"}},
		},
		{
			name: "unknown total: checkpoint as insurance",
			job:  func(j *Job) { j.Total, j.Plan.Total = 0, 0 },
			check: check{want: Decision{Kind: Checkpoint, Rule: RuleTimeLimit, Then: Requeue, Target: "gpu"},
				reason: []string{"end unknown (total iterations unknown)", "as insurance", "time limit unchanged (remaining work unknown)"}},
		},
		{
			name: "unknown total uses the plan's time on the way back to ideal",
			job: func(j *Job) {
				j.Total, j.Plan.Total, j.Plan.IdealTime = 0, 0, 240
				j.Partition, j.Gres = "gpu-dev", "gpu:1"
			},
			check: check{want: Decision{Kind: Checkpoint, Rule: RuleTimeLimit, Then: Requeue, Target: "gpu", Gres: "gpu:1", TimeLimit: 4 * time.Hour},
				reason: []string{"its ideal partition gpu (end of a dev chunk) with gres gpu:1, the plan's time limit 4h"}},
		},
		{
			name: "a 1-minute allocation still starting up: no request before its first step",
			job: func(j *Job) {
				j.StartedAt, j.TimeLimit, j.NoStepYet, j.HaveIter = now.Add(-10*time.Second), time.Minute, true, false
			},
			check: check{want: Decision{Kind: None}, reason: []string{
				"this attempt has reported no step yet; no checkpoint request before its first step (or 14:00:20, half its time limit)"}},
		},
		{
			name: "no step yet but half its time limit gone: insurance",
			job: func(j *Job) {
				j.StartedAt, j.TimeLimit, j.NoStepYet, j.HaveIter = now.Add(-31*time.Second), time.Minute, true, false
			},
			check: check{want: Decision{Kind: Checkpoint, Rule: RuleTimeLimit, Then: Requeue, Target: "gpu"},
				reason: []string{"as insurance"}},
		},
		{
			name: "no estimate yet counts as unknown",
			job:  func(j *Job) { j.HaveIter = false },
			check: check{want: Decision{Kind: Checkpoint, Rule: RuleTimeLimit, Then: Requeue, Target: "gpu"},
				reason: []string{"end unknown (no iteration time estimate yet)"}},
		},
		{
			name: "late checkpoint still requested",
			now:  now.Add(70 * time.Second),
			check: check{want: Decision{Kind: Checkpoint, Rule: RuleTimeLimit, Then: Requeue, Target: "gpu", TimeLimit: 2*time.Hour + 2*time.Minute},
				reason: []string{"(late: 10s before the limit, it may not land in time)"}},
		},
		{
			name:  "past the limit",
			now:   now.Add(81 * time.Second),
			check: check{want: Decision{Kind: None}, reason: []string{"past its time limit 14:01:20"}},
		},
		{
			name:  "limit unknown",
			job:   func(j *Job) { j.TimeLimit = 0 },
			check: check{want: Decision{Kind: None}, reason: []string{"time limit: time limit unknown"}},
		},
		{
			name: "end of a dev chunk: back to the ideal partition, never with GRES for a CPU plan",
			job: func(j *Job) {
				j.Partition, j.Gres, j.Plan = "dev", "", cpuPlan()
			},
			snap: lab(full("cpu")),
			check: check{want: Decision{Kind: Checkpoint, Rule: RuleTimeLimit, Then: Requeue, Target: "cpu", TimeLimit: 2*time.Hour + 2*time.Minute},
				reason: []string{"then requeue onto its ideal partition cpu (end of a dev chunk), time limit 2h2m"}},
		},
		{
			name: "on a cpu fallback while gpu is full: continue on cpu",
			job: func(j *Job) {
				j.Partition, j.Gres = "cpu", ""
				j.Iter = estimate.IterEstimate{MS: 800, HighMS: 900}
			},
			snap: lab(full("gpu")),
			check: check{want: Decision{Kind: Checkpoint, Rule: RuleTimeLimit, Then: Requeue, Target: "cpu", TimeLimit: 15*time.Hour + 2*time.Minute},
				reason: []string{"then requeue onto the same partition cpu, time limit 15h2m (60000 iterations at worst 900.0 ms each there"}},
		},
		{
			name: "on a cpu fallback while gpu has room: requeue onto gpu with its GPU",
			job: func(j *Job) {
				j.Partition, j.Gres = "cpu", ""
				j.Iter = estimate.IterEstimate{MS: 800, HighMS: 900}
			},
			// 60000 × 900 ms / 8 = 1h52m30s, + 1m35s = 1h54m5s → 1h55m
			check: check{want: Decision{Kind: Checkpoint, Rule: RuleTimeLimit, Then: Requeue, Target: "gpu", Gres: "gpu:1", TimeLimit: time.Hour + 55*time.Minute},
				reason: []string{"its ideal partition gpu (gpu has 2 idle node(s) and 4 of 4 GPUs idle) with gres gpu:1, time limit 1h55m (60000 iterations at worst 112.5 ms each there"}},
		},
		{
			name: "plan without migration continues on its partition",
			job: func(j *Job) {
				j.Partition, j.Gres = "cpu", ""
				j.Plan.Migrate = false
			},
			check: check{want: Decision{Kind: Checkpoint, Rule: RuleTimeLimit, Then: Requeue, Target: "cpu", TimeLimit: 2*time.Hour + 2*time.Minute},
				reason: []string{"the same partition cpu"}},
		},
		{
			name:  "the rest is capped at the partition's MaxTime",
			job:   func(j *Job) { j.Total = 10_000_000 },
			check: check{want: Decision{Kind: Checkpoint, Rule: RuleTimeLimit, Then: Requeue, Target: "gpu", TimeLimit: 48 * time.Hour}, reason: []string{"time limit 48h (the partition's maximum; the rest needs 332h"}},
		},
		{
			name:  "no plan: checkpoint, no requeue",
			job:   func(j *Job) { j.Plan = nil },
			check: check{want: Decision{Kind: Checkpoint, Rule: RuleTimeLimit, Then: None}, reason: []string{"then nothing: no isched plan"}},
		},
		{
			name: "continuations exhausted",
			job:  func(j *Job) { j.Continuations = 20 },
			check: check{want: Decision{Kind: Checkpoint, Rule: RuleTimeLimit, Then: None},
				reason: []string{"already continued 20 times (max 20): not requeued again (does the script resume from ISCHED_RESUME_FROM?)"}},
		},
		{
			name: "stale snapshot: the checkpoint still fires",
			snap: nil,
			check: check{want: Decision{Kind: Checkpoint, Rule: RuleTimeLimit, Then: Requeue, Target: "gpu", TimeLimit: 2*time.Hour + 2*time.Minute},
				reason: []string{"checkpointing now"}},
		},
		{
			name: "extend early instead (10% headroom + margin)",
			cfg:  func(c *Config) { c.AllowExtend = true },
			job:  func(j *Job) { j.StartedAt = now.Add(-time.Hour) },
			// 1 h run + 2 h × 1.1 + 1 m = 3h13m
			check: check{want: Decision{Kind: Extend, Rule: RuleTimeLimit, TimeLimit: 3*time.Hour + 13*time.Minute},
				reason: []string{"extending the limit from 2h to 3h13m"}},
		},
		{
			name: "extend capped at MaxTime",
			cfg:  func(c *Config) { c.AllowExtend = true },
			job: func(j *Job) {
				j.Partition, j.StartedAt, j.Total = "scavenger", now.Add(-time.Hour), 10_000_000
			},
			check: check{want: Decision{Kind: Extend, Rule: RuleTimeLimit, TimeLimit: 24 * time.Hour},
				reason: []string{"to 24h (the partition's maximum; the run needs"}},
		},
		{
			name:  "extend refused before: checkpoint at the deadline",
			cfg:   func(c *Config) { c.AllowExtend = true },
			job:   func(j *Job) { j.NoExtend = true },
			check: check{want: Decision{Kind: Checkpoint, Rule: RuleTimeLimit, Then: Requeue, Target: "gpu", TimeLimit: 2*time.Hour + 2*time.Minute}},
		},
		{
			name: "no extension at the deadline: a checkpoint is safer",
			cfg:  func(c *Config) { c.AllowExtend = true },
			check: check{want: Decision{Kind: Checkpoint, Rule: RuleTimeLimit, Then: Requeue, Target: "gpu", TimeLimit: 2*time.Hour + 2*time.Minute},
				reason: []string{"checkpointing now"}},
		},
		{
			name: "already at MaxTime: nothing to extend",
			cfg:  func(c *Config) { c.AllowExtend = true },
			job: func(j *Job) {
				j.TimeLimit = 48 * time.Hour
				j.StartedAt = now.Add(-48*time.Hour + 80*time.Second)
			},
			check: check{want: Decision{Kind: Checkpoint, Rule: RuleTimeLimit, Then: Requeue, Target: "gpu", TimeLimit: 2*time.Hour + 2*time.Minute}},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			cfg := labCfg()
			if tc.cfg != nil {
				tc.cfg(&cfg)
			}
			j := onGPU()
			if tc.job != nil {
				tc.job(&j)
			}
			snap := tc.snap
			if snap == nil && !strings.Contains(tc.name, "stale") {
				snap = lab()
			}
			at := tc.now
			if at.IsZero() {
				at = now
			}
			tc.verify(t, Decide(cfg, j, snap, at))
		})
	}
}

func TestDecideMigrate(t *testing.T) {
	t.Parallel()
	// onCPU: 99 000 steps × 800 ms = 22 h left on cpu, 2h45m on gpu: saves 19h15m.
	const ckptThenGPU = "checkpointing, then requeue onto gpu with gres gpu:1, time limit 3h8m"
	migrate := Decision{Kind: Checkpoint, Rule: RuleMigrate, Then: Requeue, Target: "gpu", Gres: "gpu:1", TimeLimit: 3*time.Hour + 8*time.Minute}
	tests := []struct {
		name string
		cfg  func(*Config)
		job  func(*Job)
		snap *report.Snapshot
		check
	}{
		{
			name: "cpu until gpu: gpu has room",
			check: check{want: migrate, reason: []string{
				"migrate: gpu has 2 idle node(s) and 4 of 4 GPUs idle; on cpu (speed 1) vs gpu (speed 8) 99000 iterations left take ~22h here, saving 19h15m > 1.5 × the cost 35s (restart 15s + checkpoint 20s)",
				ckptThenGPU}},
		},
		{
			name:  "gpu full",
			snap:  lab(full("gpu")),
			check: check{want: Decision{Kind: None}, reason: []string{"migration: no room on the ideal partition: gpu has no idle node (2 of 2 allocated)"}},
		},
		{
			name: "idle node but not enough GPUs",
			job:  func(j *Job) { j.Plan.IdealGres = "gpu:2" },
			snap: lab(func(m map[string]*report.Partition) {
				m["gpu"].NodesIdle, m["gpu"].NodesAlloc = 1, 1
				m["gpu"].GPUs[0].Idle, m["gpu"].GPUs[0].Alloc = 1, 3
			}),
			check: check{want: Decision{Kind: None}, reason: []string{"gpu has 1 of 4 GPUs idle, the job needs 2"}},
		},
		{
			// issue 27: gpu has room, but alice's QOS allows her 2 GPUs and
			// her other jobs hold both: the requeued job would pend
			// (QOSMaxGRESPerUser) instead of running on cpu
			name: "gpu has room, but the owner is at her GPU limit",
			job:  func(j *Job) { j.QOS = "gpuq" },
			snap: withLimits(lab(), report.UserLimit{User: "alice", QOS: "gpuq", Resource: "gpu", Max: 2, Used: 2, Reason: "QOSMaxGRESPerUser"}),
			check: check{want: Decision{Kind: None}, reason: []string{
				"gpu has room, but alice's QOS gpuq limit of 2 gpu (QOSMaxGRESPerUser, 2 in use) would hold it pending there"}},
		},
		{
			// the plan's CPUs per task on gpu go with the move: the job
			// asked for a whole cpu node's
			name:  "cpu until gpu: with the plan's CPUs there",
			job:   func(j *Job) { j.CPUs, j.Plan.IdealCPUs = 4, 2 },
			check: check{want: func() Decision { d := migrate; d.CPUs = 2; return d }(), reason: []string{ckptThenGPU}},
		},
		{
			// no idle node, but a node one job half fills has a GPU and
			// the plan's 2 CPUs free (issue 29's lab replay)
			name: "gpu full but for a partly used node with room",
			job:  func(j *Job) { j.CPUs, j.Plan.IdealCPUs = 4, 2 },
			snap: lab(full("gpu"), func(m map[string]*report.Partition) {
				m["gpu"].Mixed = []report.Room{{GPUs: 1, CPUs: 2, MemMiB: 7000, Nodes: 1}}
			}),
			check: check{want: func() Decision { d := migrate; d.CPUs = 2; return d }(), reason: []string{
				"gpu has no idle node for it, but 1 partly used node(s) with 1 GPU, 2 CPUs, 6.8 GiB free"}},
		},
		{
			// one GPU left of her 2: the move fits; another user's limit,
			// another QOS's and a CPU limit (a requeue keeps the job's CPUs)
			// do not bind
			name: "the owner's limits leave room: migrate",
			job:  func(j *Job) { j.QOS, j.CPUs = "gpuq", 4 },
			snap: withLimits(lab(),
				report.UserLimit{User: "alice", QOS: "gpuq", Resource: "gpu", Max: 2, Used: 1, Reason: "QOSMaxGRESPerUser"},
				report.UserLimit{User: "alice", QOS: "gpuq", Resource: "cpu", Max: 4, Used: 4, Reason: "QOSMaxCpuPerUserLimit"},
				report.UserLimit{User: "bob", QOS: "gpuq", Resource: "gpu", Max: 1, Used: 1, Reason: "QOSMaxGRESPerUser"},
				report.UserLimit{User: "alice", QOS: "other", Resource: "gpu", Max: 1, Used: 1, Reason: "QOSMaxGRESPerUser"}),
			check: check{want: migrate},
		},
		{
			// the job's QOS unknown: the user's default QOS binds; the
			// association's GPU limit binds every QOS
			name: "the association's GPU limit binds",
			snap: withLimits(lab(), report.UserLimit{User: "alice", Resource: "gpu", Max: 1, Used: 1, Reason: "AssocGrpGRES"}),
			check: check{want: Decision{Kind: None}, reason: []string{
				"alice's association limit of 1 gpu (AssocGrpGRES, 1 in use) would hold it pending there"}},
		},
		{
			name: "typed GPUs are matched by type",
			job:  func(j *Job) { j.Plan.IdealGres = "gpu:a100:1" },
			snap: lab(func(m map[string]*report.Partition) {
				m["gpu"].GPUs = []report.GPUCount{{Type: "a100", Idle: 0, Alloc: 2, Total: 2}, {Type: "v100", Idle: 2, Total: 2}}
			}),
			check: check{want: Decision{Kind: None}, reason: []string{"gpu has 0 of 2 a100 GPUs idle, the job needs 1"}},
		},
		{
			name:  "ideal partition down",
			snap:  lab(func(m map[string]*report.Partition) { m["gpu"].State = "DOWN" }),
			check: check{want: Decision{Kind: None}, reason: []string{"partition gpu is DOWN"}},
		},
		{
			name: "no gain near the end",
			job:  func(j *Job) { j.Step = 99990 },
			check: check{want: Decision{Kind: None}, reason: []string{
				"10 iterations left take ~8s here, saving 7s, not more than 1.5 × the cost 35s"}},
		},
		{
			// 75 steps left save 75 × 800 ms × (1 - 1/8) = 52.5 s, exactly
			// 1.5 × the cost: a gain must exceed it
			name: "a gain equal to the bound is not enough",
			job:  func(j *Job) { j.Step = 99925 },
			check: check{want: Decision{Kind: None}, reason: []string{
				"75 iterations left take ~1m here, saving 53s, not more than 1.5 × the cost 35s"}},
		},
		{
			name:  "a gain just above the bound migrates",
			job:   func(j *Job) { j.Step = 99924 },
			check: check{want: func() Decision { d := migrate; d.TimeLimit = 2 * time.Minute; return d }()},
		},
		{
			name:  "hysteresis",
			job:   func(j *Job) { j.LastMoveAt = now.Add(-5 * time.Minute) },
			check: check{want: Decision{Kind: None}, reason: []string{"moved 5m ago, no migration within 10m of a move"}},
		},
		{
			name:  "hysteresis over",
			job:   func(j *Job) { j.LastMoveAt = now.Add(-11 * time.Minute) },
			check: check{want: migrate},
		},
		{
			name:  "hysteresis off",
			cfg:   func(c *Config) { c.MinInterval = -1 },
			job:   func(j *Job) { j.LastMoveAt = now.Add(-time.Second) },
			check: check{want: migrate},
		},
		{
			name:  "max moves",
			job:   func(j *Job) { j.Moves = 5 },
			check: check{want: Decision{Kind: None}, reason: []string{"already migrated 5 times (max 5)"}},
		},
		{
			name:  "attempts restarted behind their checkpoints",
			job:   func(j *Job) { j.ResumeFailures = MaxResumeFailures },
			check: check{want: Decision{Kind: None}, reason: []string{"2 attempts restarted behind the checkpoint", "a move would lose the work"}},
		},
		{
			name:  "plan forbids migration",
			job:   func(j *Job) { j.Plan.Migrate = false },
			check: check{want: Decision{Kind: None}, reason: []string{"the plan does not allow migration"}},
		},
		{
			name:  "no speeds configured: no gain",
			cfg:   func(c *Config) { c.Speed = nil },
			check: check{want: Decision{Kind: None}, reason: []string{"but gpu (speed 1) is not faster than cpu (speed 1)"}},
		},
		{
			name: "GPU to CPU is forbidden",
			job: func(j *Job) {
				j.Partition, j.Gres = "gpu-dev", "gpu:1"
				j.Plan = &report.Plan{Ideal: "cpu", Fallbacks: []string{"gpu-dev"}, Total: 100000, Migrate: true}
			},
			cfg:   func(c *Config) { c.Speed["cpu"] = 100 },
			check: check{want: Decision{Kind: None}, reason: []string{"the job holds GPUs (gpu:1) and cpu has none; a GPU request cannot be dropped"}},
		},
		{
			name: "a recent checkpoint: requeue at once",
			job: func(j *Job) {
				j.LastCkptStep, j.LastCkptAt = 990, now.Add(-8*time.Second) // 10 × 800 ms = 8 s < 20 s checkpoint
			},
			check: check{want: Decision{Kind: Requeue, Rule: RuleMigrate, Target: "gpu", Gres: "gpu:1", TimeLimit: 3*time.Hour + 8*time.Minute},
				reason: []string{"the cost 23s (restart 15s + redoing 10 iterations since the last checkpoint, 8s)", "requeueing now onto gpu with gres gpu:1"}},
		},
		{
			name: "an old checkpoint: a fresh one is cheaper",
			job: func(j *Job) {
				j.LastCkptStep, j.LastCkptAt = 500, now.Add(-7*time.Minute)
			},
			check: check{want: migrate, reason: []string{"the cost 35s (restart 15s + checkpoint 20s)"}},
		},
		{
			name: "unknown total, long run so far: migrate",
			job:  func(j *Job) { j.Total, j.Plan.Total, j.StartedAt = 0, 0, now.Add(-2*time.Hour) },
			check: check{want: Decision{Kind: Checkpoint, Rule: RuleMigrate, Then: Requeue, Target: "gpu", Gres: "gpu:1"},
				reason: []string{"remaining time unknown (total iterations unknown), taken to be as long as it has run so far, 2h, saving 1h45m", "time limit unchanged"}},
		},
		{
			name: "unknown total, just started: wait",
			job:  func(j *Job) { j.Total, j.Plan.Total, j.StartedAt = 0, 0, now.Add(-50*time.Second) },
			check: check{want: Decision{Kind: None}, reason: []string{
				"taken to be as long as it has run so far, 50s, saving 44s, not more than 1.5 × the cost 35s"}},
		},
		{
			name:  "provisional estimate counts as unknown",
			job:   func(j *Job) { j.Iter.Provisional = true; j.StartedAt = now.Add(-50 * time.Second) },
			check: check{want: Decision{Kind: None}, reason: []string{"remaining time unknown (iteration time still provisional)"}},
		},
		{
			name:  "stale snapshot",
			snap:  nil,
			check: check{want: Decision{Kind: None}, reason: []string{"migration: no fresh cluster snapshot"}},
		},
		{
			name: "learned: gpu no faster for this model",
			cfg: func(c *Config) {
				c.Learned = LearnedSpeeds{"m:sgd:fp32": {"cpu": {Speed: 2, Prior: 1, N: 4}, "gpu": {Speed: 2, Prior: 8, N: 4}}}
			},
			job: func(j *Job) { j.Plan.Model = "m:sgd:fp32" },
			check: check{want: Decision{Kind: None}, reason: []string{
				"but gpu (speed 2 learned from 4 measurement(s), prior 8) is not faster than cpu (speed 2 learned from 4 measurement(s), prior 1)"}},
		},
		{
			name: "learned: gpu 4x, the time limit follows",
			cfg: func(c *Config) {
				c.Learned = LearnedSpeeds{"m:sgd:fp32": {"cpu": {Speed: 1, Prior: 1, N: 9}, "gpu": {Speed: 4, Prior: 8, N: 9}}}
			},
			job: func(j *Job) { j.Plan.Model = "m:sgd:fp32" },
			check: check{want: Decision{Kind: Checkpoint, Rule: RuleMigrate, Then: Requeue, Target: "gpu", Gres: "gpu:1", TimeLimit: 6*time.Hour + 13*time.Minute},
				reason: []string{"vs gpu (speed 4 learned from 9 measurement(s), prior 8)", "saving 16h30m"}},
		},
		{
			name: "learned for another model: the configured speeds",
			cfg: func(c *Config) {
				c.Learned = LearnedSpeeds{"other:sgd:fp32": {"cpu": {Speed: 1, Prior: 1, N: 9}, "gpu": {Speed: 1, Prior: 8, N: 9}}}
			},
			job:   func(j *Job) { j.Plan.Model = "m:sgd:fp32" },
			check: check{want: migrate, reason: []string{"on cpu (speed 1) vs gpu (speed 8)"}},
		},
		{
			name: "from scavenger with GPUs to gpu",
			job:  func(j *Job) { j.Partition, j.Gres = "scavenger", "gpu:1"; j.Plan.Fallbacks = []string{"scavenger"} },
			check: check{want: Decision{Kind: Checkpoint, Rule: RuleMigrate, Then: Requeue, Target: "gpu", Gres: "gpu:1", TimeLimit: 3*time.Hour + 8*time.Minute},
				reason: []string{"on scavenger (speed 1) vs gpu (speed 8)"}},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			cfg := labCfg()
			if tc.cfg != nil {
				tc.cfg(&cfg)
			}
			j := onCPU()
			if tc.job != nil {
				tc.job(&j)
			}
			snap := tc.snap
			if snap == nil && !strings.Contains(tc.name, "stale") {
				snap = lab()
			}
			tc.verify(t, Decide(cfg, j, snap, now))
		})
	}
}

func TestDecideDevChunk(t *testing.T) {
	t.Parallel()
	night := time.Date(2025, 3, 1, 22, 0, 0, 0, time.UTC)
	nightly := func(c *Config) { w, _ := ParseWindow("18:00-08:00"); c.DevWindows = []Window{w} }
	tests := []struct {
		name string
		cfg  func(*Config)
		job  func(*Job)
		snap *report.Snapshot
		now  time.Time
		check
	}{
		{
			name: "GPU job waiting for gpu: a chunk on gpu-dev",
			snap: lab(full("gpu")),
			check: check{want: Decision{Kind: MovePending, Rule: RuleDevChunk, Target: "gpu-dev", TimeLimit: 2 * time.Hour}, reason: []string{
				"dev chunk: pending on gpu for 5m (Resources); gpu-dev has 1 idle node(s) and 1 of 1 GPUs idle: moving it to gpu-dev with time limit 2h (the partition's maximum); a checkpoint and a requeue back onto gpu will follow before the limit"}},
		},
		{
			name: "GPU plan pending on cpu gets its GPU on gpu-dev",
			job:  func(j *Job) { j.Partition, j.Gres = "cpu", "" },
			snap: lab(full("gpu", "cpu")),
			check: check{want: Decision{Kind: MovePending, Rule: RuleDevChunk, Target: "gpu-dev", Gres: "gpu:1", TimeLimit: 2 * time.Hour},
				reason: []string{"moving it to gpu-dev with gres gpu:1"}},
		},
		{
			name: "CPU plan: a chunk on dev, no GRES",
			job: func(j *Job) {
				j.Partition, j.Gres, j.Plan = "cpu", "", cpuPlan()
			},
			snap:  lab(full("cpu")),
			check: check{want: Decision{Kind: MovePending, Rule: RuleDevChunk, Target: "dev", TimeLimit: 2 * time.Hour}},
		},
		{
			name: "a GPU job never goes to a CPU-only dev partition",
			job:  func(j *Job) { j.Plan.Fallbacks = []string{"dev"} },
			snap: lab(full("gpu")),
			check: check{want: Decision{Kind: None}, reason: []string{
				"dev chunk: the job holds GPUs (gpu:1) and dev has none"}},
		},
		{
			name: "the rest fits in one chunk: time limit = needed",
			job: func(j *Job) {
				j.Step, j.Total, j.Iter, j.HaveIter = 90000, 100000, steady, true // 10 000 × 120 ms = 20 m, + 1m35s
			},
			snap: lab(full("gpu")),
			check: check{want: Decision{Kind: MovePending, Rule: RuleDevChunk, Target: "gpu-dev", TimeLimit: 22 * time.Minute},
				reason: []string{"time limit 22m (enough for the remaining 10000 iterations); the run should finish there"}},
		},
		{
			name:  "outside the dev window",
			cfg:   nightly,
			snap:  lab(full("gpu")),
			check: check{want: Decision{Kind: None}, reason: []string{"outside the dev windows (18:00-08:00)"}},
		},
		{
			name:  "inside the dev window",
			cfg:   nightly,
			now:   night,
			job:   func(j *Job) { j.PendingSince = night.Add(-time.Hour) },
			snap:  lab(full("gpu")),
			check: check{want: Decision{Kind: MovePending, Rule: RuleDevChunk, Target: "gpu-dev", TimeLimit: 2 * time.Hour}},
		},
		{
			name: "the chunk ends with the window",
			cfg:  nightly,
			now:  time.Date(2025, 3, 2, 7, 20, 30, 0, time.UTC),
			job:  func(j *Job) { j.PendingSince = night },
			snap: lab(full("gpu")),
			check: check{want: Decision{Kind: MovePending, Rule: RuleDevChunk, Target: "gpu-dev", TimeLimit: 39 * time.Minute},
				reason: []string{"time limit 39m (until the dev window closes at 08:00:00)"}},
		},
		{
			name: "too little window left to pay for a chunk",
			cfg:  nightly,
			now:  time.Date(2025, 3, 2, 7, 58, 0, 0, time.UTC),
			job:  func(j *Job) { j.PendingSince = night },
			snap: lab(full("gpu")),
			check: check{want: Decision{Kind: None}, reason: []string{
				"a 2m chunk on gpu-dev is worth 25s of gpu time, not more than 1.5 × its cost 35s"}},
		},
		{
			name:  "pending too briefly",
			job:   func(j *Job) { j.PendingSince = now.Add(-30 * time.Second) },
			snap:  lab(full("gpu")),
			check: check{want: Decision{Kind: None}, reason: []string{"dev chunk: pending for less than 1m"}},
		},
		{
			name:  "held by a dependency",
			job:   func(j *Job) { j.PendingReason = "Dependency" },
			snap:  lab(full("gpu")),
			check: check{want: Decision{Kind: None}, reason: []string{"pending for Dependency, not for resources"}},
		},
		{
			name:  "dev busy",
			snap:  lab(full("gpu", "gpu-dev")),
			check: check{want: Decision{Kind: None}, reason: []string{"gpu-dev has no idle node"}},
		},
		{
			name:  "no dev fallback",
			job:   func(j *Job) { j.Plan.Fallbacks = []string{"cpu"} },
			snap:  lab(full("gpu")),
			check: check{want: Decision{Kind: None}, reason: []string{"no dev partition among the plan's fallbacks"}},
		},
		{
			name:  "plan forbids migration",
			job:   func(j *Job) { j.Plan.Migrate = false },
			snap:  lab(full("gpu")),
			check: check{want: Decision{Kind: None}, reason: []string{"the plan does not allow migration"}},
		},
		{
			name:  "its own partition has room: it should start there",
			snap:  lab(),
			check: check{want: Decision{Kind: None}, reason: []string{"gpu has 2 idle node(s) and 4 of 4 GPUs idle: it should start there"}},
		},
		{
			name:  "already queued on dev",
			job:   func(j *Job) { j.Partition = "gpu,gpu-dev" },
			snap:  lab(full("gpu")),
			check: check{want: Decision{Kind: None}, reason: []string{"already queued on the dev partition gpu-dev"}},
		},
		{
			name:  "stale snapshot",
			check: check{want: Decision{Kind: None}, reason: []string{"dev chunk: no fresh cluster snapshot"}},
		},
		{
			name:  "no dev partitions configured",
			cfg:   func(c *Config) { c.DevPartitions = []string{} },
			snap:  lab(full("gpu")),
			check: check{want: Decision{Kind: None}, reason: []string{"no dev partition among the plan's fallbacks"}},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			cfg := labCfg()
			if tc.cfg != nil {
				tc.cfg(&cfg)
			}
			j := pendingGPU()
			if tc.job != nil {
				tc.job(&j)
			}
			at := tc.now
			if at.IsZero() {
				at = now
			}
			tc.verify(t, Decide(cfg, j, tc.snap, at))
		})
	}
}

func TestDecideOther(t *testing.T) {
	t.Parallel()
	awaiting := func(since time.Duration) func(*Job) {
		return func(j *Job) { j.Phase, j.PhaseSince = lifecycle.AwaitingCheckpoint, now.Add(-since) }
	}
	tests := []struct {
		name string
		job  func(*Job)
		check
	}{
		{
			name:  "awaiting the checkpoint",
			job:   awaiting(40 * time.Second),
			check: check{want: Decision{Kind: None}, reason: []string{"awaiting the checkpoint requested 40s ago (given up after 1m)"}},
		},
		{
			name: "checkpoint did not arrive",
			job:  awaiting(61 * time.Second),
			check: check{want: Decision{Kind: None, Abandoned: true}, reason: []string{
				"checkpoint did not arrive within 1m1s of the request at 13:58:59 (3 × the expected 20s, at least 30s): move abandoned, the job stays on gpu"}},
		},
		{
			name: "short checkpoints still get the minimum wait",
			job: func(j *Job) {
				awaiting(25 * time.Second)(j)
				j.CkptDur = 2 * time.Second
			},
			check: check{want: Decision{Kind: None}, reason: []string{"given up after 30s"}},
		},
		{
			name: "job ended while awaiting",
			job: func(j *Job) {
				awaiting(10 * time.Second)(j)
				j.State = "COMPLETED"
			},
			check: check{want: Decision{Kind: None, Abandoned: true}, reason: []string{"the job is COMPLETED now: move abandoned"}},
		},
		{
			name:  "other states",
			job:   func(j *Job) { j.State = "COMPLETING" },
			check: check{want: Decision{Kind: None}, reason: []string{"job is COMPLETING: nothing to decide"}},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			j := onGPU()
			tc.job(&j)
			tc.verify(t, Decide(labCfg(), j, lab(), now))
		})
	}
}

func TestAfterCheckpoint(t *testing.T) {
	t.Parallel()
	cfg := labCfg()
	limitCkpt := Decide(cfg, onGPU(), lab(), now)
	migrateCkpt := Decide(cfg, onCPU(), lab(), now)
	if limitCkpt.Kind != Checkpoint || migrateCkpt.Kind != Checkpoint {
		t.Fatalf("fixtures: %+v, %+v", limitCkpt, migrateCkpt)
	}
	tests := []struct {
		name    string
		job     Job
		snap    *report.Snapshot
		pending Decision
		at      time.Time // default: 25 s after the request
		check
	}{
		{
			// the job reported 50 more steps after the checkpoint it resumes from
			name: "time limit: requeue, limit recomputed at the checkpoint's step",
			job: func() Job {
				j := onGPU()
				j.Step, j.LastCkptStep, j.LastCkptAt = 40300, 40250, now.Add(20*time.Second)
				return j
			}(),
			snap: lab(), pending: limitCkpt,
			// 59 750 × 120 ms = 1h59m30s + 1m35s → 2h2m
			check: check{want: Decision{Kind: Requeue, Rule: RuleTimeLimit, Target: "gpu", TimeLimit: 2*time.Hour + 2*time.Minute},
				reason: []string{"time limit: checkpoint at step 40250 saved; requeueing onto the same partition gpu, time limit 2h2m"}},
		},
		{
			// iterations arrive in batches, a checkpoint at once: the
			// checkpoint is ahead of the steps reported so far
			name: "time limit: the checkpoint is ahead of the steps reported",
			job: func() Job {
				j := onGPU()
				j.LastCkptStep, j.LastCkptAt = 40250, now.Add(20*time.Second)
				return j
			}(),
			snap: lab(), pending: limitCkpt,
			check: check{want: Decision{Kind: Requeue, Rule: RuleTimeLimit, Target: "gpu", TimeLimit: 2*time.Hour + 2*time.Minute},
				reason: []string{"time limit: checkpoint at step 40250 saved; requeueing onto the same partition gpu, time limit 2h2m (59750 iterations"}},
		},
		{
			name: "time limit with a stale snapshot: requeue as decided",
			job:  onGPU(), snap: nil, pending: limitCkpt,
			check: check{want: Decision{Kind: Requeue, Rule: RuleTimeLimit, Target: "gpu", TimeLimit: 2*time.Hour + 2*time.Minute},
				reason: []string{"as decided at the checkpoint request"}},
		},
		{
			// The checkpoint landed at once, and the estimate says the run
			// ends (at worst 12 s later) before the limit less the margin.
			name: "time limit: it finishes in time after all",
			job: func() Job {
				j := onGPU()
				j.Step = 99900
				return j
			}(),
			at:   now,
			snap: lab(), pending: limitCkpt,
			check: check{want: Decision{Kind: None, Rule: RuleTimeLimit, Abandoned: true}, reason: []string{"before its time limit 14:01:20: not requeued"}},
		},
		{
			// the loop's final save answered the request before its last
			// steps were reported (seen in CI: requeued at 900 of 900,
			// an attempt with nothing to do)
			name: "time limit: the checkpoint is the run's last step",
			job: func() Job {
				j := onGPU()
				j.LastCkptStep, j.LastCkptAt = 100000, now.Add(20*time.Second)
				return j
			}(),
			snap: lab(), pending: limitCkpt,
			check: check{want: Decision{Kind: None, Rule: RuleTimeLimit, Abandoned: true},
				reason: []string{"checkpoint at step 100000 saved, the run's last of 100000: the run is done, not requeued"}},
		},
		{
			name: "migrate: the checkpoint is the run's last step",
			job: func() Job {
				j := onCPU()
				j.LastCkptStep, j.LastCkptAt = 100000, now.Add(20*time.Second)
				return j
			}(),
			snap: lab(), pending: migrateCkpt,
			check: check{want: Decision{Kind: None, Rule: RuleMigrate, Abandoned: true}, reason: []string{"the run is done, not requeued"}},
		},
		{
			name: "migrate: room confirmed",
			job:  onCPU(), snap: lab(), pending: migrateCkpt,
			check: check{want: Decision{Kind: Requeue, Rule: RuleMigrate, Target: "gpu", Gres: "gpu:1", TimeLimit: 3*time.Hour + 8*time.Minute},
				reason: []string{"migrate: checkpoint at step 1000 saved and gpu has 2 idle node(s) and 4 of 4 GPUs idle still; requeueing onto gpu with gres gpu:1, time limit 3h8m"}},
		},
		{
			// a checkpoint older than the last step reported (its step is
			// what the file said): the rest of the run counts from it
			name: "migrate: the rest counts from the checkpoint's step",
			job: func() Job {
				j := onCPU()
				j.LastCkptStep, j.LastCkptAt = 100, now.Add(20*time.Second)
				return j
			}(),
			snap: lab(), pending: migrateCkpt,
			check: check{want: Decision{Kind: Requeue, Rule: RuleMigrate, Target: "gpu", Gres: "gpu:1", TimeLimit: 3*time.Hour + 9*time.Minute}, // 99 900 × 112.5 ms + 1m35s = 3h8m54s
				reason: []string{"migrate: checkpoint at step 100 saved and gpu has", "time limit 3h9m (99900 iterations"}},
		},
		{
			name: "migrate: the room is gone",
			job:  onCPU(), snap: lab(full("gpu")), pending: migrateCkpt,
			check: check{want: Decision{Kind: None, Rule: RuleMigrate, Abandoned: true},
				reason: []string{"checkpoint saved; gpu has no room any more (gpu has no idle node (2 of 2 allocated)): staying on cpu"}},
		},
		{
			name: "migrate: stale snapshot",
			job:  onCPU(), snap: nil, pending: migrateCkpt,
			check: check{want: Decision{Kind: None, Rule: RuleMigrate, Abandoned: true}, reason: []string{"no fresh cluster snapshot to confirm room on gpu: staying on cpu"}},
		},
		{
			name: "job no longer running",
			job:  func() Job { j := onCPU(); j.State = "COMPLETED"; return j }(),
			snap: lab(), pending: migrateCkpt,
			check: check{want: Decision{Kind: None, Rule: RuleMigrate, Abandoned: true}, reason: []string{"the job is COMPLETED now, nothing to requeue"}},
		},
		{
			name: "elastic: the growth goes on",
			job:  onGPU(), snap: lab(), pending: Decision{Kind: Checkpoint, Then: Requeue, Rule: RuleElastic, Target: "gpu", Gres: "gpu:2", Tasks: 2, Nodes: 1},
			check: check{want: Decision{Kind: Requeue, Rule: RuleElastic, Target: "gpu", Gres: "gpu:2", Tasks: 2, Nodes: 1},
				reason: []string{"elastic: checkpoint at step 35000 saved; requeueing onto gpu at 2 tasks (gpu:2 per node, 1 nodes), its time limit unchanged"}},
		},
		{
			name: "elastic: the growth is given up when the GPUs were taken",
			job:  onGPU(), snap: lab(full("gpu")), pending: Decision{Kind: Checkpoint, Then: Requeue, Rule: RuleElastic, Target: "gpu", Gres: "gpu:2", Tasks: 2, Nodes: 1},
			check: check{want: Decision{Kind: None, Rule: RuleElastic, Abandoned: true},
				reason: []string{"checkpoint saved; gpu has 0 GPUs idle, fewer than the 1 the run would add: staying at 1 GPUs"}},
		},
		{
			name: "elastic: a shrink goes on on a full partition",
			job:  func() Job { j := onGPU(); j.Gres, j.Nodes = "gpu:2", 2; return j }(), snap: lab(full("gpu")),
			pending: Decision{Kind: Checkpoint, Then: Requeue, Rule: RuleElastic, Target: "gpu", Gres: "gpu:1", Tasks: 1, Nodes: 1},
			check: check{want: Decision{Kind: Requeue, Rule: RuleElastic, Target: "gpu", Gres: "gpu:1", Tasks: 1, Nodes: 1},
				reason: []string{"requeueing onto gpu at 1 tasks"}},
		},
		{
			name: "checkpoint only",
			job:  onGPU(), snap: lab(), pending: Decision{Kind: Checkpoint, Rule: RuleTimeLimit, Then: None, Reason: "no plan"},
			check: check{want: Decision{Kind: None, Rule: RuleTimeLimit}, reason: []string{"checkpoint saved; nothing follows: no plan"}},
		},
		{
			name: "nothing pending",
			job:  onGPU(), snap: lab(), pending: Decision{Kind: None},
			check: check{want: Decision{Kind: None, Abandoned: true}, reason: []string{"no checkpoint was pending (none)"}},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			at := tc.at
			if at.IsZero() {
				at = now.Add(25 * time.Second)
			}
			tc.verify(t, AfterCheckpoint(cfg, tc.job, tc.snap, at, tc.pending))
		})
	}
}

// Multi-step histories, applying each decision the way the coordinator
// does: a pending GPU job takes a dev chunk and goes back to gpu at the
// chunk's end; a cpu job migrates to gpu once and never comes back; an
// abandoned migration is not retried within MinInterval.
func TestScenarios(t *testing.T) {
	t.Parallel()
	cfg := labCfg()
	gpuFull, allFull := lab(full("gpu")), lab(full("gpu", "gpu-dev"))
	type step struct {
		name string
		at   time.Duration // after now
		snap *report.Snapshot
		// landed: call AfterCheckpoint with the last Checkpoint instead of Decide.
		landed bool
		want   Kind
		target string
		edit   func(j *Job) // the world changing before the step
		// starts: after this step's requeue the target had room and the job
		// runs again at once (else it pends).
		starts bool
	}
	tests := []struct {
		name  string
		job   func() Job
		steps []step
	}{
		{
			name: "dev chunk round trip",
			job:  pendingGPU,
			steps: []step{
				{name: "pending, gpu full", snap: gpuFull, want: MovePending, target: "gpu-dev"},
				{name: "mid-chunk", at: time.Hour, snap: allFull, want: None, edit: func(j *Job) {
					j.Step, j.Total, j.Iter, j.HaveIter = 30000, 200000, steady, true
				}},
				{name: "dev limit near", at: 2*time.Hour + time.Second - 80*time.Second, snap: allFull, want: Checkpoint, target: "gpu",
					edit: func(j *Job) { j.Step = 70000 }},
				{name: "checkpoint landed", at: 2*time.Hour + time.Second - 60*time.Second, snap: allFull, landed: true, want: Requeue, target: "gpu"},
				{name: "pending on gpu again, just requeued", at: 2*time.Hour + 10*time.Second, snap: allFull, want: None},
			},
		},
		{
			name: "cpu until gpu, no ping-pong",
			job:  onCPU,
			steps: []step{
				{name: "gpu full", snap: gpuFull, want: None},
				{name: "gpu free", at: time.Minute, snap: lab(), want: Checkpoint, target: "gpu"},
				{name: "checkpoint landed", at: time.Minute + 20*time.Second, snap: lab(), landed: true, want: Requeue, target: "gpu", starts: true},
				{name: "running on gpu", at: 5 * time.Minute, snap: lab(full("cpu")), want: None},
				{name: "cpu idle, gpu full", at: time.Hour, snap: gpuFull, want: None},
			},
		},
		{
			name: "abandoned migration is not retried at once",
			job:  onCPU,
			steps: []step{
				{name: "gpu free", snap: lab(), want: Checkpoint, target: "gpu"},
				{name: "gpu taken meanwhile", at: 20 * time.Second, snap: gpuFull, landed: true, want: None},
				{name: "gpu free again", at: time.Minute, snap: lab(), want: None},
				{name: "after the interval", at: 11 * time.Minute, snap: lab(), want: Checkpoint, target: "gpu"},
			},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			j := tc.job()
			var pending Decision
			for _, s := range tc.steps {
				at := now.Add(s.at)
				if s.edit != nil {
					s.edit(&j)
				}
				var d Decision
				if s.landed {
					j.Phase = lifecycle.Idle
					d = AfterCheckpoint(cfg, j, s.snap, at, pending)
				} else {
					d = Decide(cfg, j, s.snap, at)
				}
				if d.Kind != s.want || (s.target != "" && d.Target != s.target) {
					t.Fatalf("%s: %s → %q (%s), want %s → %q", s.name, d.Kind, d.Target, d.Reason, s.want, s.target)
				}
				// Apply it as the coordinator would.
				switch d.Kind {
				case MovePending:
					j.Partition, j.TimeLimit, j.LastMoveAt = d.Target, d.TimeLimit, at
					j.State, j.StartedAt = StateRunning, at.Add(time.Second) // dev was idle: starts at once
				case Checkpoint:
					pending = d
					j.Phase, j.PhaseSince = lifecycle.AwaitingCheckpoint, at
					if d.Rule == RuleMigrate {
						j.LastMoveAt = at // an attempt counts for hysteresis, landed or not
					}
				case Requeue:
					j.LastMoveAt, j.Partition = at, d.Target
					if d.Gres != "" {
						j.Gres = d.Gres
					}
					if d.TimeLimit > 0 {
						j.TimeLimit = d.TimeLimit
					}
					if d.Rule == RuleMigrate {
						j.Moves++
						j.Iter = steady // re-measured on the new node type
					} else {
						j.Continuations++
					}
					j.State, j.PendingSince, j.PendingReason = StatePending, at, "BeginTime"
					if s.starts {
						j.State, j.StartedAt = StateRunning, at.Add(2*time.Second)
					}
				}
			}
		})
	}
}

func TestWindow(t *testing.T) {
	t.Parallel()
	at := func(h, m int) time.Time { return time.Date(2025, 3, 1, h, m, 0, 0, time.UTC) }
	tests := []struct {
		spec    string
		err     bool
		t       time.Time
		in      bool
		end     time.Time
		display string
	}{
		{spec: "18:00-08:00", t: at(22, 0), in: true, end: time.Date(2025, 3, 2, 8, 0, 0, 0, time.UTC), display: "18:00-08:00"},
		{spec: "18:00-08:00", t: at(7, 59), in: true, end: at(8, 0), display: "18:00-08:00"},
		{spec: "18:00-08:00", t: at(8, 0), in: false, display: "18:00-08:00"},
		{spec: "18:00-08:00", t: at(12, 0), in: false, display: "18:00-08:00"},
		{spec: "09:30-17:00", t: at(9, 30), in: true, end: at(17, 0), display: "09:30-17:00"},
		{spec: "09:30-17:00", t: at(17, 0), in: false, display: "09:30-17:00"},
		{spec: "00:00-24:00", t: at(23, 59), in: true, end: time.Date(2025, 3, 2, 0, 0, 0, 0, time.UTC), display: "00:00-24:00"},
		{spec: "06:00-06:00", t: at(3, 0), in: true, display: "06:00-06:00"},
		{spec: "18-08", err: true},
		{spec: "25:00-08:00", err: true},
		{spec: "18:00", err: true},
		{spec: "18:60-08:00", err: true},
	}
	for _, tc := range tests {
		t.Run(tc.spec+"@"+tc.t.Format("15:04"), func(t *testing.T) {
			t.Parallel()
			w, err := ParseWindow(tc.spec)
			if (err != nil) != tc.err {
				t.Fatalf("ParseWindow(%q) error %v, want error %v", tc.spec, err, tc.err)
			}
			if tc.err {
				return
			}
			if got := w.Contains(tc.t); got != tc.in {
				t.Errorf("Contains(%s) = %v, want %v", tc.t.Format("15:04"), got, tc.in)
			}
			if tc.in && !w.End(tc.t).Equal(tc.end) {
				t.Errorf("End(%s) = %v, want %v", tc.t.Format("15:04"), w.End(tc.t), tc.end)
			}
			if w.String() != tc.display {
				t.Errorf("String() = %q, want %q", w.String(), tc.display)
			}
		})
	}
}

func TestGPURequest(t *testing.T) {
	t.Parallel()
	tests := []struct {
		gres string
		typ  string
		n    int
	}{
		{"", "", 0},
		{"gpu", "", 1},
		{"gpu:2", "", 2},
		{"gpu:a100:2", "a100", 2},
		{"gpu:a100", "a100", 1},
		{"gres:gpu:1", "", 1},
		{"gres/gpu=2", "", 2},
		{"gres/gpu:a100=1", "a100", 1},
		{"gpu:1(IDX:0)", "", 1},
		{"mps:100,gpu:1", "", 1},
		{"shard:2", "", 0},
		{"gpu:x:y", "", 0},
	}
	for _, tc := range tests {
		t.Run(tc.gres, func(t *testing.T) {
			t.Parallel()
			if typ, n := gpuRequest(tc.gres); typ != tc.typ || n != tc.n {
				t.Errorf("gpuRequest(%q) = %q, %d; want %q, %d", tc.gres, typ, n, tc.typ, tc.n)
			}
		})
	}
}

func TestConfigDefaults(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		in   Config
		ok   func(Config) bool
	}{
		{"zero means defaults", Config{}, func(c Config) bool {
			return c.Margin == DefaultMargin && c.MinGain == DefaultMinGain && c.MoveCost == DefaultMoveCost &&
				c.MinInterval == DefaultMinInterval && c.MaxMoves == DefaultMaxMoves && len(c.DevPartitions) == 0 &&
				c.MaxContinuations == DefaultMaxContinuations && c.speed("gpu") == 1
		}},
		{"negative means off", Config{MinInterval: -1, MaxMoves: -1, MaxContinuations: -1}, func(c Config) bool {
			return c.MinInterval == 0 && c.MaxMoves < 0 && c.MaxContinuations < 0
		}},
		{"explicit values stay", Config{Margin: 2 * time.Minute, MinGain: 3, DevPartitions: []string{}}, func(c Config) bool {
			return c.Margin == 2*time.Minute && c.MinGain == 3 && len(c.DevPartitions) == 0
		}},
		{"neutral defaults", DefaultConfig(), func(c Config) bool {
			return c.speed("gpu") == 1 && c.speed("cpu") == 1 && len(c.Speed) == 0 && len(c.DevPartitions) == 0 && !c.isDev("dev")
		}},
		{"lab speeds", labCfg(), func(c Config) bool {
			return c.speed("gpu") == 8 && c.speed("cpu") == 1 && c.speed("other") == 1 && c.isDev("gpu-dev")
		}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			if c := tc.in.normalized(); !tc.ok(c) {
				t.Errorf("normalized() = %+v", c)
			}
		})
	}
}

// TestWithIdealCPUs: only a move onto the ideal partition carries the
// plan's CPUs.
func TestWithIdealCPUs(t *testing.T) {
	t.Parallel()
	j := onCPU()
	j.Plan.IdealCPUs = 2
	for _, tc := range []struct {
		name string
		d    Decision
		job  func(*Job)
		want int
	}{
		{"requeue onto the ideal", Decision{Kind: Requeue, Target: "gpu"}, nil, 2},
		{"checkpoint then requeue onto the ideal", Decision{Kind: Checkpoint, Then: Requeue, Target: "gpu"}, nil, 2},
		{"pending job moved to the ideal", Decision{Kind: MovePending, Target: "gpu"}, nil, 2},
		{"dev chunk", Decision{Kind: MovePending, Target: "gpu-dev"}, nil, 0},
		{"continued where it is", Decision{Kind: Requeue, Target: "cpu"}, nil, 0},
		{"continued on the ideal, already there", Decision{Kind: Requeue, Target: "gpu"}, func(j *Job) { j.Partition = "gpu" }, 0},
		{"checkpoint, nothing after", Decision{Kind: Checkpoint, Then: None, Target: "gpu"}, nil, 0},
		{"resubmit (a new job is submitted whole)", Decision{Kind: Resubmit, Target: "gpu"}, nil, 0},
		{"plan without CPUs", Decision{Kind: Requeue, Target: "gpu"}, func(j *Job) { j.Plan.IdealCPUs = 0 }, 0},
		{"no plan", Decision{Kind: Requeue, Target: "gpu"}, func(j *Job) { j.Plan = nil }, 0},
	} {
		jj := j
		p := *j.Plan
		jj.Plan = &p
		if tc.job != nil {
			tc.job(&jj)
		}
		if got := withIdealCPUs(tc.d, &jj).CPUs; got != tc.want {
			t.Errorf("%s: CPUs %d, want %d", tc.name, got, tc.want)
		}
	}
}

// TestDevCPUs: a dev chunk asks for a dev node's share of CPUs only when
// the job's own would not fit it.
func TestDevCPUs(t *testing.T) {
	t.Parallel()
	snap := lab()
	dev, gdev := partition(snap, "dev"), partition(snap, "gpu-dev")
	eight := &report.Partition{Name: "big-dev", NodesTotal: 2, CPUsTotal: 32, GPUs: []report.GPUCount{{Total: 8}}}
	for _, tc := range []struct {
		name string
		p    *report.Partition
		cpus int
		gres string
		want int
	}{
		{"fits a CPU dev node", dev, 2, "", 0},
		{"a whole cpu node's CPUs on a 2-CPU dev node", dev, 4, "", 2},
		{"fits a GPU dev node", gdev, 4, "gpu:1", 0},
		{"more than a GPU dev node has", gdev, 8, "gpu:1", 4},
		{"share of one GPU of four", eight, 16, "gpu:1", 4},
		{"share of two GPUs of four", eight, 16, "gpu:2", 8},
		{"CPUs unknown", dev, 0, "", 0},
		{"partition without counts", &report.Partition{Name: "x"}, 4, "", 0},
	} {
		if got := devCPUs(tc.p, tc.cpus, tc.gres); got != tc.want {
			t.Errorf("%s: %d, want %d", tc.name, got, tc.want)
		}
	}
}

// TestRoom: an idle node, or a partly used one with what the job asks free.
func TestRoom(t *testing.T) {
	t.Parallel()
	mixed := func(rs ...report.Room) *report.Partition {
		p := partition(lab(full("gpu")), "gpu")
		p.Mixed = rs
		return p
	}
	half := report.Room{GPUs: 1, CPUs: 2, MemMiB: 4000, Nodes: 2}
	typed := report.Room{GPUType: "a100", GPUs: 2, CPUs: 16, Nodes: 1}
	for _, tc := range []struct {
		name string
		p    *report.Partition
		a    ask
		ok   bool
		why  string
	}{
		{"idle node", partition(lab(), "gpu"), ask{gres: "gpu:1"}, true, "gpu has 2 idle node(s) and 4 of 4 GPUs idle"},
		{"full", mixed(), ask{gres: "gpu:1"}, false, "gpu has no idle node (2 of 2 allocated)"},
		{"a partly used node fits", mixed(half), ask{"gpu:1", 2, 1 << 30}, true, "2 partly used node(s) with 1 GPU, 2 CPUs, 3.9 GiB free"},
		{"CPUs unknown: one will do", mixed(half), ask{gres: "gpu:1"}, true, "partly used"},
		{"too many GPUs", mixed(half), ask{gres: "gpu:2", cpus: 2}, false, "no idle node"},
		{"too many CPUs", mixed(half), ask{gres: "gpu:1", cpus: 4}, false, "no idle node"},
		{"too much memory", mixed(half), ask{"gpu:1", 2, 8 << 30}, false, "no idle node"},
		{"memory unknown on the node", mixed(report.Room{GPUs: 1, CPUs: 2, Nodes: 1}), ask{"gpu:1", 2, 8 << 30}, true, "partly used"},
		{"the GPU type asked", mixed(half, typed), ask{gres: "gpu:a100:2", cpus: 8}, true, "2 a100 GPUs, 16 CPUs"},
		{"another GPU type", mixed(typed), ask{gres: "gpu:v100:1", cpus: 2}, false, "no idle node"},
		{"a CPU job on a GPU node's free CPUs", mixed(half), ask{cpus: 2}, true, "partly used"},
		{"down", func() *report.Partition { p := mixed(half); p.State = "DOWN"; return p }(), ask{gres: "gpu:1"}, false, "partition gpu is DOWN"},
	} {
		ok, why := room(tc.p, tc.a)
		if ok != tc.ok || !strings.Contains(why, tc.why) {
			t.Errorf("%s: %v %q, want %v ~%q", tc.name, ok, why, tc.ok, tc.why)
		}
	}
}
