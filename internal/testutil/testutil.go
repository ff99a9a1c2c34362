// Package testutil lets integration tests reach the real local cluster
// (scripts/dev-cluster): the Slurm controller and the Redis server with
// isched's ACL users.
//
// A missing server is a skip only on a developer's machine that did not ask
// for integration tests. When CI is set or ISCHED_INTEGRATION=1, a missing
// server is a test failure: integration tests never pass by not running.
package testutil

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/isched/isched/internal/stream"
)

// Required reports whether integration servers must be present.
func Required() bool {
	return os.Getenv("CI") != "" || os.Getenv("ISCHED_INTEGRATION") == "1"
}

// unavailable fails the test when servers are required, and skips it otherwise.
func unavailable(t testing.TB, format string, args ...any) {
	t.Helper()
	msg := fmt.Sprintf(format, args...)
	if Required() {
		t.Fatalf("integration server missing (CI or ISCHED_INTEGRATION=1 is set, so this fails): %s; run `scripts/dev-cluster up`", msg)
	}
	t.Skipf("integration server missing: %s (set ISCHED_INTEGRATION=1 to make this a failure)", msg)
}

// NeedPrometheus returns the path of the prometheus server binary (Debian's
// prometheus package, in make deps).
func NeedPrometheus(t testing.TB) string {
	t.Helper()
	p, err := exec.LookPath("prometheus")
	if err != nil {
		unavailable(t, "prometheus not installed (apt-get install prometheus): %v", err)
	}
	return p
}

// DevDir is the dev cluster's state directory.
func DevDir() string {
	if d := os.Getenv("ISCHED_DEV_DIR"); d != "" {
		return d
	}
	return "/var/lib/isched-dev"
}

// Redis describes the dev cluster's Redis server, or its Redis Cluster.
type Redis struct {
	// Addr is host:port, or for a Redis Cluster the comma-separated
	// addresses of its masters (ISCHED_REDIS_ADDR's form).
	Addr string
	dir  string
}

// DefaultClusterAddr is the Redis Cluster that `scripts/dev-cluster up
// --redis-cluster` starts (make cluster-up).
const DefaultClusterAddr = "127.0.0.1:6391,127.0.0.1:6392,127.0.0.1:6393"

// Password returns the password of an ACL user (admin, coordinator, agent, reporter).
func (r Redis) Password(t testing.TB, user string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(r.dir, "redis", user+".pass"))
	if err != nil {
		t.Fatalf("read password of redis user %q: %v", user, err)
	}
	return strings.TrimSpace(string(b))
}

// PasswordFile returns the path of an ACL user's password file.
func (r Redis) PasswordFile(user string) string {
	return filepath.Join(r.dir, "redis", user+".pass")
}

// Client opens a stream client as an ACL user on a cluster's keys, its
// password file checked private as the services check theirs; it is
// closed when the test ends.
func (r Redis) Client(t testing.TB, user, cluster string) *stream.Client {
	t.Helper()
	cfg, err := stream.ConfigFromEnv(func(k string) string {
		return map[string]string{"ISCHED_REDIS_ADDR": r.Addr, "ISCHED_REDIS_PASSWORD_FILE": r.PasswordFile(user), "ISCHED_CLUSTER": cluster}[k]
	}, user)
	if err != nil {
		t.Fatal(err)
	}
	cfg.Private = true
	c, err := stream.Open(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// NeedRedis returns the dev cluster's Redis after checking that it answers
// PING as the admin user.
func NeedRedis(t testing.TB) Redis {
	t.Helper()
	UseLab(t) // before the check: a test holding the lab may have a daemon down
	r := Redis{Addr: os.Getenv("ISCHED_REDIS_ADDR"), dir: DevDir()}
	if r.Addr == "" {
		r.Addr = "127.0.0.1:6390"
	}
	pw, err := os.ReadFile(filepath.Join(r.dir, "redis", "admin.pass"))
	if err != nil {
		unavailable(t, "redis admin password: %v", err)
		return r
	}
	for _, a := range strings.Split(r.Addr, ",") {
		if err := ping(a, "admin", strings.TrimSpace(string(pw))); err != nil {
			unavailable(t, "redis at %s: %v", a, err)
		}
	}
	return r
}

// NeedRedisCluster returns the dev cluster's Redis Cluster
// (ISCHED_REDIS_CLUSTER_ADDR, default DefaultClusterAddr) after checking
// that every master answers as the admin user and reports cluster_state:ok.
func NeedRedisCluster(t testing.TB) Redis {
	t.Helper()
	UseLab(t) // before the check: a test holding the lab may have a daemon down
	r := Redis{Addr: os.Getenv("ISCHED_REDIS_CLUSTER_ADDR"), dir: DevDir()}
	if r.Addr == "" {
		r.Addr = DefaultClusterAddr
	}
	pw, err := os.ReadFile(filepath.Join(r.dir, "redis", "admin.pass"))
	if err != nil {
		unavailable(t, "redis admin password: %v", err)
		return r
	}
	for _, a := range strings.Split(r.Addr, ",") {
		info, err := command(a, "admin", strings.TrimSpace(string(pw)), "CLUSTER", "INFO")
		if err != nil {
			unavailable(t, "redis cluster node %s: %v (scripts/dev-cluster up --redis-cluster)", a, err)
			return r
		}
		if !strings.Contains(info, "cluster_state:ok") {
			unavailable(t, "redis cluster node %s: not cluster_state:ok (scripts/dev-cluster up --redis-cluster)", a)
		}
	}
	return r
}

// command authenticates and runs one command whose reply is a bulk string
// (CLUSTER INFO), in plain RESP like ping.
func command(addr, user, pass string, args ...string) (string, error) {
	c, err := net.DialTimeout("tcp", addr, 2*time.Second)
	if err != nil {
		return "", err
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(3 * time.Second))
	if _, err := c.Write(append(respCommand("AUTH", user, pass), respCommand(args...)...)); err != nil {
		return "", err
	}
	rd := bufio.NewReader(c)
	if line, err := rd.ReadString('\n'); err != nil || strings.TrimSpace(line) != "+OK" {
		return "", fmt.Errorf("AUTH answered %q: %v", strings.TrimSpace(line), err)
	}
	line, err := rd.ReadString('\n')
	if err != nil {
		return "", err
	}
	var n int
	if _, err := fmt.Sscanf(line, "$%d", &n); err != nil || n < 0 {
		return "", fmt.Errorf("%s answered %q", strings.Join(args, " "), strings.TrimSpace(line))
	}
	b := make([]byte, n+2)
	if _, err := io.ReadFull(rd, b); err != nil {
		return "", err
	}
	return string(b[:n]), nil
}

// respCommand encodes one command in RESP.
func respCommand(args ...string) []byte {
	var b bytes.Buffer
	fmt.Fprintf(&b, "*%d\r\n", len(args))
	for _, a := range args {
		fmt.Fprintf(&b, "$%d\r\n%s\r\n", len(a), a)
	}
	return b.Bytes()
}

// ping speaks just enough RESP to authenticate and PING, so this package
// needs no Redis client library.
func ping(addr, user, pass string) error {
	c, err := net.DialTimeout("tcp", addr, 2*time.Second)
	if err != nil {
		return err
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(3 * time.Second))
	if _, err := c.Write(append(respCommand("AUTH", user, pass), respCommand("PING")...)); err != nil {
		return err
	}
	rd := bufio.NewReader(c)
	for _, want := range []string{"+OK", "+PONG"} {
		line, err := rd.ReadString('\n')
		if err != nil {
			return err
		}
		if strings.TrimSpace(line) != want {
			return fmt.Errorf("redis answered %q, want %q", strings.TrimSpace(line), want)
		}
	}
	return nil
}

// NeedSlurm checks that the Slurm controller answers. Test support is the one
// place outside internal/slurm and internal/child that runs a command.
func NeedSlurm(t testing.TB) {
	t.Helper()
	UseLab(t) // before the check: a test holding the lab may have a daemon down
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, "scontrol", "ping").CombinedOutput()
	if err != nil || !bytes.Contains(out, []byte("is UP")) {
		unavailable(t, "slurmctld: scontrol ping: %v: %s", err, bytes.TrimSpace(out))
	}
}

// Run runs a command with a timeout and returns its stdout; a failure fails
// the test with the command's stderr.
func Run(t testing.TB, timeout time.Duration, name string, args ...string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	var stdout, stderr bytes.Buffer
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("%s %s: %v\nstderr: %s", name, strings.Join(args, " "), err, stderr.String())
	}
	return stdout.String()
}

// Eventually polls cond every interval until it returns true or timeout passes.
func Eventually(t testing.TB, timeout, interval time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		if cond() {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %s waiting for %s", timeout, what)
		}
		time.Sleep(interval)
	}
}

// IsNoPerm reports whether err is Redis refusing a command or key by ACL.
func IsNoPerm(err error) bool {
	return err != nil && strings.Contains(err.Error(), "NOPERM")
}

// SlurmQueue is the queue and the nodes' states as squeue and sinfo print
// them, for a test that timed out waiting on Slurm to say who holds what
// (a job left by another run once held gpu1 for 10 minutes, and nothing
// said whose it was). conf is a SLURM_CONF, or "" for the default.
func SlurmQueue(conf string) string {
	var b strings.Builder
	for _, args := range [][]string{
		{"squeue", "-a", "-o", "%i %u %j %P %T %M %l %R"},
		{"sinfo", "-N", "-o", "%N %P %t"},
	} {
		cmd := exec.Command(args[0], args[1:]...)
		if conf != "" {
			cmd.Env = append(os.Environ(), "SLURM_CONF="+conf)
		}
		out, err := cmd.CombinedOutput()
		if err != nil {
			fmt.Fprintf(&b, "--- %s: %v\n", args[0], err)
		}
		fmt.Fprintf(&b, "--- %s\n%s", args[0], out)
	}
	return b.String()
}
