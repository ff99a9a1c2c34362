//go:build integration

package e2e

import (
	"fmt"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/isched/isched/internal/report"
)

// TestAdminCommentOnDevCluster: with admin_comment on, the coordinator asks
// the agent (root here, as a site's agent runs as root or a Slurm operator)
// to write the run's verdict into the job's AdminComment when the wrapper's
// end report arrives; `scontrol show job` shows it after the job ended.
// Slurm refuses the change once a job has ended, so the job script lives on
// 10 s after its step.
func TestAdminCommentOnDevCluster(t *testing.T) {
	besideOthers(t)
	w := newWorld(t, fastPolicy)
	b, err := os.ReadFile(w.config)
	if err != nil {
		t.Fatal(err)
	}
	cfg := strings.Replace(string(b), "{", `{"admin_comment": true, `, 1)
	if err := os.WriteFile(w.config, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	_ = w.coord.Process.Signal(syscall.SIGTERM)
	_, _ = w.coord.Process.Wait()
	w.startCoordinator()

	lineage := fmt.Sprintf("adm%d", time.Now().UnixNano()%1e6)
	plan := report.Plan{Lineage: lineage, Ideal: "cpu", Total: 40}
	job := w.submitTrainerWith(trainOpts{After: 10 * time.Second}, plan, []string{"-p", "cpu", "-t", "5"},
		"--steps", "40", "--period", "0.1", "--mb", "50", "--ckpt-every", "0")
	var comment string
	waitFor(t, w, 150*time.Second, "the job's AdminComment to carry the verdict", func() bool {
		out, err := exec.Command("scontrol", "show", "job", job.id).Output()
		if err != nil {
			return false
		}
		for _, f := range strings.Split(string(out), "\n") {
			if _, v, ok := strings.Cut(strings.TrimSpace(f), "AdminComment="); ok {
				comment = strings.TrimSpace(v)
			}
		}
		return strings.HasPrefix(comment, "isched: ")
	})
	t.Logf("job %s AdminComment=%s", job.id, comment)
	if !strings.Contains(comment, "asked 1.0 GiB") || !strings.Contains(comment, "--mem=") {
		t.Errorf("AdminComment %q, want the verdict on the job's --mem=1G", comment)
	}
	st, _ := w.status(lineage)
	found := false
	for _, d := range st.Decisions {
		found = found || d.Kind == "annotate"
	}
	if !found {
		t.Errorf("no annotate decision in the status: %+v", st.Decisions)
	}
}
