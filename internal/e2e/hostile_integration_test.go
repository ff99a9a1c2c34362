//go:build integration

package e2e

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/isched/isched/internal/report"
	"github.com/isched/isched/internal/testutil"
)

// userDir is a directory owned by a test user inside a world-writable one.
func userDir(t *testing.T, base, name string) (string, int) {
	t.Helper()
	u, err := user.Lookup(name)
	if err != nil {
		t.Fatalf("test user %s: %v (scripts/dev-cluster up creates alice and bob)", name, err)
	}
	uid, _ := strconv.Atoi(u.Uid)
	gid, _ := strconv.Atoi(u.Gid)
	dir := filepath.Join(base, name)
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Chown(dir, uid, gid); err != nil {
		t.Fatal(err)
	}
	return dir, uid
}

// sbatchAs submits a job as a test user (runuser; the job runs as that user).
func (w *world) sbatchAs(who string, args ...string) string {
	w.t.Helper()
	var out, errb bytes.Buffer
	cmd := exec.Command("runuser", append([]string{"-u", who, "--", "sbatch", "--parsable"}, args...)...)
	cmd.Stdout, cmd.Stderr = &out, &errb
	if err := cmd.Run(); err != nil {
		w.t.Fatalf("sbatch as %s %v: %v: %s", who, args, err, errb.String())
	}
	id := strings.TrimSpace(strings.Split(out.String(), ";")[0])
	w.jobs = append(w.jobs, id)
	return id
}

// writeAs writes a file owned by uid.
func writeAs(t *testing.T, path string, data []byte, mode os.FileMode, uid int) {
	t.Helper()
	if err := os.WriteFile(path, data, mode); err != nil {
		t.Fatal(err)
	}
	if err := os.Chown(path, uid, uid); err != nil {
		t.Fatal(err)
	}
}

// shq quotes for the test's own bash job scripts.
func shq(s string) string { return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'" }

// hostileTrainer writes a 1 MB line to stdout and to the progress file, then
// trains normally and saves a checkpoint under a name full of shell syntax.
const hostileTrainer = `
import os, sys, time
sys.path.insert(0, os.environ["ISCHED_HELPER_DIR"])
import isched
with open(os.environ["ISCHED_PROGRESS_FILE"], "a") as f:
    f.write("isched1 step=" + "9" * (1 << 20) + "\n")
sys.stdout.write("L" * (1 << 20) + "\n")
sys.stdout.flush()
for i in range(1, 21):
    isched.step(i, total=20)
    time.sleep(0.05)
ck = os.environ["ISCHED_CHECKPOINT_DIR"]
isched.save(lambda p: open(p, "wb").write(b"w" * 1000), os.path.join(ck, sys.argv[1]), step=20)
time.sleep(1)
print("hostile trainer done")
`

// TestHostileUser: bob, a second Unix user with what every job has on a
// site that opted in to direct reports (the reporter's Redis password,
// MUNGE; by default he has no password: noRedisCredentialForBob), attacks alice's running job through a
// real agent and coordinator. Every attempt is refused with a logged reason,
// alice's job and its record are untouched, no component crashes, and no
// shell ever runs what a name or path says.
func TestHostileUser(t *testing.T) {
	w := newWorld(t, fastPolicy)
	attacker := testutil.Binary(t, "isched-attacker", "./internal/e2e/testdata/attacker")
	base := testutil.WorkDir(t, "isched-hostile-")
	aliceDir, aliceUID := userDir(t, base, "alice")
	bobDir, bobUID := userDir(t, base, "bob")
	canary := filepath.Join(base, "pwned")
	shell := fmt.Sprintf("$(touch %s);`touch %s`|&<>*?", canary, canary)
	// in file names: no slash; run, it would touch the job's working
	// directory (bob's jobs run in bobDir)
	fileShell := "$(touch pwned);`touch pwned`|&<>*?"
	helper := filepath.Join(testutil.RepoRoot(), "scripts")
	fake := filepath.Join(testutil.RepoRoot(), "internal/wrapper/testdata/fake_trainer.py")
	wrapper := filepath.Join(binDir, "isched-wrapper")
	// by default no job user can read the reporter password (jobs report
	// through isched-relay); this test is the site that opted in to direct
	// reports, where bob has it: the coordinator must still refuse him
	noRedisCredentialForBob(t, w)
	reporterPass := w.optInReporterPass(base)
	exports := "--export=ALL,ISCHED_HELPER_DIR=" + helper + ",ISCHED_CLUSTER=" + w.cluster + ",ISCHED_REDIS_ADDR=" + w.redis.Addr +
		",ISCHED_REPORT_DIRECT=1,ISCHED_REDIS_PASSWORD_FILE=" + reporterPass
	stamp := time.Now().UnixNano() % 1e6

	// alice's job: a plain wrapped training run on cpu
	const total = 150
	victim := report.Plan{Lineage: fmt.Sprintf("vic%d", stamp), Cluster: w.cluster, Ideal: "cpu", Total: total, Migrate: true}
	vdir := filepath.Join(aliceDir, "job")
	script := "#!/bin/bash\nexec srun " + strings.Join([]string{shq(wrapper), "--report-interval", "1s", "--checkpoint-dir", shq(vdir),
		"--", "/usr/bin/python3", shq(fake), "--facts", shq(filepath.Join(vdir, "facts.json")),
		"--steps", strconv.Itoa(total), "--period", "0.2", "--ckpt-every", "50"}, " ") + "\n"
	if err := os.Mkdir(vdir, 0o755); err != nil {
		t.Fatal(err)
	}
	_ = os.Chown(vdir, aliceUID, aliceUID)
	writeAs(t, filepath.Join(aliceDir, "job.sh"), []byte(script), 0o755, aliceUID)
	aliceJob := w.sbatchAs("alice", "-J", "alice-train", "-D", aliceDir, "-p", "cpu", "-n", "1", "-t", "5", "--mem=1G", "-o", filepath.Join(aliceDir, "out.txt"),
		"--comment", victim.FormatComment(), exports+",ISCHED_LINEAGE="+victim.Lineage, filepath.Join(aliceDir, "job.sh"))
	waitFor(t, w, 90*time.Second, "alice's job reporting", func() bool {
		st, ok := w.status(victim.Lineage)
		return ok && st.State == "RUNNING" && st.Step >= 10
	})

	// bob's jobs. One names alice's lineage in its plan comment (lineage
	// ids are public: squeue shows comments) and its wrapper reports into
	// it. The other is named and laid out with shell syntax, a newline, and
	// 1 MB lines, and points its wrappers at a FIFO and at /etc/shadow.
	hijackDir := filepath.Join(bobDir, "hijack")
	if err := os.Mkdir(hijackDir, 0o755); err != nil {
		t.Fatal(err)
	}
	_ = os.Chown(hijackDir, bobUID, bobUID)
	script = "#!/bin/bash\nexec srun " + strings.Join([]string{shq(wrapper), "--report-interval", "1s", "--checkpoint-dir", shq(hijackDir),
		"--", "/usr/bin/python3", shq(fake), "--steps", "2000", "--period", "0.05"}, " ") + "\n"
	writeAs(t, filepath.Join(bobDir, "hijack.sh"), []byte(script), 0o755, bobUID)
	hijackJob := w.sbatchAs("bob", "-J", "bob-hijack", "-D", hijackDir, "-p", "cpu", "-n", "1", "-t", "5", "--mem=1G", "-o", filepath.Join(bobDir, "hijack.out"),
		"--comment", victim.FormatComment(), exports+",ISCHED_LINEAGE="+victim.Lineage, filepath.Join(bobDir, "hijack.sh"))

	ckdir := filepath.Join(bobDir, "ck "+fileShell+" 'q\"")
	if err := os.Mkdir(ckdir, 0o755); err != nil {
		t.Fatal(err)
	}
	_ = os.Chown(ckdir, bobUID, bobUID)
	link, fifo := filepath.Join(bobDir, "shadow.link"), filepath.Join(bobDir, "progress.fifo")
	if err := os.Symlink("/etc/shadow", link); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Mkfifo(fifo, 0o644); err != nil {
		t.Fatal(err)
	}
	_ = os.Lchown(link, bobUID, bobUID)
	_ = os.Chown(fifo, bobUID, bobUID)
	writeAs(t, filepath.Join(bobDir, "hostile.py"), []byte(hostileTrainer), 0o644, bobUID)
	hostileLineage := fmt.Sprintf("hos%d", stamp)
	step := func(name string, wrapperArgs []string, cmd ...string) string {
		args := append([]string{shq(wrapper), "--report-interval", "1s", "--lineage", hostileLineage + name}, wrapperArgs...)
		args = append(args, "--")
		for _, c := range cmd {
			args = append(args, shq(c))
		}
		return fmt.Sprintf("srun %s\necho %s=$? >> %s\n", strings.Join(args, " "), name, shq(filepath.Join(bobDir, "exits")))
	}
	trainer := []string{"/usr/bin/python3", fake, "--steps", "20", "--period", "0.05"}
	script = "#!/bin/bash\n" +
		step("shadow", []string{"--progress-file", shq(link)}, trainer...) +
		step("fifo", []string{"--progress-file", shq(fifo)}, trainer...) +
		step("long", []string{"--checkpoint-dir", shq(ckdir)}, "/usr/bin/python3", filepath.Join(bobDir, "hostile.py"), "ck "+fileShell+".pt")
	writeAs(t, filepath.Join(bobDir, "hostile.sh"), []byte(script), 0o755, bobUID)
	hostileName := "x" + shell + "\nsecond line"
	hostileJob := w.sbatchAs("bob", "-J", hostileName, "-D", bobDir, "-p", "cpu", "-n", "1", "-t", "5", "--mem=1G", "-o", filepath.Join(bobDir, "hostile.out"),
		"-e", filepath.Join(bobDir, "hostile.err"), exports, filepath.Join(bobDir, "hostile.sh"))

	// a real report of alice's, captured for bob to replay (bob himself
	// cannot read the ingest stream: the attacker checks that too)
	var replay report.Envelope
	var replayPayload, replayMAC string
	if c, err := w.client("coordinator"); err == nil {
		ents, _ := c.Range(context.Background(), c.Keys().Ingest(), "-", "+", 10000)
		for _, e := range ents {
			env, err := report.Decode(e.Payload)
			if err == nil && env.Kind == report.KindSample && env.Job.Lineage == victim.Lineage {
				replay, replayPayload, replayMAC = *env, string(e.Payload), e.MAC
				break
			}
		}
		c.Close()
	}
	if replayPayload == "" {
		t.Fatal("no report of alice's in the ingest stream to replay")
	}
	aliceJobID, _ := strconv.ParseUint(aliceJob, 10, 64)
	hijackID, _ := strconv.ParseUint(hijackJob, 10, 64)
	waitFor(t, w, 60*time.Second, "bob's hijacking job to run", func() bool { return slurmJob(hijackJob)["JobState"] == "RUNNING" })
	spec, _ := json.Marshal(map[string]any{"cluster": w.cluster, "coordinator_uid": os.Getuid(), "victim_job": aliceJobID,
		"victim_lineage": victim.Lineage, "victim_uid": aliceUID, "own_job": hijackID,
		"replay_payload": replayPayload, "replay_mac": replayMAC})
	cmd := exec.Command("runuser", "-u", "bob", "--", attacker)
	cmd.Env = append(os.Environ(), "ISCHED_REDIS_ADDR="+w.redis.Addr, "ISCHED_REDIS_PASSWORD_FILE="+reporterPass,
		"ISCHED_CLUSTER="+w.cluster)
	cmd.Stdin = bytes.NewReader(spec)
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("attacker: %v\n%s", err, out)
	}
	results := map[string]string{}
	sc := bufio.NewScanner(bytes.NewReader(out))
	for sc.Scan() {
		var o struct{ Attack, Result string }
		if json.Unmarshal(sc.Bytes(), &o) == nil {
			results[o.Attack] = o.Result
		}
	}
	t.Logf("attacker (uid %d, replaying alice's sample seq %d): %v", bobUID, replay.Seq, results)
	for _, a := range []string{"read-ingest", "write-actions", "write-snapshot", "delete-ingest"} {
		if results[a] != "noperm" {
			t.Errorf("%s as the reporter user: %q, want NOPERM from Redis", a, results[a])
		}
	}
	for _, a := range []string{"foreign-job", "forged-uid", "foreign-lineage", "unauthenticated", "replay", "oversize", "malformed"} {
		if results[a] != "sent" {
			t.Errorf("%s: %q, want the report appended (for the coordinator to refuse)", a, results[a])
		}
	}

	// alice's job runs to its end untouched
	s := waitJobEnd(t, w, aliceJob, 3*time.Minute)
	if s["JobState"] != "COMPLETED" || s["Restarts"] != "0" {
		t.Errorf("alice's job ended %s after %s restarts", s["JobState"], s["Restarts"])
	}
	var st report.JobStatus
	waitFor(t, w, time.Minute, "alice's lineage to end", func() bool {
		st, _ = w.status(victim.Lineage)
		return st.State == "ENDED"
	})
	if st.User != "alice" || st.UID != aliceUID || st.JobID != aliceJobID || st.Step != total || st.ExitStatus == nil || *st.ExitStatus != 0 {
		t.Errorf("alice's lineage: user %q uid %d job %d step %d exit %v; want alice's job %d at step %d, exit 0",
			st.User, st.UID, st.JobID, st.Step, st.ExitStatus, aliceJobID, total)
	}
	if len(st.History) != 1 || st.History[0].JobID != aliceJobID {
		t.Errorf("alice's history %s: want one span of job %d", spansText(st), aliceJobID)
	}
	for _, a := range w.actionsFor(victim.Lineage) {
		t.Errorf("action sent for alice's lineage: %+v", a)
	}
	for _, ses := range w.sessions(victim.Lineage) {
		// bob's credentials open (MUNGE says bob) before the job table can
		// refuse them: kept, never confirmed
		if ses.Confirmed && ses.JobID != aliceJobID {
			t.Errorf("a session of job %d was accepted into alice's lineage: %+v", ses.JobID, ses)
		}
	}

	// bob's hostile job: each wrapper refused what it had to and let the
	// training finish; nothing was executed
	s = waitJobEnd(t, w, hostileJob, 3*time.Minute)
	exits, _ := os.ReadFile(filepath.Join(bobDir, "exits"))
	// the steps' stdout (the trainers') apart from their stderr (the
	// wrappers' logs): in one file, slurmstepd interleaves the two streams
	// in chunks, and a wrapper log line written while the trainer wrote its
	// 1 MB line could land inside it
	hostileOut, _ := os.ReadFile(filepath.Join(bobDir, "hostile.out"))
	hostileErr, _ := os.ReadFile(filepath.Join(bobDir, "hostile.err"))
	if s["JobState"] != "COMPLETED" || strings.Count(string(exits), "=0\n") != 3 {
		t.Errorf("bob's hostile job ended %s, steps %q: every step must finish with exit 0\nstdout:\n%s\nstderr:\n%s", s["JobState"], exits,
			tail(hostileOut, 1500), tail(hostileErr, 3000))
	}
	for what, path := range map[string]string{"symlink to /etc/shadow": link, "FIFO": fifo} {
		refused := false
		for _, line := range strings.Split(string(hostileErr), "\n") {
			refused = refused || strings.Contains(line, "refusing to follow") && strings.Contains(line, path) && strings.Contains(line, "unsafe progress file")
		}
		if !refused {
			t.Errorf("no wrapper log line refusing the progress file that is a %s (%s)", what, path)
		}
	}
	if !bytes.Contains(hostileOut, append(bytes.Repeat([]byte("L"), 1<<20), '\n')) {
		t.Error("the trainer's 1 MB stdout line did not reach the job's output intact")
	}
	if !bytes.Contains(hostileOut, []byte("hostile trainer done")) {
		t.Errorf("the trainer that wrote 1 MB lines did not finish\n%s", tail(hostileOut, 3000))
	}
	lst, ok := w.status(hostileLineage + "long")
	if !ok || lst.User != "bob" || lst.Step != 20 || lst.LastCheckpoint == nil || filepath.Base(lst.LastCheckpoint.Path) != "ck "+fileShell+".pt" {
		t.Errorf("bob's 1 MB-line run: status %v user %q step %d checkpoint %+v; want step 20 (the 1 MB progress line skipped) and the checkpoint named with shell syntax",
			ok, lst.User, lst.Step, lst.LastCheckpoint)
	}
	for _, c := range []string{canary, filepath.Join(bobDir, "pwned"), filepath.Join(hijackDir, "pwned")} {
		if _, err := os.Stat(c); err == nil {
			t.Errorf("%s exists: a name or path was run through a shell", c)
		}
	}

	// refused, with the reason in the coordinator's log; nobody crashed
	log, _ := os.ReadFile(filepath.Join(w.dir, "coordinator.log"))
	for _, reason := range []string{"foreign-job", "forged", "unauthenticated", "replay", "malformed", "foreign-lineage"} {
		if !bytes.Contains(log, []byte(`"reason":"`+reason+`"`)) {
			t.Errorf("coordinator log has no \"report rejected\" with reason=%s", reason)
		}
	}
	if !bytes.Contains(log, []byte("job ignored: its plan names a lineage another user owns")) {
		t.Error("the coordinator did not log that bob's job names alice's lineage")
	}
	for name, c := range map[string]*exec.Cmd{"coordinator": w.coord, "agent": w.agent} {
		if c.ProcessState != nil || c.Process.Signal(syscall.Signal(0)) != nil {
			t.Errorf("the %s is not running any more", name)
		}
	}
	if agentLog, _ := os.ReadFile(filepath.Join(w.dir, "agent.log")); bytes.Contains(agentLog, []byte("panic")) {
		t.Errorf("agent log mentions a panic:\n%s", tail(agentLog, 2000))
	}
	if err := runCmd("scancel", hijackJob); err != nil {
		t.Log(err)
	}
}

func tail(b []byte, n int) string {
	if len(b) > n {
		b = b[len(b)-n:]
	}
	return string(b)
}

// noRedisCredentialForBob checks the default set-up (issue 26, item 1):
// bob, a job user, can read no Redis password that writes (reporter,
// coordinator, agent, admin: root's alone; viewer only reads), and Redis
// refuses his XADD to the ingest stream without one.
func noRedisCredentialForBob(t *testing.T, w *world) {
	t.Helper()
	for _, u := range []string{"reporter", "coordinator", "agent", "admin"} {
		out, err := exec.Command("runuser", "-u", "bob", "--", "cat", w.redis.PasswordFile(u)).CombinedOutput()
		if err == nil || !strings.Contains(string(out), "Permission denied") {
			t.Errorf("bob reads the %s password %s: %v %q, want permission denied", u, w.redis.PasswordFile(u), err, out)
		}
	}
	host, port, err := net.SplitHostPort(strings.Split(w.redis.Addr, ",")[0])
	if err != nil {
		t.Fatal(err)
	}
	out, _ := exec.Command("runuser", "-u", "bob", "--", "redis-cli", "-h", host, "-p", port,
		"XADD", "isched:"+w.cluster+":ingest", "MAXLEN", "0", "*", "p", "x").CombinedOutput()
	if !strings.Contains(string(out), "NOAUTH") {
		t.Errorf("bob's XADD MAXLEN 0 without a password: %q, want NOAUTH", out)
	}
}

// TestNoRedisCredentialAsBob: on the default set-up a job user holds no
// credential that can write to Redis (the XADD MAXLEN 0 of issue 26, item
// 1, froze alice's status and deleted her end report), and a job of his,
// submitted as isched submit writes it, reports through isched-relay.
func TestNoRedisCredentialAsBob(t *testing.T) {
	besideOthers(t)
	w := newWorld(t, fastPolicy)
	noRedisCredentialForBob(t, w)
	plan := report.Plan{Lineage: fmt.Sprintf("nocred%d", time.Now().UnixNano()%1e6), Ideal: "cpu", Total: 30}
	j := w.submitTrainerWith(trainOpts{User: "bob"}, plan, []string{"-p", "cpu", "-n", "1", "-t", "5"}, "--steps", "30", "--period", "0.1")
	s := waitJobEnd(t, w, j.id, 3*time.Minute)
	var st report.JobStatus
	waitFor(t, w, time.Minute, "bob's run to end in its status", func() bool {
		var ok bool
		st, ok = w.status(plan.Lineage)
		return ok && st.EndedMS != 0
	})
	if s["JobState"] != "COMPLETED" || st.Step != 30 {
		t.Fatalf("bob's job through the relay: Slurm %s, status at step %d, want COMPLETED at step 30", s["JobState"], st.Step)
	}
	bob, err := user.Lookup("bob")
	if err != nil {
		t.Fatal(err)
	}
	b, _ := os.ReadFile(filepath.Join(w.dir, "relay.log"))
	if !bytes.Contains(b, []byte("uid="+bob.Uid)) {
		t.Errorf("the relay's log names no connection of bob's:\n%s", b)
	}
}
