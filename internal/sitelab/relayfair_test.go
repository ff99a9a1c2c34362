//go:build sitelab

package sitelab

import (
	"bufio"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/isched/isched/internal/testutil"
)

// relayAuthTimeRE is an authenticated connection with its log time.
var relayAuthTimeRE = regexp.MustCompile(`time=(\S+) level=\S+ msg="relay connection authenticated" remote=([0-9.]+):[0-9]+ uid=([0-9]+)`)

// TestRelayFairToUsersOfOneHost (issue 44, item 2): off the relay's host a
// connection counts against its address, which every user of a compute
// node shares. bob holds 100 connections to the relay from c1 (more than
// the address's 64 unauthenticated places), opening again each one the
// relay closes; alice's job on c1 must still report within 5 s of its
// start (before: "refused (busy): too many unauthenticated connections
// from this source" for as long as he held them, her status at 0/200) and
// stay live. bob's sockets are idle, or (speaking) each has sent a frame's
// header and first byte: against a relay that spared connections that had
// spoken, alice's, silent until her Hello arrives, was then the one his
// reconnects closed.
func TestRelayFairToUsersOfOneHost(t *testing.T) {
	needLab(t)
	for _, mode := range []string{"idle", "speaking"} {
		t.Run(mode, func(t *testing.T) { relayFairOnC1(t, mode == "speaking") })
	}
}

// relayFairOnC1 runs alice's job on c1 while bob's holder holds 100
// sockets from c1.
func relayFairOnC1(t *testing.T, speak bool) {
	lines := startHolder(t, 100, speak)
	dir, uid := userDir(t, testUser)
	script := filepath.Join(dir, "steps.py")
	copyFile(t, "testdata/steps.py", script)
	const total = 60
	out := on(t, "login", testUser, "env", "-C", dir, "isched", "submit", "-p", "cpu", "-t", "5", "--mem", "500M",
		"--total-iters", strconv.Itoa(total), "--job-name", "site-lab-fair",
		`--wrapper-arg=--iter-pattern=step (?P<step>\d+)/(?P<total>\d+)`, "--wrapper-arg=--report-interval=1s",
		"--", "/usr/bin/python3", script, strconv.Itoa(total), "0.5", svcAddr)
	sm := submittedRE.FindStringSubmatch(out)
	if sm == nil {
		t.Fatalf("isched submit said no job id:\n%s", out)
	}
	job := sm[1]
	t.Cleanup(func() { _, _ = siteLab("exec", "login", "root", "--", "scancel", job) })
	start := waitFor(t, 2*time.Minute, "job "+job+" RUNNING on c1", func() (bool, string) {
		f := strings.Fields(on(t, "login", testUser, "squeue", "-h", "-j", job, "-o", "%T %N %S"))
		return len(f) == 3 && f[0] == "RUNNING" && f[1] == "c1", strings.Join(f, " ")
	})
	started, err := time.ParseInLocation("2006-01-02T15:04:05", strings.Fields(start)[2], time.Local)
	if err != nil {
		t.Fatalf("job start %q: %v", start, err)
	}
	// her wrapper's first authenticated connection from c1, by the relay's log
	authAt := waitFor(t, time.Minute, "the relay to authenticate alice's wrapper on c1 while bob holds his sockets", func() (bool, string) {
		at, ok := relayAuthAfter(t, computeAddr["c1"], uid, started)
		return ok, at
	})
	at, _ := time.Parse(time.RFC3339Nano, authAt)
	delay := at.Sub(started)
	t.Logf("alice's job %s started %s; its wrapper authenticated at the relay %.2f s later, with bob holding 100 sockets from c1 (speaking %v)",
		job, started.Format(time.TimeOnly), delay.Seconds(), speak)
	if delay > 5*time.Second {
		t.Errorf("alice's first report came %.1f s after her job started, want within 5 s", delay.Seconds())
	}
	if w, ok := firstLogTime(dir); ok { // Slurm's start is to the second; the wrapper's log to the millisecond
		t.Logf("from the wrapper's first log line to the relay's authentication: %d ms", at.Sub(w).Milliseconds())
	}
	// and her status stays live: the steps move on while bob still holds
	first, _ := status(t, testUser, job)
	waitFor(t, 90*time.Second, "alice's status to move on by 10 steps", func() (bool, string) {
		st, _ := status(t, testUser, job)
		return st.Step >= first.Step+10, strconv.FormatInt(st.Step, 10)
	})
	last, running := lastLine(lines)
	if !running {
		t.Fatalf("bob's holder ended before the test did (%q): nothing was shown", last)
	}
	t.Logf("bob's holder, still holding: %s", last)
}

// startHolder runs testdata/holder.py on c1 as bob, holding n sockets to
// the relay (speaking or idle), until the test ends; its output's lines
// come on the channel once it holds them all.
func startHolder(t *testing.T, n int, speak bool) <-chan string {
	t.Helper()
	bobDir, _ := userDir(t, "bob")
	holderPy := filepath.Join(bobDir, "holder.py")
	copyFile(t, "testdata/holder.py", holderPy)
	host, port, _ := strings.Cut(relayAddr, ":")
	args := []string{"exec", "c1", "bob", "--", "python3", holderPy, host, port, strconv.Itoa(n), "240"}
	if speak {
		args = append(args, "speak")
	}
	holder := exec.Command(filepath.Join(testutil.RepoRoot(), "scripts", "site-lab"), args...)
	stdout, err := holder.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	holder.Stderr = os.Stderr
	if err := holder.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_, _ = siteLab("exec", "c1", "root", "--", "pkill", "-u", "bob", "-f", "holder.py")
		_ = holder.Wait()
	})
	lines := make(chan string, 64)
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			lines <- sc.Text()
		}
		close(lines)
	}()
	waitLine(t, lines, "holding "+strconv.Itoa(n), time.Minute)
	return lines
}

// firstLogTime is the time of the first slog line in the job's output
// under dir (isched-*.out): when its wrapper was running.
func firstLogTime(dir string) (time.Time, bool) {
	outs, _ := filepath.Glob(filepath.Join(dir, "isched-*.out"))
	for _, o := range outs {
		b, err := os.ReadFile(o)
		if err != nil {
			continue
		}
		if m := regexp.MustCompile(`(?m)^time=(\S+) `).FindSubmatch(b); m != nil {
			if at, err := time.Parse(time.RFC3339Nano, string(m[1])); err == nil {
				return at, true
			}
		}
	}
	return time.Time{}, false
}

// copyFile copies a test file to dst, readable by everyone.
func copyFile(t *testing.T, src, dst string) {
	t.Helper()
	b, err := os.ReadFile(src)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(dst, b, 0o644); err != nil {
		t.Fatal(err)
	}
}

// waitLine waits for a line of lines that contains want.
func waitLine(t *testing.T, lines <-chan string, want string, timeout time.Duration) {
	t.Helper()
	deadline := time.After(timeout)
	for {
		select {
		case l, ok := <-lines:
			if !ok {
				t.Fatalf("the output ended before %q", want)
			}
			if strings.Contains(l, want) {
				return
			}
		case <-deadline:
			t.Fatalf("no %q within %s", want, timeout)
		}
	}
}

// lastLine drains what lines holds now and returns the last one, and
// whether the output is still open.
func lastLine(lines <-chan string) (string, bool) {
	last := ""
	for {
		select {
		case l, ok := <-lines:
			if !ok {
				return last, false
			}
			last = l
		default:
			return last, true
		}
	}
}

// relayAuthAfter is the log time of the relay's first authentication of
// uid from addr after t0.
func relayAuthAfter(t *testing.T, addr string, uid int, t0 time.Time) (string, bool) {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(siteDir, "log", "isched-relay.log"))
	if err != nil {
		t.Fatalf("the relay's log: %v", err)
	}
	for _, m := range relayAuthTimeRE.FindAllStringSubmatch(string(b), -1) {
		at, err := time.Parse(time.RFC3339Nano, m[1])
		if err == nil && !at.Before(t0) && m[2] == addr && m[3] == strconv.Itoa(uid) {
			return m[1], true
		}
	}
	return "", false
}
