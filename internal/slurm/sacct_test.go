package slurm

import (
	"errors"
	"os"
	"reflect"
	"strings"
	"testing"
	"time"
)

// TestParseAcctJob: sacct rows as AcctJob asks for them (fields separated
// by \x1f, so '|' in a comment is text).
func TestParseAcctJob(t *testing.T) {
	const sep = "\x1f"
	row := func(f ...string) string { return strings.Join(f, sep) }
	out := row("41", "bob", "1002", "CANCELLED by 0", "cpu", "12", "0:15", "", "") + "\n" +
		row("42", "alice", "1001", "COMPLETED", "gpu", "95", "0:0", "isched1 lineage=l|x", "isched: ask --mem=1G next time") + "\n"
	got, err := ParseAcctJob([]byte(out), "42")
	want := &AcctJob{JobID: "42", User: "alice", UID: 1001, State: "COMPLETED", Partition: "gpu", Elapsed: 95 * time.Second,
		ExitCode: "0:0", Comment: "isched1 lineage=l|x", AdminComment: "isched: ask --mem=1G next time"}
	if err != nil || !reflect.DeepEqual(got, want) {
		t.Errorf("job 42: %+v, %v\nwant %+v", got, err, want)
	}
	if got, err := ParseAcctJob([]byte(out), "41"); err != nil || got.State != "CANCELLED" {
		t.Errorf("job 41: %+v, %v; want state CANCELLED (sacct's 'by 0' dropped)", got, err)
	}
	if _, err := ParseAcctJob([]byte(out), "43"); !errors.Is(err, ErrNotFound) {
		t.Errorf("job 43: %v, want ErrNotFound", err)
	}
	for in, want := range map[string]string{
		row("42", "alice", "1001", "COMPLETED") + "\n":                          "sacct line 1: 4 fields, want 9",
		row("42", "alice", "x", "COMPLETED", "cpu", "1", "0:0", "", "") + "\n":  `UID "x"`,
		row("42", "alice", "1", "COMPLETED", "cpu", "-1", "0:0", "", "") + "\n": `ElapsedRaw "-1"`,
	} {
		if _, err := ParseAcctJob([]byte(in), "42"); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%q: %v, want %q", in, err, want)
		}
	}
}

// TestParseAcctJobCaptured: testdata/22.05/sacct.txt is AcctJob's command
// on the dev cluster's slurmdbd (job 766, bob's, no comment; job 770,
// alice's, with a comment holding '|' and the AdminComment set by scontrol
// while it ran).
func TestParseAcctJobCaptured(t *testing.T) {
	b, err := os.ReadFile("testdata/22.05/sacct.txt")
	if err != nil {
		t.Fatal(err)
	}
	got, err := ParseAcctJob(b, "770")
	want := &AcctJob{JobID: "770", User: "alice", UID: 1001, State: "COMPLETED", Partition: "cpu", Elapsed: 3 * time.Second,
		ExitCode: "0:0", Comment: "isched:v1 lineage=lab-u1001-demo|x", AdminComment: "isched: memory 643 MiB of 1.0 GiB asked; ask --mem=1G next time"}
	if err != nil || !reflect.DeepEqual(got, want) {
		t.Errorf("job 770: %+v, %v\nwant %+v", got, err, want)
	}
	if got, err := ParseAcctJob(b, "766"); err != nil || got.User != "bob" || got.UID != 1002 || got.Comment != "" || got.AdminComment != "" {
		t.Errorf("job 766: %+v, %v", got, err)
	}
}
