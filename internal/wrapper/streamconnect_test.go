package wrapper

import (
	"context"
	"testing"

	"github.com/alicebob/miniredis/v2"
)

// TestStreamConnectUsesTheJobsCluster: a job reporting straight to Redis
// whose cluster comes from Slurm (SLURM_CLUSTER_NAME, no ISCHED_CLUSTER)
// connects on that cluster's keys; nothing falls back to a built-in name.
func TestStreamConnectUsesTheJobsCluster(t *testing.T) {
	t.Parallel()
	mr := miniredis.RunT(t)
	env := map[string]string{"ISCHED_REDIS_ADDR": mr.Addr(), "SLURM_CLUSTER_NAME": "frontera"}
	getenv := func(k string) string { return env[k] }
	c, err := StreamConnect(getenv)(context.Background(), clusterName(getenv))
	if err != nil {
		t.Fatalf("connect with Slurm's cluster name: %v", err)
	}
	if _, err := c.Append(context.Background(), "isched:frontera:ingest", []byte("{}"), "mac", 0); err != nil {
		t.Fatal(err)
	}
	if !mr.Exists("isched:frontera:ingest") {
		t.Errorf("keys %v, want isched:frontera:ingest", mr.Keys())
	}
}
