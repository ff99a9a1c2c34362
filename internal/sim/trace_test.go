package sim

import (
	"errors"
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
