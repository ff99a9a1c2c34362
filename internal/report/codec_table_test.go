package report

import (
	"errors"
	"fmt"
	"testing"
	"time"
)

// TestLargeJobTable: 10,000 jobs fit a job table (agent key), but never a
// stream report, and DecodeTable refuses other kinds.
func TestLargeJobTable(t *testing.T) {
	t.Parallel()
	now := time.UnixMilli(1_800_000_000_000)
	e := NewEnvelope(KindJobs, now)
	tab := &JobTable{Cluster: "lab", TakenMS: now.UnixMilli()}
	for i := range 10000 {
		lim := int64(60)
		tab.Jobs = append(tab.Jobs, Job{JobID: uint64(i + 1), Name: fmt.Sprintf("train-%d", i), User: "alice", UID: 1001,
			Account: "research", Partition: "cpu", State: "RUNNING", Nodes: "cpu1", NodeCount: 1, CPUs: 4, TimeLimitMin: &lim,
			SubmitMS: now.UnixMilli(), StartMS: now.UnixMilli(), Comment: "isched:v1 lineage=l ideal=gpu"})
	}
	e.Jobs = tab
	b, err := Encode(e)
	if err != nil {
		t.Fatalf("10k-job table: %v", err)
	}
	if len(b) <= MaxPayload {
		t.Fatalf("table of %d bytes does not exercise the large limit", len(b))
	}
	if _, err := Decode(b); !errors.Is(err, ErrTooLarge) {
		t.Errorf("Decode of a %d-byte table: %v, want ErrTooLarge", len(b), err)
	}
	got, err := DecodeTable(b)
	if err != nil || len(got.Jobs.Jobs) != 10000 {
		t.Fatalf("DecodeTable: %v", err)
	}
	s := NewEnvelope(KindResult, now)
	s.Result = &Result{ActionID: "a", Status: StatusOK, Message: "m", DoneMS: now.UnixMilli()}
	rb, _ := Encode(s)
	if _, err := DecodeTable(rb); !errors.Is(err, ErrInvalid) {
		t.Errorf("DecodeTable of a result: %v", err)
	}
}
