//go:build integration

package stream_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"testing"

	"github.com/isched/isched/internal/stream"
	"github.com/isched/isched/internal/testutil"
)

// TestRedisClusterBatchSpansSlots: on the dev Redis Cluster a coordinator's
// batch over many lineages (each its own hash slot, spread over the three
// masters), a Then, the sessions hash and an XACK all land, and a Del of
// keys in different slots deletes them all (one MULTI/EXEC or DEL over
// several slots is refused by Redis Cluster: CROSSSLOT).
func TestRedisClusterBatchSpansSlots(t *testing.T) {
	r := testutil.NeedRedisCluster(t)
	ctx := context.Background()
	coord := open(t, r, "coordinator", true)
	k := coord.Keys()
	if err := coord.EnsureGroup(ctx, k.Ingest(), "coordinator"); err != nil {
		t.Fatal(err)
	}
	id, err := coord.Append(ctx, k.Ingest(), []byte("r"), "mac", 100)
	if err != nil {
		t.Fatal(err)
	}
	if got, err := coord.ReadGroup(ctx, k.Ingest(), "coordinator", "c1", 10, 0); err != nil || len(got) != 1 {
		t.Fatalf("read %v, err %v", got, err)
	}
	var keys []string
	slots := map[int]bool{}
	var b stream.Batch
	for i := range 40 {
		l := fmt.Sprintf("L%d", i)
		b.Set(k.JobState(l), []byte(l), 0)
		b.PushList(k.JobSeries(l), 5, []byte(l+"a"), []byte(l+"b"))
		keys = append(keys, k.JobState(l), k.JobSeries(l))
		slots[stream.Slot(k.JobState(l))] = true
	}
	if len(slots) < 30 {
		t.Fatalf("40 lineages in %d slots: the test would not span the cluster", len(slots))
	}
	b.Then()
	b.HSet(k.Sessions(), "sid", "1")
	b.Ack(k.Ingest(), "coordinator", id)
	keys = append(keys, k.Sessions(), k.Ingest())
	t.Cleanup(func() { _ = coord.Del(context.Background(), keys...) })
	if err := coord.WriteBatch(ctx, &b); err != nil {
		t.Fatalf("batch over %d slots: %v", len(slots), err)
	}
	for i := range 40 {
		l := fmt.Sprintf("L%d", i)
		if v, err := coord.Get(ctx, k.JobState(l)); err != nil || string(v) != l {
			t.Errorf("%s state %q, err %v", l, v, err)
		}
		if v, err := coord.List(ctx, k.JobSeries(l)); err != nil || len(v) != 2 {
			t.Errorf("%s series %q, err %v", l, v, err)
		}
	}
	if v, err := coord.HGet(ctx, k.Sessions(), "sid"); err != nil || v != "1" {
		t.Errorf("session %q, err %v", v, err)
	}
	if pend, err := coord.ReadOwnPending(ctx, k.Ingest(), "coordinator", "c1", 10); err != nil || len(pend) != 0 {
		t.Errorf("pending after the batch's XACK: %v, err %v", pend, err)
	}
	if err := coord.Del(ctx, keys...); err != nil {
		t.Fatalf("del over %d slots: %v", len(slots), err)
	}
	for _, key := range keys {
		if _, err := coord.Get(ctx, key); !errors.Is(err, stream.ErrNotFound) {
			t.Errorf("%s after Del: %v, want not found", key, err)
		}
	}
}

// BenchmarkWriteBatch: one coordinator round's batch — 200 lineages'
// state, status and a series point, then (Then) the sessions hash and an
// XACK — on the single dev Redis and on the dev Redis Cluster, where it is
// one MULTI/EXEC per slot instead of one in all.
func BenchmarkWriteBatch(b *testing.B) {
	for _, tc := range []struct {
		name string
		need func(testing.TB) testutil.Redis
	}{{"single", testutil.NeedRedis}, {"cluster", testutil.NeedRedisCluster}} {
		b.Run(tc.name, func(b *testing.B) {
			r := tc.need(b)
			ctx := context.Background()
			env := map[string]string{"ISCHED_REDIS_ADDR": r.Addr, "ISCHED_REDIS_PASSWORD_FILE": r.PasswordFile("coordinator"), "ISCHED_CLUSTER": fmt.Sprintf("benchbatch%d", os.Getpid())}
			cfg, err := stream.ConfigFromEnv(func(k string) string { return env[k] }, "coordinator")
			if err != nil {
				b.Fatal(err)
			}
			c, err := stream.Open(ctx, cfg)
			if err != nil {
				b.Fatal(err)
			}
			defer c.Close()
			k := c.Keys()
			var keys []string
			state := bytes.Repeat([]byte("s"), 2048)
			var batch stream.Batch
			for range b.N {
				for i := range 200 {
					l := fmt.Sprintf("L%d", i)
					batch.Set(k.JobState(l), state, 0)
					batch.Set(k.JobStatus(l), state[:900], 0)
					batch.PushList(k.JobSeries(l), 1000, []byte(`{"t_ms":1,"step":2}`))
				}
				batch.Then()
				batch.HSet(k.Sessions(), "sid", "1")
				batch.Ack(k.Ingest(), "coordinator", "1-1")
				if err := c.WriteBatch(ctx, &batch); err != nil && !strings.Contains(err.Error(), "NOGROUP") {
					b.Fatal(err)
				}
				batch.Reset()
			}
			b.ReportMetric(float64(b.Elapsed().Microseconds())/float64(b.N), "µs/batch")
			for i := range 200 {
				keys = append(keys, k.JobKeys(fmt.Sprintf("L%d", i))...)
			}
			_ = c.Del(ctx, append(keys, k.Sessions(), k.Ingest())...)
		})
	}
}
