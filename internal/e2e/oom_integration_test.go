//go:build integration

package e2e

import (
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/isched/isched/internal/report"
)

// TestEarlyOOM: a job with --mem=300M whose trainer allocates 600 MB at its
// 10th iteration is killed by the kernel (task/cgroup enforces the limit).
// The coordinator's status for the lineage must say so within seconds, with
// a measured peak near the limit, not the RSS of the last sample before the
// allocation.
func TestEarlyOOM(t *testing.T) {
	w := newWorld(t, fastPolicy)
	lineage := fmt.Sprintf("oom%d", time.Now().UnixNano()%1e6)
	const limit = 300 << 20
	plan := report.Plan{Lineage: lineage, Ideal: "cpu", Total: 200, Migrate: true}
	job := w.submitTrainer(plan, []string{"-p", "cpu", "-t", "5", "--mem=300M"},
		"--steps", "200", "--period", "0.2", "--mb", "600", "--alloc-at", "10", "--ckpt-every", "0")
	waitFor(t, w, 90*time.Second, "the job running with iterations reported", func() bool {
		st, ok := w.status(lineage)
		return ok && st.State == "RUNNING" && st.Step >= 1
	})
	s := waitJobEnd(t, w, job.id, 90*time.Second)
	killedAt := time.Now()
	t.Logf("Slurm: %s exit %s on %s (restarts %s)", s["JobState"], s["ExitCode"], s["NodeList"], s["Restarts"])
	// The OOM hit step 0 (srun), not the batch step, so the job itself ends
	// FAILED (exit 137 from srun) rather than OUT_OF_MEMORY; slurmstepd's
	// message is Slurm's word that the kernel killed it at the limit.
	if (s["JobState"] != "FAILED" && s["JobState"] != "OUT_OF_MEMORY") || !strings.Contains(job.output(), "oom-kill event") {
		t.Fatalf("job ended %s without slurmstepd's oom-kill message (is task/cgroup enforcing memory?)\n%s", s["JobState"], job.output())
	}
	if end, err := time.ParseInLocation("2006-01-02T15:04:05", s["EndTime"], time.Local); err == nil {
		killedAt = end
	}

	// What the wrapper measured and concluded (its summary line on stderr).
	sum := regexp.MustCompile(`isched-wrapper: summary: exit=(\d+)(?: \((\w+)\))? .*?peak_rss=([\d.]+) MiB(?: cgroup_peak=([\d.]+) MiB)?.* reason=(\S+)`).
		FindStringSubmatch(job.output())
	if sum == nil {
		t.Fatalf("no wrapper summary in the job output:\n%s", job.output())
	}
	peakMiB, _ := strconv.ParseFloat(sum[3], 64)
	t.Logf("wrapper: exit %s (%s), peak RSS %s MiB, cgroup peak %s MiB, reason %s", sum[1], sum[2], sum[3], sum[4], sum[5])
	if sum[1] != "137" || sum[2] != "SIGKILL" {
		t.Errorf("wrapper exit %s (%s), want 137 (SIGKILL): the kernel's OOM killer ends the child with SIGKILL", sum[1], sum[2])
	}
	if sum[5] != report.EndOOM {
		t.Errorf("wrapper End.Reason %q, want %q: the child was OOM-killed (slurmstepd: oom-kill event) but the wrapper only "+
			"calls it oom when its last periodic sample saw the cgroup within 5%% of the limit (internal/wrapper/run.go); "+
			"an allocation between two samples is missed", sum[5], report.EndOOM)
	}

	// What the coordinator shows.
	var st report.JobStatus
	var oomAt time.Time
	var oomMsg string
	deadline := killedAt.Add(15 * time.Second)
	for time.Now().Before(deadline) {
		st, _ = w.status(lineage)
		for _, e := range st.Events {
			if e.Kind == "oom" {
				oomAt, oomMsg = time.UnixMilli(e.AtMS), e.Message
			}
		}
		if n := len(st.History); !oomAt.IsZero() || (n > 0 && st.History[n-1].Reason == report.EndOOM) {
			break
		}
		time.Sleep(300 * time.Millisecond)
	}
	endReason := ""
	if n := len(st.History); n > 0 {
		endReason = st.History[n-1].Reason
	}
	t.Logf("coordinator: state %s, events %v, end reason %q, peak RSS %d MiB, oom message %q, spans %s",
		st.State, eventKinds(st), endReason, st.PeakRSSBytes>>20, oomMsg, spansText(st))
	if oomAt.IsZero() && endReason != report.EndOOM {
		t.Errorf("no \"oom\" event and end reason %q in the lineage status within 15 s of the kill at %s", endReason, killedAt.Format(time.TimeOnly))
	} else if !oomAt.IsZero() {
		d := oomAt.Sub(killedAt)
		t.Logf("oom event %.1f s after the job's end (second resolution)", d.Seconds())
		if d > 10*time.Second {
			t.Errorf("the oom event came %s after the kill, want within seconds", d.Round(100*time.Millisecond))
		}
	}
	// The peak: the trainer reached the 300 MB limit (that is what killed
	// it); a peak far below says the measurement missed the allocation.
	if peakMiB*(1<<20) < 0.8*limit && st.PeakRSSBytes < limit*8/10 {
		t.Errorf("measured peak %.0f MiB (wrapper) / %d MiB (status) for a process killed at its %d MiB limit: "+
			"the peak comes from 1 s samples of the process tree, and the allocation happened between two samples",
			peakMiB, st.PeakRSSBytes>>20, limit>>20)
	}
	if st.MemLimitBytes != limit {
		t.Errorf("status memory limit %d MiB, want the job's %d MiB (the end report carries the cgroup's limit)", st.MemLimitBytes>>20, limit>>20)
	}
	// The lineage must not look alive: Slurm does not requeue an OOM. The
	// agent's squeue may still show the job COMPLETING (slurmstepd cleaning
	// up) for a publish or two; the lineage ends at Slurm's final state.
	waitFor(t, w, 20*time.Second, "the lineage to show the job's end (an end time)", func() bool {
		st, _ = w.status(lineage)
		return st.EndedMS != 0
	})
	exit := "none"
	if st.ExitStatus != nil {
		exit = strconv.Itoa(*st.ExitStatus)
	}
	t.Logf("lineage at the end: state %s, exit status %s, ended at %d", st.State, exit, st.EndedMS)
	if st.State != s["JobState"] || st.EndedMS == 0 || st.ExitStatus == nil || *st.ExitStatus != 137 {
		t.Errorf("lineage end: state %s, ended at %d, exit status %v; want Slurm's %s with the wrapper's exit 137", st.State, st.EndedMS, exit, s["JobState"])
	}
}
