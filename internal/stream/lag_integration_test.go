//go:build integration

package stream_test

import (
	"context"
	"testing"
	"time"

	"github.com/isched/isched/internal/stream"
	"github.com/isched/isched/internal/testutil"
)

// TestLagCountsTrimmedUnread appends more than MAXLEN ~ keeps to a stream
// whose group does not read, twice: on the real Redis, the entries trimmed
// before the group read them are counted while it is behind, and after its
// read counter is valid (the second time) also once it caught up.
func TestLagCountsTrimmedUnread(t *testing.T) { testLagCountsTrimmedUnread(t, testutil.NeedRedis(t)) }

// TestRedisClusterLagCountsTrimmedUnread: the same on the dev Redis Cluster (keys spread
// over three masters; make cluster-up starts it).
func TestRedisClusterLagCountsTrimmedUnread(t *testing.T) {
	testLagCountsTrimmedUnread(t, testutil.NeedRedisCluster(t))
}

func testLagCountsTrimmedUnread(t *testing.T, r testutil.Redis) {
	ctx := context.Background()
	c := open(t, r, "coordinator", true)
	key := c.Keys().Ingest() + "-lagtest"
	t.Cleanup(func() { _ = c.Del(ctx, key) })
	_ = c.Del(ctx, key)
	if err := c.EnsureGroup(ctx, key, "g"); err != nil {
		t.Fatal(err)
	}
	lag := func() stream.GroupLag {
		t.Helper()
		l, err := c.Lag(ctx, key, "g")
		if err != nil {
			t.Fatal(err)
		}
		return l
	}
	const burst = 500
	var lostBefore int64
	for round := 1; round <= 2; round++ {
		for i := range burst {
			if _, err := c.Append(ctx, key, []byte(`{"i":1}`), "mac", 100); err != nil {
				t.Fatalf("append %d: %v", i, err)
			}
		}
		l := lag()
		if l.Added != int64(round*burst) || l.Length >= burst {
			t.Fatalf("round %d before reading: %+v, want %d added, length trimmed below %d", round, l, round*burst, burst)
		}
		n, ok := l.TrimmedUnread()
		if !l.Behind() || !ok || n != lostBefore+burst-l.Length {
			t.Fatalf("round %d before reading: behind %v, trimmed unread %d %v (%+v), want true, %d", round, l.Behind(), n, ok, l, lostBefore+burst-l.Length)
		}
		ents, err := c.ReadGroup(ctx, key, "g", "c", 10_000, 10*time.Millisecond)
		if err != nil {
			t.Fatal(err)
		}
		if int64(len(ents)) != l.Length {
			t.Fatalf("read %d entries, the stream held %d", len(ents), l.Length)
		}
		after := lag()
		n2, ok := after.TrimmedUnread()
		if after.Behind() || !ok {
			t.Fatalf("round %d after reading what is left: %+v, want caught up", round, after)
		}
		if round == 2 && n2 != n {
			t.Fatalf("round 2 after reading: trimmed unread %d (%+v), want still %d", n2, after, n)
		}
		lostBefore = n2
	}
	if _, err := c.Lag(ctx, key, "nosuchgroup"); err == nil {
		t.Fatal("Lag of a missing group: no error")
	}
}

// TestAckDeleteKeepsLag: entries the group read, acked and deleted in one
// batch (what the coordinator does with the reports it rejects) leave the
// stream, and on the real Redis the group's lag and the trimmed-unread
// count stay known and right: deleting only what the group read never
// puts a tombstone after its last-delivered id.
func TestAckDeleteKeepsLag(t *testing.T) {
	ctx := context.Background()
	c := open(t, testutil.NeedRedis(t), "coordinator", true)
	key := c.Keys().Ingest() + "-acktest"
	t.Cleanup(func() { _ = c.Del(ctx, key) })
	_ = c.Del(ctx, key)
	if err := c.EnsureGroup(ctx, key, "g"); err != nil {
		t.Fatal(err)
	}
	for i := range 10 {
		if _, err := c.Append(ctx, key, []byte(`{"i":1}`), "mac", 1000); err != nil {
			t.Fatalf("append %d: %v", i, err)
		}
	}
	for _, step := range []struct{ read, length, lag int64 }{{6, 4, 4}, {10, 0, 0}} {
		ents, err := c.ReadGroup(ctx, key, "g", "c", 6, 10*time.Millisecond)
		if err != nil {
			t.Fatal(err)
		}
		ids := make([]string, len(ents))
		for i, e := range ents {
			ids[i] = e.ID
		}
		var b stream.Batch
		b.Ack(key, "g", ids...)
		b.Delete(key, ids...)
		if err := c.WriteBatch(ctx, &b); err != nil {
			t.Fatal(err)
		}
		l, err := c.Lag(ctx, key, "g")
		if err != nil {
			t.Fatal(err)
		}
		n, ok := l.TrimmedUnread()
		if l.Read != step.read || l.Length != step.length || l.Lag != step.lag || l.Pending != 0 || !ok || n != 0 {
			t.Fatalf("after reading %d: %+v, trimmed unread %d %v; want length %d, lag %d, none pending, 0 trimmed",
				step.read, l, n, ok, step.length, step.lag)
		}
	}
}
