package bench

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/isched/isched/internal/report"
)

// FakeSlurm is the data directory of scripts/bench/fakeslurm, the stand-in
// for squeue, sinfo and scontrol that a real isched-agent runs in the
// benchmark. sinfo and scontrol answer with output captured on the dev
// cluster (internal/slurm/testdata/22.05); squeue answers with one real
// captured job record (all ~110 members, ~2.7 KB: what slurmctld's JSON
// costs the agent to parse) per simulated job, rewritten by SetJobs.
type FakeSlurm struct {
	Dir      string
	template map[string]json.RawMessage
	meta     json.RawMessage
}

// NewFakeSlurm fills dir from the captured 22.05 output in testdata and
// starts with an empty queue.
func NewFakeSlurm(dir, testdata string) (*FakeSlurm, error) {
	for _, f := range []string{"sinfo.json", "partitions.txt", "start.txt"} {
		b, err := os.ReadFile(filepath.Join(testdata, f))
		if err != nil {
			return nil, fmt.Errorf("bench: fake slurm: %w", err)
		}
		if err := os.WriteFile(filepath.Join(dir, f), b, 0o644); err != nil {
			return nil, err
		}
	}
	raw, err := os.ReadFile(filepath.Join(testdata, "squeue.json"))
	if err != nil {
		return nil, fmt.Errorf("bench: fake slurm: %w", err)
	}
	var doc struct {
		Meta json.RawMessage              `json:"meta"`
		Jobs []map[string]json.RawMessage `json:"jobs"`
	}
	if err := json.Unmarshal(raw, &doc); err != nil {
		return nil, fmt.Errorf("bench: fake slurm: squeue.json: %w", err)
	}
	f := &FakeSlurm{Dir: dir, meta: doc.Meta}
	for _, j := range doc.Jobs {
		// a RUNNING job with a GPU: the record the benchmark's jobs look like
		if string(j["job_state"]) == `"RUNNING"` && string(j["tres_per_node"]) == `"gres:gpu:1"` {
			f.template = j
			break
		}
	}
	if f.template == nil {
		return nil, errors.New("bench: fake slurm: no running GPU job in squeue.json to use as a template")
	}
	return f, f.SetJobs(nil)
}

// SetJobs makes squeue list rows (written to a temporary file and renamed,
// so a concurrent squeue reads the old or the new queue, never half).
func (f *FakeSlurm) SetJobs(rows []report.Job) error {
	var buf bytes.Buffer
	buf.WriteString(`{"meta":`)
	buf.Write(f.meta)
	buf.WriteString(`,"errors":[],"jobs":[`)
	job := make(map[string]json.RawMessage, len(f.template))
	for k, v := range f.template {
		job[k] = v
	}
	for i, r := range rows {
		set := func(k string, v any) {
			b, _ := json.Marshal(v)
			job[k] = b
		}
		set("job_id", r.JobID)
		set("array_job_id", 0)
		set("name", r.Name)
		set("user_name", r.User)
		set("user_id", r.UID)
		set("group_id", r.UID)
		set("account", r.Account)
		set("partition", r.Partition)
		set("job_state", r.State)
		set("state_reason", r.Reason)
		set("nodes", r.Nodes)
		set("batch_host", r.Nodes)
		set("node_count", r.NodeCount)
		set("cpus", r.CPUs)
		set("comment", r.Comment)
		set("restart_cnt", 0)
		gres, detail := "", []string{}
		if n, ok := strings.CutPrefix(r.Gres, "gpu:"); ok {
			idx := "0"
			if k := atoi(n); k > 1 {
				idx = "0-" + strconv.Itoa(k-1)
			}
			gres, detail = "gres:gpu:"+n, []string{"gpu:" + n + "(IDX:" + idx + ")"}
		}
		set("tres_per_node", gres)
		set("gres_detail", detail)
		if r.TimeLimitMin != nil {
			set("time_limit", *r.TimeLimitMin)
		}
		set("submit_time", r.SubmitMS/1000)
		set("eligible_time", r.SubmitMS/1000)
		set("start_time", r.StartMS/1000)
		if r.TimeLimitMin != nil {
			set("end_time", r.StartMS/1000+60**r.TimeLimitMin)
		}
		b, err := json.Marshal(job)
		if err != nil {
			return err
		}
		if i > 0 {
			buf.WriteByte(',')
		}
		buf.Write(b)
	}
	buf.WriteString("]}\n")
	tmp := filepath.Join(f.Dir, ".squeue.json.tmp")
	if err := os.WriteFile(tmp, buf.Bytes(), 0o644); err != nil {
		return err
	}
	return os.Rename(tmp, filepath.Join(f.Dir, "squeue.json"))
}

func atoi(s string) int { n, _ := strconv.Atoi(s); return n }

// Calls counts the Slurm commands run so far, by command name and first
// distinguishing argument ("squeue --json", "squeue --start", ...).
func (f *FakeSlurm) Calls() (map[string]int64, error) {
	out := map[string]int64{}
	fh, err := os.Open(filepath.Join(f.Dir, "calls.log"))
	if errors.Is(err, os.ErrNotExist) {
		return out, nil
	}
	if err != nil {
		return nil, err
	}
	defer fh.Close()
	sc := bufio.NewScanner(fh)
	for sc.Scan() {
		out[callKind(sc.Text())]++
	}
	return out, sc.Err()
}

func callKind(line string) string {
	f := strings.Fields(line)
	if len(f) == 0 {
		return "?"
	}
	for _, a := range f[1:] {
		switch a {
		case "--json", "--start", "partition", "job", "config", "node":
			return f[0] + " " + a
		}
	}
	return f[0]
}
