//go:build integration

package e2e

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/isched/isched/internal/testutil"
)

// Fault injection on the dev cluster's daemons (the fault suite, `make
// test-chaos`): stopping slurmctld, a slurmd or redis-server by the pid in
// its pid file, and putting the cluster back for the tests that run next.

var devNodes = []string{"dev1", "gdev1", "cpu1", "cpu2", "gpu1", "gpu2"}

func slurmctldPidFile() string { return filepath.Join(testutil.DevDir(), "run", "slurmctld.pid") }
func slurmdPidFile(node string) string {
	return filepath.Join(testutil.DevDir(), "run", "slurmd-"+node+".pid")
}
func redisPidFile() string { return filepath.Join(testutil.DevDir(), "redis", "run", "redis.pid") }

// clusterUp runs `scripts/dev-cluster up` (it restarts what is missing),
// resumes nodes left down or drained and waits until every node responds
// and none is down.
func clusterUp(t *testing.T) {
	t.Helper()
	out, err := exec.Command(filepath.Join(testutil.RepoRoot(), "scripts", "dev-cluster"), "up").CombinedOutput()
	if err != nil {
		t.Errorf("dev-cluster up: %v\n%s", err, out)
		return
	}
	deadline := time.Now().Add(2 * time.Minute)
	resumed := map[string]bool{}
	for {
		var bad []string
		for _, n := range devNodes {
			st := nodeStateLong(n)
			switch {
			case st == "" || strings.HasSuffix(st, "*") || strings.Contains(st, "unk"):
				bad = append(bad, n+"="+st)
			case strings.HasPrefix(st, "down") || strings.HasPrefix(st, "drain") || strings.HasPrefix(st, "fail"):
				bad = append(bad, n+"="+st)
				if !resumed[n] {
					resumed[n] = true
					_ = exec.Command("scontrol", "update", "nodename="+n, "state=resume").Run()
				}
			}
		}
		if len(bad) == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Errorf("cluster not back after 2 min: %v", bad)
			return
		}
		time.Sleep(500 * time.Millisecond)
	}
}

// nodeStateLong is sinfo's state of a node with its flags ("idle",
// "down*", "drained", ...).
func nodeStateLong(node string) string {
	out, err := exec.Command("sinfo", "-h", "-N", "-n", node, "-o", "%t").Output()
	if err != nil {
		return ""
	}
	return strings.TrimSpace(strings.Split(string(out), "\n")[0])
}

// restoreClusterOnCleanup puts every daemon back after the test. Register
// it after newWorld: cleanups run last-registered first, so the cluster is
// back before the world's cleanup cancels its jobs.
func restoreClusterOnCleanup(t *testing.T) {
	t.Cleanup(func() { clusterUp(t) })
}

// snapSeen is one snapshot the monitor read from Redis.
type snapSeen struct {
	seenMS, takenMS int64
}

// snapMonitor records every snapshot the agent publishes (read every 200
// ms: the agent publishes one a second), so a test can tell which
// picture of the cluster existed when the coordinator decided something.
type snapMonitor struct {
	mu    sync.Mutex
	seen  []snapSeen
	stop  chan struct{}
	done  chan struct{}
	world *world
}

func (w *world) monitorSnapshots() *snapMonitor {
	m := &snapMonitor{stop: make(chan struct{}), done: make(chan struct{}), world: w}
	go func() {
		defer close(m.done)
		var last int64
		for {
			select {
			case <-m.stop:
				return
			case <-time.After(200 * time.Millisecond):
			}
			snap, ok := w.snapshot()
			if !ok || snap.TakenMS == last {
				continue
			}
			last = snap.TakenMS
			m.mu.Lock()
			m.seen = append(m.seen, snapSeen{seenMS: time.Now().UnixMilli(), takenMS: last})
			m.mu.Unlock()
		}
	}()
	w.t.Cleanup(m.Stop)
	return m
}

// Stop ends the monitor (idempotent).
func (m *snapMonitor) Stop() {
	select {
	case <-m.stop:
	default:
		close(m.stop)
	}
	<-m.done
}

// newestBefore is the newest snapshot taken at or before atMS that the
// monitor saw; ok is false when there was none.
func (m *snapMonitor) newestBefore(atMS int64) (int64, bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	var best int64
	for _, s := range m.seen {
		if s.takenMS <= atMS && s.takenMS > best {
			best = s.takenMS
		}
	}
	return best, best > 0
}

// firstTakenAfter is the first snapshot taken after ms; ok false if none yet.
func (m *snapMonitor) firstTakenAfter(ms int64) (int64, bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	var ts []int64
	for _, s := range m.seen {
		if s.takenMS > ms {
			ts = append(ts, s.takenMS)
		}
	}
	if len(ts) == 0 {
		return 0, false
	}
	sort.Slice(ts, func(i, j int) bool { return ts[i] < ts[j] })
	return ts[0], true
}

// countTakenAfter is how many snapshots taken after ms the monitor saw.
func (m *snapMonitor) countTakenAfter(ms int64) int {
	m.mu.Lock()
	defer m.mu.Unlock()
	n := 0
	for _, s := range m.seen {
		if s.takenMS > ms {
			n++
		}
	}
	return n
}

// staleAfterMS is the harness coordinator's stale_after (newWorld: 15 s).
const staleAfterMS = 15000

// checkNoStaleDecisions fails for every decision of the lineages made after
// fromMS without a snapshot younger than stale_after (or, with afterMS > 0,
// without one taken after afterMS: a picture from before a fault's end).
func checkNoStaleDecisions(t *testing.T, w *world, m *snapMonitor, fromMS, afterMS int64, lineages ...string) int {
	t.Helper()
	n := 0
	for _, lin := range lineages {
		st, ok := w.status(lin)
		if !ok {
			// every lineage passed ran: one whose decisions cannot be read
			// would pass the check unchecked
			t.Errorf("%s: no status to check its decisions against the snapshots", lin)
			continue
		}
		for _, d := range st.Decisions {
			if d.AtMS < fromMS {
				continue
			}
			n++
			taken, ok := m.newestBefore(d.AtMS)
			switch {
			case !ok:
				t.Errorf("%s: decision %s at %s with no snapshot published before it", lin, d.Kind, time.UnixMilli(d.AtMS).Format(time.TimeOnly))
			case d.AtMS-taken > staleAfterMS:
				t.Errorf("%s: decision %s at %s on a snapshot %d ms old (stale_after %d ms)", lin, d.Kind,
					time.UnixMilli(d.AtMS).Format(time.TimeOnly), d.AtMS-taken, staleAfterMS)
			case afterMS > 0 && taken <= afterMS:
				t.Errorf("%s: decision %s at %s while the newest snapshot (taken %s) was from before the fault ended (%s)", lin, d.Kind,
					time.UnixMilli(d.AtMS).Format(time.TimeOnly), time.UnixMilli(taken).Format(time.TimeOnly), time.UnixMilli(afterMS).Format(time.TimeOnly))
			}
		}
	}
	return n
}

// agentBackoff reads the agent log's last "<what> recovered" line and
// returns its failure count; ok is false if there is none.
func (w *world) agentRecovered(what string) (failures int, line string, ok bool) {
	b, _ := os.ReadFile(filepath.Join(w.dir, "agent.log"))
	re := regexp.MustCompile(`msg="` + regexp.QuoteMeta(what) + ` recovered".*failures=(\d+)`)
	for _, l := range strings.Split(string(b), "\n") {
		if m := re.FindStringSubmatch(l); m != nil {
			failures, _ = strconv.Atoi(m[1])
			line, ok = l, true
		}
	}
	return failures, line, ok
}

// lastCheckpointStep is the highest step of a complete ckpt-step<N>.pt in dir.
func lastCheckpointStep(dir string) int64 {
	ents, _ := os.ReadDir(dir)
	var best int64 = -1
	for _, e := range ents {
		name := e.Name()
		if !strings.HasPrefix(name, "ckpt-step") || !strings.HasSuffix(name, ".pt") {
			continue
		}
		if n, err := strconv.ParseInt(strings.TrimSuffix(strings.TrimPrefix(name, "ckpt-step"), ".pt"), 10, 64); err == nil && n > best {
			best = n
		}
	}
	return best
}

// procAlive: the process exists and is not a zombie.
func procAlive(pid int) bool {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return false
	}
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	return i > 0 && i+2 < len(s) && s[i+2] != 'Z'
}
