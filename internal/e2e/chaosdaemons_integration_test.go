//go:build integration

package e2e

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/isched/isched/internal/report"
	"github.com/isched/isched/internal/testutil"
)

// TestChaosSlurmctldRestart (issue 8, requirement 4): slurmctld stops for
// longer than the coordinator's stale_after while a planned job trains on
// cpu, waiting for the gpu partition a blocker holds. The agent must back
// off (a handful of failed polls over the outage, not one a second), keep
// running and publish again once slurmctld is back; the job trains on
// untouched; while no fresh snapshot exists the coordinator decides
// nothing, and the move it makes after the blocker goes (cancelled once
// slurmctld is back) is decided on a snapshot taken after the restart. The
// job then moves to gpu and ends exactly once from its checkpoint.
func TestChaosSlurmctldRestart(t *testing.T) {
	testutil.OwnLab(t) // it restarts slurmctld
	w := newWorld(t, fastPolicy)
	restoreClusterOnCleanup(t)
	blocker := w.blockGPU(t, 3*time.Minute)

	lineage := fmt.Sprintf("ctld%d", time.Now().UnixNano()%1e6)
	// The move must still pay when the gpu frees: with no checkpoint
	// measured it costs 1.5 × (3 s + 30 s) = 49.5 s, saved by more than 283
	// steps left at 0.2 s (1/8 of it on gpu). 500 steps left that margin to
	// slurmctld's restart: in one CI run it came back 11 s late, the gpu
	// freed with about 150 steps left, and the job rightly stayed on cpu.
	// 1000 steps leave about two minutes of slack.
	const total = 1000
	plan := report.Plan{Lineage: lineage, Ideal: "gpu", IdealGres: "gpu:1", Fallbacks: []string{"cpu"}, Total: total, Migrate: true}
	job := w.submitTrainer(plan, []string{"-p", "cpu", "-t", "10"},
		"--steps", fmt.Sprint(total), "--period", "0.2", "--ckpt-every", "0", "--gpu-speedup", "8")
	waitFor(t, w, 90*time.Second, "training on cpu with an iteration estimate", func() bool {
		st, ok := w.status(lineage)
		return ok && st.Partition == "cpu" && st.Step >= 15 && st.IterMS > 0
	})
	mon := w.monitorSnapshots()
	waitFor(t, w, 30*time.Second, "the monitor to see a snapshot from before the outage", func() bool {
		_, ok := mon.newestBefore(time.Now().UnixMilli())
		return ok
	})

	stopAt := time.Now()
	testutil.StopDaemon(t, slurmctldPidFile(), "slurmctld", syscall.SIGTERM)
	// slurmctld answers while it shuts down (saving its state took 14 s
	// in one CI run): the outage starts when its process is gone
	downAt := time.Now()
	t.Logf("slurmctld took %s to stop", downAt.Sub(stopAt).Round(time.Millisecond))
	before, _ := w.status(lineage)
	// slurmctld stays down for the whole outage, and until the job
	// advanced half as fast as it trains (0.2 s a step) through it: the
	// outage is the fault's length, the steps are waited for
	const outage = 25 * time.Second // > stale_after (15 s) and the snapshot TTL (15 s)
	want := before.Step + int64(outage/(2*200*time.Millisecond))
	var during report.JobStatus
	for deadline := downAt.Add(2 * outage); ; time.Sleep(500 * time.Millisecond) {
		during, _ = w.status(lineage)
		if time.Since(downAt) >= outage && during.Step >= want || time.Now().After(deadline) {
			break
		}
	}
	if !procAlive(w.agent.Process.Pid) {
		t.Fatalf("the agent exited while slurmctld was down\n%s", w.logs())
	}
	// training goes on: reports reach the coordinator through Redis only
	if during.Step < want {
		t.Errorf("the job advanced %d → %d steps during a %s slurmctld outage (0.2 s a step)", before.Step, during.Step, time.Since(downAt).Round(time.Second))
	}
	// the agent published nothing built without slurmctld (a poll begun
	// just before it went may still land)
	if taken, ok := mon.firstTakenAfter(downAt.UnixMilli() + 3000); ok {
		t.Errorf("a snapshot taken at %s, while slurmctld was down", time.UnixMilli(taken).Format(time.TimeOnly))
	}
	clusterUp(t)
	upAt := time.Now()
	t.Logf("slurmctld down %s", upAt.Sub(downAt).Round(time.Millisecond))

	var fresh int64
	waitFor(t, w, 60*time.Second, "a snapshot taken after slurmctld came back", func() bool {
		var ok bool
		fresh, ok = mon.firstTakenAfter(upAt.UnixMilli())
		return ok
	})
	t.Logf("first snapshot after the restart taken %s after slurmctld was back", time.UnixMilli(fresh).Sub(upAt).Round(time.Millisecond))
	waitFor(t, w, 30*time.Second, "the agent's poll recovery in its log", func() bool { _, _, ok := w.agentRecovered("poll"); return ok })
	failures, line, _ := w.agentRecovered("poll")
	t.Logf("agent: %s", line)
	// 1 s poll, backoff 1 s doubling: about log2(outage)+2 tries, not one a second
	if failures < 1 || failures > 8 {
		t.Errorf("the agent failed %d polls during a %s outage: want 1..8 (capped exponential backoff)", failures, upAt.Sub(downAt).Round(time.Second))
	}
	// now the gpu frees up: the move must be decided on a post-restart picture
	if err := runCmd("scancel", blocker); err != nil {
		t.Fatal(err)
	}
	s := waitJobEnd(t, w, job.id, 4*time.Minute)
	mon.Stop()
	if s["JobState"] != "COMPLETED" || s["Partition"] != "gpu" || s["Restarts"] != "1" {
		t.Errorf("job ended %s on %s after %s restarts, want COMPLETED on gpu after 1\n%s", s["JobState"], s["Partition"], s["Restarts"], w.logs())
	}
	runs := jobcompRuns(job.id)
	if len(runs) != 2 || runs[1]["JobState"] != "COMPLETED" {
		t.Errorf("jobcomp runs %v: want one requeued run, then one COMPLETED", jobcompStates(runs))
	}
	if ids := jobsOfLineage(lineage); len(ids) != 1 || ids[0] != job.id {
		t.Errorf("jobs carrying the lineage: %v, want only %s", ids, job.id)
	}
	var st report.JobStatus
	waitFor(t, w, 20*time.Second, "the lineage to end", func() bool {
		st, _ = w.status(lineage)
		return st.State == "ENDED"
	})
	t.Logf("spans %s; decisions %v", spansText(st), decisionKinds(st))
	if n := checkNoStaleDecisions(t, w, mon, stopAt.UnixMilli(), upAt.UnixMilli(), lineage); n == 0 {
		t.Errorf("no decision after the restart: the job was never moved (decisions %v)", decisionKinds(st))
	}
	for _, d := range st.Decisions {
		if d.AtMS >= stopAt.UnixMilli() && d.AtMS < fresh {
			t.Errorf("decision %s at %s, before the first post-restart snapshot", d.Kind, time.UnixMilli(d.AtMS).Format(time.TimeOnly))
		}
	}
	lostIterations(t, st)
	if st.ExitStatus == nil || *st.ExitStatus != 0 || st.Step != total {
		t.Errorf("lineage end: exit %v step %d", st.ExitStatus, st.Step)
	}
	if !strings.Contains(job.output(), fmt.Sprintf("done at step %d", total)) {
		t.Errorf("trainer output: %s", job.output())
	}
}

// killJobProcesses SIGKILLs every process of a Slurm job on this machine:
// its slurmstepds ("slurmstepd: [<id>.<step>]") and the processes whose
// environment carries SLURM_JOB_ID=<id>. With the node's slurmd killed
// first, this is the node losing power as far as the job is concerned.
func killJobProcesses(t *testing.T, jobID string) int {
	t.Helper()
	ents, err := os.ReadDir("/proc")
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid == os.Getpid() {
			continue
		}
		cmd, _ := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
		env, _ := os.ReadFile(fmt.Sprintf("/proc/%d/environ", pid))
		mine := strings.HasPrefix(string(cmd), "slurmstepd: ["+jobID+".")
		for _, kv := range strings.Split(string(env), "\x00") {
			if kv == "SLURM_JOB_ID="+jobID {
				mine = true
			}
		}
		if mine && syscall.Kill(pid, syscall.SIGKILL) == nil {
			n++
		}
	}
	return n
}

// continuedAfterSecondKill checks the run of TestChaosSlurmdKilled when the
// resumed attempt was SIGKILLed too, some 30 s after the node came back
// (ci56 and ci59; again on 2026-11-28, job 1782: the step "CANCELLED",
// exit 137, with no SIGTERM before it). The cause is Slurm's: when the node
// fails, slurmctld queues a REQUEST_TERMINATE_JOB for the job on it
// (slurmctld at debug2: "Spawning RPC agent for msg_type
// REQUEST_TERMINATE_JOB" at the requeue); the requeued job keeps its id, so
// when that request reaches the returned node as the new incarnation
// starts there, slurmd kills the new one's steps after KillWait (30 s on
// the lab). When the request lands first (its epilog done before the
// start, "duplicate epilog complete response"), the run is untouched: a
// race between the agent's retry and the scheduler, as at any site whose
// requeued job returns to the node that failed. Slurm does not requeue a FAILED job:
// the coordinator must continue the run from its newest confirmed
// checkpoint (at most one --ckpt-every, 20 steps, behind the kill), and
// that is what is checked.
func continuedAfterSecondKill(t *testing.T, w *world, job trainJob, lineage string, resume int64, total int) {
	t.Helper()
	t.Logf("the resumed attempt was killed too (%s); the coordinator must continue the run", strings.TrimSpace(lastLines(job.output(), 3)))
	waitFor(t, w, 2*time.Minute, "the coordinator to continue the run (a third attempt)", func() bool {
		return slurmJob(job.id)["Restarts"] == "2"
	})
	if s := waitJobEnd(t, w, job.id, 4*time.Minute); s["JobState"] != "COMPLETED" {
		t.Fatalf("continued job ended %s, want COMPLETED\n%s\n%s", s["JobState"], job.output(), w.logs())
	}
	st := w.endedStatus(lineage, 30*time.Second)
	t.Logf("spans %s; decisions %v", spansText(st), decisionKinds(st))
	if n := len(st.History); n >= 3 {
		if lost := st.History[n-2].EndStep - st.History[n-1].StartStep; lost > 20 { // (negative: the checkpoint came after the last step report)
			t.Errorf("the continued attempt resumed at step %d, the killed one reached %d: want at most one checkpoint period (20) lost", st.History[n-1].StartStep, st.History[n-2].EndStep)
		}
	}
	if st.ExitStatus == nil || *st.ExitStatus != 0 || st.Step != int64(total) || len(st.History) < 3 || st.History[1].StartStep != resume {
		t.Errorf("after the second kill: exit %v step %d spans %s; want the run resumed at %d and continued to %d", st.ExitStatus, st.Step,
			spansText(st), resume, total)
	}
}

func lastLines(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	return strings.Join(lines[max(0, len(lines)-n):], "\n")
}

// supervisorLog is where scripts/dev-cluster's slurmctld supervisor notes
// each crash it restarts slurmctld after.
var supervisorLog = filepath.Join(testutil.DevDir(), "log", "slurmctld-supervisor.log")

// slurmctldCrashedSince reports whether the supervisor restarted a crashed
// slurmctld at or after t (its lines start with an RFC 3339 time).
func slurmctldCrashedSince(t time.Time) bool {
	b, _ := os.ReadFile(supervisorLog)
	for _, line := range strings.Split(string(b), "\n") {
		at, rest, ok := strings.Cut(line, " ")
		when, err := time.Parse(time.RFC3339, at)
		if ok && err == nil && strings.HasPrefix(rest, "slurmctld crashed") && !when.Before(t.Truncate(time.Second)) {
			return true
		}
	}
	return false
}

// heldAfterCrash: Slurm holds the job (pending at priority 0) and the
// lab's supervisor restarted a crashed slurmctld since t.
func heldAfterCrash(s map[string]string, t time.Time) bool {
	return s["JobState"] == "PENDING" && s["Priority"] == "0" && slurmctldCrashedSince(t)
}

// TestChaosSlurmdKilled (issue 8, requirement 3): the slurmd of the node a
// planned job runs on is SIGKILLed, with the job's processes (the node is
// gone). Slurm must notice (the node not responding, the run ending
// NODE_FAIL in the jobcomp log), requeue the job, and once the node is back
// the job resumes from its last checkpoint and completes; the coordinator
// follows the lineage through it (one lineage, two attempts, ended once).
//
// On the lab's Slurm 22.05.8 the scenario has three more endings that
// isched does not control, each checked for what isched must still do:
//   - the resumed attempt SIGKILLed again, 30 s in, by the failed node's
//     stale REQUEST_TERMINATE_JOB (slurmctld keeps the job id across the
//     requeue; seen at debug2): the coordinator continues the run from its
//     newest checkpoint (continuedAfterSecondKill);
//   - slurmctld segfaulting as the node returns, restarted by the lab's
//     supervisor, the attempt's srun failing: the coordinator continues
//     the run;
//   - that crash's restart leaving the job held (Priority=0, "Job already
//     running, do not launch second copy"): Slurm holds it and isched must
//     not release what Slurm held; the test is skipped, naming the crash
//     and the hold (.ci/allowed-skips lets this test skip, and only then).
func TestChaosSlurmdKilled(t *testing.T) {
	testutil.ClaimPartitions(t, "cpu", "gpu", "scavenger") // it kills the slurmd of a cpu node (scavenger's too)
	w := newWorld(t, fastPolicy)
	restoreClusterOnCleanup(t)
	node := firstIdle(t, w, 3*time.Minute, "cpu1", "cpu2")
	lineage := fmt.Sprintf("node%d", time.Now().UnixNano()%1e6)
	const total = 600
	plan := report.Plan{Lineage: lineage, Ideal: "cpu", Total: total, Migrate: true}
	job := w.submitTrainer(plan, []string{"-p", "cpu", "-w", node, "-t", "10"},
		"--steps", fmt.Sprint(total), "--period", "0.1", "--ckpt-every", "20")
	waitFor(t, w, 90*time.Second, "training with checkpoints", func() bool {
		st, ok := w.status(lineage)
		return ok && st.Step >= 50 && lastCheckpointStep(job.ckdir) >= 40
	})
	seen, _ := w.status(lineage)
	testutil.StopDaemon(t, slurmdPidFile(node), "slurmd", syscall.SIGKILL)
	killed := killJobProcesses(t, job.id)
	killedAt := time.Now()
	ck := lastCheckpointStep(job.ckdir)
	t.Logf("slurmd of %s and %d processes of job %s killed; last checkpoint: step %d", node, killed, job.id, ck)
	if killed == 0 {
		t.Fatalf("no process of job %s found to kill", job.id)
	}

	// Slurm notices: the node stops responding, the run ends NODE_FAIL, the job is requeued
	waitFor(t, w, 3*time.Minute, "Slurm to requeue the job after the node failure", func() bool {
		return slurmJob(job.id)["Restarts"] == "1"
	})
	t.Logf("requeued %s after the kill; node %s: %s", time.Since(killedAt).Round(time.Second), node, nodeStateLong(node))
	if runs := jobcompRuns(job.id); len(runs) != 1 || runs[0]["JobState"] != "NODE_FAIL" {
		t.Errorf("jobcomp runs %v: want the first run ended NODE_FAIL", jobcompStates(runs))
	}
	if s := slurmJob(job.id); s["JobState"] != "PENDING" {
		t.Errorf("job %s while its node is down: want PENDING (requeued, pinned to %s)", s["JobState"], node)
	}
	// the coordinator sees the pending job (or, wrongly, ends the lineage)
	var waiting report.JobStatus
	var ok bool
	waitFor(t, w, 60*time.Second, "the coordinator to see the requeued job", func() bool {
		waiting, ok = w.status(lineage)
		return ok && (waiting.State == "PENDING" || waiting.State == "ENDED")
	})
	if !ok || waiting.State == "ENDED" {
		t.Errorf("coordinator's status while the job waits for its node: %+v (the lineage must not end on a requeued job)", waiting.State)
	}
	// The resume point is the last checkpoint the coordinator holds as
	// complete: the newest file on disk, or — when the node died within a
	// report interval of writing it, so that its report died too — the one
	// before it (one --ckpt-every earlier). Never an unconfirmed file.
	resume := int64(-1)
	if c := waiting.LastCheckpoint; c != nil && c.Step != nil {
		resume = *c.Step
	}
	if resume != ck && resume != ck-20 {
		t.Fatalf("coordinator's last checkpoint %v: want step %d (the newest on disk) or %d (the one before, its successor's report lost with the node)", waiting.LastCheckpoint, ck, ck-20)
	}
	t.Logf("coordinator's last confirmed checkpoint: step %d (newest on disk: %d)", resume, ck)

	clusterUp(t) // slurmd back; the node returns to service
	var s map[string]string
	waitFor(t, w, 4*time.Minute, "job "+job.id+" to end (or Slurm to hold it after a crash)", func() bool {
		s = slurmJob(job.id)
		return slurmEnded(s["JobState"]) || heldAfterCrash(s, killedAt)
	})
	if heldAfterCrash(s, killedAt) {
		t.Skipf("slurmctld crashed after the kill (%s) and its restart left job %s held (JobState=%s Priority=0 Reason=%s...): Slurm's own failure; isched does not release a job Slurm held",
			supervisorLog, job.id, s["JobState"], s["Reason"])
	}
	if s["JobState"] == "COMPLETED" && s["Restarts"] == "2" && slurmctldCrashedSince(killedAt) {
		// slurmctld 22.05.8 can segfault as the node returns (seen in
		// ci: right after it allocated the requeued job); the supervisor
		// restarts it, but the attempt's srun found no controller and
		// failed. The coordinator must then continue the run, losing
		// nothing: that is what is checked, instead of Slurm's one requeue.
		st := w.endedStatus(lineage, 30*time.Second)
		t.Logf("slurmctld crashed during the test (%s); spans %s; decisions %v", supervisorLog, spansText(st), decisionKinds(st))
		lostIterations(t, st)
		if st.ExitStatus == nil || *st.ExitStatus != 0 || st.Step != total || len(st.History) < 2 || st.History[1].StartStep != resume {
			t.Errorf("after slurmctld's crash: exit %v step %d spans %s; want the run continued from step %d to %d", st.ExitStatus, st.Step,
				spansText(st), resume, total)
		}
		return
	}
	if s["JobState"] == "FAILED" && s["Restarts"] == "1" && strings.Contains(job.output(), "task 0: Killed") {
		continuedAfterSecondKill(t, w, job, lineage, resume, total)
		return
	}
	if s["JobState"] != "COMPLETED" || s["Restarts"] != "1" {
		t.Fatalf("job ended %s after %s restarts, want COMPLETED after 1\n%s\n%s", s["JobState"], s["Restarts"], job.output(), w.logs())
	}
	runs := jobcompRuns(job.id)
	t.Logf("jobcomp runs: %v", jobcompStates(runs))
	if len(runs) != 2 || runs[1]["JobState"] != "COMPLETED" {
		t.Errorf("jobcomp runs %v: want NODE_FAIL then one COMPLETED", jobcompStates(runs))
	}
	a1 := job.attemptFacts(t, 0, 1)
	t.Logf("attempt 1: resumed from %v at step %d, end %d", a1["resumed_from"], num(a1, "start"), num(a1, "end"))
	if num(a1, "start") != resume || num(a1, "end") != total {
		t.Errorf("attempt 1 ran %d..%d: want %d (the last confirmed checkpoint before the node died)..%d", num(a1, "start"), num(a1, "end"), resume, total)
	}
	if ids := jobsOfLineage(lineage); len(ids) != 1 || ids[0] != job.id {
		t.Errorf("jobs carrying the lineage: %v, want only %s", ids, job.id)
	}
	var st report.JobStatus
	waitFor(t, w, 30*time.Second, "the lineage to end", func() bool {
		st, _ = w.status(lineage)
		return st.State == "ENDED"
	})
	t.Logf("spans %s; events %v; decisions %v", spansText(st), eventKinds(st), decisionKinds(st))
	// recognised: the first attempt's span ends at the last step it
	// reported (at least the one seen before the kill: the reports of its
	// last second died with the node), marked as Slurm's requeue; the
	// second resumes from the checkpoint
	if len(st.History) != 2 || st.History[1].StartStep != resume || st.History[0].EndStep < seen.Step ||
		!strings.HasPrefix(st.History[0].Reason, "requeued by Slurm") {
		t.Errorf("history %s: want attempt 0 ended at or past step %d, requeued by Slurm, then attempt 1 from step %d", spansText(st), seen.Step, resume)
	}
	if st.ExitStatus == nil || *st.ExitStatus != 0 || st.Step != total {
		t.Errorf("lineage end: exit %v step %d", st.ExitStatus, st.Step)
	}
}
