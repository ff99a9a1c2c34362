package slurm

import (
	"bytes"
	"encoding/json"
	"flag"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/isched/isched/internal/report"
)

var update = flag.Bool("update", false, "rewrite golden files under testdata/")

const v2205 = "testdata/22.05"

// captured is the time the 22.05 files were captured (squeue.json's newest
// submit_time), so golden files do not depend on when the test runs.
var captured = time.Date(2026, 11, 22, 3, 16, 30, 0, time.UTC)

func readFile(t testing.TB, name string) []byte {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(v2205, name))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// golden compares v's JSON with testdata/22.05/<name>, rewriting it with -update.
func golden(t *testing.T, name string, v any) {
	t.Helper()
	got, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		t.Fatal(err)
	}
	got = append(got, '\n')
	path := filepath.Join(v2205, name)
	if *update {
		if err := os.WriteFile(path, got, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run go test -update to create it)", err)
	}
	if !bytes.Equal(got, want) {
		t.Errorf("%s differs from the golden file (go test -run %s -update rewrites it):\n%s", path, t.Name(), got)
	}
}

func byID(jobs []report.Job) map[uint64]report.Job {
	m := map[uint64]report.Job{}
	for _, j := range jobs {
		m[j.JobID] = j
	}
	return m
}

// TestParseSqueueExclusive: bob's `sbatch -p gpu -N 2 --exclusive`
// asked for no GPU, yet Slurm 22.05 allocated the nodes' four (captured
// in testdata/22.05/squeue-exclusive.json).
func TestParseSqueueExclusive(t *testing.T) {
	jobs, err := ParseSqueue(readFile(t, "squeue-exclusive.json"))
	if err != nil {
		t.Fatal(err)
	}
	j, ok := byID(jobs)[453]
	if !ok || j.State != "RUNNING" || j.Gres != "" || j.AllocGPUs != 4 || j.NodeCount != 2 || j.CPUs != 8 {
		t.Fatalf("job 453: %+v; want RUNNING on 2 nodes, 8 CPUs, no GRES asked, 4 GPUs allocated", j)
	}
	if p := byID(jobs)[444]; p.AllocGPUs != 0 {
		t.Errorf("a job cancelled while pending has %d GPUs allocated, want 0", p.AllocGPUs)
	}
}

func TestAllocGPUs(t *testing.T) {
	for in, want := range map[string]int{
		"cpu=8,mem=4000M,node=2,billing=8,gres/gpu=4":                 4,
		"cpu=2,mem=1000M,node=1,billing=2,gres/gpu=1,gres/gpu:a100=1": 1,
		"cpu=1,mem=500M,node=1,billing=1":                             0,
		"":                                                            0,
		"gres/gpu=x":                                                  0,
	} {
		if got := AllocGPUs(in); got != want {
			t.Errorf("AllocGPUs(%q) = %d, want %d", in, got, want)
		}
	}
}

func TestParseSqueue2205(t *testing.T) {
	jobs, err := ParseSqueue(readFile(t, "squeue.json"))
	if err != nil {
		t.Fatal(err)
	}
	if len(jobs) != 19 {
		t.Fatalf("got %d jobs, want 19", len(jobs))
	}
	m := byID(jobs)
	i64 := func(v int64) *int64 { return &v }
	checks := []struct {
		name string
		id   uint64
		ok   func(j report.Job) bool
	}{
		{"gpu job: gres from tres_per_node, gres: prefix dropped", 8, func(j report.Job) bool {
			return j.State == "RUNNING" && j.Partition == "gpu" && j.Gres == "gpu:1" && j.Nodes == "gpu1" && *j.TimeLimitMin == 30 && j.StartMS > 0 && j.EndMS == 0
		}},
		{"--gpus=1: gres from tres_per_job", 10, func(j report.Job) bool { return j.Gres == "gpu:1" && j.User == "alice" && j.UID == 1001 }},
		{"array task 11_0", 15, func(j report.Job) bool {
			return j.ArrayJobID == 11 && j.ArrayTaskID != nil && *j.ArrayTaskID == 0
		}},
		{"pending array rest has no task id", 11, func(j report.Job) bool {
			return j.State == "PENDING" && j.Reason == "JobArrayTaskLimit" && j.ArrayJobID == 0 && j.ArrayTaskID == nil
		}},
		{"pending over partition limit", 12, func(j report.Job) bool {
			return j.State == "PENDING" && j.Reason == "PartitionTimeLimit" && j.StartMS == 0 && j.ExpectedStartMS == 0 && *j.TimeLimitMin == 180
		}},
		{"pending with a begin time: expected start, not a start", 13, func(j report.Job) bool {
			return j.StartMS == 0 && j.ExpectedStartMS == time.Date(2026, 11, 22, 4, 16, 8, 0, time.UTC).UnixMilli() && j.CPUs == 2
		}},
		{"requeued once", 14, func(j report.Job) bool { return j.RestartCount == 1 && j.Requeue }},
		{"failed: end and elapsed", 18, func(j report.Job) bool {
			return j.State == "FAILED" && j.EndMS > 0 && j.EndMS >= j.StartMS && j.Reason == "NonZeroExitCode"
		}},
		{"comment kept", 7, func(j report.Job) bool { return j.Comment == "isched lineage=abc" }},
		{"shell metacharacters are data", 19, func(j report.Job) bool {
			return j.Name == "isched-slurm-test-$(touch /tmp/pwned);echo" && j.Reason == "JobHeldUser"
		}},
	}
	_ = i64
	for _, c := range checks {
		t.Run(c.name, func(t *testing.T) {
			j, ok := m[c.id]
			if !ok {
				t.Fatalf("job %d missing", c.id)
			}
			if !c.ok(j) {
				b, _ := json.Marshal(j)
				t.Errorf("job %d: %s", c.id, b)
			}
		})
	}
	table := BuildJobTable("lab", jobs, nil, captured)
	env := report.NewEnvelope(report.KindJobs, captured)
	env.Jobs = &table
	if _, err := report.Encode(env); err != nil {
		t.Fatalf("job table does not pass report's validation: %v", err)
	}
	golden(t, "squeue.golden.json", jobs)
}

func TestParseSinfo2205(t *testing.T) {
	nodes, err := ParseSinfo(readFile(t, "sinfo.json"))
	if err != nil {
		t.Fatal(err)
	}
	if len(nodes) != 6 {
		t.Fatalf("got %d nodes, want 6", len(nodes))
	}
	golden(t, "sinfo.golden.json", nodes)
	checkSinfoByEye(t, nodes)
}

// checkSinfoByEye checks nodes of sinfo.json against values read off the
// captured files by eye, not from the parser's output: the golden file is
// whatever the parser wrote with -update. Each node below is its record in
// sinfo.json ("state", "cpus", "alloc_cpus", "idle_cpus", "gres",
// "gres_used", "tres", "tres_used", "partitions"), and the same node in
// nodes.txt (scontrol show node -o, captured alongside) agrees: State,
// CPUTot, CPUAlloc, Gres, CfgTRES (RealMemory), AllocTRES (AllocMem),
// Partitions.
func checkSinfoByEye(t *testing.T, nodes []Node) {
	t.Helper()
	want := map[string]Node{
		// "allocated", 4 of 4 CPUs, 2000 of 8000 MB, no GRES configured
		"cpu1": {Name: "cpu1", State: "ALLOCATED", CPUs: 4, AllocCPUs: 4, IdleCPUs: 0, GresUsed: "gpu:0",
			TRES: "cpu=4,mem=8000M,billing=4", TRESUsed: "cpu=4,mem=2000M", Partitions: []string{"cpu", "scavenger"}},
		// "idle"; "tres_used": null
		"cpu2": {Name: "cpu2", State: "IDLE", CPUs: 4, AllocCPUs: 0, IdleCPUs: 4, GresUsed: "gpu:0",
			TRES: "cpu=4,mem=8000M,billing=4", Partitions: []string{"cpu", "scavenger"}},
		// "mixed", 1 of 2 CPUs, 500 of 4000 MB
		"dev1": {Name: "dev1", State: "MIXED", CPUs: 2, AllocCPUs: 1, IdleCPUs: 1, GresUsed: "gpu:0",
			TRES: "cpu=2,mem=4000M,billing=2", TRESUsed: "cpu=1,mem=500M", Partitions: []string{"dev"}},
		// "mixed", 3 of 4 CPUs, both GPUs of "gpu:2" in use ("gres_used": "gpu:2")
		"gpu1": {Name: "gpu1", State: "MIXED", CPUs: 4, AllocCPUs: 3, IdleCPUs: 1, Gres: "gpu:2", GresUsed: "gpu:2",
			TRES: "cpu=4,mem=8000M,billing=4", TRESUsed: "cpu=3,mem=1500M", Partitions: []string{"gpu", "scavenger"}},
		// "idle", one GPU configured, none used
		"gdev1": {Name: "gdev1", State: "IDLE", CPUs: 4, AllocCPUs: 0, IdleCPUs: 4, Gres: "gpu:1", GresUsed: "gpu:0",
			TRES: "cpu=4,mem=8000M,billing=4", Partitions: []string{"gpu-dev"}},
	}
	for _, n := range nodes {
		w, ok := want[n.Name]
		if !ok {
			continue
		}
		delete(want, n.Name)
		if !reflect.DeepEqual(n, w) {
			t.Errorf("node %s:\n got %+v\nwant %+v (read off sinfo.json and nodes.txt)", n.Name, n, w)
		}
	}
	for name := range want {
		t.Errorf("node %s missing", name)
	}
}

func TestParsePartitions2205(t *testing.T) {
	parts, err := ParsePartitions(readFile(t, "partitions.txt"))
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]struct {
		max, def int64
		tier     int
		dflt     bool
	}{
		"dev": {120, 30, 10, false}, "gpu-dev": {120, 30, 10, false}, "cpu": {2880, 60, 10, true},
		"gpu": {2880, 60, 10, false}, "scavenger": {1440, 60, 1, false},
	}
	if len(parts) != len(want) {
		t.Fatalf("got %d partitions, want %d", len(parts), len(want))
	}
	for _, p := range parts {
		w := want[p.Name]
		if *minutes(p.MaxTime) != w.max || *minutes(p.DefaultTime) != w.def || p.PriorityTier != w.tier || p.Default != w.dflt ||
			p.MaxNodes != nil || p.MinNodes != 0 || p.State != "UP" || p.PreemptMode != "REQUEUE" {
			t.Errorf("%s: %+v, want %+v", p.Name, p, w)
		}
	}
}

func TestBuildSnapshot2205(t *testing.T) {
	parts, err := ParsePartitions(readFile(t, "partitions.txt"))
	if err != nil {
		t.Fatal(err)
	}
	nodes, err := ParseSinfo(readFile(t, "sinfo.json"))
	if err != nil {
		t.Fatal(err)
	}
	jobs, err := ParseSqueue(readFile(t, "squeue.json"))
	if err != nil {
		t.Fatal(err)
	}
	s := BuildSnapshot("lab", parts, nodes, jobs, captured)
	env := report.NewEnvelope(report.KindSnapshot, captured)
	env.Snapshot = &s
	if _, err := report.Encode(env); err != nil {
		t.Fatalf("snapshot does not pass report's validation: %v", err)
	}
	p := map[string]report.Partition{}
	for _, x := range s.Partitions {
		p[x.Name] = x
	}
	// At capture time (sinfo): cpu1 allocated (4 jobs), cpu2 idle, dev1
	// mixed, gpu1 mixed with both GPUs in use, gpu2 and gdev1 idle.
	gpu := p["gpu"]
	if gpu.NodesAlloc != 1 || gpu.NodesIdle != 1 || gpu.NodesTotal != 2 || gpu.CPUsAlloc != 3 || gpu.CPUsTotal != 8 {
		t.Errorf("gpu nodes/cpus: %+v", gpu)
	}
	if len(gpu.GPUs) != 1 || gpu.GPUs[0] != (report.GPUCount{Type: "", Alloc: 2, Idle: 2, Total: 4}) {
		t.Errorf("gpu GPUs: %+v", gpu.GPUs)
	}
	if c := p["cpu"]; c.NodesAlloc != 1 || c.NodesIdle != 1 || len(c.GPUs) != 0 || c.PendingJobs != 2 {
		t.Errorf("cpu: %+v (pending: array rest 11 and held 19)", c)
	}
	if d := p["dev"]; d.PendingJobs != 1 || *d.MaxTimeMin != 120 || *d.DefaultTimeMin != 30 {
		t.Errorf("dev: %+v", d)
	}
	if g := p["gpu-dev"]; len(g.GPUs) != 1 || g.GPUs[0].Total != 1 || g.GPUs[0].Idle != 1 || g.PendingJobs != 1 {
		t.Errorf("gpu-dev: %+v", g)
	}
	if s.Pending != 4 {
		t.Errorf("pending %d, want 4", s.Pending)
	}
	golden(t, "snapshot.golden.json", s)
}

func TestParseStart2205(t *testing.T) {
	starts, err := ParseStart(readFile(t, "start.txt"))
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]time.Time{"13": time.Date(2026, 11, 22, 4, 16, 8, 0, time.UTC)}
	if len(starts) != len(want) || !starts["13"].Equal(want["13"]) {
		t.Errorf("got %v, want %v", starts, want)
	}
	jobs, err := ParseSqueue(readFile(t, "squeue.json"))
	if err != nil {
		t.Fatal(err)
	}
	starts["11"] = captured.Add(time.Hour) // as if the array rest had an estimate
	table := BuildJobTable("lab", jobs, starts, captured)
	m := byID(table.Jobs)
	if got := m[11].ExpectedStartMS; got != captured.Add(time.Hour).UnixMilli() {
		t.Errorf("array rest expected start %d", got)
	}
	if got := m[8].ElapsedS; got != captured.Unix()-time.Date(2026, 11, 22, 3, 16, 9, 0, time.UTC).Unix() {
		t.Errorf("running job 8 elapsed %d s", got)
	}
	if jobs[0].ElapsedS != byID(jobs)[jobs[0].JobID].ElapsedS {
		t.Error("BuildJobTable modified its input")
	}
}

func TestParseShowJob2205(t *testing.T) {
	jobs, err := ParseShowJob(readFile(t, "show_job_all.txt"))
	if err != nil {
		t.Fatal(err)
	}
	m := map[string]JobInfo{}
	for _, j := range jobs {
		m[j.JobID] = j
	}
	cases := []struct {
		id   string
		ok   func(j JobInfo) bool
		what string
	}{
		{"7", func(j JobInfo) bool {
			return j.Comment == "isched lineage=abc" && j.Fields["StdErr"] == "/tmp/isched-cap/7.out" && j.User == "root" && j.UID == 0
		}, "a comment with a space and a '=' stays one value"},
		{"8", func(j JobInfo) bool {
			return j.State == "RUNNING" && j.TresPerNode == "gres:gpu:1" && *j.TimeLimit == 30*time.Minute && j.Partition == "gpu" && j.BatchFlag
		}, "running gpu job"},
		{"10", func(j JobInfo) bool { return j.User == "alice" && j.UID == 1001 && j.TresPerJob == "gres:gpu:1" }, "alice's --gpus job"},
		{"15", func(j JobInfo) bool { return j.ID() == "11_0" && j.ArrayTaskID == "0" }, "array task"},
		{"11", func(j JobInfo) bool { return j.ID() == "11" && j.ArrayTaskID == "2-3%2" && j.StartTime.IsZero() }, "array rest"},
		{"14", func(j JobInfo) bool { return j.Restarts == 1 && j.Requeue }, "requeued"},
		{"19", func(j JobInfo) bool {
			return j.Name == "isched-slurm-test-$(touch /tmp/pwned);echo" && j.Held() && j.Reason == "JobHeldUser"
		}, "held job with shell metacharacters in its name"},
		{"18", func(j JobInfo) bool { return j.Ended() && j.State == "FAILED" }, "failed"},
	}
	for _, c := range cases {
		j, ok := m[c.id]
		if !ok {
			t.Errorf("job %s missing", c.id)
			continue
		}
		if !c.ok(j) {
			t.Errorf("%s: job %s: %+v", c.what, c.id, j)
		}
	}
}

// TestParseShowJobResized2205 reads a job resized to 4 tasks on 2 nodes
// while requeued held, then running (captured, testdata/README.md).
func TestParseShowJobResized2205(t *testing.T) {
	for _, tc := range []struct{ file, state, numNodes string }{
		{"show_job_resized_pending.txt", "PENDING", "1"}, // NumNodes lags behind the update
		{"show_job_resized_running.txt", "RUNNING", "2"},
	} {
		jobs, err := ParseShowJob(readFile(t, tc.file))
		if err != nil || len(jobs) != 1 {
			t.Fatalf("%s: %d jobs, %v", tc.file, len(jobs), err)
		}
		j := jobs[0]
		if j.State != tc.state || j.Fields["NumNodes"] != tc.numNodes || j.Nodes() != 2 || j.Tasks() != 4 || j.CPUsPerTask() != 2 ||
			j.TresPerNode != "gres:gpu:2" || j.Restarts != 1 {
			t.Errorf("%s: state %s, NumNodes %s, Nodes() %d, tasks %d, CPUs/task %d, %s, restarts %d", tc.file, j.State,
				j.Fields["NumNodes"], j.Nodes(), j.Tasks(), j.CPUsPerTask(), j.TresPerNode, j.Restarts)
		}
	}
	for _, tc := range []struct {
		fields map[string]string
		want   int
	}{
		{map[string]string{"NumNodes": "2-2"}, 2},
		{map[string]string{"NumNodes": "1", "TRES": "cpu=1,mem=500M,node=3"}, 3},
		{map[string]string{"TRES": "cpu=1"}, 1},
		{nil, 1},
	} {
		if got := (&JobInfo{Fields: tc.fields}).Nodes(); got != tc.want {
			t.Errorf("Nodes() of %v = %d, want %d", tc.fields, got, tc.want)
		}
	}
}

func TestParseKVFreeText(t *testing.T) {
	line := "JobId=5 JobName=my job  name UserId=bob(1002) JobState=PENDING Reason=None Comment=a b=c  d Partition=x StdOut=/tmp/with space/o.txt Power="
	jobs, err := ParseShowJob([]byte(line))
	if err != nil {
		t.Fatal(err)
	}
	j := jobs[0]
	if j.Name != "my job  name" || j.Comment != "a b=c  d" || j.Fields["StdOut"] != "/tmp/with space/o.txt" || j.User != "bob" || j.Partition != "x" {
		t.Errorf("%+v", j)
	}
}

// TestDrift reads the fields this package uses in every JSON spelling seen
// between Slurm 22.05 and 24.x.
func TestDrift(t *testing.T) {
	const base = `"job_id": 42, "user_id": 1001, "user_name": "alice", "partition": "gpu", "name": "n"`
	cases := []struct {
		name string
		json string
		want func(j report.Job) bool
	}{
		{"22.05 numbers", `"job_state": "RUNNING", "time_limit": 60, "start_time": 1700000000, "node_count": 2, "cpus": 8, "array_task_id": null, "array_job_id": 0, "tres_per_node": "gres:gpu:2"`,
			func(j report.Job) bool {
				return j.State == "RUNNING" && *j.TimeLimitMin == 60 && j.StartMS == 1700000000000 && j.NodeCount == 2 && j.CPUs == 8 && j.ArrayTaskID == nil && j.Gres == "gpu:2"
			}},
		{"22.05 INFINITE time limit", `"job_state": "RUNNING", "time_limit": 4294967295`, func(j report.Job) bool { return j.TimeLimitMin == nil }},
		{"22.05 NO_VAL time limit", `"job_state": "RUNNING", "time_limit": 4294967294`, func(j report.Job) bool { return j.TimeLimitMin == nil }},
		{"23.x objects and state list", `"job_state": ["RUNNING"], "time_limit": {"set": true, "infinite": false, "number": 90},
			"start_time": {"set": true, "infinite": false, "number": 1700000000}, "end_time": {"set": true, "infinite": false, "number": 1700005400},
			"node_count": {"set": true, "infinite": false, "number": 1}, "cpus": {"set": true, "infinite": false, "number": 4},
			"array_job_id": {"set": true, "infinite": false, "number": 40}, "array_task_id": {"set": true, "infinite": false, "number": 3},
			"tres_per_node": "gres/gpu:1", "restart_cnt": 2, "requeue": true`,
			func(j report.Job) bool {
				return j.State == "RUNNING" && *j.TimeLimitMin == 90 && j.StartMS == 1700000000000 && j.EndMS == 0 && j.NodeCount == 1 && j.CPUs == 4 &&
					j.ArrayJobID == 40 && *j.ArrayTaskID == 3 && j.Gres == "gpu:1" && j.RestartCount == 2 && j.Requeue
			}},
		{"23.x infinite and unset", `"job_state": ["PENDING", "REQUEUED"], "time_limit": {"set": true, "infinite": true, "number": 0},
			"start_time": {"set": false, "infinite": false, "number": 0}, "array_task_id": {"set": false, "infinite": false, "number": 0},
			"array_job_id": {"set": true, "infinite": false, "number": 0}`,
			func(j report.Job) bool {
				return j.State == "PENDING" && j.TimeLimitMin == nil && j.StartMS == 0 && j.ExpectedStartMS == 0 && j.ArrayTaskID == nil
			}},
		{"ended 23.x", `"job_state": ["COMPLETED"], "start_time": {"set": true, "number": 1700000000}, "end_time": {"set": true, "number": 1700000100}`,
			func(j report.Job) bool { return j.EndMS == 1700000100000 && j.ElapsedS == 100 }},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			doc := `{"meta": {}, "errors": [], "warnings": [], "jobs": [{` + base + `, ` + c.json + `}]}`
			jobs, err := ParseSqueue([]byte(doc))
			if err != nil {
				t.Fatal(err)
			}
			if len(jobs) != 1 || !c.want(jobs[0]) {
				b, _ := json.Marshal(jobs)
				t.Errorf("got %s", b)
			}
		})
	}
}

func TestSinfoDrift(t *testing.T) {
	doc := `{"errors": [], "nodes": [
	  {"name": "a", "state": ["IDLE", "DRAIN"], "cpus": 4, "alloc_cpus": 0, "idle_cpus": 4, "gres": "gpu:a100:2(S:0-1)", "gres_used": "gpu:a100:0(IDX:N/A)", "partitions": ["p"]},
	  {"name": "b", "state": "mixed", "state_flags": [], "cpus": 4, "alloc_cpus": 2, "gres": "gpu:a100:2(S:0),gpu:v100:1", "gres_used": "gpu:a100:1(IDX:0),gpu:v100:1(IDX:2)", "partitions": ["p"]},
	  {"name": "c", "state": "down", "state_flags": ["NOT_RESPONDING"], "cpus": 8, "alloc_cpus": 0, "idle_cpus": 8, "gres": "", "tres": "cpu=8,gres/gpu=4", "partitions": ["p", "q"]},
	  {"name": "d", "state": "idle", "state_flags": ["COMPLETING"], "cpus": 2, "alloc_cpus": 0, "idle_cpus": 2, "partitions": ["q"]}
	]}`
	nodes, err := ParseSinfo([]byte(doc))
	if err != nil {
		t.Fatal(err)
	}
	if nodes[0].State != "IDLE" || len(nodes[0].Flags) != 1 || nodes[0].Flags[0] != "DRAIN" || nodes[1].IdleCPUs != 2 {
		t.Fatalf("%+v", nodes)
	}
	maxN := 4
	parts := []PartitionInfo{{Name: "p", State: "UP", MaxNodes: &maxN}, {Name: "q", State: "UP"}, {Name: "empty", State: "DOWN"}}
	s := BuildSnapshot("lab", parts, nodes, nil, captured)
	p := s.Partitions[0]
	if p.NodesAlloc != 1 || p.NodesIdle != 0 || p.NodesOther != 2 || p.NodesTotal != 3 || p.CPUsTotal != 16 || p.CPUsAlloc != 2 || p.CPUsIdle != 2 {
		t.Errorf("p nodes/cpus: %+v", p)
	}
	wantGPU := []report.GPUCount{{Type: "", Alloc: 0, Idle: 0, Total: 4}, {Type: "a100", Alloc: 1, Idle: 1, Total: 4}, {Type: "v100", Alloc: 1, Idle: 0, Total: 1}}
	if len(p.GPUs) != len(wantGPU) {
		t.Fatalf("p GPUs %+v, want %+v", p.GPUs, wantGPU)
	}
	for i := range wantGPU {
		if p.GPUs[i] != wantGPU[i] {
			t.Errorf("p GPUs %+v, want %+v", p.GPUs, wantGPU)
		}
	}
	if q := s.Partitions[1]; q.NodesAlloc != 1 || q.NodesOther != 1 {
		t.Errorf("q (completing idle node counts as allocated): %+v", q)
	}
	if e := s.Partitions[2]; e.NodesTotal != 0 || e.GPUs == nil {
		t.Errorf("empty partition: %+v", e)
	}
}

func TestMalformed(t *testing.T) {
	job := func(extra string) string {
		return `{"job_id": 7, "user_id": 0, "job_state": "RUNNING"` + extra + `}`
	}
	cases := []struct {
		name, in, want string
	}{
		{"empty", ``, "squeue --json: malformed JSON at byte 0: unexpected end of input"},
		{"not an object", `[]`, "want '{', got '['"},
		{"truncated", `{"jobs": [` + job(""), "unexpected end of input in list"},
		{"no jobs member", `{"meta": {}}`, `no "jobs" member`},
		{"jobs not a list", `{"jobs": 3}`, "jobs: want a list"},
		{"bad time limit", `{"jobs": [` + job("") + `, ` + job(`, "time_limit": "soon"`) + `]}`, `jobs[1] (job 7): field time_limit: want a number or {set,infinite,number}, got "soon"`},
		{"bad state type", `{"jobs": [` + job(`, "job_state": 5`) + `]}`, "jobs[0] (job 7): field job_state: want a string or a list of strings"},
		{"missing state", `{"jobs": [{"job_id": 9, "user_id": 0}]}`, "jobs[0] (job 9): field job_state: missing"},
		{"missing user id", `{"jobs": [{"job_id": 9, "job_state": "RUNNING"}]}`, "jobs[0] (job 9): field user_id: missing"},
		{"bad job id", `{"jobs": [{"job_id": -1, "user_id": 0, "job_state": "RUNNING"}]}`, "jobs[0]: field job_id"},
		{"name not a string", `{"jobs": [` + job(`, "name": 12`) + `]}`, "jobs[0] (job 7): field name: want string"},
		{"bad number", `{"jobs": [` + job(`, "cpus": 01`) + `]}`, "jobs[0] (job 7): malformed JSON"},
		{"trailing garbage", `{"jobs": []} x`, "trailing data"},
		{"unterminated string", `{"jobs": [` + job(`, "name": "abc`) + `]}`, "unterminated string"},
		{"control character", "{\"jobs\": [" + job(`, "name": "a`+"\x01"+`"`) + `]}`, "control character"},
		{"skipped member malformed", `{"jobs": [` + job(`, "other": [1, 2,]`) + `]}`, "malformed JSON"},
		{"deep nesting", `{"jobs": [` + job(`, "x": `+strings.Repeat("[", 300)+strings.Repeat("]", 300)) + `]}`, "nested too deep"},
		{"job id found after the bad field", `{"jobs": [{"account": 5, "job_id": 77}]}`, "jobs[0] (job 77): field account: want string, got 5"},
		{"job not an object", `{"jobs": [3]}`, "jobs[0]: want a job object, got 3"},
		{"slurm errors", `{"errors": [{"error": "Unable to contact slurm controller", "errno": 1}], "jobs": []}`, "squeue --json reported errors: Unable to contact slurm controller"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			_, err := ParseSqueue([]byte(c.in))
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Errorf("error %v, want it to contain %q", err, c.want)
			}
		})
	}
	other := []struct {
		name  string
		parse func([]byte) error
		in    string
		want  string
	}{
		{"sinfo bad cpus", func(b []byte) error { _, err := ParseSinfo(b); return err }, `{"nodes": [{"name": "n1", "state": "idle", "cpus": "four"}]}`, `nodes[0] (node n1): field cpus: want a number, got "four"`},
		{"sinfo no state", func(b []byte) error { _, err := ParseSinfo(b); return err }, `{"nodes": [{"name": "n1", "cpus": 4}]}`, "(node n1): field state: missing"},
		{"sinfo no nodes", func(b []byte) error { _, err := ParseSinfo(b); return err }, `{"meta": {}}`, `no "nodes" member`},
		{"partition bad max time", func(b []byte) error { _, err := ParsePartitions(b); return err }, "PartitionName=p State=UP MaxTime=soon", "partition p: field MaxTime"},
		{"partition no name", func(b []byte) error { _, err := ParsePartitions(b); return err }, "State=UP", "field PartitionName: missing"},
		{"partition bad tier", func(b []byte) error { _, err := ParsePartitions(b); return err }, "PartitionName=p State=UP PriorityTier=high", "partition p: field PriorityTier"},
		{"start bad line", func(b []byte) error { _, err := ParseStart(b); return err }, "13 2026-11-22T04:16:08\n14\n", "line 2"},
		{"start bad time", func(b []byte) error { _, err := ParseStart(b); return err }, "13 tomorrow\n", "(job 13): start time"},
		{"start bad id", func(b []byte) error { _, err := ParseStart(b); return err }, "$(x) N/A\n", `job id "$(x)"`},
		{"show job no state", func(b []byte) error { _, err := ParseShowJob(b); return err }, "JobId=4 UserId=a(1)", "job 4: field JobState: missing"},
		{"show job bad restarts", func(b []byte) error { _, err := ParseShowJob(b); return err }, "JobId=4 UserId=a(1) JobState=RUNNING Restarts=x", "job 4: field Restarts"},
		{"show job bad id", func(b []byte) error { _, err := ParseShowJob(b); return err }, "JobName=x", "field JobId"},
	}
	for _, c := range other {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			err := c.parse([]byte(c.in))
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Errorf("error %v, want it to contain %q", err, c.want)
			}
		})
	}
}

func TestGPUs(t *testing.T) {
	cases := []struct {
		in   string
		want map[string]int
	}{
		{"", map[string]int{}},
		{"(null)", map[string]int{}},
		{"gpu:2", map[string]int{"": 2}},
		{"gpu:0", map[string]int{"": 0}},
		{"gpu", map[string]int{"": 1}},
		{"gpu:tesla:2(S:0)", map[string]int{"tesla": 2}},
		{"gpu:1(IDX:0)", map[string]int{"": 1}},
		{"gpu:2(IDX:0,2)", map[string]int{"": 2}},
		{"gpu:a100:1(IDX:0),mps:100K(IDX:N/A)", map[string]int{"a100": 1}},
		{"gpu:a100:2,gpu:v100:1", map[string]int{"a100": 2, "v100": 1}},
		{"gres:gpu:1", map[string]int{"": 1}},
		{"gres/gpu:1", map[string]int{"": 1}},
		{"gpu:tesla", map[string]int{"tesla": 1}},
		{"cpu=4,mem=8000M,billing=4,gres/gpu=2", map[string]int{"": 2}},
		{"cpu=4,gres/gpu=3,gres/gpu:a100=2,gres/gpu:v100=1", map[string]int{"a100": 2, "v100": 1}},
		{"mps:200", map[string]int{}},
	}
	for _, c := range cases {
		got, err := GPUs(c.in)
		if err != nil {
			t.Errorf("GPUs(%q): %v", c.in, err)
			continue
		}
		if len(got) != len(c.want) {
			t.Errorf("GPUs(%q) = %v, want %v", c.in, got, c.want)
			continue
		}
		for k, v := range c.want {
			if got[k] != v {
				t.Errorf("GPUs(%q) = %v, want %v", c.in, got, c.want)
			}
		}
	}
	if _, err := GPUs("gpu:a100:lots"); err == nil {
		t.Error("GPUs accepted a non-numeric count")
	}
}

func TestParseDuration(t *testing.T) {
	cases := []struct {
		in   string
		want time.Duration
		nil_ bool
		bad  bool
	}{
		{in: "UNLIMITED", nil_: true}, {in: "NONE", nil_: true}, {in: "INFINITE", nil_: true},
		{in: "30", want: 30 * time.Minute}, {in: "1:30", want: 90 * time.Second},
		{in: "02:00:00", want: 2 * time.Hour}, {in: "2-00:00:00", want: 48 * time.Hour},
		{in: "1-12", want: 36 * time.Hour}, {in: "1-00:30", want: 24*time.Hour + 30*time.Minute},
		{in: "00:30:00", want: 30 * time.Minute},
		{in: "soon", bad: true}, {in: "1:2:3:4", bad: true}, {in: "-5", bad: true}, {in: "1-", bad: true},
	}
	for _, c := range cases {
		got, err := ParseDuration(c.in)
		switch {
		case c.bad:
			if err == nil {
				t.Errorf("ParseDuration(%q) accepted", c.in)
			}
		case err != nil:
			t.Errorf("ParseDuration(%q): %v", c.in, err)
		case c.nil_ != (got == nil):
			t.Errorf("ParseDuration(%q) = %v", c.in, got)
		case got != nil && *got != c.want:
			t.Errorf("ParseDuration(%q) = %s, want %s", c.in, *got, c.want)
		}
	}
}
