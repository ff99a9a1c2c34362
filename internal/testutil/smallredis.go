package testutil

import (
	"bufio"
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// SmallRedis is a redis-server of a test's own on loopback: maxmemory as
// given, noeviction (the lab's policy), the documented reporter ACL (with
// a +info|memory the relay needs) and an admin user; the reporter's
// password file is Dir/reporter.pass (0600).
type SmallRedis struct {
	Addr, Dir string
	MaxMemory int64
	Admin     *redis.Client
}

// smallRedisPass is every user's password on a SmallRedis.
const smallRedisPass = "small-redis-test-password"

// PasswordFile is the reporter's password file.
func (r SmallRedis) PasswordFile() string { return filepath.Join(r.Dir, "reporter.pass") }

// ACLLine returns the first line of path that starts with prefix (an ACL
// rule in docs/deployment.md or scripts/dev-cluster), trimmed.
func ACLLine(t testing.TB, path, prefix string) string {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if l := strings.TrimSpace(sc.Text()); strings.HasPrefix(l, prefix) {
			return l
		}
	}
	t.Fatalf("%s: no line starting %q", path, prefix)
	return ""
}

// DocumentedReporterACL is docs/deployment.md's reporter line with pass as
// its password; scripts/dev-cluster's must be the same rule.
func DocumentedReporterACL(t testing.TB, pass string) string {
	t.Helper()
	root := RepoRoot()
	doc := ACLLine(t, filepath.Join(root, "docs", "deployment.md"), "user reporter on #<sha256> ")
	dev := ACLLine(t, filepath.Join(root, "scripts", "dev-cluster"), "user reporter on #$(hash reporter) ")
	rule := strings.TrimPrefix(doc, "user reporter on #<sha256> ")
	if d := strings.TrimSuffix(strings.TrimPrefix(dev, "user reporter on #$(hash reporter) "), "$extra"); d != rule {
		t.Errorf("scripts/dev-cluster's reporter %q differs from docs/deployment.md's %q", d, rule)
	}
	return "user reporter on >" + pass + " " + rule
}

// StartSmallRedis starts a SmallRedis of maxMemory bytes, stopped when
// the test ends.
func StartSmallRedis(t testing.TB, maxMemory int64) SmallRedis {
	t.Helper()
	bin, err := exec.LookPath("redis-server")
	if err != nil {
		t.Fatalf("redis-server is needed (make deps installs it): %v", err)
	}
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "reporter.pass"), []byte(smallRedisPass+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	acl := "user default off resetpass ~* &* +@all\nuser admin on >" + smallRedisPass + " ~* &* +@all\n" +
		DocumentedReporterACL(t, smallRedisPass) + "\n"
	if err := os.WriteFile(filepath.Join(dir, "users.acl"), []byte(acl), 0o600); err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := ln.Addr().(*net.TCPAddr).Port
	_ = ln.Close()
	srv := exec.Command(bin, "--port", strconv.Itoa(port), "--bind", "127.0.0.1", "--aclfile", filepath.Join(dir, "users.acl"),
		"--save", "", "--appendonly", "no", "--dir", dir, "--logfile", filepath.Join(dir, "redis.log"),
		"--maxmemory", strconv.FormatInt(maxMemory, 10), "--maxmemory-policy", "noeviction", "--proto-max-bulk-len", "48mb")
	if err := srv.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = srv.Process.Kill(); _, _ = srv.Process.Wait() })
	addr := fmt.Sprintf("127.0.0.1:%d", port)
	r := SmallRedis{Addr: addr, Dir: dir, MaxMemory: maxMemory,
		Admin: redis.NewClient(&redis.Options{Addr: addr, Username: "admin", Password: smallRedisPass, DisableIdentity: true, Protocol: 2})}
	t.Cleanup(func() { _ = r.Admin.Close() })
	deadline := time.Now().Add(30 * time.Second)
	for r.Admin.Ping(context.Background()).Err() != nil {
		if time.Now().After(deadline) {
			log, _ := os.ReadFile(filepath.Join(dir, "redis.log"))
			t.Fatalf("redis-server of the test does not answer\n%s", log)
		}
		time.Sleep(50 * time.Millisecond)
	}
	return r
}

// InfoField is one integer field of an INFO reply.
func InfoField(t testing.TB, info, name string) int64 {
	t.Helper()
	for _, l := range strings.Split(info, "\r\n") {
		if v, ok := strings.CutPrefix(l, name+":"); ok {
			n, err := strconv.ParseInt(v, 10, 64)
			if err != nil {
				t.Fatalf("INFO %s: %q", name, v)
			}
			return n
		}
	}
	t.Fatalf("INFO has no %s", name)
	return 0
}

// MemSampler reads used_memory until stopped and keeps the largest.
type MemSampler struct {
	Samples, Max, Over atomic.Int64
	errs               atomic.Value // the first sampling error
}

// Run samples until ctx ends, then closes done; a sample at or over
// maxMemory counts in Over.
func (s *MemSampler) Run(ctx context.Context, admin *redis.Client, maxMemory int64, done chan<- struct{}) {
	defer close(done)
	for ctx.Err() == nil {
		info, err := admin.Info(ctx, "memory").Result()
		if err != nil {
			if ctx.Err() == nil {
				s.errs.CompareAndSwap(nil, err)
			}
			return
		}
		var used int64
		for _, l := range strings.Split(info, "\r\n") {
			if v, ok := strings.CutPrefix(l, "used_memory:"); ok {
				used, _ = strconv.ParseInt(v, 10, 64)
			}
		}
		s.Samples.Add(1)
		if used > s.Max.Load() {
			s.Max.Store(used)
		}
		if used >= maxMemory {
			s.Over.Add(1)
		}
	}
}

// Err is the first sampling error, nil if none.
func (s *MemSampler) Err() error {
	err, _ := s.errs.Load().(error)
	return err
}
