package coordinator

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/isched/isched/internal/estimate"
	"github.com/isched/isched/internal/lifecycle"
	"github.com/isched/isched/internal/policy"
	"github.com/isched/isched/internal/report"
	"github.com/isched/isched/internal/stream"
)

// pending is an action the coordinator issued and has no result for yet.
type pending struct {
	ID       string          `json:"id"`
	Type     string          `json:"type"`
	Decision policy.Decision `json:"decision"`
	IssuedMS int64           `json:"issued_ms"`
	Action   json.RawMessage `json:"action"` // the encoded envelope, re-sent verbatim after a crash
}

// action is the action p sent, decoded; the zero action when it does not
// decode (it did when it was issued).
func (p *pending) action() report.Action {
	if env, err := report.Decode(p.Action); err == nil && env.Action != nil {
		return *env.Action
	}
	return report.Action{}
}

// lineage is everything the coordinator keeps about one lineage.
type lineage struct {
	Status     report.JobStatus       `json:"status"`
	Iter       estimate.IterEstimator `json:"iter"`
	Mem        estimate.MemTracker    `json:"mem"`
	Ckpt       estimate.CkptTimer     `json:"ckpt"`
	Phase      lifecycle.State        `json:"phase"` // changed only by to (lifecycle.Next)
	PhaseMS    int64                  `json:"phase_ms"`
	Pending    *pending               `json:"pending,omitempty"`
	Actions    int                    `json:"actions"` // issued so far: part of deterministic ids
	LastMoveMS int64                  `json:"last_move_ms"`
	// LastOrderMS is when rule 7 last set the pending job's nice value.
	LastOrderMS int64 `json:"last_order_ms,omitempty"`
	// Preempts counts rule 8's preemptions of the run; while it yields
	// (lifecycle.Yielding) YieldTo is the job it yields to, since
	// YieldSinceMS.
	Preempts     int    `json:"preemptions,omitempty"`
	YieldTo      uint64 `json:"yield_to,omitempty"`
	YieldSinceMS int64  `json:"yield_since_ms,omitempty"`
	// Resizes counts rule 9's resizes of an elastic run, and Rates its
	// learned steps per second at each size (GPUs) it ran at before the
	// current attempt.
	// Twin is the run's twin job (rule 10, twin.go) while it is meant to
	// exist, since TwinSinceMS (the agent's result), and TwinReason its
	// pending reason in the last job table; never the run's JobID.
	Twin         uint64           `json:"twin,omitempty"`
	TwinSinceMS  int64            `json:"twin_since_ms,omitempty"`
	TwinReason   string           `json:"twin_reason,omitempty"`
	Resizes      int              `json:"resizes,omitempty"`
	Rates        map[int]float64  `json:"elastic_rates,omitempty"`
	Moves        int              `json:"moves"`
	Conts        int              `json:"continuations"`
	RequeueRule  string           `json:"requeue_rule,omitempty"` // rule of the requeue in flight
	NoExtend     bool             `json:"no_extend,omitempty"`
	LastIterMS   int64            `json:"last_iter_ms"`
	NonFinite    bool             `json:"nonfinite"`
	CkptAtReq    int64            `json:"ckpt_at_req"`              // checkpoints seen when the request went out
	CkptsAtStart int64            `json:"ckpts_at_start,omitempty"` // checkpoints seen when the current attempt began
	Ckpts        int64            `json:"ckpts"`
	PeakETA      int64            `json:"first_eta_ms"` // first known ETA, for the estimate-error metric
	RankRSS      map[string]int64 `json:"rank_rss,omitempty"`
	// WasEnded is how a state saved before the lifecycle's Ended state
	// said the run was over; read once (getLineage), never written.
	WasEnded     bool             `json:"ended,omitempty"`
	End          *attemptEnd      `json:"end,omitempty"`           // the current attempt's end, until settled
	CkptDecision *policy.Decision `json:"ckpt_decision,omitempty"` // what follows the requested checkpoint
	// Resuming is the attempt that was given a checkpoint to resume from,
	// until its first step says whether it did (checkResume).
	Resuming *resumeCheck `json:"resuming,omitempty"`
	// OwnerUID is the uid of the first session accepted into the lineage:
	// a lineage id is public (squeue shows plan comments), so another
	// user's job claiming it must not write into its status.
	OwnerUID *int `json:"owner_uid,omitempty"`
	// CompletedMS: when the job table first showed the current job
	// COMPLETED while no end report had settled the lineage (its wrapper
	// never sent one, or the report is late). After EndGrace the lineage
	// ends on Slurm's word.
	CompletedMS int64 `json:"completed_ms,omitempty"`
	// SlurmClosed is the attempt whose span the job table closed (Slurm
	// requeued the job) before its wrapper's end report arrived: when the
	// report comes after all (it was only late, as after a preemption), it
	// still tells when and why the attempt ended.
	SlurmClosed *spanKey `json:"slurm_closed,omitempty"`
	// Moved is the steady iteration estimate of the partition the lineage
	// left, until the new partition's own estimate exists: the ETA after a
	// move is that estimate converted by the partitions' speeds.
	Moved *movedEst `json:"moved,omitempty"`
	// Drift is what the current attempt's ETA predicted at the points of
	// estimate.DriftFracs, judged at its end into the receipt's ETA ratios.
	Drift *driftMarks `json:"drift,omitempty"`
	// Use is what the attempts used, for the verdict at the end.
	Use   jobUse `json:"use,omitzero"`
	dirty bool
}

// driftMarks are the ETA's marks (estimate.MarkDrift) of one attempt on
// one partition: only a run that went on where it was marked can say how
// far the mark was off.
type driftMarks struct {
	JobID     uint64               `json:"job_id"`
	Attempt   int                  `json:"attempt"`
	Partition string               `json:"partition"`
	Marks     []estimate.DriftMark `json:"marks"`
}

// markDrift records the ETA's prediction per step when the run passes one
// of estimate.DriftFracs; a new attempt or partition starts afresh.
func (l *lineage) markDrift(now time.Time, est estimate.IterEstimate) {
	st := &l.Status
	d := l.Drift
	if !d.of(st) {
		d = &driftMarks{JobID: st.JobID, Attempt: st.Attempt, Partition: st.Partition}
	}
	n := len(d.Marks)
	d.Marks = estimate.MarkDrift(d.Marks, st.Step, st.TotalIters, now, est)
	if len(d.Marks) != n || l.Drift != d {
		l.Drift, l.dirty = d, true
	}
}

// driftRatios judges the current attempt's marks at the run's end (atMS);
// nil when they were made by another attempt or on another partition.
func (l *lineage) driftRatios(atMS int64) []report.ETARatio {
	st := &l.Status
	if !l.Drift.of(st) {
		return nil
	}
	return estimate.DriftRatios(l.Drift.Marks, st.Step, atMS)
}

// of says whether the marks are the current attempt's on the partition it
// runs on (false for nil).
func (d *driftMarks) of(st *report.JobStatus) bool {
	return d != nil && d.JobID == st.JobID && d.Attempt == st.Attempt && d.Partition == st.Partition
}

// spanKey names one attempt of one job: one history span.
type spanKey struct {
	JobID   uint64 `json:"job_id"`
	Attempt int    `json:"attempt"`
}

// attemptEnd is rank 0's end report of the current attempt while the job
// table has not yet said whether Slurm requeues the job (a preempted job's
// trainer exits 0 after its SIGTERM checkpoint): settled by
// syncWithJobTable, dropped when a new attempt starts.
type attemptEnd struct {
	JobID    uint64 `json:"job_id"`
	Attempt  int    `json:"attempt"`
	AtMS     int64  `json:"at_ms"`
	ExitCode int    `json:"exit_code"`
	Signal   string `json:"signal,omitempty"` // that killed the training command
}

// owner returns the lineage's owner: the recorded one, else (state saved
// before owners were recorded) the uid of its last start.
func (l *lineage) owner() (int, bool) {
	switch {
	case l.OwnerUID != nil:
		return *l.OwnerUID, true
	case l.Status.JobID != 0:
		return l.Status.UID, true
	}
	return 0, false
}

func (c *Coordinator) getLineage(ctx context.Context, name string) (*lineage, error) {
	if l, ok := c.lineages[name]; ok {
		c.touched[name] = l
		return l, nil
	}
	b, err := c.store.Get(ctx, c.keys.JobState(name))
	l := &lineage{}
	switch {
	case errors.Is(err, stream.ErrNotFound):
		l.Status = report.JobStatus{V: 1, Cluster: c.keys.Cluster, Lineage: name, Step: -1, History: []report.Span{}, Events: []report.StatusEvent{}, Decisions: []report.Decision{}}
		if err := c.store.HSet(ctx, c.keys.Lineages(), name, "1"); err != nil {
			return nil, err
		}
	case err != nil:
		return nil, err
	default:
		if err := json.Unmarshal(b, l); err != nil {
			return nil, fmt.Errorf("coordinator: state of lineage %s: %w", name, err)
		}
		if err := l.upgrade(); err != nil {
			return nil, fmt.Errorf("coordinator: state of lineage %s: %w", name, err)
		}
	}
	c.lineages[name] = l
	c.touched[name] = l
	return l, nil
}

// save persists a lineage's state and its public status now, with
// whatever else the round queued (a decision must be in Redis before its
// action is).
func (c *Coordinator) save(ctx context.Context, name string, l *lineage) error {
	// after the write in flight: it may hold an older state of this lineage
	if err := c.settle(); err != nil {
		return err
	}
	if err := c.queueSave(name, l); err != nil {
		return err
	}
	if err := c.store.WriteBatch(ctx, &c.batch); err != nil {
		c.batch.Reset()
		return err
	}
	c.batch.Reset()
	l.dirty = false
	return nil
}

// queueSave queues a lineage's state and status in the round's batch.
func (c *Coordinator) queueSave(name string, l *lineage) error {
	l.Status.UpdatedMS = c.now().UnixMilli()
	st, err := json.Marshal(l.Status)
	if err != nil {
		return err
	}
	b, err := l.encodeState(st)
	if err != nil {
		return err
	}
	ttl := time.Duration(0)
	if l.ended() {
		ttl = c.cfg.EndedTTL
	}
	c.batch.Set(c.keys.JobState(name), b, ttl)
	c.batch.Set(c.keys.JobStatus(name), st, ttl)
	return nil
}

// stateHead is how json.Marshal begins a lineage whose status, iteration
// estimator and memory tracker are zero, when those are its first three
// members (nil otherwise: encodeState then leaves it all to json.Marshal,
// and TestEncodeStateIsMarshal fails). encodeState writes those three
// itself and takes the rest from json.Marshal.
var stateHead = func() []byte {
	var head []byte
	for _, m := range []struct {
		key string
		v   any
	}{{`{"status":`, report.JobStatus{}}, {`,"iter":`, &estimate.IterEstimator{}}, {`,"mem":`, &estimate.MemTracker{}}} {
		b, err := json.Marshal(m.v)
		if err != nil {
			return nil
		}
		head = append(append(head, m.key...), b...)
	}
	all, err := json.Marshal(&lineage{})
	if err != nil || !bytes.HasPrefix(all, append(head, ',')) {
		return nil
	}
	return head
}()

// encodeState is json.Marshal(l) given the encoding of l.Status, at about
// a third of its cost for a warm job: the estimators write their lists
// once (estimate's AppendJSON) instead of encoding/json re-reading and
// compacting them, and the status is not encoded twice. Saving a lineage
// is the coordinator's largest cost per report. TestEncodeStateIsMarshal
// compares the two byte for byte.
func (l *lineage) encodeState(status []byte) ([]byte, error) {
	rest := *l
	rest.Status, rest.Iter, rest.Mem = report.JobStatus{}, estimate.IterEstimator{}, estimate.MemTracker{}
	tail, err := json.Marshal(&rest)
	if err != nil {
		return nil, err
	}
	if stateHead == nil || !bytes.HasPrefix(tail, stateHead) {
		return json.Marshal(l)
	}
	b := make([]byte, 0, len(status)+len(tail)+16*len(l.Iter.Window)+32*len(l.Mem.Points)+256)
	b = append(b, `{"status":`...)
	b = append(b, status...)
	b = append(b, `,"iter":`...)
	if b, err = l.Iter.AppendJSON(b); err != nil {
		return nil, err
	}
	b = append(b, `,"mem":`...)
	if b, err = l.Mem.AppendJSON(b); err != nil {
		return nil, err
	}
	return append(b, tail[len(stateHead):]...), nil
}

func (l *lineage) event(now time.Time, kind, msg string) {
	// the same kind is not repeated within a minute
	for i := len(l.Status.Events) - 1; i >= 0; i-- {
		e := l.Status.Events[i]
		if e.Kind == kind && now.UnixMilli()-e.AtMS < 60_000 {
			return
		}
	}
	l.eventEach(now, kind, msg)
}

// eventEach records an event even when one of its kind came within a
// minute: one per attempt (a resume offered, confirmed or failed).
func (l *lineage) eventEach(now time.Time, kind, msg string) {
	l.Status.Events = appendLast(l.Status.Events, report.StatusEvent{AtMS: now.UnixMilli(), Kind: kind, Message: msg}, statusKeep)
	l.dirty = true
}

func (l *lineage) decision(d report.Decision) {
	l.Status.Decisions = appendLast(l.Status.Decisions, d, statusKeep)
	l.dirty = true
}

// statusKeep is how many events and decisions a status keeps.
const statusKeep = 50

// appendLast appends v to s and keeps the last n elements.
func appendLast[T any](s []T, v T, n int) []T {
	s = append(s, v)
	if len(s) > n {
		s = s[len(s)-n:]
	}
	return s
}

// endedLinger is how long an ended lineage stays in memory (late reports,
// the job table still listing its job) before only Redis holds it.
const endedLinger = 10 * time.Minute

// evictEnded drops ended lineages from memory and from the tracked set once
// they have lingered: their state and status stay in Redis for EndedTTL
// (for `isched status` and a late report, which reloads them), but the
// coordinator no longer carries every lineage it ever saw.
func (c *Coordinator) evictEnded(ctx context.Context, now time.Time) error {
	var gone []string
	for name, l := range c.lineages {
		// a twin still to cancel keeps it (twin.go: no twin left behind)
		if l.ended() && !l.dirty && l.Status.EndedMS > 0 && now.UnixMilli()-l.Status.EndedMS > endedLinger.Milliseconds() && l.Twin == 0 {
			gone = append(gone, name)
		}
	}
	if len(gone) == 0 {
		return nil
	}
	if err := c.store.HDel(ctx, c.keys.Lineages(), gone...); err != nil {
		return err
	}
	for _, name := range gone {
		delete(c.lineages, name)
	}
	return nil
}

// ended says whether the run is over (the lifecycle's Ended state).
func (l *lineage) ended() bool { return l.Phase == lifecycle.Ended }

// upgrade brings a state read back from Redis to this version's form: a
// run a coordinator before the lifecycle's Ended state recorded as ended
// is in that state now. A state this version does not know is refused:
// guessing would act on a run whose protocol step is unknown.
func (l *lineage) upgrade() error {
	if l.WasEnded {
		l.Phase, l.WasEnded = lifecycle.Ended, false
	}
	if !l.Phase.Valid() {
		return fmt.Errorf("unknown lifecycle state %q", l.Phase)
	}
	return nil
}

// to moves the lineage's lifecycle on ev (lifecycle.Next) and says
// whether the table allowed it. A refused transition leaves the state as
// it was, is logged as the error it is and counted
// (isched_coordinator_refused_transitions_total): the coordinator's tests
// fail on any.
func (c *Coordinator) to(l *lineage, ev lifecycle.Event, now time.Time) bool {
	next, err := lifecycle.Next(l.Phase, ev)
	if err != nil {
		c.log.Error("lineage transition refused", "lineage", l.Status.Lineage, "job", l.Status.JobID, "err", err)
		c.metrics.refusedTransitions.WithLabelValues(l.Phase.String(), string(ev)).Inc()
		return false
	}
	if next != l.Phase {
		l.Phase, l.PhaseMS, l.dirty = next, now.UnixMilli(), true
	}
	return true
}
