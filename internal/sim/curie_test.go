package sim

import (
	"errors"
	"math"
	"strings"
	"testing"
)

func curieCores(p string) int {
	return map[string]int{"standard": 16, "large": 32, "hybrid": 8}[p]
}

// TestReadCurie: real lines of the Curie log: SWF's whole nodes per
// partition, the requested time as the limit, the recorded wait kept
// apart; a partition the site does not model is left out.
func TestReadCurie(t *testing.T) {
	t.Parallel()
	jobs, rec, err := ReadCurie("curie_excerpt.csv", open(t, "testdata/curie_excerpt.csv"), curieCores)
	if err != nil {
		t.Fatal(err)
	}
	if len(jobs) != 7 || len(rec) != 7 {
		t.Fatalf("%d jobs, %d recorded, want 7 (BCS left out)", len(jobs), len(rec))
	}
	j := jobs[4] // 677919: 128 procs on standard, asked 2040 s, waited 9 s
	if j.ID != 677919 || j.Nodes != 8 || j.CPUs != 16 || j.Limit != 2040 || j.Run != 865 || j.Partition != "standard" || j.Submit != 159 {
		t.Errorf("job %+v", j)
	}
	if rec[4].Wait != 9 || rec[4].JCT != 874 || rec[4].ID != 677919 {
		t.Errorf("recorded %+v, want wait 9, JCT 874", rec[4])
	}
	if h := jobs[5]; h.Partition != "hybrid" || h.Nodes != 1 || h.CPUs != 8 {
		t.Errorf("hybrid job %+v", h)
	}
	_, _, err = ReadCurie("in", strings.NewReader(strings.Join(curieNeed, ",")+"\n1,2,x,4,5,6,7,8,9,standard\n"), curieCores)
	var pe *ParseError
	if !errors.As(err, &pe) || pe.Line != 2 || pe.Field != "wait_s" || pe.File != "in" {
		t.Errorf("error %v, want in:2 field wait_s", err)
	}
	if _, _, err = ReadCurie("in", strings.NewReader("job_id,wait_s\n"), curieCores); !errors.As(err, &pe) || pe.Field != "submit_epoch" {
		t.Errorf("error %v, want the missing submit_epoch named", err)
	}
}

func TestSpearman(t *testing.T) {
	t.Parallel()
	tests := []struct {
		a, b []float64
		want float64
	}{
		{[]float64{1, 2, 3}, []float64{10, 20, 30}, 1},
		{[]float64{1, 2, 3}, []float64{3, 2, 1}, -1},
		{[]float64{0, 0, 5, 9}, []float64{1, 1, 2, 3}, 1}, // ties share their rank
		{[]float64{1, 2, 3, 4}, []float64{1, 3, 2, 4}, 0.8},
		{[]float64{1, 1}, []float64{1, 2}, 0}, // no variation
	}
	for _, tc := range tests {
		if got := spearman(tc.a, tc.b); math.Abs(got-tc.want) > 1e-12 {
			t.Errorf("spearman(%v, %v) = %g, want %g", tc.a, tc.b, got, tc.want)
		}
	}
}

// TestWaitFidelity pairs the jobs by ID and compares their waits.
func TestWaitFidelity(t *testing.T) {
	t.Parallel()
	// waits 0+100+300 over completion 100+200+400: 4/7
	rec := []Observed{{ID: 1, Wait: 0, JCT: 100}, {ID: 2, Wait: 100, JCT: 200}, {ID: 3, Wait: 300, JCT: 400}, {ID: 9, Wait: 5, JCT: 5}}
	r := &Result{Jobs: []JobResult{{ID: 1, Wait: 10, JCT: 110}, {ID: 2, Wait: 50, JCT: 150}, {ID: 3, Wait: 600, JCT: 700}}}
	f := WaitFidelity(rec, r)
	if f.Jobs != 3 || math.Abs(f.MeanRecorded-400.0/3) > 1e-9 || math.Abs(f.MeanReplayed-220) > 1e-9 || f.Spearman != 1 ||
		f.MedianRecorded != 100 || f.MedianReplayed != 50 || math.Abs(f.ShareRecorded-4.0/7) > 1e-9 {
		t.Errorf("fidelity %+v", f)
	}
}
