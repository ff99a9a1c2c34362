//go:build integration

package stream_test

import (
	"context"
	"testing"
	"time"

	"github.com/isched/isched/internal/stream"
	"github.com/isched/isched/internal/testutil"
)

// TestBatchWithAckOnRealRedis: the coordinator's round — state, a session
// hash field and the XACK of the entries that caused them — lands in one
// MULTI/EXEC under the coordinator's ACL user; an entry not in the batch
// stays pending, to be read again.
func TestBatchWithAckOnRealRedis(t *testing.T) { testBatchWithAck(t, testutil.NeedRedis(t)) }

// TestRedisClusterBatchWithAck: the same on the dev Redis Cluster (keys spread
// over three masters; make cluster-up starts it).
func TestRedisClusterBatchWithAck(t *testing.T) { testBatchWithAck(t, testutil.NeedRedisCluster(t)) }

func testBatchWithAck(t *testing.T, r testutil.Redis) {
	ctx := context.Background()
	rep := open(t, r, "reporter", false)
	coord := open(t, r, "coordinator", true)
	k := coord.Keys()
	state, sessions := k.JobState("L1"), k.Sessions()
	t.Cleanup(func() { _ = coord.Del(ctx, k.Ingest(), state, sessions) })

	for _, p := range []string{"r1", "r2"} {
		if _, err := rep.Append(ctx, k.Ingest(), []byte(p), "mac", 1000); err != nil {
			t.Fatalf("reporter XADD: %v", err)
		}
	}
	if err := coord.EnsureGroup(ctx, k.Ingest(), "coordinator"); err != nil {
		t.Fatal(err)
	}
	read, err := coord.ReadGroup(ctx, k.Ingest(), "coordinator", "c1", 10, 100*time.Millisecond)
	if err != nil || len(read) != 2 {
		t.Fatalf("read %d entries, err %v", len(read), err)
	}

	var b stream.Batch
	b.Set(state, []byte(`{"step":10}`), 0)
	b.HSet(sessions, "sid1", `{"seq":1}`)
	b.Ack(k.Ingest(), "coordinator", read[0].ID)
	if err := coord.WriteBatch(ctx, &b); err != nil {
		t.Fatalf("coordinator's batch with XACK: %v", err)
	}
	if v, err := coord.Get(ctx, state); err != nil || string(v) != `{"step":10}` {
		t.Errorf("state %q, err %v", v, err)
	}
	if v, err := coord.HGet(ctx, sessions, "sid1"); err != nil || v != `{"seq":1}` {
		t.Errorf("session %q, err %v", v, err)
	}
	pend, err := coord.ReadOwnPending(ctx, k.Ingest(), "coordinator", "c1", 10)
	if err != nil {
		t.Fatal(err)
	}
	if len(pend) != 1 || pend[0].ID != read[1].ID {
		t.Errorf("pending after the batch: %d entries %v, want only %s", len(pend), pend, read[1].ID)
	}
}
