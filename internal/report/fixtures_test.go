package report

import (
	"bytes"
	"encoding/json"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

var testNow = time.UnixMilli(1_700_000_000_000)

var allKinds = []Kind{
	KindStart, KindSample, KindCheckpoint, KindSignal, KindEnd,
	KindSnapshot, KindJobs, KindAction, KindResult,
}

func ptr[T any](v T) *T { return &v }

// fixture returns a fresh, valid envelope of each kind, filled so that
// round trips exercise every field type (pointers to zero, empty strings,
// user data with shell metacharacters, array jobs, maps).
func fixture(kind Kind) *Envelope {
	e := NewEnvelope(kind, testNow)
	if kind.session() {
		e.Job = &JobRef{
			Cluster: "lab", JobID: 4242, ArrayJobID: 4240, ArrayTaskID: ptr(0), StepID: "batch",
			Lineage: "ln-7f3a.2", User: "alice", UID: 1001, Partition: "gpu", Node: "gpu1",
			Attempt: 1, Rank: 0, NRanks: 2,
		}
		e.SID = "0123456789abcdef0123456789abcdef"
		e.Seq = 7
	}
	const ms = 1_700_000_000_000
	switch kind {
	case KindStart:
		e.Start = &Start{
			Argv: []string{"python", "train.py", "--lr=3e-4", "--note=$(rm -rf ~); `x` <&>"},
			Cwd:  "/home/alice/proj", Host: "gpu1", PID: 31337, WrapperVersion: "v0.1.0",
			CheckpointDir: "/home/alice/proj/ckpt", ProgressFile: "/tmp/isched-4242.progress",
			Device: "cuda", GPUs: []string{"GPU-8a1b2c3d-0000-1111-2222-333344445555", "1"},
			TotalIters: 100_000, ItersPerEpoch: 1000, Epochs: 100,
			ResumeFrom: "/home/alice/proj/ckpt/step-5000.pt", Cred: "MUNGE:AwQDAACz0lX+Ag==:",
		}
	case KindSample:
		e.Sample = &Sample{
			CPU: &CPUStat{RSSBytes: 3 << 30, PeakRSSBytes: 4 << 30, PSSBytes: 2 << 30, CPUPercent: 387.5, Procs: 9},
			GPU: &GPUStat{
				Devices: []GPUDevice{{
					Index: 0, UUID: "GPU-8a1b2c3d-0000-1111-2222-333344445555", Name: "NVIDIA A100-SXM4-40GB",
					UsedBytes: 30 << 30, TotalBytes: 40 << 30, UtilPercent: ptr(97.0), PowerWatts: ptr(0.0), EnergyJ: ptr(1.5e9),
				}},
				Procs: []GPUProc{{PID: 31337, Device: "GPU-8a1b2c3d-0000-1111-2222-333344445555", UsedBytes: 29 << 30}},
			},
			Iters: []Iter{
				{Step: 5001, Epoch: 5, Samples: 256, Loss: ptr(0.0), AtMS: ms + 100, DurMS: 412.25, LoopDurMS: 410, Source: SourceFile},
				{Step: 5002, Epoch: 5, LossNonFinite: true, AtMS: ms + 512, DurMS: 0, Source: SourcePattern},
			},
			Gaps: 1, Dropped: 2,
		}
	case KindCheckpoint:
		e.Checkpoint = &Checkpoint{
			Path: "/home/alice/proj/ckpt/step-5000.pt", Size: 1 << 30, Step: ptr(int64(5000)),
			MTimeMS: ms - 1000, Complete: true,
			SHA256: "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855",
		}
	case KindSignal:
		e.Signal = &SignalEvent{Signal: "SIGUSR1", Forwarded: "file:/tmp/isched-4242.ckpt-now", From: "slurm"}
	case KindEnd:
		e.End = &End{
			ExitCode: 143, Signal: "SIGTERM", WallMS: 3_600_000, PeakRSSBytes: 4 << 30,
			PeakGPUBytes: map[string]int64{"GPU-8a1b2c3d-0000-1111-2222-333344445555": 31 << 30},
			Iters:        5002, MedianIterMS: 410.5, P90IterMS: 455, Checkpoints: 5, Reason: EndSignaled,
			CgroupPeakBytes: 5 << 30, MemLimitBytes: 8 << 30,
		}
	case KindSnapshot:
		e.Snapshot = &Snapshot{
			Cluster: "lab", TakenMS: ms - 5000, Pending: 3,
			Partitions: []Partition{
				{
					Name: "gpu", State: "UP", NodesAlloc: 1, NodesIdle: 1, NodesTotal: 2, CPUsAlloc: 8, CPUsIdle: 8, CPUsTotal: 16,
					GPUs:        []GPUCount{{Type: "", Alloc: 2, Idle: 2, Total: 4}},
					PendingJobs: 2, MaxTimeMin: nil, DefaultTimeMin: ptr(int64(60)), MinNodes: 1, MaxNodes: ptr(2),
					PreemptMode: "OFF",
				},
				{
					Name: "cpu", State: "UP", Default: true, NodesTotal: 2, NodesIdle: 2, CPUsIdle: 4, CPUsTotal: 4,
					GPUs: []GPUCount{}, PendingJobs: 1, MaxTimeMin: ptr(int64(0)), PriorityTier: 1, PreemptMode: "REQUEUE",
				},
			},
		}
	case KindJobs:
		e.Jobs = &JobTable{
			Cluster: "lab", TakenMS: ms - 5000,
			Jobs: []Job{
				{
					JobID: 4242, ArrayJobID: 4240, ArrayTaskID: ptr(2), Name: "train; rm -rf / # \x1b[31m\"quoted\"", User: "alice", UID: 1001,
					Account: "ml", Partition: "gpu", State: "RUNNING", Reason: "None", Nodes: "gpu[1-2]", NodeCount: 2,
					CPUs: 16, Gres: "gpu:2", TimeLimitMin: ptr(int64(120)), SubmitMS: ms - 90_000, StartMS: ms - 60_000,
					ElapsedS: 60, RestartCount: 1, Requeue: true, Comment: "isched lineage=ln-7f3a.2",
				},
				{
					JobID: 4243, Name: "eval", User: "bob", UID: 1002, Partition: "cpu,gpu", State: "PENDING",
					Reason: "(Resources)", Gres: "", SubmitMS: ms - 10_000, ExpectedStartMS: ms + 600_000,
				},
			},
		}
	case KindAction:
		e.Action = &Action{
			ID: "lab:4242:requeue:1", Type: ActionRequeue, Cluster: "lab", JobID: 4242, Lineage: "ln-7f3a.2",
			User: "alice", Partition: "gpu", Gres: "gpu:1", TimeLimitMin: 90, Hold: true,
			Reason: "checkpoint saved; move to a freer partition", IssuedMS: ms,
		}
	case KindResult:
		e.Result = &Result{
			ActionID: "lab:4242:requeue:1", Status: StatusFailed, Message: "scontrol requeue failed",
			Stderr: "scontrol: error: Invalid job id specified\n", DoneMS: ms + 800,
		}
	}
	return e
}

func mustEncode(t testing.TB, e *Envelope) []byte {
	t.Helper()
	b, err := Encode(e)
	if err != nil {
		t.Fatalf("Encode(%s fixture): %v", e.Kind, err)
	}
	return b
}

// mutate encodes the fixture of kind, applies edits to it as generic JSON
// (numbers kept verbatim) and re-encodes it: a way to build invalid input
// that Encode would refuse to produce.
func mutate(t testing.TB, kind Kind, edits ...func(map[string]any)) []byte {
	t.Helper()
	dec := json.NewDecoder(bytes.NewReader(fixtureJSON()[kind]))
	dec.UseNumber()
	var m map[string]any
	if err := dec.Decode(&m); err != nil {
		t.Fatal(err)
	}
	for _, edit := range edits {
		edit(m)
	}
	b, err := json.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// fixtureJSON is the encoded fixture of each kind, computed once.
var fixtureJSON = sync.OnceValue(func() map[Kind][]byte {
	enc := make(map[Kind][]byte)
	for _, kind := range allKinds {
		b, err := Encode(fixture(kind))
		if err != nil {
			panic(err)
		}
		enc[kind] = b
	}
	return enc
})

// set replaces the value at a dotted path ("sample.iters.0.step"); a raw
// json.RawMessage value is spliced in as is.
func set(path string, v any) func(map[string]any) {
	return func(m map[string]any) { walkPath(m, path, func(parent any, key string) { assign(parent, key, v) }) }
}

// del removes the object key at a dotted path (array elements stay).
func del(path string) func(map[string]any) {
	return func(m map[string]any) {
		walkPath(m, path, func(parent any, key string) {
			if p, ok := parent.(map[string]any); ok {
				delete(p, key)
			}
		})
	}
}

func walkPath(m map[string]any, path string, at func(parent any, key string)) {
	parts := strings.Split(path, ".")
	var cur any = m
	for _, p := range parts[:len(parts)-1] {
		switch c := cur.(type) {
		case map[string]any:
			cur = c[p]
		case []any:
			i, _ := strconv.Atoi(p)
			cur = c[i]
		}
	}
	at(cur, parts[len(parts)-1])
}

func assign(parent any, key string, v any) {
	switch p := parent.(type) {
	case map[string]any:
		p[key] = v
	case []any:
		i, _ := strconv.Atoi(key)
		p[i] = v
	}
}
