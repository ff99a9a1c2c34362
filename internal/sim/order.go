package sim

import (
	"math"
	"strconv"
	"strings"
	"time"

	"github.com/isched/isched/internal/lifecycle"
	"github.com/isched/isched/internal/policy"
)

// prioScale turns the replay's float priorities into Slurm's integers
// (policy.Order works on those) with a thousandth's resolution.
const prioScale = 1000

// orderQueued is rule 7 in the replay, every PriorityCalcPeriod: the
// coordinator's policy.Order over isched's pending jobs, with their
// multifactor priorities as Slurm would show them, and their nice values
// set as the agent would set them. Only the multifactor model has
// priorities to exchange.
func (s *sim) orderQueued() {
	cfg := &s.cfg.Sched
	if !s.pol.OrderByRemaining || !cfg.Backfill || s.now-s.orderedAt < max(cfg.CalcPeriod, s.cfg.Tick) {
		return
	}
	s.orderedAt = s.now
	var q []policy.Queued
	for _, i := range s.active {
		js := &s.jobs[i]
		if js.state != stPending || js.plan == nil || js.phase != lifecycle.Idle {
			continue
		}
		q = append(q, policy.Queued{JobID: uint64(i) + 1, Queue: s.queueName(js), Priority: int64(s.priorityOf(js, cfg) * prioScale),
			Nice: int64(js.nice * prioScale), Remaining: s.remaining(js), PendingSince: at(js.order)})
	}
	for _, p := range policy.Order(s.pol, q, at(s.now)) {
		s.jobs[p.JobID-1].nice = float64(p.Nice) / prioScale
		s.dirty, s.bfDirty = true, true
	}
}

// queueName names the partitions a job pends on, as squeue lists them.
func (s *sim) queueName(js *jobState) string {
	var b strings.Builder
	for k, pi := range js.parts {
		if k > 0 {
			b.WriteByte(',')
		}
		b.WriteString(strconv.Itoa(pi))
	}
	return b.String()
}

// remaining is what the coordinator's predictedRemaining says of a
// pending job: its measured iterations where it ran before, else its
// time limit (isched's plan set it from its estimate).
func (s *sim) remaining(js *jobState) time.Duration {
	e, ok := js.est.Estimate()
	var limit time.Duration
	if len(js.parts) > 0 {
		if l := s.limitOf(js, js.parts[0]); !math.IsInf(l, 1) {
			limit = time.Duration(l * float64(time.Second))
		}
	}
	return policy.PredictedRemaining(js.iters-js.lastCkpt, e, ok, limit)
}
