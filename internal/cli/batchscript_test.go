package cli

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// userScript is a batch script as users write them: short and long
// spellings, GPUs by type, memory per GPU, a signal handler's signal,
// options passed on, and a body that runs its own srun.
const userScript = `#!/bin/bash
#SBATCH -J resnet-sweep
#SBATCH --partition=gpu,cpu
#SBATCH -t 4:00:00
#SBATCH --gpus-per-node=a100:2 --mem-per-gpu=40G
#SBATCH -c 8
#SBATCH --exclusive --hint=nomultithread   # passed on
#SBATCH --signal=B:USR1@120
#SBATCH --requeue

module load cuda
srun python train.py --lr "$1"
`

func writeScript(t *testing.T, text string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "job.sbatch")
	if err := os.WriteFile(p, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

// TestSubmitBatchScript: `isched submit job.sbatch ARGS` takes the
// script's #SBATCH lines as the request, runs the script unmodified under
// the wrapper in the batch step, and says what it took.
func TestSubmitBatchScript(t *testing.T) {
	h := newHarness(t)
	h.labState()
	job := writeScript(t, userScript)
	for _, argv := range [][]string{{job, "0.1"}, {"--", "bash", job, "0.1"}} {
		args := append([]string{"submit", "--dry-run", "--wrapper", "/opt/isched/bin/isched-wrapper"}, argv...)
		code, out, errOut := h.run(args...)
		if code != 0 {
			t.Fatalf("%v: exit %d: %s", argv, code, errOut)
		}
		for _, want := range []string{
			"#SBATCH --job-name=resnet-sweep\n", "#SBATCH --partition=gpu\n", "#SBATCH --gres=gpu:a100:2\n", "#SBATCH --cpus-per-task=8\n",
			"#SBATCH --mem=81920M\n", "#SBATCH --time=240\n", "#SBATCH --signal=B:USR1@", "#SBATCH --exclusive\n", "#SBATCH --hint=nomultithread\n",
			"--checkpoint-signal file --checkpoint-signal USR1 -- ",
			"\nexec /opt/isched/bin/isched-wrapper ", " -- /bin/bash " + job + " 0.1\n",
		} {
			if argv[0] == "--" {
				want = strings.Replace(want, "-- /bin/bash ", "-- bash ", 1)
			}
			if !strings.Contains(out, want) {
				t.Errorf("%v: the script lacks %q:\n%s", argv, want, out)
			}
		}
		if strings.Contains(out, "exec srun") {
			t.Errorf("%v: the wrapper runs under srun; the user's script starts its own steps:\n%s", argv, out)
		}
		for _, want := range []string{job + " line 9: --requeue: isched always requeues its jobs", job + " is the request: 7 options taken (line 2 -J resnet-sweep, line 3 --partition=gpu,cpu", "2 passed on to sbatch"} {
			if !strings.Contains(errOut, want) {
				t.Errorf("%v: stderr lacks %q:\n%s", argv, want, errOut)
			}
		}
	}
}

// TestSubmitBatchScriptPrecedence: the command line's flags beat the
// SBATCH_* variables, which beat the script's lines (sbatch's order).
func TestSubmitBatchScriptPrecedence(t *testing.T) {
	h := newHarness(t)
	h.labState()
	h.env["SBATCH_TIMELIMIT"] = "2:00:00"
	h.env["SBATCH_PARTITION"] = "cpu"
	job := writeScript(t, userScript)
	code, out, errOut := h.run("submit", "--dry-run", "--wrapper", "/opt/isched/bin/isched-wrapper", "-p", "dev", "--mem", "8G", job)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	for _, want := range []string{"#SBATCH --partition=dev\n", "#SBATCH --time=120\n", "#SBATCH --mem=8192M\n"} {
		if !strings.Contains(out, want) {
			t.Errorf("the script lacks %q:\n%s", want, out)
		}
	}
	if strings.Contains(errOut, "SBATCH_TIMELIMIT ignored") {
		t.Errorf("SBATCH_TIMELIMIT was taken, not ignored:\n%s", errOut)
	}
}

// TestSubmitBatchScriptRefusals: an option isched cannot honour is
// refused with its file and line; nothing is dropped silently.
func TestSubmitBatchScriptRefusals(t *testing.T) {
	h := newHarness(t)
	h.labState()
	for _, tc := range []struct{ line, want string }{
		{"#SBATCH --array=0-9%0", "--array: array \"0-9%0\": %0: want a positive count"},
		{"#SBATCH -a 5-2", "--array: array \"5-2\": \"5-2\": the range ends before it starts"},
		{"#SBATCH -D /scratch", "line 2: -D /scratch: --chdir is not taken"},
		{"#SBATCH --priority=9000", "line 2: --priority=9000: --priority is not taken (a privileged option)"},
		{"#SBATCH --nice=-100", "line 2: --nice=-100: --nice \"-100\": only a privileged user"},
		{"#SBATCH --gres=shard:2", "line 2: --gres=shard:2: --gres \"shard:2\": isched requests GPUs only"},
		{"#SBATCH --gpus=2 -N 2", "line 2: --gpus=2: --gpus counts the GPUs of all 2 nodes"},
		{"#SBATCH --mem-per-gpu=10G", "--mem-per-gpu \"10G\": want a size such as 40G (and, per GPU, GPUs asked)"},
		{"#SBATCH --comment=x", "--comment is not taken (the comment carries isched's plan)"},
		{"#SBATCH --reservation='a b'", "line 2: --reservation=a b: the value of --reservation may hold only"},
		{"#SBATCH --pa=gpu", "line 2: --pa=gpu: --pa is ambiguous"},
		{"#SBATCH -c eight", "line 2: -c eight: --cpus-per-task \"eight\": want a count"},
		{"#SBATCH -p gpu\n#PBS -l walltime=1:00:00", "#PBS or #BSUB lines: isched reads only #SBATCH lines"},
	} {
		job := writeScript(t, "#!/bin/bash\n"+tc.line+"\npython train.py\n")
		code, _, errOut := h.run("submit", "--dry-run", "--wrapper", "/opt/isched/bin/isched-wrapper", job)
		if code == 0 || !strings.Contains(errOut, tc.want) || !strings.Contains(errOut, job) {
			t.Errorf("%q: exit %d, stderr %q; want the file and ~%q", tc.line, code, errOut, tc.want)
		}
	}
}

// TestSubmitBatchScriptArray: a script's #SBATCH --array is taken: the
// job is that array, each element a run of its own (lineage
// <lineage>_<task>, its own checkpoint directory and output file), and
// the command line's --array goes over the script's.
func TestSubmitBatchScriptArray(t *testing.T) {
	h := newHarness(t)
	h.labState()
	job := writeScript(t, "#!/bin/bash\n#SBATCH -p cpu\n#SBATCH --array=0-3%2\npython train.py --seed $SLURM_ARRAY_TASK_ID\n")
	code, out, errOut := h.run("submit", "--dry-run", "--wrapper", "/opt/isched/bin/isched-wrapper", job)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	lineage := "lab-u1001-job-abababab"
	for _, want := range []string{
		"#SBATCH --array=0-3%2\n",
		"#SBATCH --output=" + harnessCwd + "/isched-" + lineage + "_%a.out\n",
		"export ISCHED_LINEAGE=" + lineage + "\n",
		"\nexport ISCHED_LINEAGE=\"${ISCHED_LINEAGE}_${SLURM_ARRAY_TASK_ID}\"\n",
		"\nexport ISCHED_CHECKPOINT_DIR=" + harnessCwd + "/checkpoints/" + lineage + `/"${SLURM_ARRAY_TASK_ID}"` + "\n",
		"\nexec /opt/isched/bin/isched-wrapper --checkpoint-signal file ",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("the script lacks %q:\n%s", want, out)
		}
	}
	if !strings.Contains(errOut, "line 3 --array=0-3%2") {
		t.Errorf("stderr does not say the array was taken from line 3:\n%s", errOut)
	}
	code, out, errOut = h.run("submit", "--dry-run", "--wrapper", "/opt/isched/bin/isched-wrapper", "-a", "7", job)
	if code != 0 || !strings.Contains(out, "#SBATCH --array=7\n") || strings.Contains(out, "--array=0-3") {
		t.Errorf("-a 7 over the script's line: exit %d:\n%s%s", code, out, errOut)
	}
}

// TestSubmitPlainScriptIsACommand: a script without #SBATCH lines is the
// command, as before (under srun).
func TestSubmitPlainScriptIsACommand(t *testing.T) {
	h := newHarness(t)
	h.labState()
	job := writeScript(t, "#!/bin/bash\npython train.py\n")
	code, out, errOut := h.run("submit", "--dry-run", "--wrapper", "/opt/isched/bin/isched-wrapper", "-p", "cpu", "-t", "30", "--", "bash", job)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	if !strings.Contains(out, "exec srun /opt/isched/bin/isched-wrapper") || !strings.Contains(out, "#SBATCH --signal=USR1@") {
		t.Errorf("a plain script runs under srun:\n%s", out)
	}
}

func TestSubmitBatchScriptSignal(t *testing.T) {
	h := newHarness(t)
	h.labState()
	for _, tc := range []struct{ line, want string }{
		{"#SBATCH --signal=USR2@60", "--checkpoint-signal USR2 -- "},
		{"#SBATCH --signal=SIGTERM", "--checkpoint-signal TERM -- "},
		{"#SBATCH --signal=B:NOPE@60", "!--signal \"B:NOPE@60\": want [B:]SIGNAL[@seconds] with a signal the wrapper can deliver"},
	} {
		job := writeScript(t, "#!/bin/bash\n#SBATCH -p cpu -t 30\n"+tc.line+"\npython train.py\n")
		code, out, errOut := h.run("submit", "--dry-run", "--wrapper", "/opt/isched/bin/isched-wrapper", job)
		if refused, ok := strings.CutPrefix(tc.want, "!"); ok {
			if code == 0 || !strings.Contains(errOut, refused) {
				t.Errorf("%q: exit %d, stderr %q", tc.line, code, errOut)
			}
			continue
		}
		if code != 0 || !strings.Contains(out, tc.want) {
			t.Errorf("%q: exit %d, script lacks %q:\n%s%s", tc.line, code, tc.want, out, errOut)
		}
	}
}

// TestSubmitDryRunWithoutTheStack: with only the user's script (no
// cluster name, no relay, no wrapper installed) a dry run still shows the
// script and says what a real submission needs; the submission itself is
// refused.
func TestSubmitDryRunWithoutTheStack(t *testing.T) {
	h := newHarness(t)
	delete(h.env, "ISCHED_CLUSTER")
	delete(h.env, "ISCHED_RELAY_ADDR")
	// no isched-wrapper in PATH, whatever this machine has installed (make
	// test's deb-test installs the package in /usr/bin beside this test)
	h.env["PATH"] = t.TempDir()
	job := writeScript(t, "#!/bin/bash\n#SBATCH -p gpu --gres=gpu:1 -t 1:00:00 --mem=4G\npython train.py\n")
	code, out, errOut := h.run("submit", "--dry-run", job)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	for _, want := range []string{"#SBATCH --partition=gpu\n", "export ISCHED_CLUSTER=no-cluster\n", "exec isched-wrapper ", "export ISCHED_RELAY_ADDR=none-configured\n", "-- /bin/bash " + job + "\n"} {
		if !strings.Contains(out, want) {
			t.Errorf("the script lacks %q:\n%s", want, out)
		}
	}
	for _, want := range []string{"a real submission needs: no cluster name", "a real submission needs: no isched-relay configured", "a real submission needs: isched-wrapper not found"} {
		if !strings.Contains(errOut, want) {
			t.Errorf("stderr lacks %q:\n%s", want, errOut)
		}
	}
	if code, _, errOut := h.run("submit", job); code == 0 || !strings.Contains(errOut, "no cluster name") {
		t.Errorf("a real submission: exit %d, %s", code, errOut)
	}
}

// TestSubmitPerGPUFlags: --gpus [type:]N (and -G), --gpus-per-node,
// --mem-per-gpu, --mem-per-cpu and --cpus-per-gpu on the command line,
// alone or over a batch script's lines.
func TestSubmitPerGPUFlags(t *testing.T) {
	h := newHarness(t)
	h.labState()
	job := writeScript(t, "#!/bin/bash\n#SBATCH -p gpu -t 30 --gres=gpu:2 --mem-per-gpu=8G\npython train.py\n")
	for _, tc := range []struct {
		args []string
		want []string // script lines; "!" first: the error
	}{
		{[]string{"-p", "gpu", "-t", "30", "--gpus", "a100:2", "--mem-per-gpu", "10G", "--", "python3", "train.py"},
			[]string{"#SBATCH --gres=gpu:a100:2\n", "#SBATCH --mem=20480M\n"}},
		{[]string{"-p", "gpu", "-t", "30", "-G", "1", "--cpus-per-gpu", "4", "--", "python3", "train.py"},
			[]string{"#SBATCH --gres=gpu:1\n", "#SBATCH --cpus-per-task=4\n"}},
		{[]string{"-p", "gpu", "-t", "30", "--gpus-per-node", "2", "--mem-per-cpu", "2G", "-c", "3", "--", "python3", "train.py"},
			[]string{"#SBATCH --gres=gpu:2\n", "#SBATCH --mem=6144M\n"}},
		{[]string{"--gpus", "4", job}, []string{"#SBATCH --gres=gpu:4\n", "#SBATCH --mem=32768M\n"}},
		{[]string{"--mem", "4G", job}, []string{"#SBATCH --gres=gpu:2\n", "#SBATCH --mem=4096M\n"}},
		{[]string{"-p", "gpu", "-t", "30", "--gpus", "2", "--gres", "gpu:1", "--", "python3", "train.py"}, []string{"!--gpus and --gres both given"}},
		{[]string{"-p", "gpu", "-t", "30", "--gpus", "two", "--", "python3", "train.py"}, []string{"!--gpus=two: --gpus \"two\": want [type:]N GPUs"}},
	} {
		code, out, errOut := h.run(append([]string{"submit", "--dry-run", "--wrapper", "/opt/isched/bin/isched-wrapper"}, tc.args...)...)
		if refused, ok := strings.CutPrefix(tc.want[0], "!"); ok {
			if code == 0 || !strings.Contains(errOut, refused) {
				t.Errorf("%v: exit %d, stderr %q; want ~%q", tc.args, code, errOut, refused)
			}
			continue
		}
		if code != 0 {
			t.Errorf("%v: exit %d: %s", tc.args, code, errOut)
			continue
		}
		for _, w := range tc.want {
			if !strings.Contains(out, w) {
				t.Errorf("%v: the script lacks %q:\n%s", tc.args, w, out)
			}
		}
	}
}

// TestSubmitBatchScriptOutputs: a script's -e (its stderr apart) is taken
// with --output's checks, and its --parsable prints the job id alone, as
// sbatch would.
func TestSubmitBatchScriptOutputs(t *testing.T) {
	h := newHarness(t)
	h.labState()
	errFile := filepath.Join(h.dir, "train-%j.err")
	job := writeScript(t, "#!/bin/bash\n#SBATCH -p cpu\n#SBATCH -e "+errFile+"\n#SBATCH --parsable\npython3 train.py\n")
	code, out, errOut := h.run("submit", "--checkpoint-dir", filepath.Join(h.dir, "ck"), "--wrapper", "/opt/isched/bin/isched-wrapper", job)
	if code != 0 || out != "101\n" {
		t.Fatalf("exit %d, stdout %q: %s", code, out, errOut)
	}
	if script := string(h.slurm.submitted[0]); !strings.Contains(script, "#SBATCH --error="+errFile+"\n") {
		t.Errorf("the script's -e is not the job's --error:\n%s", script)
	}
	if code, out, _ := h.run("submit", "--dry-run", "--wrapper", "/opt/isched/bin/isched-wrapper", job); code != 0 || !strings.HasPrefix(out, "#!/bin/bash") {
		t.Errorf("a dry run of a --parsable script: exit %d\n%s", code, out)
	}
}

// TestSubmitElastic: --gpus MIN-MAX (or --elastic MIN-MAX) starts the run
// at MIN GPUs, one task each, its memory per GPU, and puts the range in
// the plan; a request that contradicts the range is refused.
func TestSubmitElastic(t *testing.T) {
	h := newHarness(t)
	h.labState()
	base := []string{"-p", "gpu", "-t", "30", "--mem", "4G"}
	for _, tc := range []struct {
		args []string
		want []string // script lines; "!" first: the error
	}{
		{[]string{"--gpus", "1-4"}, []string{"#SBATCH --gres=gpu:1\n", "#SBATCH --ntasks=1\n", "#SBATCH --mem-per-gpu=4096M\n", " elastic=1-4\"",
			// sbatch froze SLURM_NTASKS=1 into the job: srun counts the attempt's GPUs
			"ISCHED_GPUS_PER_NODE=\"${SLURM_GPUS_ON_NODE:-1}\"\n",
			`exec srun --ntasks="$(( ISCHED_GPUS_PER_NODE * ${SLURM_JOB_NUM_NODES:-1} ))" --ntasks-per-node="$ISCHED_GPUS_PER_NODE" /opt/isched/bin/isched-wrapper `}},
		{[]string{"--elastic", "2-4"}, []string{"#SBATCH --gres=gpu:2\n", "#SBATCH --ntasks=2\n", "#SBATCH --mem-per-gpu=2048M\n", " elastic=2-4\""}},
		{[]string{"-G", "2-8", "-n", "2"}, []string{"#SBATCH --gres=gpu:2\n", "#SBATCH --ntasks=2\n", " elastic=2-8\""}},
		{[]string{"--elastic", "1-2", "--gpus", "1"}, []string{"#SBATCH --gres=gpu:1\n", " elastic=1-2\""}},
		{[]string{"--gpus", "1-4", "--ntasks", "2"}, []string{"!--ntasks 2 with --gpus 1-4: an elastic run has one task per GPU, 1 to start"}},
		{[]string{"--gpus", "2-2"}, []string{"!--gpus 2-2: MIN equals MAX, a run of fixed size: give --gpus 2"}},
		{[]string{"--gpus", "4-1"}, []string{"!--gpus \"4-1\": want 1 <= MIN <= MAX"}},
		{[]string{"--elastic", "1-4", "--gpus", "2"}, []string{"!--gpus 2 with --elastic 1-4: an elastic run starts at its MIN, 1 GPUs"}},
		{[]string{"--elastic", "1-4", "--gpus", "1-2"}, []string{"!--gpus 1-2 and --elastic 1-4 both give a range"}},
		{[]string{"--elastic", "1-4", "--gres", "gpu:1"}, []string{"!with --gres or --array"}},
	} {
		args := append(append([]string{"submit", "--dry-run", "--wrapper", "/opt/isched/bin/isched-wrapper"}, base...), tc.args...)
		code, out, errOut := h.run(append(args, "--", "python3", "train.py")...)
		if refused, ok := strings.CutPrefix(tc.want[0], "!"); ok {
			if code == 0 || !strings.Contains(errOut, refused) {
				t.Errorf("%v: exit %d, stderr %q; want ~%q", tc.args, code, errOut, refused)
			}
			continue
		}
		if code != 0 {
			t.Errorf("%v: exit %d: %s", tc.args, code, errOut)
			continue
		}
		for _, w := range tc.want {
			if !strings.Contains(out, w) {
				t.Errorf("%v: the script lacks %q:\n%s", tc.args, w, out)
			}
		}
		if strings.Contains(out, "#SBATCH --mem=") {
			t.Errorf("%v: an elastic run's memory is per GPU, not per node:\n%s", tc.args, out)
		}
	}
	job := writeScript(t, "#!/bin/bash\n#SBATCH -p gpu -t 30\nsrun python train.py\n")
	code, _, errOut := h.run("submit", "--dry-run", "--wrapper", "/opt/isched/bin/isched-wrapper", "--gpus", "1-2", job)
	if code == 0 || !strings.Contains(errOut, "an elastic run's tasks are started by isched's own srun line") {
		t.Errorf("an elastic batch script: exit %d, %s", code, errOut)
	}
}

// TestSubmitElasticStartSize: with an estimate and the agent's picture of
// the cluster, an elastic run starts on the GPUs idle on one node of its
// partition (policy.StartSize) when no job waits there, and at its MIN
// when one does.
func TestSubmitElasticStartSize(t *testing.T) {
	args := []string{"submit", "--dry-run", "--model", "testdata/resnet18_128.json", "--samples", "50000", "--epochs", "10", "--batch", "32",
		"--optimizer", "momentum", "--site", "../../examples/site-lab.json", "--receipts", "none", "--policy", "ideal",
		"--wrapper", "/opt/isched/bin/isched-wrapper", "--gpus", "1-4", "--", "python3", "train.py"}
	for _, tc := range []struct {
		name    string
		idle    bool // gpu2 idle
		pending bool // and carol's job still waits
		want    []string
		note    string
		avoid   string
	}{
		{"no GPU idle", false, false, []string{"#SBATCH --gres=gpu:1\n", "#SBATCH --ntasks=1\n"}, "0 GPUs idle (0 on one node), 0 kept for arrivals: it starts at its base, 1", "--gres=gpu:2"},
		{"a job waits on gpu", true, true, []string{"#SBATCH --gres=gpu:1\n", "#SBATCH --ntasks=1\n"}, "jobs wait for 1 GPUs: the run starts at its base, 1", "--gres=gpu:2"},
		{"gpu2 idle", true, false, []string{"#SBATCH --gres=gpu:2\n", "#SBATCH --ntasks=2\n", "# elastic: 2 GPUs idle on one node and no job waits: it starts at 2 GPUs"},
			"elastic: 2 GPUs idle on one node and no job waits: it starts at 2 GPUs", "--gres=gpu:1\n"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := newHarness(t)
			h.labState()
			if tc.idle {
				h.idleGPU2(tc.pending)
			}
			code, out, errOut := h.run(args...)
			if code != 0 {
				t.Fatalf("exit %d: %s", code, errOut)
			}
			for _, w := range tc.want {
				if !strings.Contains(out, w) {
					t.Errorf("the script lacks %q:\n%s", w, out)
				}
			}
			if !strings.Contains(errOut, "isched submit: elastic: ") || !strings.Contains(errOut, tc.note) || strings.Contains(out, tc.avoid) {
				t.Errorf("stderr %q, want the note %q; script:\n%s", errOut, tc.note, out)
			}
		})
	}
}
