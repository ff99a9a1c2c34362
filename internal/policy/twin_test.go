package policy

import (
	"strings"
	"testing"
	"time"

	"github.com/isched/isched/internal/lifecycle"
	"github.com/isched/isched/internal/report"
)

// keepCfg is the lab's configuration with rule 10 on.
func keepCfg() Config {
	c := labCfg()
	c.KeepPlace = true
	return c
}

// onCPUTwin is onCPU with its twin pending on gpu since 10 minutes.
func onCPUTwin() Job {
	j := onCPU()
	j.Phase, j.PhaseSince = lifecycle.TwinPending, now.Add(-10*time.Minute)
	return j
}

// onCPU: 99 000 steps × 800 ms = 22 h left on cpu, 2h45m on gpu: a move
// saves 19h15m; the handover costs restart 15 s + checkpoint 20 s.
const twinGain = "on cpu (speed 1) vs gpu (speed 8) 99000 iterations left take ~22h here, saving 19h15m > 1.5 × the cost 35s (restart 15s + checkpoint 20s)"

func TestWantTwin(t *testing.T) {
	t.Parallel()
	twin := Decision{Kind: SubmitTwin, Rule: RuleKeepPlace, Target: "gpu", Gres: "gpu:1", TimeLimit: 3*time.Hour + 8*time.Minute}
	not := Decision{Kind: None, Rule: RuleKeepPlace}
	tests := []struct {
		name string
		cfg  func(*Config)
		job  func(*Job)
		snap *report.Snapshot // default: gpu full
		check
	}{
		{name: "off", cfg: func(c *Config) { c.KeepPlace = false }, check: check{want: not, reason: []string{"off (keep_place is false)"}}},
		{name: "on cpu, gpu full: keep the place", check: check{want: twin, reason: []string{
			"keep place: " + twinGain, "submitting a twin pending on gpu with gres gpu:1, time limit 3h8m"}}},
		{name: "with the plan's CPUs on gpu", job: func(j *Job) { j.CPUs, j.Plan.IdealCPUs = 4, 2 },
			check: check{want: func() Decision { d := twin; d.CPUs = 2; return d }()}},
		{name: "on its ideal partition", job: func(j *Job) { j.Partition, j.Gres = "gpu", "gpu:1" },
			check: check{want: not, reason: []string{"on its ideal partition gpu"}}},
		{name: "the plan does not allow migration", job: func(j *Job) { j.Plan.Migrate = false },
			check: check{want: not, reason: []string{"the plan does not allow migration"}}},
		{name: "moved too often", job: func(j *Job) { j.Moves = DefaultMaxMoves },
			check: check{want: not, reason: []string{"already migrated 5 times (max 5)"}}},
		{name: "resume broken", job: func(j *Job) { j.ResumeFailures = MaxResumeFailures },
			check: check{want: not, reason: []string{"a move would lose the work"}}},
		{name: "moved within the hysteresis", job: func(j *Job) { j.LastMoveAt = now.Add(-time.Minute) },
			check: check{want: not, reason: []string{"moved 1m ago"}}},
		{name: "pending", job: func(j *Job) { j.State = StatePending }, check: check{want: not, reason: []string{"the job is PENDING"}}},
		{name: "a twin already waits", job: func(j *Job) { j.Phase = lifecycle.TwinPending },
			check: check{want: not, reason: []string{"isched has twin-pending under way"}}},
		{name: "nearly done", job: func(j *Job) { j.Step = 99990 },
			check: check{want: not, reason: []string{"saving 7s, not more than 1.5 × the cost 35s"}}},
		{name: "the ideal is not faster", cfg: func(c *Config) { c.Speed["cpu"] = 8 },
			check: check{want: not, reason: []string{"gpu (speed 8) is not faster than cpu (speed 8)"}}},
		{name: "no snapshot", snap: &report.Snapshot{}, check: check{want: not, reason: []string{"is not in the cluster snapshot"}}},
		{name: "a GPU job cannot wait on a CPU partition", job: func(j *Job) {
			j.Partition, j.Gres, j.Plan.Ideal = "gpu-dev", "gpu:1", "cpu"
		}, check: check{want: not, reason: []string{"the job holds GPUs (gpu:1) and cpu has none"}}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			cfg, j, snap := keepCfg(), onCPU(), tc.snap
			if tc.cfg != nil {
				tc.cfg(&cfg)
			}
			if tc.job != nil {
				tc.job(&j)
			}
			if snap == nil {
				snap = lab(full("gpu"))
			}
			d, ok := WantTwin(cfg, j, snap, now)
			if ok != (d.Kind == SubmitTwin) {
				t.Errorf("ok %v with %s", ok, d.Kind)
			}
			tc.verify(t, d)
		})
	}
}

func TestTwinStarted(t *testing.T) {
	t.Parallel()
	handover := Decision{Kind: Checkpoint, Then: Handover, Rule: RuleKeepPlace, Target: "gpu", Gres: "gpu:1"}
	drop := Decision{Kind: DropTwin, Rule: RuleKeepPlace}
	tests := []struct {
		name string
		job  func(*Job)
		check
	}{
		{name: "pays: checkpoint, then hand over", check: check{want: handover, reason: []string{
			"the twin started on gpu; " + twinGain, "checkpointing, then the attempt on cpu ends and the twin resumes"}}},
		{name: "nearly done: drop the twin", job: func(j *Job) { j.Step = 99990 },
			check: check{want: drop, reason: []string{"not more than 1.5 × the cost 35s", "cancelling the twin, the run stays"}}},
		{name: "the run pends elsewhere: hand over at once", job: func(j *Job) {
			j.State, j.LastCkptStep, j.LastCkptAt = StatePending, 900, now.Add(-time.Hour)
		}, check: check{want: Decision{Kind: Handover, Rule: RuleKeepPlace, Target: "gpu", Gres: "gpu:1"},
			reason: []string{"cancelling the pending job, the twin resumes from the last checkpoint at step 900"}}},
		{name: "the run has ended", job: func(j *Job) { j.State = "COMPLETED" }, check: check{want: drop, reason: []string{"the run is COMPLETED"}}},
		{name: "resume broken", job: func(j *Job) { j.ResumeFailures = MaxResumeFailures },
			check: check{want: drop, reason: []string{"restarted behind the checkpoint"}}},
		{name: "already on the ideal", job: func(j *Job) { j.Partition = "gpu" },
			check: check{want: drop, reason: []string{"the run already runs on gpu"}}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			j := onCPU()
			j.Phase, j.PhaseSince = lifecycle.HandingOver, now
			if tc.job != nil {
				tc.job(&j)
			}
			tc.verify(t, TwinStarted(keepCfg(), j, now))
		})
	}
}

// TestDecideWithTwin: while a twin waits rule 2 does not move the run
// (even with room on the ideal partition), rule 1 still guards the time
// limit and cancels the twin first, and a twin that stops paying is
// dropped; while the handover's checkpoint is awaited it is given up as
// rule 2's is.
func TestDecideWithTwin(t *testing.T) {
	t.Parallel()
	nearLimit := func(j *Job) { j.StartedAt, j.TimeLimit = now.Add(-2*time.Hour+80*time.Second), 2*time.Hour }
	tests := []struct {
		name string
		job  func(*Job)
		snap *report.Snapshot // default: gpu full
		want Decision         // Reason ignored; TimeLimit and Target only where set
		has  string
	}{
		{name: "idle: rule 2 migrates into the room", job: func(j *Job) { j.Phase = lifecycle.Idle }, snap: lab(),
			want: Decision{Kind: Checkpoint, Rule: RuleMigrate, Then: Requeue}, has: "migrate: gpu has 2 idle node(s)"},
		{name: "twin pending, gpu full: no migration", want: Decision{Kind: None},
			has: "keep place: the twin waits on gpu; time limit: "},
		{name: "twin pending, room: the twin's turn, no migration", snap: lab(),
			job: func(j *Job) { j.TwinReason = "Priority" }, want: Decision{Kind: None},
			has: "migration: not while a twin keeps the run's place"},
		{name: "twin pending, room but a limit holds the twin: rule 2, the twin cancelled first", snap: lab(),
			job:  func(j *Job) { j.TwinReason = "AssocGrpGRES" },
			want: Decision{Kind: Checkpoint, Rule: RuleMigrate, Then: Requeue, CancelTwin: true},
			has:  "a limit holds the twin (AssocGrpGRES) though gpu has room: cancelling the twin first"},
		{name: "twin pending, a limit holds the twin, gpu full: no migration",
			job: func(j *Job) { j.TwinReason = "QOSMaxGRESPerUser" }, want: Decision{Kind: None},
			has: "migration: not while a twin keeps the run's place"},
		{name: "twin pending near the limit: rule 1, the twin cancelled first", job: nearLimit,
			want: Decision{Kind: Checkpoint, Rule: RuleTimeLimit, Then: Requeue, CancelTwin: true}, has: "cancelling the twin first"},
		{name: "twin pending, nearly done: drop it", job: func(j *Job) { j.Step = 99990 },
			want: Decision{Kind: DropTwin, Rule: RuleKeepPlace}, has: "a move no longer pays"},
		{name: "twin pending, the run pends (Slurm requeued it)", job: func(j *Job) { j.State = StatePending },
			want: Decision{Kind: None, Rule: RuleKeepPlace}, has: "the run is PENDING"},
		{name: "handing over: awaiting the checkpoint", job: func(j *Job) { j.Phase, j.PhaseSince = lifecycle.HandingOver, now.Add(-10*time.Second) },
			want: Decision{Kind: None, Rule: RuleKeepPlace}, has: "awaiting the checkpoint requested 10s ago (given up after 1m)"},
		{name: "handing over: no checkpoint in time", job: func(j *Job) { j.Phase, j.PhaseSince = lifecycle.HandingOver, now.Add(-2*time.Minute) },
			want: Decision{Kind: DropTwin, Rule: RuleKeepPlace, Abandoned: true}, has: "the twin is cancelled"},
		{name: "handing over: the run was requeued, pends: hand over at once", job: func(j *Job) {
			j.Phase, j.PhaseSince, j.State = lifecycle.HandingOver, now.Add(-10*time.Second), StatePending
		}, want: Decision{Kind: Handover, Rule: RuleKeepPlace}, has: "the twin resumes from the last checkpoint"},
		{name: "handing over: the run stopped", job: func(j *Job) {
			j.Phase, j.PhaseSince, j.State = lifecycle.HandingOver, now.Add(-10*time.Second), "FAILED"
		}, want: Decision{Kind: DropTwin, Rule: RuleKeepPlace, Abandoned: true}, has: "the job is FAILED now"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			j := onCPUTwin()
			if tc.job != nil {
				tc.job(&j)
			}
			snap := tc.snap
			if snap == nil {
				snap = lab(full("gpu"))
			}
			d := Decide(keepCfg(), j, snap, now)
			got := Decision{Kind: d.Kind, Rule: d.Rule, Then: d.Then, CancelTwin: d.CancelTwin, Abandoned: d.Abandoned}
			if got != tc.want {
				t.Errorf("got %+v\nwant %+v\nreason: %s", got, tc.want, d.Reason)
			}
			if !strings.Contains(d.Reason, tc.has) {
				t.Errorf("reason %q lacks %q", d.Reason, tc.has)
			}
		})
	}
}

func TestAfterCheckpointHandover(t *testing.T) {
	t.Parallel()
	j := onCPU()
	j.Phase, j.PhaseSince = lifecycle.HandingOver, now.Add(-20*time.Second)
	pending := TwinStarted(keepCfg(), j, now.Add(-20*time.Second))
	if pending.Kind != Checkpoint || pending.Then != Handover {
		t.Fatalf("fixture: %+v", pending)
	}
	j.Step, j.LastCkptStep, j.LastCkptAt = 1030, 1025, now
	check{want: Decision{Kind: Handover, Rule: RuleKeepPlace, Target: "gpu", Gres: "gpu:1"},
		reason: []string{"keep place: checkpoint at step 1025 saved; the attempt on cpu ends and the twin on gpu resumes from it"}}.
		verify(t, AfterCheckpoint(keepCfg(), j, lab(full("gpu")), now, pending))
	j.Step, j.LastCkptStep = j.Total, j.Total
	check{want: Decision{Kind: None, Rule: RuleKeepPlace, Abandoned: true}, reason: []string{"the run is done, not requeued"}}.
		verify(t, AfterCheckpoint(keepCfg(), j, lab(), now, pending))
}
