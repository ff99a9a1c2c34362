package sim

import (
	"errors"
	"math"
	"os"
	"strings"
	"testing"
)

func open(t *testing.T, path string) *os.File {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	return f
}

func TestReadOpenB(t *testing.T) {
	t.Parallel()
	jobs, err := ReadOpenB("openb", open(t, "testdata/openb_pod_excerpt.csv"))
	if err != nil {
		t.Fatal(err)
	}
	// the two Pending tasks were never scheduled: left out
	if len(jobs) != 5 {
		t.Fatalf("%d jobs, want 5", len(jobs))
	}
	first := jobs[0]
	if first.Submit != 0 || first.Run != 12537496 || first.GPUs != 1 || first.CPUs != 12 || first.MemMiB != 16384 || !first.Censored {
		t.Errorf("first job %+v", first)
	}
	var big Job
	for _, j := range jobs {
		if j.GPUs == 8 {
			big = j
		}
	}
	if big.CPUs != 88 || big.Run != 10769854-9437497 || big.Censored {
		t.Errorf("8-GPU job %+v", big)
	}
}

func TestReadRuntimes(t *testing.T) {
	t.Parallel()
	rt, err := ReadRuntimes("philly", open(t, "testdata/philly_runtime_excerpt.csv"))
	if err != nil {
		t.Fatal(err)
	}
	if want := []float64{0, 1060, 4628239}; len(rt) != 3 || rt[0] != want[0] || rt[1] != want[1] || rt[2] != want[2] {
		t.Errorf("run times %v, want %v", rt, want)
	}
}

func TestReadSWF(t *testing.T) {
	t.Parallel()
	jobs, err := ReadSWF("sample.swf", open(t, "testdata/sample.swf"), 32)
	if err != nil {
		t.Fatal(err)
	}
	// job 3 ran 0 s: left out; job 4 has no allocated processors but asked 40
	if len(jobs) != 3 {
		t.Fatalf("%d jobs, want 3: %+v", len(jobs), jobs)
	}
	want := []Job{
		{ID: 1, User: "u3", Submit: 0, Nodes: 1, CPUs: 16, Run: 3600, Limit: 7200},
		{ID: 2, User: "u4", Submit: 60, Nodes: 2, CPUs: 32, Run: 120, Limit: 600},
		{ID: 4, User: "u5", Submit: 90, Nodes: 2, CPUs: 32, Run: 1800, MemMiB: 2},
	}
	for i := range want {
		if jobs[i] != want[i] {
			t.Errorf("job %d: %+v, want %+v", i, jobs[i], want[i])
		}
	}
}

func TestReadSacct(t *testing.T) {
	t.Parallel()
	jobs, err := ReadSacct("sacct.txt", open(t, "testdata/sacct.txt"))
	if err != nil {
		t.Fatal(err)
	}
	if len(jobs) != 2 {
		t.Fatalf("%d jobs, want 2 (no step, no job that never started): %+v", len(jobs), jobs)
	}
	bob, alice := jobs[0], jobs[1]
	if bob.User != "bob" || bob.Nodes != 2 || bob.CPUs != 4 || bob.Run != 1800 || bob.Limit != 86400 || bob.Submit != 0 {
		t.Errorf("bob's job %+v", bob)
	}
	if alice.GPUs != 1 || alice.Partition != "gpu" || alice.Submit != 3600 || alice.Run != 3600 || alice.Limit != 7200 {
		t.Errorf("alice's job %+v", alice)
	}
}

func TestParseErrors(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name, in  string
		read      func(string) error
		line      int
		field     string
		errSyntax bool
	}{
		{"swf field", "1 0 10 x 16 -1 -1 16 7200 -1 1 3 1 -1 1 -1 -1 -1\n", swf, 1, "run", true},
		{"swf count", "; c\n1 0 10\n", swf, 2, "count", false},
		{"openb header", "name,cpu\n", openb, 1, "header", false},
		{"openb field", strings.Join(openbFields, ",") + "\np,1000,10,one,0,,BE,Running,0,10,0\n", openb, 2, "num_gpu", true},
		{"runtime", "runtime\n12\n-3\n", runtimes, 3, "runtime", true},
		{"sacct header", "JobID|User\n", sacct, 1, "Partition", false},
		{"philly header", "timestamp,duration,num_gpus\n", phillyRead, 1, "header", false},
		{"philly count", PhillyHeader + "\n2017-09-04 10:30:41,2240194.0,8,17921552.0\n", phillyRead, 2, "count", false},
		{"philly time", PhillyHeader + "\n2017-09-04 10:30:41,1,1,1,a\n2017-09-31 10:30:41,1,1,1,a\n", phillyRead, 3, "timestamp", true},
		{"philly duration", PhillyHeader + "\n2017-09-04 10:30:41,0,1,0,a\n", phillyRead, 2, "duration", true},
		{"philly gpus", PhillyHeader + "\n2017-09-04 10:30:41,10,1.5,15,a\n", phillyRead, 2, "num_gpus", true},
		{"philly gpu_time", PhillyHeader + "\n2017-09-04 10:30:41,10,1,NaN,a\n", phillyRead, 2, "gpu_time", true},
		{"philly cluster", PhillyHeader + "\n2017-09-04 10:30:41,10,1,10,\n", phillyRead, 2, "cluster", true},
		{"sacct time", "JobID|User|Partition|Submit|Start|End|NNodes|NCPUS\n1|a|gpu|yesterday|2026-01-05T10:00:00|2026-01-05T10:00:00|1|1\n", sacct, 2, "Submit", true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			err := tc.read(tc.in)
			var pe *ParseError
			if !errors.As(err, &pe) {
				t.Fatalf("error %v, want a ParseError", err)
			}
			if pe.File != "in" || pe.Line != tc.line || pe.Field != tc.field || errors.Is(err, errSyntax) != tc.errSyntax {
				t.Errorf("error %q: file %s line %d field %s, want in:%d %s (syntax %v)", err, pe.File, pe.Line, pe.Field, tc.line, tc.field, tc.errSyntax)
			}
		})
	}
}

func phillyRead(s string) error {
	_, err := ReadPhilly("in", strings.NewReader(s))
	return err
}

func swf(s string) error {
	_, err := ReadSWF("in", strings.NewReader(s), 32)
	return err
}

func openb(s string) error {
	_, err := ReadOpenB("in", strings.NewReader(s))
	return err
}

func runtimes(s string) error {
	_, err := ReadRuntimes("in", strings.NewReader(s))
	return err
}

func sacct(s string) error {
	_, err := ReadSacct("in", strings.NewReader(s))
	return err
}

func TestParseSlurmDuration(t *testing.T) {
	t.Parallel()
	for in, want := range map[string]float64{"30": 1800, "1:30": 90, "02:00:00": 7200, "1-00:00:00": 86400, "2-12": 216000, "1-01:30": 91800} {
		if got, err := parseSlurmDuration(in); err != nil || got != want {
			t.Errorf("parseSlurmDuration(%q) = %g, %v; want %g", in, got, err, want)
		}
	}
	if _, err := parseSlurmDuration("1:2:3:4"); err == nil {
		t.Error("1:2:3:4 parsed")
	}
}

// TestReadPhilly: real lines of the Philly trace (Pollux's preparation):
// arrivals from the first, 8 GPUs as one node, 16 as two whole nodes,
// the virtual cluster as account and user.
func TestReadPhilly(t *testing.T) {
	t.Parallel()
	jobs, err := ReadPhilly("philly_excerpt.csv", open(t, "testdata/philly_excerpt.csv"))
	if err != nil {
		t.Fatal(err)
	}
	if len(jobs) != 24 {
		t.Fatalf("%d jobs, want 24", len(jobs))
	}
	tests := []struct {
		k                 int
		submit, run       float64
		nodes, gpus, cpus int
		account           string
	}{
		{0, 0, 2240194, 1, 8, 32, "vc-7f04ca"},
		// 2017-09-07 03:58:57 is 2 days 17:28:16 after 09-04 10:30:41
		{1, 2*86400 + 17*3600 + 28*60 + 16, 3256045, 1, 1, 4, "vc-6214e9"},
		{12, 0, 657879, 2, 8, 32, "vc-b436b2"},
		{18, 0, 19, 1, 2, 8, "vc-11cb48"},
	}
	for _, tc := range tests {
		j := jobs[tc.k]
		if tc.submit != 0 && j.Submit != tc.submit {
			t.Errorf("job %d submits at %g, want %g", tc.k, j.Submit, tc.submit)
		}
		if j.Run != tc.run || j.Nodes != tc.nodes || j.GPUs != tc.gpus || j.CPUs != tc.cpus || j.Account != tc.account || j.User != tc.account {
			t.Errorf("job %d: %+v, want run %g, %d node(s) of %d GPUs and %d CPUs, account %s", tc.k, j, tc.run, tc.nodes, tc.gpus, tc.cpus, tc.account)
		}
	}
	if jobs[0].ID != 2 {
		t.Errorf("first job's ID %d, want its line, 2", jobs[0].ID)
	}
}

// TestAccountQuotas: a virtual cluster's limit is its share of the
// GPU-time x the GPUs x the over-subscription, rounded up, and never below
// its largest job; the shares are the GPU-time shares.
func TestAccountQuotas(t *testing.T) {
	t.Parallel()
	jobs := []Job{
		{Account: "a", Nodes: 1, GPUs: 1, Run: 600},
		{Account: "a", Nodes: 1, GPUs: 2, Run: 100},  // a: 800 GPU-s of 1000
		{Account: "b", Nodes: 2, GPUs: 8, Run: 12.5}, // b: 200 GPU-s, 16 GPUs at once
	}
	q, sh := AccountQuotas(jobs, 10, 1.5)
	if q["a"] != 12 || q["b"] != 16 { // ceil(0.8*10*1.5) = 12; ceil(0.2*15) = 3 < 16
		t.Errorf("quotas %v, want a 12, b 16", q)
	}
	if math.Abs(sh["a"]-0.8) > 1e-12 || math.Abs(sh["b"]-0.2) > 1e-12 {
		t.Errorf("shares %v, want a 0.8, b 0.2", sh)
	}
	if q, _ := AccountQuotas(jobs, 10, 0); q != nil {
		t.Errorf("no over-subscription gave quotas %v, want none", q)
	}
}

func TestBusiestWindow(t *testing.T) {
	t.Parallel()
	const day = 86400.0
	jobs := []Job{{Submit: 0, Nodes: 1, GPUs: 1, Run: 10}, {Submit: 3 * day, Nodes: 1, GPUs: 1, Run: 100},
		{Submit: 3.5 * day, Nodes: 1, GPUs: 8, Run: 100}, {Submit: 9 * day, Nodes: 1, GPUs: 1, Run: 10}}
	if from := BusiestWindow(jobs, 2*day); from != 2*day {
		t.Errorf("busiest 2 days start at day %g, want 2 (the first window holding both busy jobs)", from/day)
	}
	w := TimeWindow(jobs, 2*day, 4*day)
	if len(w) != 2 || w[0].Submit != 0 || w[1].Submit != 0.5*day {
		t.Errorf("window: %+v", w)
	}
	if s := ScaleArrivals(jobs, 2); s[3].Submit != 4.5*day || jobs[3].Submit != 9*day {
		t.Errorf("arrivals x2: %g (the trace's own left alone: %g)", s[3].Submit, jobs[3].Submit)
	}
}
