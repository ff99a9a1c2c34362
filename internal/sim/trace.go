package sim

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"math"
	"slices"
	"strconv"
	"strings"
	"time"
)

// ParseError is a trace line that could not be read: the file, the line
// (1-based) and the field.
type ParseError struct {
	File  string
	Line  int
	Field string
	Err   error
}

func (e *ParseError) Error() string {
	return fmt.Sprintf("%s:%d: field %s: %v", e.File, e.Line, e.Field, e.Err)
}

func (e *ParseError) Unwrap() error { return e.Err }

// errSyntax is the cause of a field that is not what its column holds.
var errSyntax = errors.New("not a valid value")

// lines calls fn with every line of r and its number, stopping at the
// first error.
func lines(r io.Reader, fn func(n int, line string) error) error {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64*1024), 1<<20)
	n := 0
	for sc.Scan() {
		n++
		if err := fn(n, sc.Text()); err != nil {
			return err
		}
	}
	return sc.Err()
}

// SWF fields (1-based in the format's documentation, 0-based here).
var swfFields = []string{"job", "submit", "wait", "run", "procs", "cpu_used", "mem_used", "req_procs",
	"req_time", "req_mem", "status", "user", "group", "exe", "queue", "partition", "preceding", "think"}

// ReadSWF reads a Standard Workload Format trace (the Parallel Workloads
// Archive's): ';' comments, 18 whitespace-separated fields, -1 for
// unknown. A job of P processors takes ceil(P / cores) whole nodes of
// cores CPUs (SWF says nothing of nodes); jobs with no run time or no
// processors are left out, as the archive's cleaned logs advise.
func ReadSWF(name string, r io.Reader, cores int) ([]Job, error) {
	if cores <= 0 {
		return nil, fmt.Errorf("sim: SWF %s: cores per node must be positive", name)
	}
	var jobs []Job
	err := lines(r, func(n int, line string) error {
		line = strings.TrimSpace(line)
		if line == "" || strings.HasPrefix(line, ";") {
			return nil
		}
		f := strings.Fields(line)
		if len(f) != len(swfFields) {
			return &ParseError{name, n, "count", fmt.Errorf("%d fields, want %d", len(f), len(swfFields))}
		}
		v := make([]float64, len(f))
		for k, s := range f {
			x, err := strconv.ParseFloat(s, 64)
			if err != nil || math.IsNaN(x) || math.IsInf(x, 0) {
				return &ParseError{name, n, swfFields[k], fmt.Errorf("%q: %w", s, errSyntax)}
			}
			v[k] = x
		}
		j, ok := swfJob(swfRecord{id: v[0], submit: v[1], run: v[3], procs: v[4], reqProcs: v[7], reqTime: v[8], reqMem: v[9], user: v[11]}, cores)
		if !ok {
			return nil
		}
		jobs = append(jobs, j)
		return nil
	})
	if err != nil {
		return nil, err
	}
	return sortJobs(jobs), nil
}

// swfRecord is what a job of an SWF log says (-1: unknown).
type swfRecord struct {
	id, submit, run, procs, reqProcs, reqTime, reqMem, user float64
}

// swfJob is an SWF job on nodes of cores CPUs: ceil(P / cores) whole
// nodes for P processors; false for a job with no run time or no
// processors, which the archive's cleaned logs advise leaving out.
func swfJob(r swfRecord, cores int) (Job, bool) {
	procs := r.procs
	if procs <= 0 {
		procs = r.reqProcs
	}
	if r.run <= 0 || procs <= 0 || r.submit < 0 {
		return Job{}, false
	}
	nodes := int(math.Ceil(procs / float64(cores)))
	j := Job{ID: int(r.id), User: "u" + strconv.Itoa(int(r.user)), Submit: r.submit, Nodes: nodes,
		CPUs: min(int(procs), cores), Run: r.run}
	if r.reqTime > 0 {
		j.Limit = max(r.reqTime, r.run)
	}
	if r.reqMem > 0 {
		j.MemMiB = int64(r.reqMem) >> 10 // KB per processor in SWF
	}
	return j, true
}

// sortJobs orders jobs by submission and moves the first to second 0.
func sortJobs(jobs []Job) []Job {
	slices.SortStableFunc(jobs, func(a, b Job) int {
		switch {
		case a.Submit < b.Submit:
			return -1
		case a.Submit > b.Submit:
			return 1
		}
		return a.ID - b.ID
	})
	if len(jobs) > 0 {
		t0 := jobs[0].Submit
		for i := range jobs {
			jobs[i].Submit -= t0
		}
	}
	return jobs
}

// sacctNeed are the columns ReadSacct needs.
var sacctNeed = []string{"JobID", "User", "Partition", "Submit", "Start", "End", "NNodes", "NCPUS"}

// ReadSacct reads `sacct --parsable2 --allocations` output with a header
// (--format=JobID,User,Partition,Submit,Start,End,NNodes,NCPUS and
// optionally Timelimit, AllocTRES or ReqTRES, State). Steps (ids with a
// dot) and jobs that never started are left out; times are local,
// 2006-01-02T15:04:05.
func ReadSacct(name string, r io.Reader) ([]Job, error) {
	var jobs []Job
	var col map[string]int
	err := lines(r, func(n int, line string) error {
		if strings.TrimSpace(line) == "" {
			return nil
		}
		f := strings.Split(line, "|")
		if col == nil {
			var err error
			col, err = header(name, n, f, sacctNeed)
			return err
		}
		if len(f) != len(col) {
			return &ParseError{name, n, "count", fmt.Errorf("%d fields, the header has %d", len(f), len(col))}
		}
		j, ok, err := sacctJob(f, col)
		if err != nil {
			var pe *ParseError
			if errors.As(err, &pe) {
				pe.File, pe.Line = name, n
			}
			return err
		}
		if ok {
			jobs = append(jobs, j)
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return sortJobs(jobs), nil
}

func sacctJob(f []string, col map[string]int) (Job, bool, error) {
	get := func(h string) string {
		if k, ok := col[h]; ok {
			return f[k]
		}
		return ""
	}
	if strings.Contains(get("JobID"), ".") || get("Start") == "Unknown" || get("Start") == "None" {
		return Job{}, false, nil
	}
	var ts [3]float64
	for k, h := range []string{"Submit", "Start", "End"} {
		t, err := time.ParseInLocation("2006-01-02T15:04:05", get(h), time.UTC)
		if err != nil {
			return Job{}, false, &ParseError{Field: h, Err: fmt.Errorf("%q: %w", get(h), errSyntax)}
		}
		ts[k] = float64(t.Unix())
	}
	nodes, err1 := strconv.Atoi(get("NNodes"))
	cpus, err2 := strconv.Atoi(get("NCPUS"))
	if err1 != nil || nodes <= 0 {
		return Job{}, false, &ParseError{Field: "NNodes", Err: fmt.Errorf("%q: %w", get("NNodes"), errSyntax)}
	}
	if err2 != nil || cpus <= 0 {
		return Job{}, false, &ParseError{Field: "NCPUS", Err: fmt.Errorf("%q: %w", get("NCPUS"), errSyntax)}
	}
	id, _ := strconv.Atoi(strings.SplitN(get("JobID"), "_", 2)[0])
	j := Job{ID: id, User: get("User"), Partition: strings.Split(get("Partition"), ",")[0], Submit: ts[0],
		Nodes: nodes, CPUs: max(1, cpus/nodes), Run: max(ts[2]-ts[1], 0)}
	j.GPUs = tresGPUs(get("AllocTRES"))
	if j.GPUs == 0 {
		j.GPUs = tresGPUs(get("ReqTRES"))
	}
	j.GPUs = (j.GPUs + nodes - 1) / nodes
	if tl := get("Timelimit"); tl != "" && tl != "UNLIMITED" && tl != "Partition_Limit" {
		d, err := parseSlurmDuration(tl)
		if err != nil {
			return Job{}, false, &ParseError{Field: "Timelimit", Err: fmt.Errorf("%q: %w", tl, errSyntax)}
		}
		j.Limit = d
	}
	return j, true, nil
}

// tresGPUs reads gres/gpu=N (or gres/gpu:type=N) from a TRES list.
func tresGPUs(tres string) int {
	n := 0
	for _, item := range strings.Split(tres, ",") {
		k, v, ok := strings.Cut(item, "=")
		if !ok || !(k == "gres/gpu" || strings.HasPrefix(k, "gres/gpu:")) {
			continue
		}
		if c, err := strconv.Atoi(v); err == nil && k == "gres/gpu" {
			n = c
		} else if err == nil && n == 0 {
			n = c
		}
	}
	return n
}

// parseSlurmDuration reads [days-]hours:minutes:seconds or minutes.
func parseSlurmDuration(s string) (float64, error) {
	days, hadDays := 0, false
	if d, rest, ok := strings.Cut(s, "-"); ok {
		hadDays = true
		n, err := strconv.Atoi(d)
		if err != nil {
			return 0, err
		}
		days, s = n, rest
	}
	parts := strings.Split(s, ":")
	var v [3]int
	for k, p := range parts {
		n, err := strconv.Atoi(p)
		if err != nil || k >= 3 {
			return 0, errSyntax
		}
		v[k] = n
	}
	switch {
	case len(parts) == 1 && hadDays:
		return float64(days*86400 + v[0]*3600), nil
	case len(parts) == 1:
		return float64(v[0] * 60), nil
	case len(parts) == 2 && hadDays:
		return float64(days*86400 + v[0]*3600 + v[1]*60), nil
	case len(parts) == 2:
		return float64(v[0]*60 + v[1]), nil
	}
	return float64(days*86400 + v[0]*3600 + v[1]*60 + v[2]), nil
}

// header reads a CSV header line (line n of file name): each column's
// index by name, and an error naming the first of need it lacks.
func header(name string, n int, fields, need []string) (map[string]int, error) {
	col := make(map[string]int, len(fields))
	for k, h := range fields {
		col[h] = k
	}
	for _, h := range need {
		if _, ok := col[h]; !ok {
			return nil, &ParseError{name, n, h, errors.New("missing from the header")}
		}
	}
	return col, nil
}
