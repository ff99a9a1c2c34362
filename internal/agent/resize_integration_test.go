//go:build integration

package agent_test

import (
	"context"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/isched/isched/internal/agent"
	"github.com/isched/isched/internal/report"
	"github.com/isched/isched/internal/slurm"
	"github.com/isched/isched/internal/testutil"
)

// resizeScript records each task of every attempt as "restart procid
// ntasks step_tasks node CUDA_VISIBLE_DEVICES"; restart 1 ends after its
// srun (the continuation path: the agent requeues it from COMPLETED).
const resizeScript = `#!/bin/sh
#SBATCH -J isched-slurm-test-agent-resize
#SBATCH -p gpu -t 10 --gres=gpu:1 -o /dev/null --chdir=/tmp --requeue
export SLURM_EXPORT_ENV=ALL
r=${SLURM_RESTART_COUNT:-0}
srun --gpus-per-task=1 sh -c 'echo "${SLURM_RESTART_COUNT:-0} $SLURM_PROCID $SLURM_NTASKS $SLURM_STEP_NUM_TASKS $SLURMD_NODENAME ${CUDA_VISIBLE_DEVICES:-none}"' >> %s
[ "$r" = 1 ] && exit 0
exec sleep 600
`

// tasksOf returns the lines of restart r once there are n of them.
func tasksOf(t *testing.T, out string, r, n int) []string {
	t.Helper()
	var got []string
	testutil.Eventually(t, 60*time.Second, 100*time.Millisecond, fmt.Sprintf("%d tasks of restart %d", n, r), func() bool {
		got = got[:0]
		for _, l := range fileLines(out) {
			if f := strings.Fields(l); len(f) == 6 && f[0] == fmt.Sprint(r) {
				got = append(got, l)
			}
		}
		return len(got) >= n
	})
	return got
}

// TestIntegrationResizeByAgent: the agent resizes alice's running job from
// 1 task (gpu:1) to 2 on one node (gpu:2) with a requeue action, and after
// that attempt ended (COMPLETED) back to 1 with an ended requeue. Each
// attempt's srun starts that many tasks, each with its own GPU.
func TestIntegrationResizeByAgent(t *testing.T) {
	testutil.ClaimPartitions(t, "gpu")
	c := newCluster(t)
	sc := &slurm.Client{}
	a, err := agent.New(agent.Config{Cluster: c.name, PollInterval: time.Second}, sc, c.agentClient(t))
	if err != nil {
		t.Fatal(err)
	}
	bg := agent.Start(context.Background(), a)
	t.Cleanup(func() { _ = bg.Close(context.Background()) })

	out := filepath.Join(testutil.WorkDir(t, "isched-slurm-test-agent-"), "runs")
	job := submit(t, sc, fmt.Sprintf(resizeScript, out), "alice")
	if got := tasksOf(t, out, 0, 1); !strings.HasPrefix(got[0], "0 0 1 1 gpu") {
		t.Fatalf("first attempt %q", got)
	}
	steps := []struct {
		mod   func(*report.Action)
		wait  func(j *slurm.JobInfo) bool
		tasks int
		msg   string
	}{
		{func(a *report.Action) { a.Gres, a.Tasks = "gpu:2", 2 }, func(j *slurm.JobInfo) bool { return j.State == "RUNNING" },
			2, "to gres gpu:2, 2 tasks on 1 node (its own CPUs per task, 1: 2 per node), from 1 task on 1 node, released"},
		{func(a *report.Action) { a.Gres, a.Tasks, a.CPUs, a.Ended = "gpu:1", 1, 1, true }, func(j *slurm.JobInfo) bool { return j.State == "COMPLETED" },
			1, "to gres gpu:1, 1 task on 1 node, 1 CPUs per task, from 2 tasks on 1 node, released"},
	}
	for i, s := range steps {
		waitJob(t, sc, job, "ready for resize "+fmt.Sprint(i+1), s.wait)
		act := action(c.name, report.ActionRequeue, fmt.Sprintf("resize-%s-%d", job, i+1), job, "alice", s.mod)
		start := time.Now()
		c.send(t, act)
		r := c.waitResult(t, act.ID, 60*time.Second)
		got := tasksOf(t, out, i+1, s.tasks)
		t.Logf("resize %d of job %s: result %q; tasks ran after %s: %q", i+1, job, r.Message, time.Since(start).Round(time.Millisecond), got)
		if r.Status != report.StatusOK || !strings.Contains(r.Message, s.msg) {
			t.Errorf("result %+v; want ok, ~%q", r, s.msg)
		}
		gpus := map[string]bool{}
		for _, l := range got {
			f := strings.Fields(l)
			if f[2] != fmt.Sprint(s.tasks) || f[3] != fmt.Sprint(s.tasks) || strings.Contains(f[5], ",") || gpus[f[5]] {
				t.Errorf("attempt %d task %q: want SLURM_NTASKS=%d, a GPU of its own", i+1, l, s.tasks)
			}
			gpus[f[5]] = true
		}
		if len(got) != s.tasks {
			t.Errorf("attempt %d ran %d tasks, want %d: %q", i+1, len(got), s.tasks, got)
		}
	}
}
