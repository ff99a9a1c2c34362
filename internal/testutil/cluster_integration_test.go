//go:build integration

package testutil_test

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/isched/isched/internal/stream"
	"github.com/isched/isched/internal/testutil"
)

// TestDevClusterRunsJobs checks the dev cluster's contract that every other
// integration test builds on: partitions route to their nodes, GPUs are
// emulated as GRES and visible in the step.
func TestDevClusterRunsJobs(t *testing.T) {
	testutil.UseLab(t, "gpu", "dev", "cpu")
	testutil.NeedSlurm(t)
	cases := []struct {
		name      string
		args      []string
		wantNodes []string
		wantCUDA  bool
	}{
		{name: "gpu with gres", args: []string{"-p", "gpu", "--gres=gpu:1"}, wantNodes: []string{"gpu1", "gpu2"}, wantCUDA: true},
		{name: "dev", args: []string{"-p", "dev"}, wantNodes: []string{"dev1"}},
		{name: "cpu", args: []string{"-p", "cpu"}, wantNodes: []string{"cpu1", "cpu2"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			dir := t.TempDir()
			out := filepath.Join(dir, "out.txt")
			script := "#!/bin/sh\nsrun sh -c 'echo \"node=$(hostname) slurmd=$SLURMD_NODENAME cuda=${CUDA_VISIBLE_DEVICES-unset}\"'\n"
			path := filepath.Join(dir, "job.sh")
			if err := os.WriteFile(path, []byte(script), 0o755); err != nil {
				t.Fatal(err)
			}
			args := append([]string{"--wait", "--parsable", "-J", "isched-cluster-test", "-t", "2", "-o", out}, tc.args...)
			args = append(args, path)
			start := time.Now()
			testutil.Run(t, 2*time.Minute, "sbatch", args...)
			b, err := os.ReadFile(out)
			if err != nil {
				t.Fatalf("job output: %v", err)
			}
			line := strings.TrimSpace(string(b))
			t.Logf("%s: %q after %s", tc.name, line, time.Since(start).Round(time.Millisecond))
			f := map[string]string{}
			for _, kv := range strings.Fields(line) {
				k, v, _ := strings.Cut(kv, "=")
				f[k] = v
			}
			okNode := false
			for _, n := range tc.wantNodes {
				okNode = okNode || f["node"] == n
			}
			if !okNode || f["slurmd"] != f["node"] {
				t.Errorf("job ran on node=%q slurmd=%q, want one of %v with matching hostname", f["node"], f["slurmd"], tc.wantNodes)
			}
			if tc.wantCUDA && (f["cuda"] == "unset" || f["cuda"] == "") {
				t.Errorf("CUDA_VISIBLE_DEVICES not set in a --gres=gpu:1 step: %q", line)
			}
			if !tc.wantCUDA && f["cuda"] != "unset" {
				t.Errorf("CUDA_VISIBLE_DEVICES=%q set in a job without GPUs", f["cuda"])
			}
		})
	}
}

func TestRedisAnswersAdmin(t *testing.T) {
	r := testutil.NeedRedis(t)
	if r.Password(t, "reporter") == "" {
		t.Fatal("reporter password empty")
	}
	// every password that writes is root's alone; jobs report through
	// isched-relay (issue 26, item 1); viewer only reads, for isched status
	for _, u := range []string{"coordinator", "agent", "reporter", "admin"} {
		fi, err := os.Stat(r.PasswordFile(u))
		if err != nil {
			t.Fatal(err)
		}
		if fi.Mode().Perm()&0o077 != 0 {
			t.Errorf("%s password file mode %v: readable by others", u, fi.Mode().Perm())
		}
	}
}

// TestRedisClusterNodesHaveTheUsers: every master of the dev Redis Cluster
// (scripts/dev-cluster up --redis-cluster) knows isched's ACL users with
// the single server's passwords, and has the default user off.
func TestRedisClusterNodesHaveTheUsers(t *testing.T) {
	r := testutil.NeedRedisCluster(t)
	nodes := strings.Split(r.Addr, ",")
	if len(nodes) < 3 {
		t.Fatalf("cluster %q: want three masters", r.Addr)
	}
	for _, addr := range nodes {
		for _, user := range []string{"coordinator", "agent", "reporter", "viewer"} {
			env := map[string]string{"ISCHED_REDIS_ADDR": addr, "ISCHED_REDIS_PASSWORD_FILE": r.PasswordFile(user), "ISCHED_CLUSTER": "users"}
			cfg, err := stream.ConfigFromEnv(func(k string) string { return env[k] }, user)
			if err != nil {
				t.Fatal(err)
			}
			c, err := stream.Open(context.Background(), cfg) // AUTH and PING
			if err != nil {
				t.Errorf("node %s as %s: %v", addr, user, err)
				continue
			}
			_ = c.Close()
		}
		env := map[string]string{"ISCHED_REDIS_ADDR": addr, "ISCHED_REDIS_PASSWORD_FILE": filepath.Join(t.TempDir(), "none"), "ISCHED_CLUSTER": "users"}
		if err := os.WriteFile(env["ISCHED_REDIS_PASSWORD_FILE"], []byte("guess\n"), 0o600); err != nil {
			t.Fatal(err)
		}
		cfg, err := stream.ConfigFromEnv(func(k string) string { return env[k] }, "default")
		if err != nil {
			t.Fatal(err)
		}
		if c, err := stream.Open(context.Background(), cfg); err == nil {
			_ = c.Close()
			t.Errorf("node %s: the default user logs in", addr)
		}
	}
}

// TestDevClusterQuietCancelsLeftovers: `dev-cluster quiet`, which make test
// runs before its tests, cancels the jobs a killed run left behind (one of
// alice's, one of root's on gpu), names each, and returns once the queue is
// empty.
func TestDevClusterQuietCancelsLeftovers(t *testing.T) {
	testutil.OwnLab(t) // it cancels every job on the cluster
	testutil.NeedSlurm(t)
	alice := strings.TrimSpace(testutil.Run(t, time.Minute, "runuser", "-u", "alice", "--",
		"sbatch", "--parsable", "-J", "isched-left-alice", "-p", "cpu", "-t", "5", "-o", "/dev/null", "--wrap", "sleep 300"))
	root := strings.TrimSpace(testutil.Run(t, time.Minute, "sbatch", "--parsable", "-J", "isched-left-root",
		"-p", "gpu", "-t", "5", "-o", "/dev/null", "--wrap", "sleep 300"))
	out := testutil.Run(t, 2*time.Minute, filepath.Join(testutil.RepoRoot(), "scripts", "dev-cluster"), "quiet")
	for _, want := range []string{alice + " alice isched-left-alice cpu", root + " root isched-left-root gpu"} {
		if !strings.Contains(out, "cancelling a left-over job on lab: "+want) {
			t.Errorf("dev-cluster quiet did not name %q:\n%s", want, out)
		}
	}
	if q := strings.TrimSpace(testutil.Run(t, time.Minute, "squeue", "-h", "-o", "%i %j %T")); q != "" {
		t.Errorf("jobs left after dev-cluster quiet:\n%s", q)
	}
}
