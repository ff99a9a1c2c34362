package slurm

import (
	"bytes"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/isched/isched/internal/report"
)

// StartFormat is the squeue format StartEstimates asks for and ParseStart
// reads: job id and expected start, no header.
var startArgs = []string{"--start", "--noheader", "--format=%i %S"}

// ParseStart parses `squeue --start --noheader --format='%i %S'` output:
// the scheduler's expected start of each pending job, in UTC (ExecRunner
// sets TZ=UTC). Jobs without an estimate ("N/A") are left out. Keys are job
// ids as StartKey spells them: "123", "123_4" for an array task, and "123"
// for the pending rest of array 123 (printed "123_[5-9%2]").
func ParseStart(b []byte) (map[string]time.Time, error) {
	out := map[string]time.Time{}
	for n, line := range bytes.Split(b, []byte("\n")) {
		f := strings.Fields(string(line))
		if len(f) == 0 {
			continue
		}
		if len(f) != 2 {
			return nil, fmt.Errorf("squeue --start: line %d: want \"JOBID START\", got %q", n+1, line)
		}
		id := f[0]
		if i := strings.Index(id, "_["); i > 0 {
			id = id[:i]
		}
		if !ValidJobID(id) {
			return nil, fmt.Errorf("squeue --start: line %d: job id %q: want digits with an optional _N", n+1, f[0])
		}
		t, err := parseTimestamp(f[1])
		if err != nil {
			return nil, fmt.Errorf("squeue --start: line %d (job %s): start time: %w", n+1, id, err)
		}
		if t.IsZero() {
			continue
		}
		out[id] = t
	}
	return out, nil
}

// StartKey is a job row's key in ParseStart's map.
func StartKey(j *report.Job) string {
	if j.ArrayTaskID != nil && j.ArrayJobID != 0 {
		return strconv.FormatUint(j.ArrayJobID, 10) + "_" + strconv.Itoa(*j.ArrayTaskID)
	}
	return strconv.FormatUint(j.JobID, 10)
}

// BuildJobTable stamps a job table at now: the elapsed time of running jobs
// (now - start) and, for pending jobs, the `squeue --start` estimate when
// there is one (starts may be nil). It does not modify jobs.
func BuildJobTable(cluster string, jobs []report.Job, starts map[string]time.Time, now time.Time) report.JobTable {
	out := make([]report.Job, len(jobs))
	copy(out, jobs)
	nowMS := now.UnixMilli()
	for i := range out {
		j := &out[i]
		switch {
		case j.State == StatePending:
			if t, ok := starts[StartKey(j)]; ok {
				j.ExpectedStartMS = t.UnixMilli()
			}
		case j.EndMS == 0 && j.StartMS > 0 && nowMS > j.StartMS:
			j.ElapsedS = (nowMS - j.StartMS) / 1000
		}
	}
	return report.JobTable{Cluster: cluster, TakenMS: nowMS, Jobs: out}
}
