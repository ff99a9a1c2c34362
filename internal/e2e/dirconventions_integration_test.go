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

	"github.com/isched/isched/internal/testutil"
)

// Directory checkpoints in the conventions matrix (issue 14, 4g): the loop
// of testdata/dirckpt_train.py saves a directory of several files in the
// layout of Hugging Face's Trainer, torch.distributed.checkpoint or
// DeepSpeed, the file that marks it complete last, and on SIGUSR1 saves
// and exits 0 (convention a). Its first attempt, asked to stop (by
// SIGUSR1 or, in that attempt only, SIGTERM: however it ends), begins the
// checkpoint it was asked for and is killed mid-save: a directory without
// its marker, newer than the attempt's last complete one and quiet for
// 2 s before the kill (long enough for a watcher that ignored the marker
// to confirm it), which the next attempt must not resume from. Each run needs at least one continuation, must reach
// its total with every attempt resuming from the directory the one before
// completed last (passed as the resume path: ISCHED_RESUME_FROM, or the
// --resume-arg flag), and the status must tell the truth.

// dirConvention is one directory layout of the matrix.
type dirConvention struct {
	layout string // dirckpt_train.py --layout
	glob   string // the wrapper's --checkpoint-glob
	// resumeArg is the wrapper's --resume-arg ("" : ISCHED_RESUME_FROM only)
	resumeArg string
	// dir is the checkpoint directory's name for a step
	dir func(step int64) string
}

// dirAttempt is what one attempt of dirckpt_train.py recorded.
type dirAttempt struct {
	attemptFacts
	Resume    string `json:"resume"`     // the directory it resumed from
	ResumeArg string `json:"resume_arg"` // --resume_from_checkpoint's value
	Half      string `json:"half"`       // the directory it left half-written
}

func runDirConvention(t *testing.T, c dirConvention) {
	testutil.UseLab(t, "cpu") // its jobs stay on cpu (ideal and fallback), beside the other conventions'
	w := newWorld(t, fastPolicy)
	lineage := fmt.Sprintf("dc%s%d", c.layout, time.Now().UnixNano()%1e6)
	dir, _ := os.MkdirTemp(w.dir, "job")
	_ = os.Chmod(dir, 0o755)
	ckdir, tmp, facts := filepath.Join(dir, "ckpt"), filepath.Join(dir, "tmp"), filepath.Join(dir, "facts")
	for _, d := range []string{ckdir, tmp} {
		_ = os.MkdirAll(d, 0o755)
	}
	// --checkpoint-quiesce 300ms: a directory taken for no known layout
	// would be confirmed (half-written) 300 ms after its last write; only
	// its layout's missing marker keeps it from being a resume point
	args := []string{filepath.Join(binDir, "isched-wrapper"), "--report-interval", "1s", "--checkpoint-dir", ckdir,
		"--checkpoint-glob", c.glob, "--checkpoint-debounce", "300ms", "--checkpoint-quiesce", "300ms",
		"--checkpoint-signal", "USR1", "--grace", "10s", "--iter-pattern", `step (?P<step>[0-9]+)/(?P<total>[0-9]+)`}
	if c.resumeArg != "" {
		args = append(args, "--resume-arg="+c.resumeArg)
	}
	args = append(args, "--", "/usr/bin/python3", filepath.Join(testutil.RepoRoot(), "internal/e2e/testdata/dirckpt_train.py"),
		"--layout", c.layout, "--steps", fmt.Sprint(convSteps), "--period", fmt.Sprint(convPeriod),
		"--ckpt-every", fmt.Sprint(convEvery), "--ckpt-dir", ckdir, "--facts", facts, "--half-written")
	st, s, out := runToEnd(t, w, jobRun{name: c.layout, lineage: lineage, dir: dir, tmp: tmp, args: args, limit: 1,
		sbatch: []string{"--signal=USR1@30"}, steps: convSteps, budget: 8*time.Minute + time.Duration(convSteps*convPeriod*3)*time.Second})
	if st.TotalIters != convSteps || st.LoopTotal != convSteps || st.PlanTotal != 57 {
		t.Errorf("%s: total %d (loop %d, plan %d), want the loop's %d", c.layout, st.TotalIters, st.LoopTotal, st.PlanTotal, convSteps)
	}
	atts := readDirAttempts(t, facts)
	if len(atts) < 2 || s["Restarts"] != fmt.Sprint(len(atts)-1) || len(st.History) != len(atts) {
		t.Fatalf("%s: %d attempts (facts %+v), Slurm restarts %s, %d history spans: want at least one continuation, one restart and one span per attempt",
			c.layout, len(atts), atts, s["Restarts"], len(st.History))
	}
	// the first attempt was killed while saving the step after its last
	// complete checkpoint; the second resumed from that complete one
	first := atts[0]
	if first.How != "killed mid-save" || first.Half != filepath.Join(ckdir, c.dir(first.End)) || first.Saved <= 0 || first.Saved >= first.End {
		t.Fatalf("%s: first attempt %+v: want it killed mid-save of %s after a complete save of an earlier step; history %s; decisions %v\njob output (tail):\n%s",
			c.layout, first, c.dir(first.End), spansText(st), decisionReasons(st), tail(out, 3000))
	}
	if atts[1].Resume == first.Half {
		t.Errorf("%s: attempt 1 resumed from %s, the directory attempt 0 left half-written", c.layout, first.Half)
	}
	checkNotRecorded(t, ckdir, lineage, first.Half)
	var redone, lost int64
	var added []string
	for i := 1; i < len(atts); i++ {
		prev, cur := atts[i-1], atts[i]
		want := filepath.Join(ckdir, c.dir(prev.Saved))
		if answeredByPeriodic(prev.Saved, cur.Start) {
			want = filepath.Join(ckdir, c.dir(cur.Start))
		}
		if cur.Resume != want || cur.Start != prev.Saved && !answeredByPeriodic(prev.Saved, cur.Start) {
			t.Errorf("%s: attempt %d resumed at step %d from %q; the one before completed %s (step %d) last",
				c.layout, i, cur.Start, cur.Resume, want, prev.Saved)
		}
		if c.resumeArg != "" && cur.ResumeArg != want {
			t.Errorf("%s: attempt %d got --resume_from_checkpoint %q, want %s", c.layout, i, cur.ResumeArg, want)
		}
		if st.History[i].StartStep != cur.Start {
			t.Errorf("%s: history span %d starts at %d, the script resumed at %d", c.layout, i, st.History[i].StartStep, cur.Start)
		}
		redone += prev.End - cur.Start
		lost += max(prev.Saved-cur.Start, 0)
		added = append(added, fmt.Sprintf("%.1fs", cur.T0-prev.T1))
	}
	if last := atts[len(atts)-1]; last.End != convSteps || last.How != "done" {
		t.Errorf("%s: last attempt %+v, want done at %d", c.layout, last.attemptFacts, convSteps)
	}
	t.Logf("status at the end: %s at step %d of %d; attempts %d (Slurm restarts %s), continuations %d; history %s; decisions %v",
		st.State, st.Step, st.TotalIters, len(st.History), s["Restarts"], st.Continuations, spansText(st), decisionReasons(st))
	ends := make([]attemptFacts, len(atts))
	for i, a := range atts {
		ends[i] = a.attemptFacts
	}
	t.Logf("DIRCONVENTION %s: attempts %d, continuations by isched %d, Slurm restarts %s, steps redone %d, lost beyond the last complete checkpoint %d, gap between attempts %s, wall %s; ends: %v",
		c.layout, len(atts), st.Continuations, s["Restarts"], redone, lost, strings.Join(added, ","), time.Since(w.started).Round(time.Second), attemptEnds(ends))
}

// readDirAttempts reads every attempt's facts, in restart order.
func readDirAttempts(t *testing.T, facts string) []dirAttempt {
	t.Helper()
	var atts []dirAttempt
	paths, _ := filepath.Glob(facts + ".*")
	for _, p := range paths {
		if strings.HasSuffix(p, ".tmp") {
			continue
		}
		b, err := os.ReadFile(p)
		var a dirAttempt
		if err == nil {
			err = json.Unmarshal(b, &a)
		}
		if err != nil {
			t.Fatalf("facts %s: %v", p, err)
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
	return atts
}

// checkNotRecorded fails if the attempt that left half written (attempt
// 0) recorded it in the lineage's resume file as a confirmed checkpoint.
// (The file keeps the last few; a later attempt may save the same step
// anew, complete, and record it rightly.)
func checkNotRecorded(t *testing.T, ckdir, lineage, half string) {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(ckdir, ".isched-lineage-"+lineage+".json"))
	if err != nil {
		t.Fatalf("the lineage's resume file: %v", err)
	}
	var r struct {
		Checkpoints []struct {
			Path    string `json:"path"`
			Attempt int    `json:"attempt"`
		} `json:"checkpoints"`
	}
	if err := json.Unmarshal(b, &r); err != nil {
		t.Fatalf("the lineage's resume file: %v", err)
	}
	for _, p := range r.Checkpoints {
		if p.Path == half && p.Attempt == 0 {
			t.Errorf("the half-written %s was recorded as a resume point: %s", half, b)
		}
	}
}

// TestConventionHFCheckpointDirs: Hugging Face Trainer's checkpoint-<step>/
// (pytorch_model.bin, optimizer.pt, scheduler.pt, rng_state.pth, then
// trainer_state.json), resumed with --resume_from_checkpoint DIR through
// the wrapper's --resume-arg.
func TestConventionHFCheckpointDirs(t *testing.T) {
	t.Parallel()
	runDirConvention(t, dirConvention{layout: "hf", glob: "checkpoint-*", resumeArg: "--resume_from_checkpoint {path}",
		dir: func(n int64) string { return fmt.Sprintf("checkpoint-%d", n) }})
}

// TestConventionDCPDirs: torch.distributed.checkpoint's layout (step_<N>/
// with __0_0.distcp, __1_0.distcp, then .metadata), written by hand: the
// Debian torch 1.13 has no torch.distributed.checkpoint.
func TestConventionDCPDirs(t *testing.T) {
	t.Parallel()
	runDirConvention(t, dirConvention{layout: "dcp", glob: "*",
		dir: func(n int64) string { return fmt.Sprintf("step_%d", n) }})
}

// TestConventionDeepSpeedDirs: DeepSpeed's global_step<N>/ (model and
// optimizer states), then the top-level "latest" naming it; "latest"
// itself (the default glob matches it) is no checkpoint.
func TestConventionDeepSpeedDirs(t *testing.T) {
	t.Parallel()
	runDirConvention(t, dirConvention{layout: "deepspeed", glob: "*",
		dir: func(n int64) string { return fmt.Sprintf("global_step%d", n) }})
}
