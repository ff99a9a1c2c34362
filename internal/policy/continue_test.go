package policy

import (
	"strings"
	"testing"
	"time"
)

func TestAfterEnd(t *testing.T) {
	t.Parallel()
	zero, one, exit143 := 0, 1, 143
	// running on cpu, its ideal, 3000 steps, checkpoint at 294, step 300
	base := func() Job {
		return Job{JobID: 7, User: "alice", Lineage: "l2", State: "COMPLETED", Partition: "cpu", Plan: cpuPlan(),
			StartedAt: now.Add(-40 * time.Second), TimeLimit: 3 * time.Minute,
			Step: 300, Total: 3000, Iter: steady, HaveIter: true, CkptDur: time.Second,
			LastCkptStep: 294, LastCkptAt: now.Add(-5 * time.Second)}
	}
	tests := []struct {
		name   string
		job    func(*Job)
		end    End
		cfg    func(*Config)
		want   Kind
		reason []string
	}{
		{name: "usr1, saved, exit 0: Slurm says COMPLETED", end: End{State: "COMPLETED", Exit: &zero, NewCkpts: 1}, want: Requeue,
			reason: []string{"continue: the attempt ended COMPLETED (exit 0) at step 300 of 3000 (2700 left); resuming from the checkpoint at step 294: requeueing onto the same partition cpu, time limit"}},
		{name: "saved, exit 143 of its own", end: End{State: "FAILED", Exit: &exit143, NewCkpts: 1}, want: Requeue,
			reason: []string{"ended FAILED (exit 143)"}},
		{name: "timeout, killed, periodic checkpoints", end: End{State: "TIMEOUT", Exit: &exit143, Signal: "SIGTERM", NewCkpts: 3}, want: Requeue,
			reason: []string{"ended TIMEOUT (exit 143, killed by SIGTERM)"}},
		{name: "node failure, no end report", end: End{State: "NODE_FAIL", NewCkpts: 2}, want: Requeue,
			reason: []string{"ended NODE_FAIL (no end report)"}},
		{name: "preempted, not requeued by Slurm", end: End{State: "PREEMPTED", Exit: &zero, NewCkpts: 1}, want: Requeue},
		{name: "cancelled", end: End{State: "CANCELLED", Exit: &zero, NewCkpts: 1}, want: None, reason: []string{"cancelled (scancel): not continued"}},
		{name: "done", job: func(j *Job) { j.Step = 3000 }, end: End{State: "COMPLETED", Exit: &zero, NewCkpts: 1}, want: None,
			reason: []string{"at step 3000 of 3000: the run is done"}},
		{name: "killed after saving its last step, before reporting it", job: func(j *Job) { j.Step, j.LastCkptStep = 2980, 3000 },
			end: End{State: "TIMEOUT", Exit: &exit143, Signal: "SIGTERM", NewCkpts: 1}, want: None,
			reason: []string{"at step 2980 of 3000 with its checkpoint at the last step 3000: the run is done"}},
		{name: "total unknown", job: func(j *Job) { j.Total, j.Plan.Total = 0, 0 }, end: End{State: "COMPLETED", Exit: &zero, NewCkpts: 1}, want: None,
			reason: []string{"the total is unknown, so the run counts as done"}},
		{name: "crash without a new checkpoint", end: End{State: "FAILED", Exit: &one, ResumeStep: 294}, want: None,
			reason: []string{"a crash (exit 1) with no new checkpoint since the attempt began: not continued blindly"}},
		{name: "crash after a new checkpoint", end: End{State: "FAILED", Exit: &one, NewCkpts: 1}, want: Requeue},
		{name: "no progress since the previous attempt", end: End{State: "TIMEOUT", Exit: &exit143, Signal: "SIGTERM", ResumeStep: 294}, want: None,
			reason: []string{"no progress since the previous attempt (it resumed at step 294 and its newest checkpoint is the checkpoint at step 294)"}},
		{name: "one attempt restarted behind its checkpoint", job: func(j *Job) { j.ResumeFailures = 1 },
			end: End{State: "COMPLETED", Exit: &zero, NewCkpts: 1}, want: Requeue},
		{name: "two attempts restarted behind their checkpoints", job: func(j *Job) { j.ResumeFailures = MaxResumeFailures },
			end: End{State: "COMPLETED", Exit: &zero, NewCkpts: 1}, want: None,
			reason: []string{"2 attempts restarted behind the checkpoint they were given (does the script read ISCHED_RESUME_FROM, and can it read that file?): not requeued"}},
		{name: "no checkpoint at all", job: func(j *Job) { j.LastCkptAt, j.LastCkptStep = time.Time{}, 0 }, end: End{State: "TIMEOUT"}, want: None,
			reason: []string{"with no checkpoint to continue from"}},
		{name: "slurmctld forgot the job: resubmitted", end: End{Exit: &zero, NewCkpts: 1}, want: Resubmit,
			reason: []string{"resuming from the checkpoint at step 294: slurmctld no longer holds the job (MinJobAge): resubmitting its batch script as a new job onto the same partition cpu, time limit"}},
		{name: "slurmctld forgot the job, continuations off", cfg: func(c *Config) { c.NoContinuations = true }, end: End{Exit: &zero, NewCkpts: 1}, want: None,
			reason: []string{"continuations are off (max_continuations 0)"}},
		{name: "slurmctld forgot the job after a crash", end: End{Exit: &one, ResumeStep: 294}, want: None,
			reason: []string{"a crash (exit 1)"}},
		{name: "slurmctld forgot the job, bounded", job: func(j *Job) { j.Continuations = 20 }, end: End{Exit: &zero, NewCkpts: 1}, want: None,
			reason: []string{"already continued 20 times (max 20)"}},
		{name: "slurmctld forgot a finished run", job: func(j *Job) { j.Step = 3000 }, end: End{Exit: &zero, NewCkpts: 1}, want: None,
			reason: []string{"the run is done"}},
		{name: "bounded", job: func(j *Job) { j.Continuations = 20 }, end: End{State: "COMPLETED", Exit: &zero, NewCkpts: 1}, want: None,
			reason: []string{"already continued 20 times (max 20)"}},
		{name: "continuations off", cfg: func(c *Config) { c.NoContinuations = true }, end: End{State: "COMPLETED", Exit: &zero, NewCkpts: 1}, want: None,
			reason: []string{"continuations are off (max_continuations 0): not requeued"}},
	}
	for _, tc := range tests {
		j := base()
		if tc.job != nil {
			j.Plan = cpuPlan()
			tc.job(&j)
		}
		cfg := labCfg()
		if tc.cfg != nil {
			tc.cfg(&cfg)
		}
		d := AfterEnd(cfg, j, tc.end, lab(), now)
		if d.Kind != tc.want || d.Rule != RuleContinue {
			t.Errorf("%s: %s (rule %s), want %s: %s", tc.name, d.Kind, d.Rule, tc.want, d.Reason)
			continue
		}
		for _, r := range tc.reason {
			if !strings.Contains(d.Reason, r) {
				t.Errorf("%s: reason %q lacks %q", tc.name, d.Reason, r)
			}
		}
		if (d.Kind == Requeue || d.Kind == Resubmit) && (d.Target != "cpu" || d.TimeLimit <= 0) {
			t.Errorf("%s: target %s time limit %s", tc.name, d.Target, d.TimeLimit)
		}
	}
}
