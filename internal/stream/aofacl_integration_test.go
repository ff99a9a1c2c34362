//go:build integration

package stream_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/isched/isched/internal/stream"
	"github.com/isched/isched/internal/testutil"
)

// defaultACLLine returns the `user default` line of a file (the first one).
func defaultACLLine(t *testing.T, path string) string {
	t.Helper()
	return testutil.ACLLine(t, path, "user default ")
}

// TestAOFKeepsTransactionsWithTheDocumentedACL: Redis before 8 replays
// each MULTI/EXEC of its append-only file as the default user and checks
// that user's ACL at EXEC (redis/redis#14541). With the default user off
// and without permissions, every transaction since the last AOF rewrite
// (the coordinator's batches: acks, sessions, lineage states) was dropped
// on restart while plain commands stayed: after a Redis kill the
// coordinator re-judged every report with its sessions gone
// (TestChaosRedisKilledUnder20Jobs). A Redis of its own, with the
// `default` line docs/deployment.md and the dev cluster use, is killed
// after a batch and must load it back.
func TestAOFKeepsTransactionsWithTheDocumentedACL(t *testing.T) {
	bin, err := exec.LookPath("redis-server")
	if err != nil {
		t.Fatalf("redis-server is needed (make deps installs it): %v", err)
	}
	root := testutil.RepoRoot()
	line := defaultACLLine(t, filepath.Join(root, "docs", "deployment.md"))
	if dev := defaultACLLine(t, filepath.Join(root, "scripts", "dev-cluster")); dev != line {
		t.Errorf("scripts/dev-cluster's default user %q differs from docs/deployment.md's %q", dev, line)
	}
	dir := t.TempDir()
	pass := "aof-test-password"
	passFile := filepath.Join(dir, "coordinator.pass")
	_ = os.WriteFile(passFile, []byte(pass+"\n"), 0o600)
	acl := filepath.Join(dir, "users.acl")
	_ = os.WriteFile(acl, []byte(line+"\nuser coordinator on >"+pass+" resetchannels ~isched:* -@all +@all -@dangerous -@admin +info\n"), 0o600)
	port := freePort(t)
	var srv *exec.Cmd
	start := func() {
		srv = exec.Command(bin, "--port", fmt.Sprint(port), "--bind", "127.0.0.1", "--aclfile", acl,
			"--appendonly", "yes", "--appendfsync", "always", "--save", "", "--dir", dir,
			"--logfile", filepath.Join(dir, "redis.log"))
		if err := srv.Start(); err != nil {
			t.Fatal(err)
		}
	}
	start()
	t.Cleanup(func() { _ = srv.Process.Kill(); _, _ = srv.Process.Wait() })
	open := func() *stream.Client {
		env := map[string]string{"ISCHED_REDIS_ADDR": fmt.Sprintf("127.0.0.1:%d", port), "ISCHED_REDIS_PASSWORD_FILE": passFile, "ISCHED_CLUSTER": "aoftest"}
		cfg, err := stream.ConfigFromEnv(func(k string) string { return env[k] }, "coordinator")
		if err != nil {
			t.Fatal(err)
		}
		deadline := time.Now().Add(20 * time.Second)
		for {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			c, err := stream.Open(ctx, cfg)
			cancel()
			if err == nil {
				// a server still loading its AOF answers LOADING
				if _, err = c.Get(context.Background(), c.Keys().JobState("probe")); err == nil || errors.Is(err, stream.ErrNotFound) {
					return c
				}
				c.Close()
			}
			if time.Now().After(deadline) {
				log, _ := os.ReadFile(filepath.Join(dir, "redis.log"))
				t.Fatalf("redis-server of the test: %v\n%s", err, log)
			}
			time.Sleep(100 * time.Millisecond)
		}
	}
	c := open()
	k := c.Keys()
	ctx := context.Background()
	// a batch as the coordinator writes it (two commands or more: Redis
	// propagates a one-command transaction without MULTI)
	var b stream.Batch
	b.Set(k.JobState("tx"), []byte("state"), 0)
	b.HSet(k.Sessions(), "sid", "session")
	if err := c.WriteBatch(ctx, &b); err != nil {
		t.Fatal(err)
	}
	if err := c.Set(ctx, k.JobState("plain"), []byte("plain"), 0); err != nil {
		t.Fatal(err)
	}
	c.Close()
	_ = srv.Process.Kill() // SIGKILL: the AOF (fsync always) is all there is
	_, _ = srv.Process.Wait()
	start()
	c = open()
	defer c.Close()
	if _, err := c.Get(ctx, k.JobState("plain")); err != nil {
		t.Fatalf("a plain SET did not survive the restart: %v", err)
	}
	if _, err := c.Get(ctx, k.JobState("tx")); err != nil {
		log, _ := os.ReadFile(filepath.Join(dir, "redis.log"))
		t.Errorf("a MULTI/EXEC batch was lost on restart with %q: %v\nredis log:\n%s", line, err, log)
	}
	if _, err := c.HGet(ctx, k.Sessions(), "sid"); err != nil {
		t.Errorf("the batch's HSET was lost on restart: %v", err)
	}
}
