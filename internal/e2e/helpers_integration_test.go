//go:build integration

package e2e

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/isched/isched/internal/lifecycle"
	"github.com/isched/isched/internal/report"
	"github.com/isched/isched/internal/testutil"
)

// Helpers shared by the end-to-end tests beyond the basic harness: waiting
// for a shared cluster, reading Slurm's record of a job (scontrol, the
// jobcomp log) and the coordinator's private state in Redis.

func hasOutputFlag(args []string) bool {
	for _, a := range args {
		if a == "-o" || a == "--output" || strings.HasPrefix(a, "--output=") {
			return true
		}
	}
	return false
}

// dropRedisKeys unlinks every key of this test's cluster name (unique
// per test; the coordinator user may touch every isched:* key).
func (w *world) dropRedisKeys() {
	c, err := w.client("coordinator")
	if err != nil {
		return
	}
	defer c.Close()
	_, _ = c.DropCluster(context.Background())
}

// lineageState is the coordinator's private record of a lineage (the
// fields the tests look at; see internal/coordinator/state.go).
type lineageState struct {
	Phase   string `json:"phase"`
	Pending *struct {
		ID   string `json:"id"`
		Type string `json:"type"`
	} `json:"pending"`
	Actions int              `json:"actions"`
	Moves   int              `json:"moves"`
	Conts   int              `json:"continuations"`
	Ckpts   int64            `json:"ckpts"`
	RankRSS map[string]int64 `json:"rank_rss"`
	Twin    uint64           `json:"twin"` // rule 10's twin job, while one is meant to exist
}

// underWay says whether a move or continuation of isched's is still
// under way (internal/lifecycle: awaiting a checkpoint or a requeue's
// start); idle and ended are not.
func (s lineageState) underWay() bool {
	return s.Phase == string(lifecycle.AwaitingCheckpoint) || s.Phase == string(lifecycle.RequeueIssued)
}

func (w *world) lineageState(lineage string) (lineageState, bool) {
	c, err := w.client("coordinator")
	if err != nil {
		return lineageState{}, false
	}
	defer c.Close()
	b, err := c.Get(context.Background(), c.Keys().JobState(lineage))
	if err != nil {
		return lineageState{}, false
	}
	var s lineageState
	if json.Unmarshal(b, &s) != nil {
		return lineageState{}, false
	}
	return s, true
}

// sessionRec is one wrapper session the coordinator accepted.
type sessionRec struct {
	SID       string `json:"sid"`
	JobID     uint64 `json:"job_id"`
	Lineage   string `json:"lineage"`
	Rank      int    `json:"rank"`
	Confirmed bool   `json:"confirmed"`
}

func (w *world) sessions(lineage string) []sessionRec {
	c, err := w.client("coordinator")
	if err != nil {
		return nil
	}
	defer c.Close()
	m, err := c.HGetAll(context.Background(), c.Keys().Sessions())
	if err != nil {
		return nil
	}
	var out []sessionRec
	for _, v := range m {
		var s sessionRec
		if json.Unmarshal([]byte(v), &s) == nil && s.Lineage == lineage {
			out = append(out, s)
		}
	}
	return out
}

// actionsFor lists the actions the coordinator sent for a lineage, in order.
func (w *world) actionsFor(lineage string) []report.Action {
	var out []report.Action
	for _, a := range w.actions() {
		if a.Lineage == lineage {
			out = append(out, a)
		}
	}
	return out
}

// actions is every action in the test cluster's actions stream, oldest
// first (nil if Redis cannot be read).
func (w *world) actions() []report.Action {
	c, err := w.client("coordinator")
	if err != nil {
		return nil
	}
	defer c.Close()
	ents, err := c.Range(context.Background(), c.Keys().Actions(), "-", "+", 10000)
	if err != nil {
		return nil
	}
	var out []report.Action
	for _, e := range ents {
		env, err := report.Decode(e.Payload)
		if err == nil && env.Action != nil {
			out = append(out, *env.Action)
		}
	}
	return out
}

func decisionKinds(st report.JobStatus) []string {
	var out []string
	for _, d := range st.Decisions {
		out = append(out, d.Kind+"("+d.Result+")")
	}
	return out
}

func eventKinds(st report.JobStatus) []string {
	var out []string
	for _, e := range st.Events {
		out = append(out, e.Kind)
	}
	return out
}

// findEvent is the lineage's last event of kind, nil if none.
func findEvent(st report.JobStatus, kind string) *report.StatusEvent {
	for i := len(st.Events) - 1; i >= 0; i-- {
		if st.Events[i].Kind == kind {
			return &st.Events[i]
		}
	}
	return nil
}

// nodeState is sinfo's state of one node ("idle", "mixed", "allocated", ...).
func nodeState(node string) string {
	out, err := exec.Command("sinfo", "-h", "-N", "-n", node, "-o", "%T").Output()
	if err != nil {
		return ""
	}
	return strings.TrimSpace(strings.Split(string(out), "\n")[0])
}

// waitNodesIdle waits until every node is idle: other people's jobs share
// the cluster, and a test that needs a whole node must not start before.
func waitNodesIdle(t *testing.T, w *world, timeout time.Duration, nodes ...string) {
	t.Helper()
	waitFor(t, w, timeout, "nodes "+strings.Join(nodes, ",")+" idle", func() bool {
		for _, n := range nodes {
			if s := nodeState(n); s != "idle" {
				return false
			}
		}
		return true
	})
}

// idleNodes waits until n of the candidate nodes are idle and returns them.
func idleNodes(t *testing.T, w *world, timeout time.Duration, n int, candidates ...string) []string {
	t.Helper()
	var got []string
	waitFor(t, w, timeout, fmt.Sprintf("%d of %s idle", n, strings.Join(candidates, ",")), func() bool {
		got = got[:0]
		for _, c := range candidates {
			if nodeState(c) == "idle" {
				got = append(got, c)
			}
		}
		return len(got) >= n
	})
	return got[:n]
}

// firstIdle waits for one of the nodes to be idle and returns it.
func firstIdle(t *testing.T, w *world, timeout time.Duration, nodes ...string) string {
	t.Helper()
	var got string
	waitFor(t, w, timeout, "one of "+strings.Join(nodes, ",")+" idle", func() bool {
		for _, n := range nodes {
			if nodeState(n) == "idle" {
				got = n
				return true
			}
		}
		return false
	})
	return got
}

func slurmEnded(state string) bool {
	switch state {
	case "COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "NODE_FAIL", "OUT_OF_MEMORY", "BOOT_FAIL", "DEADLINE", "PREEMPTED":
		return true
	}
	return false
}

// waitJobEnd waits for a job's final state and returns scontrol's record.
func waitJobEnd(t *testing.T, w *world, id string, timeout time.Duration) map[string]string {
	t.Helper()
	var s map[string]string
	waitFor(t, w, timeout, "job "+id+" to end", func() bool {
		s = slurmJob(id)
		return slurmEnded(s["JobState"])
	})
	return s
}

// jobcompRuns returns the jobcomp log's lines for a job id: one per run
// that ended, requeued runs included (the lab has no slurmdbd, so no sacct).
func jobcompRuns(id string) []map[string]string {
	f, err := os.Open(filepath.Join(testutil.DevDir(), "log", "jobcomp.txt"))
	if err != nil {
		return nil
	}
	defer f.Close()
	var out []map[string]string
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<16), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if !strings.HasPrefix(line, "JobId="+id+" ") {
			continue
		}
		m := map[string]string{}
		for _, fld := range strings.Fields(line) {
			if k, v, ok := strings.Cut(fld, "="); ok {
				m[k] = v
			}
		}
		out = append(out, m)
	}
	return out
}

func jobcompStates(runs []map[string]string) []string {
	var out []string
	for _, r := range runs {
		out = append(out, r["JobState"]+"@"+r["Partition"])
	}
	return out
}

// jobsOfLineage lists the job ids squeue shows (all states it still keeps)
// whose comment carries the lineage's plan.
func jobsOfLineage(lineage string) []string {
	out, err := exec.Command("squeue", "--all", "-h", "-t", "all", "-o", "%i|%k").Output()
	if err != nil {
		return nil
	}
	var ids []string
	for _, line := range strings.Split(string(out), "\n") {
		id, comment, ok := strings.Cut(line, "|")
		if !ok {
			continue
		}
		if p, ok, err := report.ParsePlanComment(comment); ok && err == nil && p.Lineage == lineage {
			ids = append(ids, strings.TrimSpace(id))
		}
	}
	slices.Sort(ids)
	return ids
}

// factsOf reads one facts file of the fake trainer; ok is false while it
// does not exist.
func factsOf(path string) (map[string]any, bool) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, false
	}
	var m map[string]any
	if json.Unmarshal(b, &m) != nil {
		return nil, false
	}
	return m, true
}

// attemptFacts is what attempt n of rank r did (see fake_trainer.py).
func (j trainJob) attemptFacts(t *testing.T, rank, attempt int) map[string]any {
	t.Helper()
	p := j.facts
	if rank > 0 {
		p += ".rank" + strconv.Itoa(rank)
	}
	p += ".attempt" + strconv.Itoa(attempt)
	m, ok := factsOf(p)
	if !ok {
		out, _ := os.ReadFile(filepath.Join(j.dir, "out.txt"))
		t.Fatalf("no facts of rank %d attempt %d (%s)\njob output:\n%s", rank, attempt, p, out)
	}
	return m
}

func num(m map[string]any, k string) int64 {
	if f, ok := m[k].(float64); ok {
		return int64(f)
	}
	return -1
}

// output is the job's output file (every attempt: --open-mode=append).
func (j trainJob) output() string {
	b, _ := os.ReadFile(filepath.Join(j.dir, "out.txt"))
	return string(b)
}

// lostIterations checks every pair of consecutive spans of a lineage: the
// next attempt must resume where the previous one stopped.
// endedStatus waits up to within for the coordinator to call the lineage
// ENDED (Slurm can call a job COMPLETED before the coordinator has read its
// end report) and returns that status.
func (w *world) endedStatus(lineage string, within time.Duration) report.JobStatus {
	w.t.Helper()
	var st report.JobStatus
	waitFor(w.t, w, within, lineage+"'s lineage to end", func() bool {
		var ok bool
		st, ok = w.status(lineage)
		return ok && st.State == "ENDED"
	})
	return st
}

func lostIterations(t *testing.T, st report.JobStatus) {
	t.Helper()
	for i := 1; i < len(st.History); i++ {
		prev, cur := st.History[i-1], st.History[i]
		if lost := prev.EndStep - cur.StartStep; lost != 0 {
			t.Errorf("attempt %d (%s) resumed at step %d, attempt %d stopped at %d: %d iterations lost",
				cur.Attempt, cur.Partition, cur.StartStep, prev.Attempt, prev.EndStep, lost)
		}
	}
}

func spansText(st report.JobStatus) string {
	var b strings.Builder
	for i, s := range st.History {
		if i > 0 {
			b.WriteString(" → ")
		}
		fmt.Fprintf(&b, "[job %d attempt %d %s/%s steps %d..%d %s]", s.JobID, s.Attempt, s.Partition, s.Node, s.StartStep, s.EndStep, s.Reason)
	}
	return b.String()
}

// TestMain removes the binaries built for the package (43 MB a run).
func TestMain(m *testing.M) {
	code := m.Run()
	testutil.RemoveBinaries()
	os.Exit(code)
}

// blockGPU fills the gpu partition (both nodes, all their GPUs) with a
// sleeping job and waits up to within for it to run; it returns the job
// id, to scancel when the partition should free up.
func (w *world) blockGPU(t *testing.T, within time.Duration) string {
	t.Helper()
	blocker := w.sbatch("-J", "isched-e2e-blocker", "-p", "gpu", "-N", "2", "--gres=gpu:2", "-t", "5", "--wrap", "sleep 300")
	waitFor(t, w, within, "blocker running on gpu", func() bool { return slurmJob(blocker)["JobState"] == "RUNNING" })
	return blocker
}

// waitReceipt waits for a receipt in the coordinator's list that match
// accepts and returns it.
func (w *world) waitReceipt(timeout time.Duration, what string, match func(report.Receipt) bool) report.Receipt {
	w.t.Helper()
	var rec report.Receipt
	waitFor(w.t, w, timeout, what, func() bool {
		c, err := w.client("coordinator")
		if err != nil {
			return false
		}
		defer c.Close()
		vals, _ := c.List(context.Background(), c.Keys().Receipts())
		for _, v := range vals {
			var r report.Receipt
			if json.Unmarshal(v, &r) == nil && match(r) {
				rec = r
				return true
			}
		}
		return false
	})
	return rec
}
