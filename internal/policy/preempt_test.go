package policy

import (
	"strings"
	"testing"
	"time"
)

func TestPreempt(t *testing.T) {
	t.Parallel()
	on := Config{PreemptForShort: true}
	long := Running{JobID: 1, Queue: "gpu", Gres: "gpu:1", Remaining: 3 * time.Hour, Attained: time.Hour, CkptDur: 20 * time.Second}
	short := Waiting{Queued: Queued{JobID: 9, Queue: "gpu", Remaining: 10 * time.Minute, PendingSince: now.Add(-5 * time.Minute)}, Gres: "gpu:1", Blocked: true}
	tests := []struct {
		name    string
		cfg     Config
		running []Running
		waiting []Waiting
		victim  uint64 // 0: none
		why     string
	}{
		{"off", Config{}, []Running{long}, []Waiting{short}, 0, "off (preempt_for_short is false)"},
		{"the long run yields to the short one", on, []Running{long}, []Waiting{short}, 1, ""},
		{"the longest of two yields", on, []Running{long, with(long, func(r *Running) { r.JobID, r.Remaining = 2, 5*time.Hour })}, []Waiting{short}, 2, ""},
		{"another queue", on, []Running{with(long, func(r *Running) { r.Queue = "cpu" })}, []Waiting{short}, 0, "no isched job waits"},
		{"too few GPUs to take its place", on, []Running{long}, []Waiting{withW(short, func(w *Waiting) { w.Gres = "gpu:2" })}, 0, "no isched job waits"},
		{"too few nodes to take its place", on, []Running{long}, []Waiting{withW(short, func(w *Waiting) { w.Nodes = 2 })}, 0, "no isched job waits"},
		{"as many nodes", on, []Running{with(long, func(r *Running) { r.Nodes = 2 })}, []Waiting{withW(short, func(w *Waiting) { w.Nodes = 2 })}, 1, ""},
		{"not blocked (held, a dependency)", on, []Running{long}, []Waiting{withW(short, func(w *Waiting) { w.Blocked = false })}, 0, "no isched job waits"},
		{"waited less than min_pending", on, []Running{long}, []Waiting{withW(short, func(w *Waiting) { w.PendingSince = now.Add(-10 * time.Second) })}, 0, "no isched job waits"},
		{"preempted twice already", on, []Running{with(long, func(r *Running) { r.Preemptions = 2 })}, []Waiting{short}, 0, "preempted 2 times already (max 2)"},
		{"its attempt just started", on, []Running{with(long, func(r *Running) { r.Attained = 5 * time.Minute })}, []Waiting{short}, 0, "started or moved within 10m"},
		{"moved lately", on, []Running{with(long, func(r *Running) { r.LastMoveAt = now.Add(-time.Minute) })}, []Waiting{short}, 0, "started or moved within 10m"},
		{"the gain does not pay", on, []Running{with(long, func(r *Running) { r.Remaining = short.Remaining + 52*time.Second })}, []Waiting{short}, 0,
			"the gain does not exceed 1.5 × the cost 35s"},
		{"the gain just pays", on, []Running{with(long, func(r *Running) { r.Remaining = short.Remaining + 53*time.Second })}, []Waiting{short}, 1, ""},
		{"unknown length never yields", on, []Running{with(long, func(r *Running) { r.Remaining = 0 })}, []Waiting{short}, 0, "no isched job waits"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			p, ok, why := Preempt(tc.cfg, tc.running, tc.waiting, now)
			if ok != (tc.victim != 0) || p.Victim != tc.victim || ok && p.For != 9 {
				t.Fatalf("got %+v ok %v (%s), want victim %d", p, ok, why, tc.victim)
			}
			if ok && !strings.Contains(p.Reason, "checkpointing job") {
				t.Errorf("reason %q", p.Reason)
			}
			if !ok && !strings.Contains(why, tc.why) {
				t.Errorf("why %q, want ~%q", why, tc.why)
			}
		})
	}
}

func with(r Running, f func(*Running)) Running  { f(&r); return r }
func withW(w Waiting, f func(*Waiting)) Waiting { f(&w); return w }

// TestAfterCheckpointPreempt: rule 8's checkpoint landed: the job is
// requeued onto its own partition, held, yielding to the waiting job;
// without a job to yield to the preemption is given up.
func TestAfterCheckpointPreempt(t *testing.T) {
	t.Parallel()
	j := onGPU()
	pending := Decision{Kind: Checkpoint, Then: Requeue, Rule: RulePreempt, Target: "gpu", Gres: "gpu:1", YieldTo: 9}
	d := AfterCheckpoint(labCfg(), j, lab(), now, pending)
	if d.Kind != Requeue || d.Rule != RulePreempt || !d.Hold || d.YieldTo != 9 || d.Target != "gpu" || d.Gres != "gpu:1" || d.TimeLimit <= 0 {
		t.Errorf("got %+v", d)
	}
	if !strings.Contains(d.Reason, "held until job 9 has started") {
		t.Errorf("reason %q", d.Reason)
	}
	pending.YieldTo = 0
	if d := AfterCheckpoint(labCfg(), j, lab(), now, pending); !d.Abandoned || d.Kind != None {
		t.Errorf("no job to yield to: %+v", d)
	}
}
