package stream

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
)

// Batch collects writes that Client.WriteBatch sends in one round trip,
// inside MULTI/EXEC: Redis applies them together once EXEC arrives, so a
// client dying mid-batch leaves none of them (Redis does not roll back a
// command that fails at run time, such as a wrong type). The coordinator persists a
// round's work this way (lineage state and status, wrapper sessions, series
// points, receipts) instead of one round trip per write: at 10,000 jobs the
// round trips, not the work, bounded its reports per second, and a crash
// between two of them could persist a session's sequence number without
// the state that the same report changed.
//
// On a Redis Cluster one MULTI/EXEC may only touch keys of one hash slot,
// so WriteBatch sends one MULTI/EXEC per slot (a lineage's keys share one:
// Keys.Job): each slot's writes still land together, the batch as a whole
// no longer does. Then orders what matters across slots: the writes queued
// after it are sent only once every write queued before it has landed, so
// a crash in between can leave the first part without the second, never
// the reverse.
//
// The zero value is an empty batch.
type Batch struct {
	ops []batchOp
	// waves are the indexes in ops where a Then started a new wave.
	waves []int
}

type batchOp struct {
	kind   batchKind
	key    string
	val    []byte
	ttl    time.Duration
	fields []string
	max    int64
	vals   [][]byte
	group  string
}

type batchKind int

const (
	opSet batchKind = iota
	opHSet
	opPush
	opAck
	opDel
)

// Set queues Client.Set.
func (b *Batch) Set(key string, val []byte, ttl time.Duration) {
	b.ops = append(b.ops, batchOp{kind: opSet, key: key, val: val, ttl: ttl})
}

// HSet queues Client.HSet (field, value pairs). An odd count is refused
// by WriteBatch.
func (b *Batch) HSet(key string, fieldValues ...string) {
	if len(fieldValues) == 0 {
		return
	}
	b.ops = append(b.ops, batchOp{kind: opHSet, key: key, fields: fieldValues})
}

// PushList queues Client.PushList: append vals, keep the last max.
func (b *Batch) PushList(key string, max int64, vals ...[]byte) {
	if len(vals) == 0 {
		return
	}
	b.ops = append(b.ops, batchOp{kind: opPush, key: key, max: max, vals: vals})
}

// Ack queues Client.Ack: the entries are acknowledged in the same
// MULTI/EXEC as the writes they caused, so no crash can land one without
// the other.
func (b *Batch) Ack(stream, group string, ids ...string) {
	if len(ids) == 0 {
		return
	}
	b.ops = append(b.ops, batchOp{kind: opAck, key: stream, group: group, fields: ids})
}

// Delete queues XDEL of entries (queue it after their Ack: XDEL leaves
// an entry in the group's pending list). The coordinator deletes the
// reports it rejected, so a flood of forged or malformed entries does not
// hold Redis's memory until the writers' MAXLEN trims it. Delete only
// entries the group read: a deleted entry after the group's
// last-delivered id would make its lag unknown to Redis (XINFO GROUPS).
func (b *Batch) Delete(stream string, ids ...string) {
	if len(ids) == 0 {
		return
	}
	b.ops = append(b.ops, batchOp{kind: opDel, key: stream, fields: ids})
}

// Then makes the writes queued after it wait, on a Redis Cluster, until
// every write queued before it has landed (see Batch). On a single server
// the whole batch is one MULTI/EXEC anyway.
func (b *Batch) Then() {
	n := len(b.ops)
	if n == 0 || (len(b.waves) > 0 && b.waves[len(b.waves)-1] == n) {
		return
	}
	b.waves = append(b.waves, n)
}

// Len is the number of queued writes.
func (b *Batch) Len() int { return len(b.ops) }

// Reset empties the batch. It keeps the slice, not what the writes
// referenced: a coordinator's batch holds a whole state per lineage (~10
// KiB), and after one large round (a backlog worked off) the slots past the
// usual length would keep those values alive for good. A slice grown past
// maxKeptOps is dropped too.
func (b *Batch) Reset() {
	b.waves = b.waves[:0]
	if cap(b.ops) > maxKeptOps {
		b.ops = nil
		return
	}
	clear(b.ops)
	b.ops = b.ops[:0]
}

// maxKeptOps: a batch slice larger than this is not kept across Reset.
const maxKeptOps = 4096

// WriteBatch sends every queued write in one MULTI/EXEC (on a Redis
// Cluster one per hash slot, wave by wave: see Batch). An empty batch sends
// nothing.
func (c *Client) WriteBatch(ctx context.Context, b *Batch) error {
	if b == nil || len(b.ops) == 0 {
		return nil
	}
	for _, op := range b.ops {
		if op.kind == opHSet && len(op.fields)%2 != 0 {
			return fmt.Errorf("stream: batch: hset %s: %d arguments, want field/value pairs", op.key, len(op.fields))
		}
		if op.kind == opPush && op.max <= 0 {
			return fmt.Errorf("stream: batch: push %s: max %d, want > 0", op.key, op.max)
		}
		if op.kind == opAck && op.group == "" {
			return fmt.Errorf("stream: batch: xack %s: no group", op.key)
		}
	}
	ctx, cancel := c.bound(ctx)
	defer cancel()
	if c.cluster {
		return c.writeBatchCluster(ctx, b)
	}
	pipe := c.rdb.TxPipeline()
	for _, op := range b.ops {
		queueOp(ctx, pipe, op)
	}
	if _, err := pipe.Exec(ctx); err != nil {
		return fmt.Errorf("stream: batch of %d writes: %w", len(b.ops), err)
	}
	return nil
}

// maxSlotTx bounds the MULTI/EXECs of one batch in flight at once on a
// Redis Cluster.
const maxSlotTx = 32

// writeBatchCluster sends a batch wave by wave (Then), each wave as one
// MULTI/EXEC per hash slot, up to maxSlotTx of them at once.
func (c *Client) writeBatchCluster(ctx context.Context, b *Batch) error {
	start := 0
	for i := 0; i <= len(b.waves); i++ {
		end := len(b.ops)
		if i < len(b.waves) {
			end = b.waves[i]
		}
		if err := c.writeWave(ctx, b.ops[start:end]); err != nil {
			return fmt.Errorf("stream: batch of %d writes, wave %d of %d: %w", len(b.ops), i+1, len(b.waves)+1, err)
		}
		start = end
	}
	return nil
}

// writeWave sends ops as one MULTI/EXEC per hash slot, in parallel, each
// slot's writes in their queued order.
func (c *Client) writeWave(ctx context.Context, ops []batchOp) error {
	var order []int
	bySlot := map[int][]batchOp{}
	for _, op := range ops {
		s := Slot(op.key)
		if _, ok := bySlot[s]; !ok {
			order = append(order, s)
		}
		bySlot[s] = append(bySlot[s], op)
	}
	errs := make([]error, len(order))
	sem := make(chan struct{}, maxSlotTx)
	var wg sync.WaitGroup
	for i, s := range order {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer func() { <-sem; wg.Done() }()
			pipe := c.rdb.TxPipeline()
			for _, op := range bySlot[s] {
				queueOp(ctx, pipe, op)
			}
			if _, err := pipe.Exec(ctx); err != nil {
				errs[i] = fmt.Errorf("slot %d (%s): %w", s, bySlot[s][0].key, err)
			}
		}()
	}
	wg.Wait()
	return errors.Join(errs...)
}

// queueOp queues one batch write in a pipeline.
func queueOp(ctx context.Context, pipe redis.Pipeliner, op batchOp) {
	switch op.kind {
	case opSet:
		pipe.Set(ctx, op.key, op.val, op.ttl)
	case opHSet:
		args := make([]any, len(op.fields))
		for i, f := range op.fields {
			args[i] = f
		}
		pipe.HSet(ctx, op.key, args...)
	case opPush:
		args := make([]any, len(op.vals))
		for i, v := range op.vals {
			args[i] = v
		}
		pipe.RPush(ctx, op.key, args...)
		pipe.LTrim(ctx, op.key, -op.max, -1)
	case opAck:
		pipe.XAck(ctx, op.key, op.group, op.fields...)
	case opDel:
		pipe.XDel(ctx, op.key, op.fields...)
	}
}
