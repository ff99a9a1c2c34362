//go:build integration

package stream_test

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/isched/isched/internal/stream"
	"github.com/isched/isched/internal/testutil"
)

func openBounded(t testing.TB, r testutil.Redis, cluster string, maxEntry int) *stream.Client {
	t.Helper()
	env := map[string]string{"ISCHED_REDIS_ADDR": r.Addr, "ISCHED_REDIS_PASSWORD_FILE": r.PasswordFile("coordinator"), "ISCHED_CLUSTER": cluster}
	cfg, err := stream.ConfigFromEnv(func(k string) string { return env[k] }, "coordinator")
	if err != nil {
		t.Fatal(err)
	}
	cfg.Private, cfg.MaxEntry = true, maxEntry
	c, err := stream.Open(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// TestBoundedGroupReads: with MaxEntry, new and pending reads return at
// most count entries, none over the cap: a larger one is deleted inside
// Redis and comes back as Oversize, without its fields, and once more,
// pending and gone, without payload. Claim returns ids only (and drops
// the deleted one from the pending list).
func TestBoundedGroupReads(t *testing.T) { testBoundedGroupReads(t, testutil.NeedRedis(t)) }

// TestRedisClusterBoundedGroupReads: the same on the dev Redis Cluster (keys spread
// over three masters; make cluster-up starts it).
func TestRedisClusterBoundedGroupReads(t *testing.T) {
	testBoundedGroupReads(t, testutil.NeedRedisCluster(t))
}

func testBoundedGroupReads(t *testing.T, r testutil.Redis) {
	ctx := context.Background()
	cluster := fmt.Sprintf("bounded%d", os.Getpid())
	c := openBounded(t, r, cluster, 1024)
	k := c.Keys()
	t.Cleanup(func() { _ = c.Del(context.Background(), k.Ingest()) })
	if err := c.EnsureGroup(ctx, k.Ingest(), "g"); err != nil {
		t.Fatal(err)
	}
	for _, p := range [][]byte{[]byte("one"), bytes.Repeat([]byte("x"), 1025), []byte("three"), []byte("four")} {
		if _, err := c.Append(ctx, k.Ingest(), p, "mac", 0); err != nil {
			t.Fatal(err)
		}
	}
	got, err := c.ReadGroup(ctx, k.Ingest(), "g", "c1", 3, 10*time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 3 || string(got[0].Payload) != "one" || got[0].MAC != "mac" || !got[1].Oversize || got[1].Payload != nil || string(got[2].Payload) != "three" {
		t.Fatalf("bounded read: %+v", got)
	}
	if n, _ := c.Len(ctx, k.Ingest()); n != 3 {
		t.Errorf("stream length %d after the oversize entry: want 3 (it is deleted)", n)
	}
	pend, err := c.ReadOwnPending(ctx, k.Ingest(), "g", "c1", 10)
	if err != nil {
		t.Fatal(err)
	}
	if len(pend) != 3 || !pend[0].Redelivered || pend[1].Payload != nil || pend[1].ID != got[1].ID || string(pend[2].Payload) != "three" {
		t.Fatalf("pending: %+v", pend)
	}
	// a blocking read waits for the next entry (by polling)
	go func() {
		time.Sleep(100 * time.Millisecond)
		_, _ = c.Append(context.Background(), k.Ingest(), []byte("five"), "mac", 0)
	}()
	more, err := c.ReadGroup(ctx, k.Ingest(), "g", "c1", 10, 5*time.Second)
	if err != nil || len(more) == 0 || string(more[0].Payload) != "four" {
		t.Fatalf("next read: %v %+v", err, more)
	}
	claimed, err := c.Claim(ctx, k.Ingest(), "g", "c2", 0, 100)
	if err != nil {
		t.Fatal(err)
	}
	if len(claimed) != 3 || claimed[0].Payload != nil || !claimed[0].Redelivered {
		t.Fatalf("claim: %+v", claimed)
	}
}

// TestRepairGroupKeepsUndeliveredEntries: an entry from the future that
// the group has not read yet is deleted, and the group stays where it
// was, so the entries after its position still come.
func TestRepairGroupKeepsUndeliveredEntries(t *testing.T) {
	testRepairGroupKeepsUndeliveredEntries(t, testutil.NeedRedis(t))
}

// TestRedisClusterRepairGroupKeepsUndeliveredEntries: the same on the dev
// Redis Cluster (XSETID and XGROUP SETID routed to the stream's master).
func TestRedisClusterRepairGroupKeepsUndeliveredEntries(t *testing.T) {
	testRepairGroupKeepsUndeliveredEntries(t, testutil.NeedRedisCluster(t))
}

func testRepairGroupKeepsUndeliveredEntries(t *testing.T, r testutil.Redis) {
	ctx := context.Background()
	cluster := fmt.Sprintf("repair%d", os.Getpid())
	c := openBounded(t, r, cluster, 1024)
	k := c.Keys()
	t.Cleanup(func() { _ = c.Del(context.Background(), k.Ingest()) })
	if err := c.EnsureGroup(ctx, k.Ingest(), "g"); err != nil {
		t.Fatal(err)
	}
	if rp, err := c.RepairGroup(ctx, k.Ingest(), "g", time.Now(), time.Minute); err != nil || rp.Any() {
		t.Fatalf("a sound stream repaired: %+v %v", rp, err)
	}
	if _, err := c.Append(ctx, k.Ingest(), []byte("read"), "m", 0); err != nil {
		t.Fatal(err)
	}
	if _, err := c.ReadGroup(ctx, k.Ingest(), "g", "c1", 10, time.Millisecond); err != nil {
		t.Fatal(err)
	}
	unread, err := c.Append(ctx, k.Ingest(), []byte("unread"), "m", 0)
	if err != nil {
		t.Fatal(err)
	}
	future := fmt.Sprintf("%d-0", time.Now().Add(time.Hour).UnixMilli())
	raw := redis.NewUniversalClient(&redis.UniversalOptions{Addrs: strings.Split(r.Addr, ","), Username: "coordinator", Password: r.Password(t, "coordinator"), DisableIdentity: true, Protocol: 2})
	t.Cleanup(func() { _ = raw.Close() })
	if err := raw.XAdd(ctx, &redis.XAddArgs{Stream: k.Ingest(), ID: future, Values: []string{"m", "x"}}).Err(); err != nil {
		t.Fatal(err)
	}
	rp, err := c.RepairGroup(ctx, k.Ingest(), "g", time.Now(), time.Minute)
	if err != nil || rp.FutureIDs != 1 || rp.LastID != unread {
		t.Fatalf("repair: %+v %v, want 1 deleted, last id %s", rp, err, unread)
	}
	got, err := c.ReadGroup(ctx, k.Ingest(), "g", "c1", 10, time.Millisecond)
	if err != nil || len(got) != 1 || string(got[0].Payload) != "unread" {
		t.Fatalf("after the repair: %v %+v, want the unread entry", err, got)
	}
	if _, err := c.Append(ctx, k.Ingest(), []byte("new"), "m", 0); err != nil {
		t.Fatalf("append after the repair: %v", err)
	}
}

// BenchmarkGroupRead compares a consumer group read of 512 reports of
// 1.5 KiB (a sample report's size) plain and bounded (MaxEntry: one
// XREADGROUP per entry inside a script), on the dev cluster's Redis.
//
//	ISCHED_INTEGRATION=1 go test -tags integration,libmunge -run '^$' -bench GroupRead ./internal/stream
func BenchmarkGroupRead(b *testing.B) {
	r := testutil.NeedRedis(b)
	ctx := context.Background()
	payload := bytes.Repeat([]byte("x"), 1536)
	for _, maxEntry := range []int{0, 64 << 10} {
		name := "plain"
		if maxEntry > 0 {
			name = "bounded"
		}
		b.Run(name, func(b *testing.B) {
			c := openBounded(b, r, fmt.Sprintf("benchread%d", os.Getpid()), maxEntry)
			k := c.Keys()
			b.Cleanup(func() { _ = c.Del(context.Background(), k.Ingest()) })
			if err := c.EnsureGroup(ctx, k.Ingest(), "g"); err != nil {
				b.Fatal(err)
			}
			for range b.N {
				b.StopTimer()
				for range 512 {
					if _, err := c.Append(ctx, k.Ingest(), payload, "mac", 0); err != nil {
						b.Fatal(err)
					}
				}
				b.StartTimer()
				got, err := c.ReadGroup(ctx, k.Ingest(), "g", "c1", 512, time.Millisecond)
				if err != nil || len(got) != 512 {
					b.Fatalf("read %d: %v", len(got), err)
				}
			}
			b.ReportMetric(float64(b.Elapsed().Microseconds())/float64(b.N)/512, "µs/entry")
		})
	}
}

// TestRepairGroupRecreates: a stream deleted under the coordinator (a
// hostile or mistaken DEL) is created again with its group, and a group
// destroyed alone is created again; each repair says which. The split of
// RepairGroup (issue 45) once dereferenced the missing stream's info
// here: the coordinator panicked (CI ci6, TestHostile... in
// internal/coordinator).
func TestRepairGroupRecreates(t *testing.T) {
	r := testutil.NeedRedis(t)
	ctx := context.Background()
	c := openBounded(t, r, fmt.Sprintf("recreate%d", os.Getpid()), 1024)
	k := c.Keys()
	t.Cleanup(func() { _ = c.Del(context.Background(), k.Ingest()) })
	_ = c.Del(ctx, k.Ingest())
	rp, err := c.RepairGroup(ctx, k.Ingest(), "g", time.Now(), time.Minute)
	if err != nil || rp.Recreated != "stream" {
		t.Fatalf("missing stream: %+v %v, want recreated stream", rp, err)
	}
	raw := redis.NewUniversalClient(&redis.UniversalOptions{Addrs: strings.Split(r.Addr, ","), Username: "coordinator", Password: r.Password(t, "coordinator"), DisableIdentity: true, Protocol: 2})
	t.Cleanup(func() { _ = raw.Close() })
	if err := raw.XGroupDestroy(ctx, k.Ingest(), "g").Err(); err != nil {
		t.Fatal(err)
	}
	if rp, err = c.RepairGroup(ctx, k.Ingest(), "g", time.Now(), time.Minute); err != nil || rp.Recreated != "group" {
		t.Fatalf("missing group: %+v %v, want recreated group", rp, err)
	}
	if rp, err = c.RepairGroup(ctx, k.Ingest(), "g", time.Now(), time.Minute); err != nil || rp.Any() {
		t.Fatalf("sound again: %+v %v", rp, err)
	}
}
