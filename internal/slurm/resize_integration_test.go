//go:build integration

package slurm_test

import (
	"context"
	"fmt"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/isched/isched/internal/slurm"
	"github.com/isched/isched/internal/testutil"
)

// resizeScript records, per attempt, what each task of a bare srun and of
// `srun --gpus-per-task=1` saw: "restart procid ntasks step_tasks node
// CUDA_VISIBLE_DEVICES", marked "all" or "own". %s: extra #SBATCH lines,
// the record directory.
const resizeScript = `#!/bin/sh
#SBATCH -J isched-slurm-test-resize
#SBATCH -p gpu -t 10 --gres=gpu:1 -o /dev/null --chdir=/tmp --requeue
%s
export SLURM_EXPORT_ENV=ALL # submitted with --export=NONE: let srun pass this environment on, as isched's scripts do
line='echo "$0 ${SLURM_RESTART_COUNT:-0} $SLURM_PROCID $SLURM_NTASKS $SLURM_STEP_NUM_TASKS $SLURMD_NODENAME ${CUDA_VISIBLE_DEVICES:-none}"'
srun sh -c "$line" all >> %s/out.$SLURM_JOB_ID
srun --gpus-per-task=1 sh -c "$line" own >> %[2]s/out.$SLURM_JOB_ID
exec sleep 600
`

// taskRun is one task's line of resizeScript.
type taskRun struct {
	srun                 string // "all" or "own"
	restart, proc, tasks int
	stepTasks            int
	node, gpus           string
}

// attempt waits until restart r of the job has written its 2*n task
// lines (n of each srun), and returns them.
func attempt(t *testing.T, path string, r, n int) []taskRun {
	t.Helper()
	var got []taskRun
	testutil.Eventually(t, 60*time.Second, 100*time.Millisecond, fmt.Sprintf("%d task lines of restart %d in %s", 2*n, r, path), func() bool {
		got = got[:0]
		for _, l := range lines(t, path, 1, 60*time.Second) {
			f := strings.Fields(l)
			if len(f) != 7 {
				continue
			}
			nums := make([]int, 4)
			for i := range nums {
				nums[i], _ = strconv.Atoi(f[i+1])
			}
			if nums[0] == r {
				got = append(got, taskRun{f[0], nums[0], nums[1], nums[2], nums[3], f[5], f[6]})
			}
		}
		return len(got) >= 2*n
	})
	return got
}

// checkSize asserts that each srun of an attempt ran n tasks (procids 0..n-1)
// on the nodes expected, and that --gpus-per-task=1 gave every task on a
// node its own GPU.
func checkSize(t *testing.T, runs []taskRun, n, nodes int) {
	t.Helper()
	for _, srun := range []string{"all", "own"} {
		var procs []int
		onNode := map[string][]string{}
		for _, r := range runs {
			if r.srun != srun {
				continue
			}
			procs = append(procs, r.proc)
			onNode[r.node] = append(onNode[r.node], r.gpus)
			if r.tasks != n || r.stepTasks != n {
				t.Errorf("%s srun: task %+v: want SLURM_NTASKS=%d and SLURM_STEP_NUM_TASKS=%d", srun, r, n, n)
			}
		}
		slices.Sort(procs)
		if len(procs) != n || procs[0] != 0 || procs[n-1] != n-1 || len(onNode) != nodes {
			t.Errorf("%s srun ran tasks %v on %d nodes; want 0..%d on %d", srun, procs, len(onNode), n-1, nodes)
		}
		for node, gpus := range onNode {
			slices.Sort(gpus)
			if srun == "own" && (len(slices.Compact(slices.Clone(gpus))) != len(gpus) || slices.ContainsFunc(gpus, func(g string) bool { return strings.Contains(g, ",") || g == "none" })) {
				t.Errorf("srun --gpus-per-task=1 on %s: devices %q; want one of its own per task", node, gpus)
			}
		}
	}
}

// TestIntegrationResize: alice's job, submitted without --ntasks, is
// resized by Client.Move while running: 1 task (gpu:1) -> 2 on one node
// (gpu:2) -> 4 on two nodes (gpu:2 each, 2 CPUs per task) -> 1. Each
// attempt's sruns start that many tasks, each with its GPU.
func TestIntegrationResize(t *testing.T) {
	testutil.ClaimPartitions(t, "gpu") // the 4-task attempt needs both GPU nodes whole
	testutil.NeedSlurm(t)
	c := &slurm.Client{}
	dir := testutil.WorkDir(t, "isched-slurm-test-")
	id := submit(t, c, fmt.Sprintf(resizeScript, "", dir), "alice")
	out := filepath.Join(dir, "out."+id)
	checkSize(t, attempt(t, out, 0, 1), 1, 1)
	for i, step := range []struct {
		spec         slurm.MoveSpec
		tasks, nodes int
		cpusPerNode  string
	}{
		{slurm.MoveSpec{Gres: "gpu:2", Tasks: 2}, 2, 1, "2"},
		{slurm.MoveSpec{Gres: "gpu:2", Tasks: 4, Nodes: 2, CPUsPerTask: 2}, 4, 2, "4(x2)"},
		{slurm.MoveSpec{Gres: "gpu:1", Tasks: 1, CPUsPerTask: 1}, 1, 1, "1"},
	} {
		start := time.Now()
		res, err := c.Move(context.Background(), id, step.spec)
		if err != nil {
			t.Fatalf("resize to %d tasks on %d nodes: %v (%+v)", step.tasks, step.nodes, err, res)
		}
		runs := attempt(t, out, i+1, step.tasks)
		j := waitState(t, c, id, "RUNNING", 60*time.Second)
		t.Logf("resize %d -> %d tasks on %d nodes: move %s, tasks ran after %s; job NumTasks=%s NumNodes=%s NumCPUs=%s TRES=%s; runs %+v",
			res.FromTasks, step.tasks, step.nodes, res.Total.Round(time.Millisecond), time.Since(start).Round(time.Millisecond),
			j.Fields["NumTasks"], j.Fields["NumNodes"], j.Fields["NumCPUs"], j.Fields["TRES"], runs)
		checkSize(t, runs, step.tasks, step.nodes)
		if j.Restarts != i+1 || j.Tasks() != step.tasks || j.Nodes() != step.nodes || slurm.JobGres(j.TresPerNode, "") != step.spec.Gres {
			t.Errorf("job after resize %d: restarts %d, %d tasks on %d nodes, gres %s", i+1, j.Restarts, j.Tasks(), j.Nodes(), j.TresPerNode)
		}
		if env := testutil.Run(t, 10*time.Second, "scontrol", "show", "job", id); !strings.Contains(env, "MinCPUsNode="+strings.Split(step.cpusPerNode, "(")[0]) {
			t.Errorf("resize %d: want MinCPUsNode for %s CPUs per node:\n%s", i+1, step.cpusPerNode, env)
		}
	}
}

// TestIntegrationResizeKeepsSubmittedNtasks pins down the limit the agent
// cannot lift (testdata/README.md): a job submitted with --ntasks keeps
// SLURM_NTASKS of its submission, so a bare srun after a resize to 2
// tasks still starts one, though the job holds 2 tasks' CPUs and GPUs. If
// this starts failing, Slurm now refreshes the environment: say so in
// docs/design.md's migration protocol.
func TestIntegrationResizeKeepsSubmittedNtasks(t *testing.T) {
	testutil.ClaimPartitions(t, "gpu")
	testutil.NeedSlurm(t)
	c := &slurm.Client{}
	dir := testutil.WorkDir(t, "isched-slurm-test-")
	id := submit(t, c, fmt.Sprintf(resizeScript, "#SBATCH --ntasks=1", dir), "alice")
	out := filepath.Join(dir, "out."+id)
	attempt(t, out, 0, 1)
	if res, err := c.Move(context.Background(), id, slurm.MoveSpec{Gres: "gpu:2", Tasks: 2}); err != nil {
		t.Fatalf("resize: %v (%+v)", err, res)
	}
	j := waitState(t, c, id, "RUNNING", 60*time.Second)
	runs := attempt(t, out, 1, 1)
	t.Logf("job submitted with --ntasks=1, resized to 2: NumTasks=%s TRES=%s; runs %+v", j.Fields["NumTasks"], j.Fields["TRES"], runs)
	if j.Tasks() != 2 || len(runs) != 2 || runs[0].tasks != 1 || runs[1].tasks != 1 {
		t.Errorf("want the job at 2 tasks and each srun at SLURM_NTASKS=1 (the submission's): NumTasks %d, runs %+v", j.Tasks(), runs)
	}
}

// TestIntegrationResizeRefusedRestores: a resize Slurm refuses (3 nodes
// of the lab's 2) still leaves the keys slurmctld took (measured: the
// refused update set NumNodes=3-3, NumTasks=6, CPUs/Task=2 and gpu:2).
// Client.Move sets the job's size before the move again and releases it:
// the next attempt runs as before, 1 task with gpu:1.
func TestIntegrationResizeRefusedRestores(t *testing.T) {
	testutil.ClaimPartitions(t, "gpu")
	testutil.NeedSlurm(t)
	c := &slurm.Client{}
	dir := testutil.WorkDir(t, "isched-slurm-test-")
	id := submit(t, c, fmt.Sprintf(resizeScript, "#SBATCH -c 1", dir), "alice")
	out := filepath.Join(dir, "out."+id)
	checkSize(t, attempt(t, out, 0, 1), 1, 1)
	res, err := c.Move(context.Background(), id, slurm.MoveSpec{Gres: "gpu:2", Tasks: 6, Nodes: 3, CPUsPerTask: 2})
	if err == nil || res.UpdateErr == nil || !res.Restored || !res.Released {
		t.Fatalf("a resize to 3 nodes of 2: %v (%+v); want refused, restored and released", err, res)
	}
	t.Logf("refused: %v", err)
	checkSize(t, attempt(t, out, 1, 1), 1, 1)
	j := waitState(t, c, id, "RUNNING", 60*time.Second)
	if j.Tasks() != 1 || j.Nodes() != 1 || j.CPUsPerTask() != 1 || slurm.JobGres(j.TresPerNode, "") != "gpu:1" {
		t.Errorf("after the refused resize: %d tasks on %d nodes, %d CPUs per task, gres %s; want 1 on 1, 1, gpu:1",
			j.Tasks(), j.Nodes(), j.CPUsPerTask(), j.TresPerNode)
	}
}
