//go:build integration

package e2e

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/isched/isched/internal/report"
	"github.com/isched/isched/internal/testutil"
)

// The conventions matrix (issue 14): a real PyTorch loop
// (testdata/convention_train.py) that knows nothing of isched but
// ISCHED_RESUME_FROM, with Slurm's smallest time limit (1 min) and more
// work than fits in it, for each common way a training script meets the
// end of its allocation. Each must be continued at least once and reach
// its total, every attempt resuming from the newest checkpoint the one
// before it saved, with the status telling the truth (the loop's total,
// not the plan's, and one history span per attempt).

// convention is one row of the matrix.
type convention struct {
	name string // convention_train.py --convention
	// wrapper's --checkpoint-signal: how the coordinator's checkpoint
	// request reaches the script
	ckptSignal string
	// sbatch --signal (Slurm's own warning before the time limit), or ""
	slurmSignal string
	// steps of period seconds with a time limit of limit minutes; zero:
	// convSteps, convPeriod, 1
	steps  int64
	period float64
	limit  int
}

// convSteps × convPeriod is about 100 s of work: more than a 1-minute
// allocation holds, so every convention needs a continuation.
const (
	convSteps  = 900
	convPeriod = 0.1
	convEvery  = 50
)

// attemptFacts is what one attempt of convention_train.py recorded.
type attemptFacts struct {
	Restart string  `json:"restart"`
	Start   int64   `json:"start"`
	End     int64   `json:"end"`
	Saved   int64   `json:"saved"`
	How     string  `json:"how"`
	T0      float64 `json:"t0"`
	T1      float64 `json:"t1"`
}

func runConvention(t *testing.T, c convention) {
	if c.steps == 0 {
		c.steps, c.period, c.limit = convSteps, convPeriod, 1
	}
	testutil.UseLab(t, "cpu") // its jobs stay on cpu (ideal and fallback), beside the other conventions'
	w := newWorld(t, fastPolicy)
	lineage := fmt.Sprintf("cv%s%d", strings.ReplaceAll(c.name, "-", ""), time.Now().UnixNano()%1e6)
	dir, _ := os.MkdirTemp(w.dir, "job")
	_ = os.Chmod(dir, 0o755)
	ckdir, tmp, facts := filepath.Join(dir, "ckpt"), filepath.Join(dir, "tmp"), filepath.Join(dir, "facts")
	for _, d := range []string{ckdir, tmp} {
		_ = os.MkdirAll(d, 0o755)
	}
	args := []string{filepath.Join(binDir, "isched-wrapper"), "--report-interval", "1s", "--checkpoint-dir", ckdir,
		"--checkpoint-glob", "ckpt-*.pt", "--checkpoint-debounce", "300ms", "--checkpoint-signal", c.ckptSignal, "--grace", "10s",
		"--iter-pattern", `step (?P<step>[0-9]+)/(?P<total>[0-9]+)`, "--",
		"/usr/bin/python3", filepath.Join(testutil.RepoRoot(), "internal/e2e/testdata/convention_train.py"),
		"--convention", c.name, "--steps", fmt.Sprint(c.steps), "--period", fmt.Sprint(c.period),
		"--ckpt-every", fmt.Sprint(convEvery), "--ckpt-dir", ckdir, "--facts", facts}
	var extra []string
	if c.slurmSignal != "" {
		extra = append(extra, "--signal="+c.slurmSignal)
	}
	st, s, _ := runToEnd(t, w, jobRun{name: c.name, lineage: lineage, dir: dir, tmp: tmp, args: args, limit: c.limit,
		sbatch: extra, env: ",ISCHED_HELPER_DIR=" + filepath.Join(testutil.RepoRoot(), "scripts"), steps: c.steps,
		budget: 8*time.Minute + time.Duration(float64(c.steps)*c.period*3)*time.Second})
	if st.TotalIters != c.steps || st.LoopTotal != c.steps || st.PlanTotal != 57 {
		t.Errorf("%s: total %d (loop %d, plan %d), want the loop's %d", c.name, st.TotalIters, st.LoopTotal, st.PlanTotal, c.steps)
	}
	// one attempt per restart, each resuming where the one before saved
	var atts []attemptFacts
	paths, _ := filepath.Glob(facts + ".*")
	for _, p := range paths {
		if strings.HasSuffix(p, ".tmp") {
			continue
		}
		b, err := os.ReadFile(p)
		var a attemptFacts
		if err != nil || json.Unmarshal(b, &a) != nil {
			t.Fatalf("%s: facts %s: %v", c.name, p, err)
		}
		atts = append(atts, a)
	}
	sort.Slice(atts, func(i, j int) bool {
		a, b := atts[i].Restart, atts[j].Restart
		if len(a) != len(b) {
			return len(a) < len(b) // numerically: "9" before "10"
		}
		return a < b
	})
	restarts := fmt.Sprint(len(atts) - 1)
	if len(atts) < 2 || s["Restarts"] != restarts || len(st.History) != len(atts) {
		t.Fatalf("%s: %d attempts (facts %+v), Slurm restarts %s, %d history spans: want at least one continuation, one restart and one span per attempt",
			c.name, len(atts), atts, s["Restarts"], len(st.History))
	}
	var lost int64
	var added []string
	resumed := false // some attempt resumed from a checkpoint
	for i := 1; i < len(atts); i++ {
		prev, cur := atts[i-1], atts[i]
		want := cur.Start == prev.Saved && cur.Start > 0 || answeredByPeriodic(prev.Saved, cur.Start)
		if c.name == "requeue-self" {
			// Slurm kills the job's processes as soon as the script's own
			// requeue lands, possibly before the wrapper has confirmed the
			// checkpoint saved just before it (--checkpoint-debounce): the
			// newest confirmed one, at most one period older, is resumed —
			// from the start when the lost one was the first (saved on
			// the signal before the first periodic one)
			want = cur.Start <= prev.Saved && cur.Start >= prev.Saved-convEvery && (cur.Start > 0 || prev.Saved < convEvery)
		}
		resumed = resumed || cur.Start > 0
		if !want {
			t.Errorf("%s: attempt %d resumed at step %d, the one before saved step %d last", c.name, i, cur.Start, prev.Saved)
		}
		if st.History[i].StartStep != cur.Start {
			t.Errorf("%s: history span %d starts at %d, the script resumed at %d", c.name, i, st.History[i].StartStep, cur.Start)
		}
		lost += prev.End - cur.Start
		added = append(added, fmt.Sprintf("%.1fs", cur.T0-prev.T1))
	}
	if !resumed {
		t.Errorf("%s: no attempt resumed from a checkpoint: %v", c.name, attemptEnds(atts))
	}
	if last := atts[len(atts)-1]; last.End != c.steps || last.How != "done" {
		t.Errorf("%s: last attempt %+v, want done at %d", c.name, last, c.steps)
	}
	// the figures of the closing note
	t.Logf("status at the end: %s at step %d of %d; attempts %d (Slurm restarts %s), continuations %d; history %+v; decisions %v",
		st.State, st.Step, st.TotalIters, len(st.History), s["Restarts"], st.Continuations, st.History, decisionReasons(st))
	t.Logf("CONVENTION %s: attempts %d, continuations by isched %d, Slurm restarts %s, steps redone %d, gap between attempts %s, wall %s; ends: %v",
		c.name, len(atts), st.Continuations, s["Restarts"], lost, strings.Join(added, ","), time.Since(w.started).Round(time.Second), attemptEnds(atts))
}

// answeredByPeriodic: an attempt resumed at start, the newest periodic
// checkpoint (every convEvery steps), less than one period behind saved,
// the last step the attempt before saved. The coordinator takes the first
// checkpoint confirmed after its request as the answer: on a loaded host
// a periodic one can land before the signalled save (seen: request at step
// 78, periodic checkpoint 100 confirmed, requeue, the save at 103 too
// late; and in CI: periodic checkpoint-50 confirmed, the USR1 save of
// checkpoint-53 not yet), so that one is a right answer too.
func answeredByPeriodic(saved, start int64) bool {
	return start > 0 && start%convEvery == 0 && start < saved && saved-start < convEvery
}

func attemptEnds(atts []attemptFacts) []string {
	var out []string
	for _, a := range atts {
		out = append(out, fmt.Sprintf("%d-%d saved %d (%s)", a.Start, a.End, a.Saved, a.How))
	}
	return out
}

func decisionReasons(st report.JobStatus) []string {
	var out []string
	for _, d := range st.Decisions {
		out = append(out, d.Kind+": "+d.Reason+" ["+d.Result+"]")
	}
	return out
}

// TestConventionUSR1SaveExit0: SIGUSR1 -> save -> exit 0 (submitit, many
// site guides); Slurm records COMPLETED with work left: issue 14's run.
func TestConventionUSR1SaveExit0(t *testing.T) {
	t.Parallel()
	runConvention(t, convention{name: "usr1-exit0", ckptSignal: "USR1", slurmSignal: "USR1@30"})
}

// TestConventionUSR1SaveExit143: SIGUSR1 -> save -> exit 143 (FAILED).
func TestConventionUSR1SaveExit143(t *testing.T) {
	t.Parallel()
	runConvention(t, convention{name: "usr1-exit143", ckptSignal: "USR1", slurmSignal: "USR1@30"})
}

// TestConventionPeriodicOnly: no signal handling, periodic checkpoints
// only: the time limit ends the attempt (TIMEOUT) and the next resumes
// from the newest periodic checkpoint.
func TestConventionPeriodicOnly(t *testing.T) {
	t.Parallel()
	runConvention(t, convention{name: "periodic", ckptSignal: "file"})
}

// TestConventionRequeueSelf: the script requeues itself after saving
// (`scontrol requeue $SLURM_JOB_ID`, as Lightning's SLURM auto-requeue):
// one restart per attempt, no double action.
func TestConventionRequeueSelf(t *testing.T) {
	t.Parallel()
	runConvention(t, convention{name: "requeue-self", ckptSignal: "USR1", slurmSignal: "USR1@30"})
}

// TestConventionSIGTERMOnly: the script saves on SIGTERM and exits; no
// --signal: the coordinator's request arrives as SIGTERM, or Slurm's at
// the limit.
func TestConventionSIGTERMOnly(t *testing.T) {
	t.Parallel()
	runConvention(t, convention{name: "sigterm", ckptSignal: "TERM"})
}

// TestConventionHelper: scripts/isched.py (control-file requests, save,
// keep going): the coordinator requeues the running job after the save.
func TestConventionHelper(t *testing.T) {
	t.Parallel()
	runConvention(t, convention{name: "helper", ckptSignal: "file"})
}

// TestIssue14Scenario is issue 14's run as the user tried it: a 3-minute
// limit, about 7 minutes of work (3000 steps), SIGUSR1 -> save -> exit 0,
// Slurm's --signal=USR1@120 as the script isched submit generates, and a
// plan total (57) that the loop's own contradicts. It must end COMPLETED
// at 3000/3000 with its continuations in the status. It takes about 9
// minutes, so it runs only with ISCHED_E2E_SCENARIO=1 (the matrix above
// covers the same convention in 2 minutes).
func TestIssue14Scenario(t *testing.T) {
	if os.Getenv("ISCHED_E2E_SCENARIO") == "" {
		t.Skip("about 9 minutes: set ISCHED_E2E_SCENARIO=1 (TestConventionUSR1SaveExit0 covers the convention)")
	}
	t.Parallel()
	runConvention(t, convention{name: "usr1-exit0", ckptSignal: "USR1", slurmSignal: "USR1@120", steps: 3000, period: 0.14, limit: 3})
}

// jobRun is one wrapped training job the convention tests submit.
type jobRun struct {
	name, lineage, dir, tmp string
	args                    []string // srun's command: the wrapper and the training
	limit                   int      // minutes
	sbatch                  []string // more sbatch options
	env                     string   // more ",NAME=value" for --export
	steps                   int64    // the loop's total
	budget                  time.Duration
}

// runToEnd submits r as a requeueable job on the cpu partition under a plan
// comment whose total (57) is wrong on purpose (a total computed from
// --samples/--epochs/--batch that counts something else: the loop's own
// "step N/T" must win), waits until its lineage has ended and Slurm is done
// with the job, and fails the test unless the lineage ended at the loop's
// last step and the job COMPLETED. It returns the lineage's status, Slurm's
// view of the job and the job's output.
func runToEnd(t *testing.T, w *world, r jobRun) (report.JobStatus, map[string]string, []byte) {
	t.Helper()
	q := make([]string, len(r.args))
	for i, a := range r.args {
		q[i] = "'" + strings.ReplaceAll(a, "'", `'\''`) + "'"
	}
	script := filepath.Join(r.dir, "job.sh")
	if err := os.WriteFile(script, []byte("#!/bin/bash\nexec srun "+strings.Join(q, " ")+"\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	plan := report.Plan{Lineage: r.lineage, Ideal: "cpu", Fallbacks: []string{"cpu"}, Total: 57, Cluster: w.cluster}
	sb := []string{"-J", "isched-e2e-" + r.lineage, "-p", "cpu", "-t", fmt.Sprint(r.limit), "--requeue", "--open-mode=append", "--mem=1G",
		"-o", filepath.Join(r.dir, "out.txt"), "--comment", plan.FormatComment(),
		"--export=ALL,TMPDIR=" + r.tmp + ",ISCHED_LINEAGE=" + r.lineage + ",ISCHED_CLUSTER=" + w.cluster +
			",ISCHED_REDIS_ADDR=" + w.redis.Addr + ",ISCHED_REPORT_DIRECT=1,ISCHED_REDIS_PASSWORD_FILE=" + w.redis.PasswordFile("reporter") + r.env}
	id := w.sbatch(append(append(sb, r.sbatch...), script)...)
	var st report.JobStatus
	waitFor(t, w, r.budget, "the lineage to end", func() bool {
		var ok bool
		st, ok = w.status(r.lineage)
		return ok && st.EndedMS != 0
	})
	// the run's end report can come before Slurm is done with the job
	waitFor(t, w, time.Minute, "Slurm's final state of the job", func() bool {
		switch slurmJob(id)["JobState"] {
		case "RUNNING", "COMPLETING", "PENDING", "REQUEUED":
			return false
		}
		return true
	})
	out, _ := os.ReadFile(filepath.Join(r.dir, "out.txt"))
	s := slurmJob(id)
	if st.State != "ENDED" || st.Step != r.steps || s["JobState"] != "COMPLETED" {
		// the verdict last: CI shows a failure's tail
		t.Fatalf("%s: decisions %v\nstatus events %v\n%s\njob output (tail):\n%s\n%s: lineage %s at step %d of %d, job %s %s (restarts %s)",
			r.name, decisionReasons(st), eventKinds(st), w.logs(), tail(out, 3000),
			r.name, st.State, st.Step, st.TotalIters, id, s["JobState"], s["Restarts"])
	}
	return st, s, out
}
