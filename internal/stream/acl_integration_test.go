//go:build integration

package stream_test

import (
	"context"
	"fmt"
	"os"
	"testing"
	"time"

	"github.com/isched/isched/internal/stream"
	"github.com/isched/isched/internal/testutil"
)

func open(t *testing.T, r testutil.Redis, user string, private bool) *stream.Client {
	t.Helper()
	env := map[string]string{"ISCHED_REDIS_ADDR": r.Addr, "ISCHED_REDIS_PASSWORD_FILE": r.PasswordFile(user), "ISCHED_CLUSTER": fmt.Sprintf("it%d", os.Getpid())}
	cfg, err := stream.ConfigFromEnv(func(k string) string { return env[k] }, user)
	if err != nil {
		t.Fatal(err)
	}
	cfg.Private = private
	c, err := stream.Open(context.Background(), cfg)
	if err != nil {
		t.Fatalf("open as %s: %v", user, err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// TestACLOnRealRedis checks the ACL users of scripts/dev-cluster: the
// reporter appends to the ingest stream and can do nothing else; the agent
// cannot write actions; the coordinator reads what the reporter wrote.
func TestACLOnRealRedis(t *testing.T) { testACL(t, testutil.NeedRedis(t)) }

// TestRedisClusterACL: the same on the dev Redis Cluster (keys spread
// over three masters; make cluster-up starts it).
func TestRedisClusterACL(t *testing.T) { testACL(t, testutil.NeedRedisCluster(t)) }

func testACL(t *testing.T, r testutil.Redis) {
	ctx := context.Background()
	rep := open(t, r, "reporter", false)
	agent := open(t, r, "agent", true)
	coord := open(t, r, "coordinator", true)
	k := rep.Keys()
	t.Cleanup(func() { _ = coord.Del(ctx, k.Ingest(), k.Actions(), k.Snapshot()) })

	id, err := rep.Append(ctx, k.Ingest(), []byte("hello"), "tag", 1000)
	if err != nil {
		t.Fatalf("reporter XADD to ingest: %v", err)
	}
	got, err := coord.Range(ctx, k.Ingest(), id, id, 1)
	if err != nil || len(got) != 1 || string(got[0].Payload) != "hello" || got[0].MAC != "tag" {
		t.Fatalf("coordinator reads the report: %v %+v", err, got)
	}

	denied := []struct {
		name string
		do   func() error
	}{
		{"reporter reads ingest (XRANGE)", func() error { _, err := rep.Range(ctx, k.Ingest(), "-", "+", 10); return err }},
		{"reporter reads ingest (XREAD)", func() error { _, err := rep.ReadAfter(ctx, k.Ingest(), "0", 10, 0); return err }},
		{"reporter joins a group", func() error { return rep.EnsureGroup(ctx, k.Ingest(), "spy") }},
		{"reporter writes actions", func() error { _, err := rep.Append(ctx, k.Actions(), []byte("x"), "", 10); return err }},
		{"reporter sets the snapshot", func() error { return rep.Set(ctx, k.Snapshot(), []byte("x"), 0) }},
		{"reporter sets any key", func() error { return rep.Set(ctx, "other", []byte("x"), 0) }},
		{"reporter deletes ingest", func() error { return rep.Del(ctx, k.Ingest()) }},
		{"agent writes actions", func() error { _, err := agent.Append(ctx, k.Actions(), []byte("x"), "", 10); return err }},
		{"agent reads ingest", func() error { _, err := agent.Range(ctx, k.Ingest(), "-", "+", 1); return err }},
	}
	for _, d := range denied {
		err := d.do()
		if !testutil.IsNoPerm(err) {
			t.Errorf("%s: err %v, want NOPERM", d.name, err)
		}
	}

	// allowed paths of the agent and the coordinator
	if _, err := coord.Append(ctx, k.Actions(), []byte("act"), "", 100); err != nil {
		t.Errorf("coordinator XADD actions: %v", err)
	}
	if acts, err := agent.ReadAfter(ctx, k.Actions(), "0", 10, 100*time.Millisecond); err != nil || len(acts) != 1 {
		t.Errorf("agent XREAD actions: %v %d", err, len(acts))
	}
	if err := agent.Set(ctx, k.Snapshot(), []byte("snap"), time.Minute); err != nil {
		t.Errorf("agent SET snapshot: %v", err)
	}
}
