//go:build sitelab

package sitelab

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/isched/isched/internal/report"
	"github.com/isched/isched/internal/testutil"
)

// The site lab's addresses and ports (scripts/site-lab).
const (
	svcAddr   = "10.77.0.1"
	relayAddr = svcAddr + ":7395"
	redisAddr = svcAddr + ":7390"
	siteDir   = "/var/lib/isched-site"
	cluster   = "site"
	testUser  = "alice"
)

// computeAddr is each compute host's address; the service host is svcAddr.
var computeAddr = map[string]string{"c1": "10.77.0.11", "c2": "10.77.0.12"}

var (
	lineageRE   = regexp.MustCompile(`isched: lineage (\S+) on `)
	submittedRE = regexp.MustCompile(`Submitted batch job ([0-9]+)`)
	whereRE     = regexp.MustCompile(`site-lab job: host (\S+) addr (\S+) job ([0-9]+)`)
	authRE      = regexp.MustCompile(`msg="relay connection authenticated" remote=([0-9.]+):[0-9]+ uid=([0-9]+)`)
)

// siteLab runs scripts/site-lab with args and returns its combined output.
func siteLab(args ...string) (string, error) {
	cmd := exec.Command(filepath.Join(testutil.RepoRoot(), "scripts", "site-lab"), args...)
	out, err := cmd.CombinedOutput()
	return string(out), err
}

// needLab fails the test, loudly, when the site lab is not up.
func needLab(t *testing.T) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Fatal("the site lab's test runs as root (it enters the lab's network namespaces): make site-lab-test")
	}
	if out, err := siteLab("status"); err != nil {
		t.Fatalf("the site lab is not up (scripts/site-lab up, or make site-lab-test): status: %v\n%s", err, out)
	}
}

// on runs argv on host as who (scripts/site-lab exec: the host's network
// namespace and name, the lab's SLURM_CONF and ISCHED_CONF) and returns
// its combined output; a failure is fatal.
func on(t *testing.T, host, who string, argv ...string) string {
	t.Helper()
	out, err := siteLab(append([]string{"exec", host, who, "--"}, argv...)...)
	if err != nil {
		t.Fatalf("on %s as %s: %s: %v\n%s", host, who, strings.Join(argv, " "), err, out)
	}
	return out
}

// waitFor polls cond every second until it holds or timeout passes; then
// the test fails with what, and the last state cond described.
func waitFor(t *testing.T, timeout time.Duration, what string, cond func() (bool, string)) string {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		ok, state := cond()
		if ok {
			return state
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within %s; last:\n%s", what, timeout, state)
		}
		time.Sleep(time.Second)
	}
}

// userDir makes a fresh directory of who's under their home (the site's
// shared file system: the login and compute hosts see the same one).
func userDir(t *testing.T, who string) (string, int) {
	t.Helper()
	u, err := user.Lookup(who)
	if err != nil {
		t.Fatalf("test user %s: %v (scripts/site-lab up creates alice and bob)", who, err)
	}
	uid, _ := strconv.Atoi(u.Uid)
	gid, _ := strconv.Atoi(u.Gid)
	dir := filepath.Join(u.HomeDir, fmt.Sprintf("site-lab-%d", time.Now().UnixNano()))
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Chown(dir, uid, gid); err != nil {
		t.Fatal(err)
	}
	if os.Getenv("ISCHED_SITELAB_KEEP") == "" {
		t.Cleanup(func() { os.RemoveAll(dir) })
	}
	return dir, uid
}

// relayAuths is every (remote address, uid) the relay authenticated so far.
func relayAuths(t *testing.T) [][2]string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(siteDir, "log", "isched-relay.log"))
	if err != nil {
		t.Fatalf("the relay's log: %v", err)
	}
	var out [][2]string
	for _, m := range authRE.FindAllStringSubmatch(string(b), -1) {
		out = append(out, [2]string{m[1], m[2]})
	}
	return out
}

// adminCLI is redis-cli with args on the lab's Redis as admin, over the
// bridge.
func adminCLI(t *testing.T, args ...string) *exec.Cmd {
	t.Helper()
	pass, err := os.ReadFile(filepath.Join(siteDir, "redis", "admin.pass"))
	if err != nil {
		t.Fatalf("the lab's admin password: %v", err)
	}
	host, port, _ := strings.Cut(redisAddr, ":")
	cmd := exec.Command("redis-cli", append([]string{"--no-auth-warning", "-h", host, "-p", port, "--user", "admin"}, args...)...)
	cmd.Env = append(os.Environ(), "REDISCLI_AUTH="+strings.TrimSpace(string(pass)))
	return cmd
}

// ingestAdded is how many entries the cluster's ingest stream has ever
// taken (XINFO STREAM entries-added), read as admin over the bridge.
func ingestAdded(t *testing.T) int64 {
	t.Helper()
	out, err := adminCLI(t, "XINFO", "STREAM", "isched:"+cluster+":ingest").CombinedOutput()
	if err != nil {
		t.Fatalf("XINFO STREAM on %s: %v\n%s", redisAddr, err, out)
	}
	lines := strings.Split(string(out), "\n")
	for i, l := range lines {
		if strings.TrimSpace(l) == "entries-added" && i+1 < len(lines) {
			n, err := strconv.ParseInt(strings.TrimSpace(lines[i+1]), 10, 64)
			if err != nil {
				t.Fatalf("XINFO STREAM entries-added %q: %v", lines[i+1], err)
			}
			return n
		}
	}
	t.Fatalf("XINFO STREAM on %s without entries-added:\n%s", redisAddr, out)
	return 0
}

// snapshotPartition is partition name in the agent's latest snapshot,
// read as admin over the bridge.
func snapshotPartition(t *testing.T, name string) (report.Partition, bool) {
	t.Helper()
	out, err := adminCLI(t, "--raw", "GET", "isched:"+cluster+":snapshot").Output()
	if err != nil {
		t.Fatalf("GET the snapshot on %s: %v", redisAddr, err)
	}
	env, err := report.DecodeTable(bytes.TrimSpace(out))
	if err != nil || env.Snapshot == nil {
		return report.Partition{}, false // not published yet
	}
	for _, p := range env.Snapshot.Partitions {
		if p.Name == name {
			return p, true
		}
	}
	return report.Partition{}, false
}

// TestJobOnComputeHostReportsThroughRelay: alice submits from the login
// host with `isched submit` and only the site's isched.conf; the job runs
// on a compute host (c1, cpu's only node), its wrapper reports through
// isched-relay at the service host's address (the job holds no Redis
// password), the coordinator follows it, and `isched status` on the login
// host shows it RUNNING with its steps, then ENDED at its total.
func TestJobOnComputeHostReportsThroughRelay(t *testing.T) {
	needLab(t)
	t0 := time.Now()
	dir, uid := userDir(t, testUser)
	script := filepath.Join(dir, "steps.py")
	src, err := os.ReadFile("testdata/steps.py")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(script, src, 0o644); err != nil {
		t.Fatal(err)
	}
	authsBefore, addedBefore := len(relayAuths(t)), ingestAdded(t)
	// the job's user holds no Redis password to report with: only the relay does
	if out, err := siteLab("exec", "c1", testUser, "--", "cat", filepath.Join(siteDir, "redis", "reporter.pass")); err == nil {
		t.Fatalf("%s can read the reporter password on c1:\n%s", testUser, out)
	}

	// isched config on the login host: every address is the service host's
	conf := on(t, "login", testUser, "isched", "config")
	t.Logf("isched config on login:\n%s", conf)
	for _, want := range []string{relayAddr, redisAddr, "cluster"} {
		if !strings.Contains(conf, want) {
			t.Errorf("isched config on login does not show %q", want)
		}
	}
	if strings.Contains(conf, "127.0.0.1") {
		t.Errorf("isched config on login names 127.0.0.1:\n%s", conf)
	}

	const total = 40
	out := on(t, "login", testUser, "env", "-C", dir, "isched", "submit", "-p", "cpu", "-t", "5", "--mem", "500M",
		"--total-iters", strconv.Itoa(total), "--job-name", "site-lab",
		`--wrapper-arg=--iter-pattern=step (?P<step>\d+)/(?P<total>\d+)`,
		"--", "/usr/bin/python3", script, strconv.Itoa(total), "0.5", svcAddr)
	t.Logf("isched submit on login:\n%s", out)
	sm, lm := submittedRE.FindStringSubmatch(out), lineageRE.FindStringSubmatch(out)
	if sm == nil || lm == nil {
		t.Fatalf("isched submit said no job id or lineage:\n%s", out)
	}
	job, lineage := sm[1], lm[1]
	t.Cleanup(func() { _, _ = siteLab("exec", "login", "root", "--", "scancel", job) })

	// the batch script: the relay at the service host's address, no Redis password
	bs := on(t, "login", "root", "scontrol", "write", "batch_script", job, "-")
	if !strings.Contains(bs, "ISCHED_RELAY_ADDR="+relayAddr) {
		t.Errorf("the batch script does not report through %s:\n%s", relayAddr, bs)
	}
	// (it unsets ISCHED_REDIS_PASSWORD_FILE, defensively: that is no password)
	if m := regexp.MustCompile(`(?m)^export ISCHED_REDIS_\w*|\.pass\b|127\.0\.0\.1`).FindString(bs); m != "" {
		t.Errorf("the batch script holds %q: a Redis setting, a password file or loopback:\n%s", m, bs)
	}

	node := waitFor(t, 2*time.Minute, "job "+job+" RUNNING", func() (bool, string) {
		s := strings.TrimSpace(on(t, "login", testUser, "squeue", "-h", "-j", job, "-o", "%T %N"))
		f := strings.Fields(s)
		if len(f) == 2 && f[0] == "RUNNING" {
			return true, f[1]
		}
		return false, s
	})
	if _, ok := computeAddr[node]; !ok {
		t.Fatalf("job %s runs on %q, want a compute host (c1 or c2)", job, node)
	}
	if node != "c1" {
		t.Errorf("job %s runs on %s, want c1 (partition cpu)", job, node)
	}

	// isched status on login while it runs: RUNNING with steps
	running := waitFor(t, 90*time.Second, "isched status "+job+" RUNNING with steps", func() (bool, string) {
		s := on(t, "login", testUser, "isched", "status", job)
		m := regexp.MustCompile(`\b([1-9][0-9]*)/` + strconv.Itoa(total) + `\b`).FindString(s)
		return strings.Contains(s, "RUNNING") && m != "", s
	})
	t.Logf("isched status %s on login while running (%.0fs after submit):\n%s", job, time.Since(t0).Seconds(), running)

	// the end: Slurm's and the coordinator's
	waitFor(t, 3*time.Minute, "job "+job+" gone from squeue", func() (bool, string) {
		s := strings.TrimSpace(on(t, "login", testUser, "squeue", "-h", "-j", job, "-o", "%T"))
		return s == "" || s == "COMPLETED", s
	})
	ended := waitFor(t, 90*time.Second, "isched status "+job+" ENDED", func() (bool, string) {
		s := on(t, "login", testUser, "isched", "status", job)
		return strings.Contains(s, "ENDED"), s
	})
	t.Logf("isched status %s on login at the end (%.0fs after submit):\n%s", job, time.Since(t0).Seconds(), ended)
	if want := fmt.Sprintf("%d/%d", total, total); !strings.Contains(ended, want) {
		t.Errorf("isched status %s at the end does not show %s", job, want)
	}
	if !strings.Contains(ended, "lineage "+lineage) {
		t.Errorf("isched status %s does not name lineage %s", job, lineage)
	}

	// where it ran, from the job itself: the compute host's name and address
	outFile := filepath.Join(dir, "isched-"+lineage+".out")
	b, err := os.ReadFile(outFile)
	if err != nil {
		t.Fatalf("the job's output: %v", err)
	}
	wm := whereRE.FindStringSubmatch(string(b))
	if wm == nil {
		t.Fatalf("the job's output says nothing of where it ran:\n%s", b)
	}
	t.Logf("the job says: host %s, address %s, job %s", wm[1], wm[2], wm[3])
	if wm[1] != node || wm[2] != computeAddr[node] || wm[3] != job {
		t.Errorf("the job ran as host %s from %s (job %s), want %s from %s (job %s)", wm[1], wm[2], wm[3], node, computeAddr[node], job)
	}
	if wm[2] == svcAddr || strings.HasPrefix(wm[2], "127.") {
		t.Errorf("the job reached the service host from %s: not a compute host", wm[2])
	}

	// the relay authenticated alice's wrapper, connecting from the compute host
	var seen []string
	found := false
	for _, a := range relayAuths(t)[authsBefore:] {
		seen = append(seen, a[0]+" uid "+a[1])
		found = found || (a[0] == computeAddr[node] && a[1] == strconv.Itoa(uid))
	}
	if !found {
		t.Errorf("the relay authenticated no connection of uid %d from %s; it saw %v", uid, computeAddr[node], seen)
	}
	t.Logf("relay connections authenticated during the test: %v", seen)
	added := ingestAdded(t) - addedBefore
	t.Logf("entries the ingest stream at %s took during the test: %d", redisAddr, added)
	if added < 2 {
		t.Errorf("the ingest stream at %s took %d entries during the test, want the run's reports (at least its start and end)", redisAddr, added)
	}
	t.Logf("submit to ENDED in isched status: %.1fs", time.Since(t0).Seconds())
}

// statusJSON is the part of `isched status --json` the tests read.
type statusJSON struct {
	Lineage    string `json:"lineage"`
	State      string `json:"state"`
	Partition  string `json:"partition"`
	Node       string `json:"node"`
	Step       int64  `json:"step"`
	TotalIters int64  `json:"total_iters"`
	ExitStatus *int   `json:"exit_status"`
	History    []struct {
		Attempt   int    `json:"attempt"`
		Partition string `json:"partition"`
		Node      string `json:"node"`
		StartStep int64  `json:"start_step"`
		EndStep   *int64 `json:"end_step"`
	} `json:"history"`
}

// status is `isched status JOB --json` as who on the login host.
func status(t *testing.T, who, job string) (statusJSON, string) {
	t.Helper()
	out, err := siteLab("exec", "login", who, "--", "isched", "status", job, "--json")
	var st statusJSON
	if err != nil {
		return st, out
	}
	if err := json.Unmarshal([]byte(out), &st); err != nil {
		return st, out
	}
	return st, out
}

// squeueJob is squeue's "%T %P %N" of job on the login host ("" once gone).
func squeueJob(t *testing.T, job string) string {
	t.Helper()
	return strings.TrimSpace(on(t, "login", testUser, "squeue", "-h", "-j", job, "-o", "%T %P %N"))
}

// TestMigrationFromC1ToC2: gpu (c2's one emulated GPU) is busy with a
// blocker; alice submits from login with --policy immediate, ideal gpu,
// fallback cpu: the job starts on c1. The blocker ends; the coordinator on
// svc checkpoints the job and the agent moves it to gpu, where it resumes
// from its checkpoint on c2 and ends at its total. Every step of it crosses
// the bridge: the wrapper reports from 10.77.0.11, then from 10.77.0.12.
func TestMigrationFromC1ToC2(t *testing.T) {
	needLab(t)
	t0 := time.Now()
	dir, uid := userDir(t, testUser)
	root := testutil.RepoRoot()
	authsBefore := len(relayAuths(t))
	waitFor(t, 2*time.Minute, "c1 and c2 idle", func() (bool, string) {
		s := strings.TrimSpace(on(t, "login", testUser, "sinfo", "-h", "-N", "-o", "%N %t"))
		return s == "c1 idle\nc2 idle", s
	})

	blocker := strings.TrimSpace(on(t, "login", testUser, "sbatch", "--parsable", "-J", "site-lab-blocker", "-p", "gpu",
		"--gres=gpu:1", "-t", "3", "-o", "/dev/null", "--wrap", "sleep 300"))
	t.Cleanup(func() { _, _ = siteLab("exec", "login", "root", "--", "scancel", blocker) })
	waitFor(t, time.Minute, "the blocker "+blocker+" running on c2", func() (bool, string) {
		s := squeueJob(t, blocker)
		return s == "RUNNING gpu c2", s
	})
	// submit places the job from the agent's snapshot: wait until it shows gpu busy
	waitFor(t, time.Minute, "the agent's snapshot to show gpu busy", func() (bool, string) {
		p, ok := snapshotPartition(t, "gpu")
		return ok && p.NodesIdle == 0 && p.NodesAlloc > 0, fmt.Sprintf("%+v", p)
	})

	const total = 150
	facts := filepath.Join(dir, "facts.json")
	out := on(t, "login", testUser, "env", "-C", dir, "isched", "submit", "--policy", "immediate",
		"--model", filepath.Join(root, "internal/cli/testdata/resnet18_128.json"), "--samples", "1200", "--batch", "8",
		"--epochs", "1", "--optimizer", "momentum", "--partition-ideal", "gpu", "--fallback", "cpu",
		"-t", "10", "--mem", "500M", "--total-iters", strconv.Itoa(total), "--job-name", "site-lab-move",
		"--wrapper-arg=--report-interval=1s",
		"--", "/usr/bin/python3", filepath.Join(root, "internal/wrapper/testdata/fake_trainer.py"), "--facts", facts,
		"--steps", strconv.Itoa(total), "--period", "0.2", "--ckpt-every", "50", "--gpu-speedup", "8")
	t.Logf("isched submit on login:\n%s", out)
	sm, lm := submittedRE.FindStringSubmatch(out), lineageRE.FindStringSubmatch(out)
	if sm == nil || lm == nil {
		t.Fatalf("isched submit said no job id or lineage:\n%s", out)
	}
	job, lineage := sm[1], lm[1]
	t.Cleanup(func() { _, _ = siteLab("exec", "login", "root", "--", "scancel", job) })
	if !strings.Contains(out, "lineage "+lineage+" on cpu") {
		t.Fatalf("the job does not start on cpu while gpu is busy:\n%s", out)
	}

	before := waitFor(t, 90*time.Second, "the job training on c1 with an iteration estimate", func() (bool, string) {
		st, raw := status(t, testUser, job)
		return st.State == "RUNNING" && st.Partition == "cpu" && st.Node == "c1" && st.Step >= 15, raw
	})
	var st statusJSON
	_ = json.Unmarshal([]byte(before), &st)
	t.Logf("on c1 (%.0fs after submit): step %d/%d", time.Since(t0).Seconds(), st.Step, st.TotalIters)

	on(t, "login", testUser, "scancel", blocker)
	moved := waitFor(t, 2*time.Minute, "the job running on c2 (gpu) after the move", func() (bool, string) {
		s := squeueJob(t, job)
		return s == "RUNNING gpu c2", s
	})
	t.Logf("moved (%.0fs after submit): %s", time.Since(t0).Seconds(), moved)
	waitFor(t, 2*time.Minute, "job "+job+" to end", func() (bool, string) {
		s := squeueJob(t, job)
		return s == "" || strings.HasPrefix(s, "COMPLETED"), s
	})
	end := waitFor(t, 90*time.Second, "isched status "+job+" ENDED", func() (bool, string) {
		st, raw := status(t, testUser, job)
		return st.State == "ENDED", raw
	})
	st = statusJSON{}
	if err := json.Unmarshal([]byte(end), &st); err != nil {
		t.Fatalf("isched status --json: %v\n%s", err, end)
	}
	if st.Step != total || st.ExitStatus == nil || *st.ExitStatus != 0 {
		t.Errorf("ended at step %d, exit %v; want %d, 0", st.Step, st.ExitStatus, total)
	}
	var hist []string
	for _, h := range st.History {
		e := "-"
		if h.EndStep != nil {
			e = strconv.FormatInt(*h.EndStep, 10)
		}
		hist = append(hist, fmt.Sprintf("attempt %d %s/%s steps %d-%s", h.Attempt, h.Partition, h.Node, h.StartStep, e))
	}
	t.Logf("history: %s", strings.Join(hist, "; "))
	if n := len(st.History); n < 2 || st.History[0].Node != "c1" || st.History[n-1].Node != "c2" || st.History[n-1].Partition != "gpu" {
		t.Errorf("history %v: want c1 (cpu) first, c2 (gpu) last", hist)
	}

	// the last attempt, from the trainer itself: on c2, resumed from a checkpoint
	b, err := os.ReadFile(facts)
	if err != nil {
		t.Fatalf("the trainer's facts: %v", err)
	}
	var f struct {
		Start   float64 `json:"start"`
		End     float64 `json:"end"`
		Node    string  `json:"node"`
		Restart string  `json:"restart"`
	}
	if err := json.Unmarshal(b, &f); err != nil {
		t.Fatalf("the trainer's facts: %v\n%s", err, b)
	}
	t.Logf("last attempt: restart %s on %s, steps %.0f-%.0f", f.Restart, f.Node, f.Start, f.End)
	if f.Node != "c2" || f.End != total || f.Start <= 0 || f.Restart != "1" {
		t.Errorf("last attempt %+v: want restart 1 on c2 resumed from a checkpoint (start > 0), ending at %d", f, total)
	}
	if n := len(st.History); n >= 2 && st.History[0].EndStep != nil {
		t.Logf("lost iterations: %d", *st.History[0].EndStep-int64(f.Start))
	}

	// both compute hosts reported through the relay, as alice
	from := map[string]bool{}
	for _, a := range relayAuths(t)[authsBefore:] {
		if a[1] == strconv.Itoa(uid) {
			from[a[0]] = true
		}
	}
	if !from[computeAddr["c1"]] || !from[computeAddr["c2"]] {
		t.Errorf("the relay authenticated alice from %v, want from both %s and %s", from, computeAddr["c1"], computeAddr["c2"])
	}
	t.Logf("submit to ENDED after a move: %.1fs", time.Since(t0).Seconds())
}
