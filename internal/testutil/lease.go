package testutil

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"syscall"
	"testing"
	"time"
)

// The dev cluster's daemons (slurmctld, the slurmds, Redis) and its
// partitions are shared by every integration test package, and make test
// runs two packages at a time (go test -p 2). A lease says what a test
// needs of them, so that tests that cannot share never overlap:
//
//   - the lab: held shared by every test that uses a daemon (NeedSlurm,
//     NeedRedis and NeedRedisCluster take it), and exclusively by a test
//     that stops, kills or floods one, or needs the whole cluster quiet
//     (OwnLab);
//   - a partition: held shared by a test that runs jobs there (UseLab), and
//     exclusively by a test whose outcome depends on what runs there, such
//     as one that fills the gpu partition and waits for a move
//     (ClaimPartitions).
//
// Each name is an flock(2) on its own file under DevDir()/test-leases, one
// open file per test, so tests of one process exclude each other as tests
// of two processes do. A test holds one lease, taken in a fixed order (the
// lab, then partitions by name); asking for more releases it and takes the
// union, so no test waits while holding a name that comes after the one it
// waits for, and no two tests can wait on each other.

// Partitions are the dev cluster's partitions (scripts/dev-cluster).
var Partitions = []string{"cpu", "dev", "gpu", "gpu-dev", "scavenger"}

const labName = "lab"

type lease struct {
	mode  map[string]int // name → lockShared or lockExclusive
	files []*os.File
}

const (
	lockShared    = syscall.LOCK_SH
	lockExclusive = syscall.LOCK_EX
)

var leases = struct {
	sync.Mutex
	byTest map[testing.TB]*lease
}{byTest: map[testing.TB]*lease{}}

// UseLab holds the lab shared and each named partition shared: the test
// runs jobs there, beside other tests' jobs.
func UseLab(t testing.TB, partitions ...string) {
	t.Helper()
	want := map[string]int{labName: lockShared}
	for _, p := range partitions {
		want["partition-"+p] = lockShared
	}
	hold(t, want)
}

// ClaimPartitions holds the lab shared and each named partition alone: no
// other test runs a job there while this one runs.
func ClaimPartitions(t testing.TB, partitions ...string) {
	t.Helper()
	want := map[string]int{labName: lockShared}
	for _, p := range partitions {
		want["partition-"+p] = lockExclusive
	}
	hold(t, want)
}

// OwnLab holds the whole lab alone: no test of any package uses a daemon
// or a partition while this one runs (it kills daemons, fills partitions
// or counts a user's jobs).
func OwnLab(t testing.TB) {
	t.Helper()
	hold(t, map[string]int{labName: lockExclusive})
}

// hold makes the test's lease cover want, taking the lease anew (released,
// then the union taken in order) when it does not already.
func hold(t testing.TB, want map[string]int) {
	t.Helper()
	leases.Lock()
	cur := leases.byTest[t]
	owned := ownedHere()
	leases.Unlock()
	if cur == nil && owned {
		// a test of this process holds the whole lab: while one does, no
		// other top-level test of its package runs (it is sequential),
		// so this is one of its subtests, which it covers; taking the
		// lease on another open file would wait for itself
		return
	}
	union := map[string]int{}
	if cur != nil {
		if covers(cur.mode, want) {
			return
		}
		for n, m := range cur.mode {
			union[n] = m
		}
		cur.release()
	}
	for n, m := range want {
		if m == lockExclusive || union[n] == 0 {
			union[n] = m
		}
	}
	l, err := acquire(t, union)
	if err != nil {
		t.Fatalf("test lease %v: %v", union, err)
	}
	leases.Lock()
	leases.byTest[t] = l
	leases.Unlock()
	if cur == nil {
		t.Cleanup(func() {
			leases.Lock()
			l := leases.byTest[t]
			delete(leases.byTest, t)
			leases.Unlock()
			l.release()
		})
	}
}

// ownedHere reports whether a test of this process holds the lab
// exclusively (leases locked).
func ownedHere() bool {
	for _, l := range leases.byTest {
		if l.mode[labName] == lockExclusive {
			return true
		}
	}
	return false
}

// covers reports whether a lease of modes have satisfies want: every
// wanted name held, exclusively where wanted so. The lab held
// exclusively covers everything.
func covers(have, want map[string]int) bool {
	if have[labName] == lockExclusive {
		return true
	}
	for n, m := range want {
		if have[n] == 0 || (m == lockExclusive && have[n] != lockExclusive) {
			return false
		}
	}
	return true
}

// acquire takes each name of modes in order, logging a wait that lasts.
func acquire(t testing.TB, modes map[string]int) (*lease, error) {
	t.Helper()
	dir := filepath.Join(DevDir(), "test-leases")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("lease directory: %w", err)
	}
	names := make([]string, 0, len(modes))
	for n := range modes {
		if n != labName {
			names = append(names, n)
		}
	}
	slices.Sort(names)
	if _, ok := modes[labName]; ok {
		names = append([]string{labName}, names...)
	}
	l := &lease{mode: modes}
	for _, n := range names {
		f, err := os.OpenFile(filepath.Join(dir, n+".lock"), os.O_RDWR|os.O_CREATE, 0o644)
		if err != nil {
			l.release()
			return nil, fmt.Errorf("open lease %s: %w", n, err)
		}
		if err := lock(t, f, n, modes[n]); err != nil {
			_ = f.Close()
			l.release()
			return nil, err
		}
		l.files = append(l.files, f)
	}
	return l, nil
}

// lock takes one flock, at once if it is free, else waiting and saying so.
func lock(t testing.TB, f *os.File, name string, mode int) error {
	t.Helper()
	if err := syscall.Flock(int(f.Fd()), mode|syscall.LOCK_NB); err == nil {
		return nil
	} else if err != syscall.EWOULDBLOCK {
		return fmt.Errorf("lease %s: %w", name, err)
	}
	start := time.Now()
	for {
		err := syscall.Flock(int(f.Fd()), mode)
		if err == nil {
			break
		}
		if err != syscall.EINTR {
			return fmt.Errorf("lease %s: %w", name, err)
		}
	}
	t.Logf("waited %s for the lab lease %s (%s), held by another test", time.Since(start).Round(time.Millisecond), name, modeName(mode))
	return nil
}

func modeName(mode int) string {
	if mode == lockExclusive {
		return "exclusive"
	}
	return "shared"
}

func (l *lease) release() {
	for i := len(l.files) - 1; i >= 0; i-- {
		_ = l.files[i].Close() // closing the last descriptor drops its flock
	}
	l.files = nil
}

// Leased reports whether the test holds a lease, so that a harness can
// take its default only for a test that declared none.
func Leased(t testing.TB) bool {
	leases.Lock()
	defer leases.Unlock()
	return leases.byTest[t] != nil
}
