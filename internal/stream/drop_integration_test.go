//go:build integration

package stream_test

import (
	"context"
	"fmt"
	"os"
	"slices"
	"testing"

	"github.com/isched/isched/internal/stream"
	"github.com/isched/isched/internal/testutil"
)

// TestDropCluster: DropCluster unlinks every key of its cluster name,
// whatever its hash slot, and nothing of clusters whose names start with
// its name.
func TestDropCluster(t *testing.T) { testDropCluster(t, testutil.NeedRedis(t)) }

// TestRedisClusterDropCluster: the same on the dev Redis Cluster, the keys
// spread over its three masters.
func TestRedisClusterDropCluster(t *testing.T) { testDropCluster(t, testutil.NeedRedisCluster(t)) }

func testDropCluster(t *testing.T, r testutil.Redis) {
	ctx := context.Background()
	base := fmt.Sprintf("drop%d", os.Getpid())
	names := []string{base, base + "2", base + "-x"}
	clients := map[string]*stream.Client{}
	for _, n := range names {
		c := r.Client(t, "coordinator", n)
		clients[n] = c
		k := c.Keys()
		keys := []string{k.Ingest(), k.Receipts(), k.Lineages()}
		for i := range 50 {
			keys = append(keys, k.JobKeys(fmt.Sprintf("lin%d", i))...)
		}
		for _, key := range keys {
			if err := c.Set(ctx, key, []byte("x"), 0); err != nil {
				t.Fatal(err)
			}
		}
		t.Cleanup(func() { _, _ = c.DropCluster(ctx) })
	}
	count := func(n string) int {
		t.Helper()
		k := clients[n].Keys()
		got := 0
		for _, key := range append([]string{k.Ingest(), k.Receipts(), k.Lineages()}, k.JobKeys("lin7")...) {
			if _, err := clients[n].Get(ctx, key); err == nil {
				got++
			}
		}
		return got
	}
	before := map[string]int{}
	for _, n := range names {
		before[n] = count(n)
	}
	n, err := clients[names[0]].DropCluster(ctx)
	if err != nil {
		t.Fatal(err)
	}
	want := 3 + 50*len(clients[names[0]].Keys().JobKeys("x"))
	if n != want {
		t.Errorf("dropped %d keys, want %d", n, want)
	}
	if got := count(names[0]); got != 0 || before[names[0]] == 0 {
		t.Errorf("%s: %d of its keys left (had %d)", names[0], got, before[names[0]])
	}
	for _, other := range slices.Clone(names[1:]) {
		if got := count(other); got != before[other] || got == 0 {
			t.Errorf("%s lost keys to another cluster's drop: %d of %d left", other, got, before[other])
		}
	}
}
