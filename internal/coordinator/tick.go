package coordinator

import (
	"bytes"
	"context"
	"errors"
	"time"

	"github.com/isched/isched/internal/lifecycle"
	"github.com/isched/isched/internal/report"
	"github.com/isched/isched/internal/stream"
)

// tickIfDue ticks when a tick interval has passed since the last one, or
// sooner when a report asked for a decision now (kick).
func (c *Coordinator) tickIfDue(ctx context.Context, lastTick *time.Time) error {
	now := c.now()
	if now.Sub(*lastTick) < c.cfg.Tick && !c.kick {
		return nil
	}
	// a tick re-reads the entries pending for this consumer, which
	// include those a read ahead took: judge them first
	if c.reading != nil {
		ents, err := c.readDone()
		if err != nil {
			return err
		}
		if err := c.ingest(ctx, ents); err != nil {
			return err
		}
	}
	c.kick = false
	*lastTick = now
	c.checkLag(ctx)
	return c.tick(ctx)
}

// tick reads the agent's view, retries deferred reports, collects action
// results and takes decisions.
func (c *Coordinator) tick(ctx context.Context) error {
	now := c.now()
	if err := c.catchUp(ctx, now); err != nil {
		return err
	}
	if err := c.syncState(ctx, now); err != nil {
		return err
	}
	if err := c.decideAll(ctx, now); err != nil {
		return err
	}
	if err := c.orderQueued(ctx, now); err != nil {
		return err
	}
	if err := c.preemptForShort(ctx, now); err != nil {
		return err
	}
	if err := c.resizeElastic(ctx, now); err != nil {
		return err
	}
	if err := c.flush(ctx, true); err != nil {
		return err
	}
	if err := c.evictEnded(ctx, now); err != nil {
		return err
	}
	c.metrics.tracked.Set(float64(len(c.lineages)))
	return nil
}

// catchUp reads the agent's view and judges the reports still pending for
// this consumer (those deferred until the job table listed their job),
// with every write landed.
func (c *Coordinator) catchUp(ctx context.Context, now time.Time) error {
	// the last round's write acks its entries: land it before asking
	// which are still pending, and before deciding on what it saved
	if err := c.settle(); err != nil {
		return err
	}
	if err := c.readInputs(ctx, now); err != nil {
		return err
	}
	c.releaseReceipts(now)
	pend, err := c.store.ReadOwnPending(ctx, c.keys.Ingest(), group, c.cfg.ID, 2048)
	if err != nil {
		return err
	}
	if err := c.ingest(ctx, pend); err != nil {
		return err
	}
	return c.settle()
}

// syncState brings the lineages, sessions and learned speeds up to date
// with Slurm's job table, the agent's action results and the receipts.
func (c *Coordinator) syncState(ctx context.Context, now time.Time) error {
	if err := c.loadTracked(ctx); err != nil {
		return err
	}
	if err := c.syncWithJobTable(ctx, now); err != nil {
		return err
	}
	if err := c.pruneSessions(ctx, now); err != nil {
		return err
	}
	if err := c.readResults(ctx, now); err != nil {
		return err
	}
	if err := c.sendAnnotations(ctx, now); err != nil {
		return err
	}
	if err := c.loadSpeeds(ctx); err != nil {
		return err
	}
	c.learnSpeeds()
	return nil
}

// decideAll takes decisions for the lineages still running, on the
// snapshot when it is fresh.
func (c *Coordinator) decideAll(ctx context.Context, now time.Time) error {
	fresh := c.snap != nil && now.Sub(time.UnixMilli(c.snap.TakenMS)) <= c.cfg.StaleAfter
	for name, l := range c.lineages {
		if (l.ended() || l.End != nil && l.Phase == lifecycle.Idle) && l.Twin == 0 {
			continue // ended, or its attempt did and Slurm has the next word (a twin left goes first)
		}
		if err := c.decide(ctx, name, l, fresh, now); err != nil {
			return err
		}
	}
	return nil
}

// decodedInput is an agent value and its decoding.
type decodedInput struct {
	raw []byte
	env *report.Envelope
}

// agentInput is one value the agent publishes: its name (metrics, logs),
// key and kind.
type agentInput struct {
	name, key string
	kind      report.Kind
}

// readInputs reads the agent's snapshot and job table.
func (c *Coordinator) readInputs(ctx context.Context, now time.Time) error {
	for _, in := range []agentInput{{"snapshot", c.keys.Snapshot(), report.KindSnapshot}, {"jobs", c.keys.Jobs(), report.KindJobs}} {
		if err := c.readInput(ctx, in, now); err != nil {
			return err
		}
	}
	return nil
}

// readInput reads one agent input, decodes it when it changed, and takes
// it in when it is fresh enough to act on.
func (c *Coordinator) readInput(ctx context.Context, in agentInput, now time.Time) error {
	b, err := c.store.Get(ctx, in.key)
	if errors.Is(err, stream.ErrNotFound) {
		c.metrics.pollSuccess.WithLabelValues(in.name).Set(0)
		if in.kind == report.KindSnapshot {
			c.snap = nil
		}
		return nil
	}
	if err != nil {
		return err
	}
	env, unchanged, ok := c.decodeInput(in, b)
	if !ok {
		return nil
	}
	age := now.Sub(env.Time())
	c.metrics.pollAge.WithLabelValues(in.name).Set(age.Seconds())
	okFresh := age <= c.cfg.StaleAfter
	if okFresh {
		c.metrics.pollSuccess.WithLabelValues(in.name).Set(1)
	} else {
		c.metrics.pollSuccess.WithLabelValues(in.name).Set(0)
	}
	switch in.kind {
	case report.KindSnapshot:
		c.snap = env.Snapshot
		if !okFresh {
			c.snap = nil // never decide on a stale picture of the cluster
		}
	case report.KindJobs:
		// owners do not change, so even a stale table confirms sessions;
		// states are only used when fresh (syncWithJobTable)
		if unchanged && c.jobs != nil {
			return nil
		}
		idx := jobIndex{}
		for _, j := range env.Jobs.Jobs {
			idx[j.JobID] = j
		}
		c.jobs, c.jobsAt = idx, env.Time()
	}
	return nil
}

// decodeInput returns an agent input's decoding and whether b is the value
// already decoded. The agent publishes every poll (5 s), the coordinator
// reads every tick (2 s): a value it already decoded is not decoded again
// (at 10 000 jobs the job table is 3 MB of JSON). Its age still moves. A
// value it cannot read is logged and ignored (ok false).
func (c *Coordinator) decodeInput(in agentInput, b []byte) (env *report.Envelope, unchanged, ok bool) {
	cached, unchanged := c.inputs[in.name]
	unchanged = unchanged && bytes.Equal(b, cached.raw)
	if unchanged {
		return cached.env, true, true
	}
	c.inputDecodes++
	env, err := report.DecodeTable(b)
	if err != nil || env.Kind != in.kind {
		delete(c.inputs, in.name)
		c.metrics.pollSuccess.WithLabelValues(in.name).Set(0)
		c.log.Warn("agent data unreadable; ignored", "input", in.name, "err", err)
		return nil, false, false
	}
	c.inputs[in.name] = decodedInput{raw: b, env: env}
	return env, false, true
}

// loadTracked loads every tracked lineage once after taking the lead.
func (c *Coordinator) loadTracked(ctx context.Context) error {
	if c.resultsID != "" {
		return nil
	}
	names, err := c.store.HGetAll(ctx, c.keys.Lineages())
	if err != nil {
		return err
	}
	var expired []string
	for name := range names {
		// a tracked name whose state expired (EndedTTL) is not revived
		if _, err := c.store.Get(ctx, c.keys.JobState(name)); errors.Is(err, stream.ErrNotFound) {
			expired = append(expired, name)
			continue
		}
		if _, err := c.getLineage(ctx, name); err != nil {
			return err
		}
	}
	if len(expired) > 0 {
		if err := c.store.HDel(ctx, c.keys.Lineages(), expired...); err != nil {
			return err
		}
	}
	c.resultsID = "0" // re-read every retained result: idempotent by action id
	return nil
}
