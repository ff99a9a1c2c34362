package slurm

import "testing"

// TestSqueueNice: 22.05's squeue --json prints a job's nice as an
// unsigned 32-bit number (captured on the lab after `scontrol update
// jobid=N nice=-50`: "nice": 4294967246, "priority": 4294900850) and
// null when none was set.
func TestSqueueNice(t *testing.T) {
	for _, tc := range []struct {
		in   string
		nice int64
	}{{`4294967246`, -50}, {`null`, 0}, {`50`, 50}, {`2147483645`, 2147483645}, {`2147483651`, -2147483645}} {
		b := []byte(`{"jobs": [{"job_id": 1, "user_id": 0, "job_state": "PENDING", "priority": 4294900850, "nice": ` + tc.in + `}]}`)
		jobs, err := ParseSqueue(b)
		if err != nil || len(jobs) != 1 {
			t.Fatalf("nice %s: %v %v", tc.in, jobs, err)
		}
		if jobs[0].Nice != tc.nice || jobs[0].Priority != 4294900850 {
			t.Errorf("nice %s: nice %d priority %d, want %d and 4294900850", tc.in, jobs[0].Nice, jobs[0].Priority, tc.nice)
		}
	}
}
