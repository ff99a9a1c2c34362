package report

import (
	"strings"
	"testing"
	"time"
)

// TestActionValidate walks the per-type rules: what each type requires and
// which fields it must not carry.
func TestActionValidate(t *testing.T) {
	t.Parallel()
	base := func(typ ActionType) Action {
		a := Action{ID: "lab:1:x", Type: typ, Cluster: "lab", JobID: 1, User: "alice", IssuedMS: 1}
		switch typ {
		case ActionSignal:
			a.Signal = "SIGUSR1"
		case ActionUpdate:
			a.TimeLimitMin = 30
		case ActionSubmit:
			a.JobID, a.Script = 0, "#!/bin/bash\n#SBATCH -p gpu\nsrun isched-wrapper -- python train.py\n"
		case ActionTwin:
			a.Partition, a.Gres, a.CPUs, a.TimeLimitMin = "gpu", "gpu:1", 4, 90
		case ActionHandover:
			a.TwinJobID = 2
		case ActionAnnotate:
			a.AdminComment = "isched: asked 32 GiB, used 6.1 GiB peak: ask --mem=8G next time"
		}
		return a
	}
	tests := []struct {
		name  string
		typ   ActionType
		edit  func(*Action)
		field string // "" = valid
	}{
		{"signal", ActionSignal, nil, ""},
		{"signal without SIG", ActionSignal, func(a *Action) { a.Signal = "USR2" }, ""},
		{"signal all steps", ActionSignal, func(a *Action) { a.Steps = StepsAll }, ""},
		{"signal bad steps", ActionSignal, func(a *Action) { a.Steps = "0" }, "steps"},
		{"signal SIGKILL", ActionSignal, func(a *Action) { a.Signal = "SIGKILL" }, "signal"},
		{"signal lower case", ActionSignal, func(a *Action) { a.Signal = "sigusr1" }, "signal"},
		{"signal missing", ActionSignal, func(a *Action) { a.Signal = "" }, "signal"},
		{"signal with partition", ActionSignal, func(a *Action) { a.Partition = "gpu" }, "partition"},
		{"signal without job", ActionSignal, func(a *Action) { a.JobID = 0 }, "job_id"},
		{"requeue", ActionRequeue, nil, ""},
		{"requeue with placement and hold", ActionRequeue, func(a *Action) {
			a.Partition, a.Gres, a.TimeLimitMin, a.Hold = "gpu,cpu", "gres/gpu:a100:2", 60, true
		}, ""},
		{"requeue with signal", ActionRequeue, func(a *Action) { a.Signal = "SIGUSR1" }, "signal"},
		{"requeue with steps", ActionRequeue, func(a *Action) { a.Steps = StepsBatch }, "steps"},
		{"requeue partition injection", ActionRequeue, func(a *Action) { a.Partition = "gpu TimeLimit=UNLIMITED" }, "partition"},
		{"requeue gres injection", ActionRequeue, func(a *Action) { a.Gres = "gpu:1 --uid=0" }, "gres"},
		{"update time", ActionUpdate, nil, ""},
		{"update partition only", ActionUpdate, func(a *Action) { a.TimeLimitMin, a.Partition = 0, "cpu" }, ""},
		{"update gres only", ActionUpdate, func(a *Action) { a.TimeLimitMin, a.Gres = 0, "gpu:1" }, ""},
		{"requeue with cpus", ActionRequeue, func(a *Action) { a.Partition, a.Gres, a.CPUs = "gpu", "gpu:1", 12 }, ""},
		{"update nice only", ActionUpdate, func(a *Action) { a.TimeLimitMin, a.Nice = 0, ptr(int64(-1000)) }, ""},
		{"update nice at Slurm's bounds", ActionUpdate, func(a *Action) { a.Nice = ptr(int64(-MaxNice)) }, ""},
		{"update nice past Slurm's bounds", ActionUpdate, func(a *Action) { a.Nice = ptr(int64(MaxNice + 1)) }, "nice"},
		{"update nice below Slurm's bounds", ActionUpdate, func(a *Action) { a.Nice = ptr(int64(-MaxNice - 1)) }, "nice"},
		{"requeue with nice", ActionRequeue, func(a *Action) { a.Nice = ptr(int64(5)) }, "nice"},
		{"signal with nice", ActionSignal, func(a *Action) { a.Nice = ptr(int64(0)) }, "nice"},
		{"requeue negative cpus", ActionRequeue, func(a *Action) { a.CPUs = -2 }, "cpus"},
		{"requeue too many cpus", ActionRequeue, func(a *Action) { a.CPUs = MaxCPUs + 1 }, "cpus"},
		{"update cpus only", ActionUpdate, func(a *Action) { a.TimeLimitMin, a.CPUs = 0, 4 }, ""},
		{"cancel with cpus", ActionCancel, func(a *Action) { a.CPUs = 4 }, "cpus"},
		{"resubmit with cpus", ActionResubmit, func(a *Action) { a.CPUs = 4 }, "cpus"},
		{"requeue grow to 2 tasks", ActionRequeue, func(a *Action) { a.Gres, a.Tasks = "gpu:2", 2 }, ""},
		{"requeue grow past a node", ActionRequeue, func(a *Action) { a.Gres, a.Tasks, a.Nodes, a.CPUs, a.Ended = "gpu:2", 4, 2, 2, true }, ""},
		{"requeue at the largest size", ActionRequeue, func(a *Action) { a.Gres, a.Tasks, a.Nodes = "gpu:8", MaxElastic, MaxElastic/8 }, ""},
		{"requeue tasks past MaxElastic", ActionRequeue, func(a *Action) { a.Gres, a.Tasks = "gpu:8", MaxElastic+1 }, "tasks"},
		{"requeue negative tasks", ActionRequeue, func(a *Action) { a.Gres, a.Tasks = "gpu:1", -1 }, "tasks"},
		{"requeue negative nodes", ActionRequeue, func(a *Action) { a.Gres, a.Tasks, a.Nodes = "gpu:1", 1, -1 }, "nodes"},
		{"requeue nodes past MaxElastic", ActionRequeue, func(a *Action) { a.Gres, a.Tasks, a.Nodes = "gpu:1", 4, MaxElastic+1 }, "nodes"},
		{"requeue nodes without tasks", ActionRequeue, func(a *Action) { a.Gres, a.Nodes = "gpu:1", 2 }, "nodes"},
		{"requeue tasks uneven on nodes", ActionRequeue, func(a *Action) { a.Gres, a.Tasks, a.Nodes = "gpu:2", 3, 2 }, "tasks"},
		{"requeue more nodes than tasks", ActionRequeue, func(a *Action) { a.Gres, a.Tasks, a.Nodes = "gpu:1", 1, 2 }, "tasks"},
		{"requeue tasks without gres", ActionRequeue, func(a *Action) { a.Tasks = 2 }, "gres"},
		{"update tasks only", ActionUpdate, func(a *Action) { a.TimeLimitMin, a.Gres, a.Tasks = 0, "gpu:1", 1 }, ""},
		{"signal with tasks", ActionSignal, func(a *Action) { a.Tasks = 2 }, "tasks"},
		{"submit with tasks", ActionSubmit, func(a *Action) { a.Gres, a.Tasks = "gpu:2", 2 }, "tasks"},
		{"resubmit with nodes", ActionResubmit, func(a *Action) { a.Gres, a.Tasks, a.Nodes = "gpu:1", 2, 2 }, "tasks"},
		{"twin", ActionTwin, nil, ""},
		{"twin without partition", ActionTwin, func(a *Action) { a.Partition = "" }, "partition"},
		{"twin without job", ActionTwin, func(a *Action) { a.JobID = 0 }, "job_id"},
		{"twin held", ActionTwin, func(a *Action) { a.Hold = true }, "hold"},
		{"twin with a twin", ActionTwin, func(a *Action) { a.TwinJobID = 3 }, "twin_job_id"},
		{"handover", ActionHandover, nil, ""},
		{"handover without twin", ActionHandover, func(a *Action) { a.TwinJobID = 0 }, "twin_job_id"},
		{"handover to itself", ActionHandover, func(a *Action) { a.TwinJobID = a.JobID }, "twin_job_id"},
		{"handover twin past uint32", ActionHandover, func(a *Action) { a.TwinJobID = 1 << 33 }, "twin_job_id"},
		{"handover with partition", ActionHandover, func(a *Action) { a.Partition = "gpu" }, "partition"},
		{"cancel with a twin", ActionCancel, func(a *Action) { a.TwinJobID = 2 }, "twin_job_id"},
		{"cancel with nodes", ActionCancel, func(a *Action) { a.Nodes = 2 }, "nodes"},
		{"update nothing", ActionUpdate, func(a *Action) { a.TimeLimitMin = 0 }, "time_limit_min"},
		{"update negative time", ActionUpdate, func(a *Action) { a.TimeLimitMin = -1 }, "time_limit_min"},
		{"update hold", ActionUpdate, func(a *Action) { a.Hold = true }, "hold"},
		{"cancel", ActionCancel, nil, ""},
		{"cancel with time", ActionCancel, func(a *Action) { a.TimeLimitMin = 5 }, "time_limit_min"},
		{"cancel without job", ActionCancel, func(a *Action) { a.JobID = 0 }, "job_id"},
		{"release", ActionRelease, nil, ""},
		{"release with hold", ActionRelease, func(a *Action) { a.Hold = true }, "hold"},
		{"annotate", ActionAnnotate, nil, ""},
		{"annotate without text", ActionAnnotate, func(a *Action) { a.AdminComment = "" }, "admin_comment"},
		{"annotate with a newline", ActionAnnotate, func(a *Action) { a.AdminComment = "a\nJobId=1" }, "admin_comment"},
		{"annotate too long", ActionAnnotate, func(a *Action) { a.AdminComment = strings.Repeat("x", MaxAdminComment+1) }, "admin_comment"},
		{"annotate without job", ActionAnnotate, func(a *Action) { a.JobID = 0 }, "job_id"},
		{"cancel with a comment", ActionCancel, func(a *Action) { a.AdminComment = "x" }, "admin_comment"},
		{"submit", ActionSubmit, nil, ""},
		{"submit replacing a job", ActionSubmit, func(a *Action) { a.JobID, a.Lineage, a.Hold = 7, "ln-1", true }, ""},
		{"submit without script", ActionSubmit, func(a *Action) { a.Script = "" }, "script"},
		{"submit without shebang", ActionSubmit, func(a *Action) { a.Script = "python train.py\n" }, "script"},
		{"submit script too long", ActionSubmit, func(a *Action) { a.Script = "#!" + strings.Repeat("x", MaxScript) }, "script"},
		{"submit with signal", ActionSubmit, func(a *Action) { a.Signal = "SIGUSR1" }, "signal"},
		{"unknown type", ActionSignal, func(a *Action) { a.Type = "Signal" }, "type"},
		{"no id", ActionCancel, func(a *Action) { a.ID = "" }, "id"},
		{"id too long", ActionCancel, func(a *Action) { a.ID = strings.Repeat("a", 129) }, "id"},
		{"no cluster", ActionCancel, func(a *Action) { a.Cluster = "" }, "cluster"},
		{"bad lineage", ActionCancel, func(a *Action) { a.Lineage = "a/b" }, "lineage"},
		{"no issue time", ActionCancel, func(a *Action) { a.IssuedMS = 0 }, "issued_ms"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			a := base(tt.typ)
			if tt.edit != nil {
				tt.edit(&a)
			}
			err := a.Validate()
			if tt.field == "" {
				if err != nil {
					t.Fatalf("Validate() = %v, want nil", err)
				}
				// What validates must also survive the wire.
				e := NewEnvelope(KindAction, testNow)
				e.Action = &a
				if _, err := Decode(mustEncode(t, e)); err != nil {
					t.Fatalf("round trip: %v", err)
				}
				return
			}
			checkErr(t, err, ErrInvalid, tt.field, "")
		})
	}
}

// TestBodyValidate covers rules of the other bodies that the Decode table
// does not reach, on the Go values directly.
func TestBodyValidate(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name  string
		kind  Kind
		edit  func(*Envelope)
		field string // "" = valid
	}{
		{"start minimal", KindStart, func(e *Envelope) { e.Start = &Start{Argv: []string{"./train"}, PID: 1} }, ""},
		{"start no argv", KindStart, func(e *Envelope) { e.Start.Argv = nil }, "start.argv"},
		{"start empty command", KindStart, func(e *Envelope) { e.Start.Argv = []string{"", "x"} }, "start.argv[0]"},
		{"start empty later arg", KindStart, func(e *Envelope) { e.Start.Argv = []string{"x", ""} }, ""},
		{"start long arg", KindStart, func(e *Envelope) { e.Start.Argv = []string{"x", strings.Repeat("y", MaxArg+1)} }, "start.argv[1]"},
		{"start pid", KindStart, func(e *Envelope) { e.Start.PID = 0 }, "start.pid"},
		{"start relative cwd", KindStart, func(e *Envelope) { e.Start.Cwd = "proj" }, "start.cwd"},
		{"start device", KindStart, func(e *Envelope) { e.Start.Device = "cuda 0" }, "start.device"},
		{"start empty gpu id", KindStart, func(e *Envelope) { e.Start.GPUs = []string{""} }, "start.gpus[0]"},
		{"start cred space", KindStart, func(e *Envelope) { e.Start.Cred = "MUNGE: x" }, "start.cred"},
		{"start cred long", KindStart, func(e *Envelope) { e.Start.Cred = strings.Repeat("A", maxCred+1) }, "start.cred"},
		{"sample empty", KindSample, func(e *Envelope) { e.Sample = &Sample{} }, ""},
		{"sample no-data gpu", KindSample, func(e *Envelope) { e.Sample.GPU = &GPUStat{NoData: "NVML: driver not loaded"} }, ""},
		{"sample gpu proc pid", KindSample, func(e *Envelope) { e.Sample.GPU.Procs[0].PID = -1 }, "sample.gpu.procs[0].pid"},
		{"sample gaps", KindSample, func(e *Envelope) { e.Sample.Gaps = -1 }, "sample.gaps"},
		{"sample step", KindSample, func(e *Envelope) { e.Sample.Iters[0].Step = -1 }, "sample.iters[0].step"},
		{"sample at_ms", KindSample, func(e *Envelope) { e.Sample.Iters[1].AtMS = 0 }, "sample.iters[1].at_ms"},
		{"array ids paired", KindSample, func(e *Envelope) { e.Job.ArrayTaskID = nil }, "job.array_task_id"},
		{"checkpoint step", KindCheckpoint, func(e *Envelope) { e.Checkpoint.Step = ptr(int64(-1)) }, "checkpoint.step"},
		{"checkpoint no sha", KindCheckpoint, func(e *Envelope) { e.Checkpoint.SHA256 = "" }, ""},
		{"checkpoint upper sha", KindCheckpoint, func(e *Envelope) { e.Checkpoint.SHA256 = strings.ToUpper(e.Checkpoint.SHA256) }, "checkpoint.sha256"},
		{"signal forwarded name", KindSignal, func(e *Envelope) { e.Signal.Forwarded = "SIGUSR1" }, ""},
		{"signal not forwarded", KindSignal, func(e *Envelope) { e.Signal.Forwarded = "" }, ""},
		{"signal realtime", KindSignal, func(e *Envelope) { e.Signal.Signal = "SIGRTMIN+3" }, ""},
		{"signal name", KindSignal, func(e *Envelope) { e.Signal.Signal = "USR1" }, "signal.signal"},
		{"end exited", KindEnd, func(e *Envelope) { e.End.Reason, e.End.Signal, e.End.ExitCode = EndExited, "", 0 }, ""},
		{"end reason", KindEnd, func(e *Envelope) { e.End.Reason = "crashed" }, "end.reason"},
		{"end empty gpu key", KindEnd, func(e *Envelope) { e.End.PeakGPUBytes = map[string]int64{"": 1} }, "end.peak_gpu_bytes[]"},
		{"end p90", KindEnd, func(e *Envelope) { e.End.P90IterMS = -1 }, "end.p90_iter_ms"},
		{"end oom", KindEnd, func(e *Envelope) { e.End.Reason, e.End.Signal, e.End.ExitCode = EndOOM, "SIGKILL", 137 }, ""},
		{"end no cgroup", KindEnd, func(e *Envelope) { e.End.CgroupPeakBytes, e.End.MemLimitBytes = 0, 0 }, ""},
		{"end cgroup peak", KindEnd, func(e *Envelope) { e.End.CgroupPeakBytes = -1 }, "end.cgroup_peak_bytes"},
		{"end mem limit", KindEnd, func(e *Envelope) { e.End.MemLimitBytes = -1 }, "end.mem_limit_bytes"},
		{"snapshot cluster", KindSnapshot, func(e *Envelope) { e.Snapshot.Cluster = "" }, "snapshot.cluster"},
		{"snapshot gpus", KindSnapshot, func(e *Envelope) { e.Snapshot.Partitions[0].GPUs[0].Idle = -1 }, "snapshot.partitions[0].gpus[0].idle"},
		{"snapshot mixed room", KindSnapshot, func(e *Envelope) { e.Snapshot.Partitions[0].Mixed = []Room{{GPUs: 1, CPUs: 2, Nodes: 1}} }, ""},
		{"snapshot mixed negative cpus", KindSnapshot, func(e *Envelope) { e.Snapshot.Partitions[0].Mixed = []Room{{CPUs: -1}} }, "snapshot.partitions[0].mixed[0].cpus"},
		{"snapshot mixed negative memory", KindSnapshot, func(e *Envelope) { e.Snapshot.Partitions[0].Mixed = []Room{{MemMiB: -1}} }, "snapshot.partitions[0].mixed[0].mem_mib"},
		{"snapshot mixed too long", KindSnapshot, func(e *Envelope) { e.Snapshot.Partitions[0].Mixed = make([]Room, MaxMixed+1) }, "snapshot.partitions[0].mixed"},
		{"snapshot max nodes", KindSnapshot, func(e *Envelope) { e.Snapshot.Partitions[0].MaxNodes = ptr(-1) }, "snapshot.partitions[0].max_nodes"},
		{"jobs empty", KindJobs, func(e *Envelope) { e.Jobs.Jobs = nil }, ""},
		{"jobs any name", KindJobs, func(e *Envelope) { e.Jobs.Jobs[0].Name = "$(reboot)\n\t`id`|&;<>'\"\\ ✓" }, ""},
		{"jobs name too long", KindJobs, func(e *Envelope) { e.Jobs.Jobs[0].Name = strings.Repeat("x", MaxText+1) }, "jobs.jobs[0].name"},
		{"jobs uid", KindJobs, func(e *Envelope) { e.Jobs.Jobs[1].UID = -1 }, "jobs.jobs[1].uid"},
		{"jobs taken", KindJobs, func(e *Envelope) { e.Jobs.TakenMS = 0 }, "jobs.taken_ms"},
		{"result ok with job", KindResult, func(e *Envelope) { e.Result.Status, e.Result.NewJobID = StatusOK, 5000 }, ""},
		{"result stderr", KindResult, func(e *Envelope) { e.Result.Stderr = strings.Repeat("x", MaxStderr+1) }, "result.stderr"},
		{"result action id", KindResult, func(e *Envelope) { e.Result.ActionID = "" }, "result.action_id"},
		{"agent kind with sid", KindJobs, func(e *Envelope) { e.SID = "0123456789abcdef" }, "sid"},
		{"agent kind with seq", KindResult, func(e *Envelope) { e.Seq = 1 }, "seq"},
		{"short sid", KindSignal, func(e *Envelope) { e.SID = "abc" }, "sid"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			e := fixture(tt.kind)
			tt.edit(e)
			err := e.Validate()
			if tt.field == "" {
				if err != nil {
					t.Fatalf("Validate() = %v, want nil", err)
				}
				return
			}
			checkErr(t, err, ErrInvalid, tt.field, "")
		})
	}
}

func TestNewEnvelope(t *testing.T) {
	t.Parallel()
	now := time.Date(2024, 5, 1, 12, 0, 0, 123_456_789, time.UTC)
	e := NewEnvelope(KindSnapshot, now)
	if e.V != Version || e.Kind != KindSnapshot || e.TimeMS != now.UnixMilli() {
		t.Errorf("NewEnvelope = %+v", e)
	}
	if !e.Time().Equal(now.Truncate(time.Millisecond)) {
		t.Errorf("Time() = %v, want %v", e.Time(), now.Truncate(time.Millisecond))
	}
}

func TestTruncateText(t *testing.T) {
	t.Parallel()
	tests := []struct {
		in   string
		max  int
		want string
	}{
		{"hello", 10, "hello"},
		{"hello", 3, "hel"},
		{"héllo", 2, "h"}, // does not split é
		{"a\xffb", 10, "a\uFFFDb"},
		{"a\x00b", 10, "ab"},
		{"x", -1, ""},
	}
	for _, tt := range tests {
		got := TruncateText(tt.in, tt.max)
		if got != tt.want {
			t.Errorf("TruncateText(%q, %d) = %q, want %q", tt.in, tt.max, got, tt.want)
		}
		if err := text("f", got, max(tt.max, 0), false); err != nil {
			t.Errorf("TruncateText(%q, %d) = %q does not validate: %v", tt.in, tt.max, got, err)
		}
	}
	// What the agent does with a huge, broken stderr must validate.
	e := fixture(KindResult)
	e.Result.Stderr = TruncateText(strings.Repeat("é\xff\x00", MaxStderr), MaxStderr)
	if err := e.Validate(); err != nil {
		t.Errorf("truncated stderr: %v", err)
	}
}

// TestGPUJobBytes: a device's job memory is its listed processes' sum, else
// the device's used memory; entries of other devices and unknown (-1)
// figures do not count.
func TestGPUJobBytes(t *testing.T) {
	const mib = 1 << 20
	d := GPUDevice{UUID: "GPU-A", UsedBytes: 1429 * mib}
	for _, tc := range []struct {
		name       string
		procs      []GPUProc
		want       int64
		perProcess bool
	}{
		{"two processes", []GPUProc{{PID: 1, Device: "GPU-A", UsedBytes: 1420 * mib}, {PID: 2, Device: "GPU-A", UsedBytes: 960 * mib}}, 2380 * mib, true},
		{"another device's process", []GPUProc{{PID: 1, Device: "GPU-B", UsedBytes: 1420 * mib}}, 1429 * mib, false},
		{"unknown figure", []GPUProc{{PID: 1, Device: "GPU-A", UsedBytes: -1}}, 1429 * mib, false},
		{"none listed", nil, 1429 * mib, false},
	} {
		got, per := (&GPUStat{Devices: []GPUDevice{d}, Procs: tc.procs}).JobBytes(d)
		if got != tc.want || per != tc.perProcess {
			t.Errorf("%s: %d bytes (per process %v), want %d (%v)", tc.name, got, per, tc.want, tc.perProcess)
		}
	}
}
