//go:build integration

package e2e

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/isched/isched/internal/report"
	"github.com/isched/isched/internal/testutil"
)

var arrayRE = regexp.MustCompile(`isched: array \S+ of (\d+) runs, lineages (\S+)_<task>, on `)

// TestArrayAsAlice (issue 43, item 1): alice's own batch script asks for
// an array (#SBATCH --array=0-1) with its partition, time and memory;
// `isched submit job.sbatch` from her shell takes every line. Each element
// is a run of its own: its own lineage (<lineage>_<task>), checkpoint
// directory and output file. Slurm requeues element 1 in the middle of
// its run: it resumes from its own last checkpoint, not element 0's, and
// element 0 runs on undisturbed. Both finish their steps; `isched status
// ARRAY_ID` as alice shows the two together.
func TestArrayAsAlice(t *testing.T) {
	besideOthers(t)
	w := newWorld(t, fastPolicy)
	cli := testutil.Binary(t, "isched", "./isched")
	base := testutil.WorkDir(t, "isched-array-")
	home, uid := userDir(t, base, "alice")
	relay := w.startRelay()
	root := testutil.RepoRoot()
	writeUserConf(t, home, uid, "cluster = "+w.cluster+"\nredis_addr = "+w.redis.Addr+"\nredis_user = viewer\nredis_password_file = "+
		w.redis.PasswordFile("viewer")+"\nrelay_addr = "+relay+"\nhelper_dir = "+filepath.Join(root, "scripts")+"\n")
	const steps = 40
	script := fmt.Sprintf("#!/bin/bash\n#SBATCH -p cpu\n#SBATCH -t 5\n#SBATCH --mem=500M\n#SBATCH --array=0-1\n"+
		"exec /usr/bin/python3 %s --steps %d --period 0.25 --ckpt-every 5 --facts %s/facts-\"$SLURM_ARRAY_TASK_ID\".json "+
		"--pause-at 12 --resume-file %s/go-\"$SLURM_ARRAY_TASK_ID\"\n",
		shq(filepath.Join(root, "internal/wrapper/testdata/fake_trainer.py")), steps, shq(home), shq(home))
	writeAs(t, filepath.Join(home, "job.sbatch"), []byte(script), 0o644, uid)
	// element 0 runs through; element 1 waits after step 12 (its
	// checkpoint at 10 written) until it has been requeued
	writeAs(t, filepath.Join(home, "go-0"), nil, 0o644, uid)
	run := aliceCLI(t, home, cli)
	out := run("submit", "--total-iters", strconv.Itoa(steps), "--wrapper", filepath.Join(binDir, "isched-wrapper"), "job.sbatch")
	m := arrayRE.FindStringSubmatch(out)
	if m == nil || m[1] != "2" || !strings.Contains(out, "line 5 --array=0-1") || !strings.Contains(out, "Submitted batch job ") {
		t.Fatalf("isched submit job.sbatch:\n%s", out)
	}
	lineage := m[2]
	job := strings.Fields(out[strings.Index(out, "Submitted batch job ")+len("Submitted batch job "):])[0]
	t.Cleanup(func() { _ = exec.Command("scancel", job).Run() })
	el := func(task int) string { return report.ElementLineage(lineage, task) }

	var st1 report.JobStatus
	waitFor(t, w, 3*time.Minute, "element 1 past its second checkpoint", func() bool {
		st1, _ = w.status(el(1))
		return st1.Step >= 12
	})
	if err := runCmd("scontrol", "requeue", job+"_1"); err != nil {
		t.Fatalf("scontrol requeue %s_1: %v", job, err)
	}
	writeAs(t, filepath.Join(home, "go-1"), nil, 0o644, uid)
	ended := map[int]report.JobStatus{}
	waitFor(t, w, 4*time.Minute, "both elements to end", func() bool {
		for task := range 2 {
			if st, _ := w.status(el(task)); st.State == "ENDED" {
				ended[task] = st
			}
		}
		return len(ended) == 2
	})
	for task, st := range ended {
		if st.Step != steps || st.Lineage != el(task) {
			t.Errorf("element %d: lineage %s ended at step %d, want %s at %d", task, st.Lineage, st.Step, el(task), steps)
		}
	}
	ckpt := filepath.Join(home, "checkpoints", lineage)
	a1, ok := factsOf(filepath.Join(home, "facts-1.json.attempt1"))
	if !ok || !strings.HasPrefix(fmt.Sprint(a1["resumed_from"]), filepath.Join(ckpt, "1")+"/") || num(a1, "start") < 10 {
		ents, _ := os.ReadDir(home)
		var names []string
		for _, e := range ents {
			names = append(names, e.Name())
		}
		o, _ := os.ReadFile(filepath.Join(home, "isched-"+el(1)+".out"))
		t.Errorf("element 1's second attempt: %v; want it resumed at step 10 or later from %s/1\nin %s: %s\nits output:\n%s", a1, ckpt, home, names, o)
	}
	if _, requeued := factsOf(filepath.Join(home, "facts-0.json.attempt1")); requeued {
		t.Errorf("element 0 ran a second attempt: only element 1 was requeued")
	}
	for task := range 2 {
		dir := filepath.Join(ckpt, strconv.Itoa(task))
		if ents, err := os.ReadDir(dir); err != nil || len(ents) == 0 {
			t.Errorf("element %d's checkpoint directory %s: %v, %d entries", task, dir, err, len(ents))
		}
		if _, err := os.Stat(filepath.Join(home, "isched-"+el(task)+".out")); err != nil {
			t.Errorf("element %d's output file: %v", task, err)
		}
	}
	out = run("status", job)
	t.Logf("isched status %s:\n%s", job, out)
	for task := range 2 {
		if !regexp.MustCompile(regexp.QuoteMeta(el(task)) + `\s+\S+\s+\S+\s+` + fmt.Sprintf("%d/%d", steps, steps)).MatchString(out) {
			t.Errorf("isched status %s lacks element %d at %d/%d", job, task, steps, steps)
		}
	}
}
