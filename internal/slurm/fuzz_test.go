package slurm

import (
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"testing"

	"github.com/isched/isched/internal/report"
)

// referenceSqueue is ParseSqueue written with encoding/json (exact keys via
// a map, last duplicate wins, as the scanner does). FuzzParseSqueue checks
// that the fast scanner accepts exactly what encoding/json accepts and reads
// the same values.
func referenceSqueue(b []byte) ([]report.Job, error) {
	var top map[string]json.RawMessage
	if err := json.Unmarshal(b, &top); err != nil {
		return nil, err
	}
	if raw, ok := top["errors"]; ok {
		var errs slurmErrors
		if err := json.Unmarshal(raw, &errs); err != nil {
			return nil, err
		}
		if err := errs.err("squeue --json"); err != nil {
			return nil, err
		}
	}
	raw, ok := top["jobs"]
	if !ok {
		return nil, errors.New("no jobs")
	}
	var items []json.RawMessage
	if err := json.Unmarshal(raw, &items); err != nil {
		return nil, err
	}
	var out []report.Job
	for _, it := range items {
		var m map[string]json.RawMessage
		if err := json.Unmarshal(it, &m); err != nil || m == nil {
			return nil, fmt.Errorf("job: %v", err)
		}
		var sj squeueJob
		fields := map[string]any{
			"job_id": &sj.JobID, "array_job_id": &sj.ArrayJobID, "array_task_id": &sj.ArrayTaskID,
			"name": &sj.Name, "user_name": &sj.UserName, "user_id": &sj.UserID, "account": &sj.Account,
			"partition": &sj.Partition, "job_state": &sj.JobState, "state_reason": &sj.StateReason,
			"nodes": &sj.Nodes, "node_count": &sj.NodeCount, "cpus": &sj.CPUs, "tres_per_node": &sj.TresPerNode,
			"tres_per_job": &sj.TresPerJob, "time_limit": &sj.TimeLimit, "submit_time": &sj.SubmitTime,
			"start_time": &sj.StartTime, "end_time": &sj.EndTime, "restart_cnt": &sj.RestartCount,
			"requeue": &sj.Requeue, "comment": &sj.Comment, "gres_detail": &sj.GresDetail,
			"memory_per_node": &sj.MemPerNode, "memory_per_cpu": &sj.MemPerCPU, "priority": &sj.Priority, "nice": &sj.Nice,
		}
		for k, dst := range fields {
			if v, ok := m[k]; ok {
				if err := json.Unmarshal(v, dst); err != nil {
					return nil, fmt.Errorf("%s: %w", k, err)
				}
			}
		}
		j, err := sj.job()
		if err != nil {
			return nil, err
		}
		out = append(out, j)
	}
	return out, nil
}

func FuzzParseSqueue(f *testing.F) {
	// Two real 22.05 jobs (a large seed makes the fuzzer spend its time
	// minimizing); the 10k-job scale is the benchmark's business.
	f.Add(scaledSqueue(f, 2))
	f.Add([]byte(`{"jobs": [{"job_id": 1, "user_id": 0, "job_state": ["RUNNING"], "time_limit": {"set": true, "infinite": false, "number": 5}}]}`))
	f.Add([]byte(`{"jobs": [{"job_id": 1, "user_id": 0, "job_state": "PENDING", "name": "a\u00e9\"\\", "comment": null, "requeue": null, "gres_detail": null}]}`))
	f.Add([]byte(`{"jobs": [{"job_id": 1e2, "user_id": -0, "job_state": "R", "cpus": 4294967295, "start_time": 18446744073709551615}], "errors": []}`))
	f.Add([]byte(`{"jobs": [{"job_id": 1, "job_id": 2, "user_id": 0, "job_state": "R", "\u006eame": "x"}]}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		got, err := ParseSqueue(b)
		want, werr := referenceSqueue(b)
		if (err == nil) != (werr == nil) {
			t.Fatalf("scanner error %v, encoding/json error %v, input %q", err, werr, b)
		}
		if err == nil && !reflect.DeepEqual(got, want) {
			t.Fatalf("scanner %+v\nencoding/json %+v\ninput %q", got, want, b)
		}
	})
}

// FuzzParseText: the line-oriented parsers never panic and either fail or
// return records with the fields they promise.
func FuzzParseText(f *testing.F) {
	f.Add(readFile(f, "show_job_all.txt")[:2000], readFile(f, "partitions.txt")[:800], readFile(f, "start.txt"))
	f.Add([]byte("JobId=5 JobName=a b UserId=(null)(7) JobState=PENDING TimeLimit=UNLIMITED StartTime=Unknown"), []byte("PartitionName=p State=UP MaxTime=1-02:03:04 MaxNodes=3"), []byte("5_[1-3%1] N/A\n"))
	f.Fuzz(func(t *testing.T, job, part, start []byte) {
		if jobs, err := ParseShowJob(job); err == nil {
			for _, j := range jobs {
				if !isDigits(j.JobID) || j.State == "" {
					t.Fatalf("accepted %+v", j)
				}
			}
		}
		if parts, err := ParsePartitions(part); err == nil {
			for _, p := range parts {
				if p.Name == "" || p.State == "" {
					t.Fatalf("accepted %+v", p)
				}
			}
		}
		if starts, err := ParseStart(start); err == nil {
			for id := range starts {
				if !ValidJobID(id) {
					t.Fatalf("accepted id %q", id)
				}
			}
		}
		_, _ = ParseSinfo(job)
		_, _ = GPUs(string(part))
		_, _ = ParseDuration(string(start))
	})
}
