//go:build integration && frameworks

package e2e

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/isched/isched/internal/testutil"
)

// TestElasticFrameworksOnCluster is TestElasticOnCluster's run (grow 1 →
// 2 ranks, shrink back for bob, resume at each size: elasticOnCluster)
// with the real Lightning Trainer and the real Hugging Face Trainer
// (issue 42), from scripts/python-venv's venv (Debian's torch, the pinned
// lightning and transformers): elastic_lightning.py and elastic_hf.py
// keep the global batch at 8 through isched's helpers, save on the
// wrapper's request through isched's callbacks and resume through their
// resume helpers. The subtests run one after the other: each holds the gpu
// partition while it counts on gpu2's idle GPU.
//
// Build tag frameworks: the venv is made by make test-python (lane C of
// scripts/test-lanes), which runs this test after it.
//
// The runs are root's jobs, not alice's as in TestElasticOnCluster: the
// venv lives under root's home (scripts/python-venv, $HOME/.cache), which
// no test user can read, and opening /root or copying the venv into a
// user's directory would test the copy, not the frameworks. What runs as
// a test user (the relay, the user's files) TestElasticOnCluster covers;
// here it is the frameworks under the wrapper at another world size.
func TestElasticFrameworksOnCluster(t *testing.T) {
	py := frameworksPython(t)
	for _, fw := range []struct {
		name, script string
		check        func(t *testing.T, out string)
	}{
		{"lightning", "elastic_lightning.py", lightningWorlds},
		{"huggingface", "elastic_hf.py", nil},
	} {
		t.Run(fw.name, func(t *testing.T) {
			run, _ := elasticOnCluster(t, elasticRun{Steps: 600, Env: []string{"PYTHONPATH=" + filepath.Join(testutil.RepoRoot(), "python") + ":" + filepath.Join(testutil.RepoRoot(), "python", "tests")},
				Argv: []string{py, filepath.Join(testutil.RepoRoot(), "internal/e2e/testdata", fw.script)}})
			if fw.check == nil {
				return
			}
			out, err := os.ReadFile(filepath.Join(run.dir, "out.txt"))
			if err != nil {
				t.Fatalf("the job's output: %v", err)
			}
			fw.check(t, string(out))
		})
	}
}

// frameworksPython is scripts/python-venv's python (made if needed; the
// script flocks, so a lane building it is waited for).
func frameworksPython(t *testing.T) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	var stderr strings.Builder
	cmd := exec.CommandContext(ctx, filepath.Join(testutil.RepoRoot(), "scripts/python-venv"))
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("scripts/python-venv: %v: %s", err, stderr.String())
	}
	py := strings.TrimSpace(string(out))
	if _, err := os.Stat(py); err != nil {
		t.Fatalf("scripts/python-venv printed %q: %v", py, err)
	}
	return py
}

var lightningWorldRE = regexp.MustCompile(`(?m)^rank (\d) of (\d), cluster environment (\w+)$`)

// lightningWorlds checks what elastic_lightning.py's ranks said of
// Lightning's world under srun: its SLURMEnvironment, at rank 0 of 1 and
// ranks 0 and 1 of 2 (a rank whose Lightning world is not the wrapper's
// exits before training, and the run would not have ended).
func lightningWorlds(t *testing.T, out string) {
	t.Helper()
	seen := map[string]bool{}
	for _, m := range lightningWorldRE.FindAllStringSubmatch(out, -1) {
		if m[3] != "SLURMEnvironment" {
			t.Errorf("rank %s of %s: Lightning's cluster environment %s, want SLURMEnvironment under srun", m[1], m[2], m[3])
		}
		seen[fmt.Sprintf("%s/%s", m[1], m[2])] = true
	}
	for _, want := range []string{"0/1", "0/2", "1/2"} {
		if !seen[want] {
			t.Errorf("no rank %s of %s in the job's output (Lightning's world per rank: %v)", want[:1], want[2:], seen)
		}
	}
}
