package slurm

import (
	"cmp"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"

	"github.com/isched/isched/internal/report"
)

// squeueJob holds only the members of a `squeue --json` job this package
// uses; encoding/json skips the other ~100 without allocating for them.
type squeueJob struct {
	JobID        num      `json:"job_id"`
	ArrayJobID   num      `json:"array_job_id"`
	ArrayTaskID  num      `json:"array_task_id"`
	ArrayTasks   string   `json:"array_task_string"`
	Name         string   `json:"name"`
	UserName     string   `json:"user_name"`
	UserID       num      `json:"user_id"`
	Account      string   `json:"account"`
	QOS          string   `json:"qos"`
	Partition    string   `json:"partition"`
	JobState     words    `json:"job_state"`
	StateReason  string   `json:"state_reason"`
	Nodes        string   `json:"nodes"`
	NodeCount    num      `json:"node_count"`
	CPUs         num      `json:"cpus"`
	TresPerNode  string   `json:"tres_per_node"`
	TresPerJob   string   `json:"tres_per_job"`
	TresAlloc    string   `json:"tres_alloc_str"`
	TimeLimit    num      `json:"time_limit"`
	SubmitTime   num      `json:"submit_time"`
	StartTime    num      `json:"start_time"`
	EndTime      num      `json:"end_time"`
	RestartCount num      `json:"restart_cnt"`
	Requeue      *bool    `json:"requeue"`
	Comment      string   `json:"comment"`
	GresDetail   []string `json:"gres_detail"`
	MemPerNode   num      `json:"memory_per_node"`
	MemPerCPU    num      `json:"memory_per_cpu"`
	Priority     num      `json:"priority"`
	Nice         num      `json:"nice"`
}

// ParseSqueue parses `squeue --json` output into job table rows. Fields
// whose JSON type changed between Slurm versions are read in every known
// spelling (see testdata/README.md). Elapsed time of running jobs depends on
// the clock and is filled in by BuildJobTable.
//
// It reads the document in one pass (see scanner): members this package
// does not use are checked and skipped without allocating, so 10,000 jobs
// (35 MB) parse in a few tens of milliseconds and memory stays proportional
// to the jobs' used fields, not to Slurm's ~110 members per job.
func ParseSqueue(b []byte) ([]report.Job, error) {
	s := &scanner{b: b}
	var jobs []report.Job
	var errs slurmErrors
	sawJobs := false
	err := s.object(func(key []byte, escaped bool) error {
		switch keyString(key, escaped) {
		case "jobs":
			sawJobs = true
			var err error
			jobs, err = s.squeueJobs()
			return err
		case "errors":
			raw, err := s.value()
			if err != nil {
				return err
			}
			if err := json.Unmarshal(raw, &errs); err != nil {
				return fmt.Errorf("errors: %w", err)
			}
			return nil
		default:
			return s.skip()
		}
	})
	if err == nil && s.peek() != 0 {
		err = s.fail("trailing data after the document")
	}
	if err != nil {
		return nil, fmt.Errorf("squeue --json: %w", err)
	}
	if err := errs.err("squeue --json"); err != nil {
		return nil, err
	}
	if !sawJobs {
		return nil, fmt.Errorf("squeue --json: no \"jobs\" member (is this squeue --json output?)")
	}
	return jobs, nil
}

func (s *scanner) squeueJobs() ([]report.Job, error) {
	if s.peek() == 'n' {
		return nil, s.literal("null")
	}
	if s.peek() != '[' {
		raw, _ := s.value()
		return nil, fmt.Errorf("jobs: want a list, got %.64s", raw)
	}
	var out []report.Job
	i := 0
	err := s.array(func() error {
		start := s.peekOffset()
		var sj squeueJob
		err := s.squeueJob(&sj)
		if err == nil {
			var j report.Job
			if j, err = sj.job(); err == nil {
				out = append(out, j)
				i++
				return nil
			}
		}
		return fmt.Errorf("jobs[%d]%s: %w", i, jobLabelAt(s.b, start), err)
	})
	return out, err
}

func (s *scanner) peekOffset() int {
	s.ws()
	return s.i
}

// jobLabelAt names the job of a failed item: its job_id, found by
// re-reading the item from its start (a field before job_id may have
// failed), or "" when that is not possible.
func jobLabelAt(b []byte, start int) string {
	s := &scanner{b: b, i: start}
	var id num
	found := false
	_ = s.object(func(key []byte, escaped bool) error {
		if !found && string(key) == "job_id" {
			if s.num(&id) == nil && id.Set && id.V > 0 {
				found = true
				return nil
			}
		}
		return s.skip()
	})
	if found {
		return fmt.Sprintf(" (job %d)", id.V)
	}
	return ""
}

// squeueJob reads one job object, keeping the members squeueJob holds.
func (s *scanner) squeueJob(sj *squeueJob) error {
	if s.peek() != '{' {
		raw, err := s.value()
		if err != nil {
			return err
		}
		return &typeError{want: "a job object", got: raw}
	}
	return s.object(func(key []byte, escaped bool) error {
		if escaped {
			key = []byte(keyString(key, true))
		}
		return sj.member(s, key)
	})
}

func (sj *squeueJob) member(s *scanner, key []byte) error {
	var err error
	switch n, t := sj.numMember(key), sj.textMember(key); {
	case n != nil:
		err = s.num(n)
	case t != nil:
		err = s.text(t)
	case string(key) == "job_state":
		err = s.words(&sj.JobState)
	case string(key) == "requeue":
		err = s.boolean(&sj.Requeue)
	case string(key) == "gres_detail":
		err = s.textList(&sj.GresDetail)
	default:
		return s.skip()
	}
	if err != nil {
		return &fieldError{field: string(key), err: err}
	}
	return nil
}

// array sets an array element's ids, or a pending rest's task range
// ("11_[2-3%2]" has array_job_id but no task id; report.Job pairs the
// two, so it is job 11 with its range).
func (sj *squeueJob) array(j *report.Job) {
	switch {
	case !sj.ArrayJobID.Set || sj.ArrayJobID.V == 0:
	case sj.ArrayTaskID.Set && !sj.ArrayTaskID.Inf:
		t := int(sj.ArrayTaskID.V)
		j.ArrayJobID, j.ArrayTaskID = uint64(sj.ArrayJobID.V), &t
	case j.State == StatePending:
		j.ArrayTasks = cmp.Or(sj.ArrayTasks, "?")
	}
}

// numMember is the number member key names, or nil.
func (sj *squeueJob) numMember(key []byte) *num {
	switch string(key) {
	case "job_id":
		return &sj.JobID
	case "array_job_id":
		return &sj.ArrayJobID
	case "array_task_id":
		return &sj.ArrayTaskID
	case "user_id":
		return &sj.UserID
	case "node_count":
		return &sj.NodeCount
	case "cpus":
		return &sj.CPUs
	case "time_limit":
		return &sj.TimeLimit
	case "submit_time":
		return &sj.SubmitTime
	case "start_time":
		return &sj.StartTime
	case "end_time":
		return &sj.EndTime
	case "restart_cnt":
		return &sj.RestartCount
	case "memory_per_node":
		return &sj.MemPerNode
	case "memory_per_cpu":
		return &sj.MemPerCPU
	case "priority":
		return &sj.Priority
	case "nice":
		return &sj.Nice
	}
	return nil
}

// textMember is the string member key names, or nil.
func (sj *squeueJob) textMember(key []byte) *string {
	switch string(key) {
	case "name":
		return &sj.Name
	case "user_name":
		return &sj.UserName
	case "account":
		return &sj.Account
	case "qos":
		return &sj.QOS
	case "partition":
		return &sj.Partition
	case "state_reason":
		return &sj.StateReason
	case "nodes":
		return &sj.Nodes
	case "tres_per_node":
		return &sj.TresPerNode
	case "tres_per_job":
		return &sj.TresPerJob
	case "tres_alloc_str":
		return &sj.TresAlloc
	case "comment":
		return &sj.Comment
	case "array_task_string":
		return &sj.ArrayTasks
	}
	return nil
}

// text reads a string member; null leaves it empty (as encoding/json does).
func (s *scanner) text(dst *string) error {
	switch s.peek() {
	case '"':
		v, err := s.str()
		*dst = v
		return err
	case 'n':
		return s.literal("null")
	}
	return s.wrongType("string")
}

func (s *scanner) wrongType(want string) error {
	raw, err := s.value()
	if err != nil {
		return err
	}
	return &typeError{want: want, got: raw}
}

func (s *scanner) boolean(dst **bool) error {
	var v bool
	switch s.peek() {
	case 't':
		v = true
		if err := s.literal("true"); err != nil {
			return err
		}
	case 'f':
		if err := s.literal("false"); err != nil {
			return err
		}
	case 'n':
		*dst = nil
		return s.literal("null")
	default:
		return s.wrongType("bool")
	}
	*dst = &v
	return nil
}

func (s *scanner) textList(dst *[]string) error {
	switch s.peek() {
	case 'n':
		*dst = nil
		return s.literal("null")
	case '[':
	default:
		return s.wrongType("a list of strings")
	}
	var out []string
	err := s.array(func() error {
		var v string
		if err := s.text(&v); err != nil {
			return err
		}
		out = append(out, v)
		return nil
	})
	*dst = out
	return err
}

// words reads a state: a string, a list of strings, or null.
func (s *scanner) words(dst *words) error {
	switch s.peek() {
	case '"':
		v, err := s.str()
		*dst = words{v}
		return err
	case '[':
		var list []string
		if err := s.textList(&list); err != nil {
			if _, ok := err.(*typeError); ok {
				return &typeError{want: "a string or a list of strings", got: []byte("a list with a non-string")}
			}
			return err
		}
		*dst = list
		return nil
	case 'n':
		*dst = nil
		return s.literal("null")
	}
	return s.wrongType("a string or a list of strings")
}

// num reads a number member in any of Slurm's spellings (see num).
func (s *scanner) num(n *num) error {
	switch c := s.peek(); {
	case c == 'n':
		*n = num{}
		return s.literal("null")
	case c == '-' || '0' <= c && c <= '9':
		raw, err := s.number()
		if err != nil {
			return err
		}
		return n.UnmarshalJSON(raw)
	case c == '{':
		*n = num{}
		var set, inf *bool
		var number num
		err := s.object(func(key []byte, escaped bool) error {
			switch keyString(key, escaped) {
			case "set", "infinite":
				var b *bool
				if err := s.boolean(&b); err != nil {
					return err
				}
				if string(key) == "set" {
					set = b
				} else {
					inf = b
				}
				return nil
			case "number":
				return s.num(&number)
			}
			return s.skip()
		})
		if err != nil {
			return err
		}
		switch {
		case inf != nil && *inf:
			n.Inf, n.Set = true, true
		case set != nil && !*set || !number.Set:
		default:
			*n = number
		}
		return nil
	}
	return s.wrongType("a number or {set,infinite,number}")
}

func (sj *squeueJob) job() (report.Job, error) {
	missing := func(field string) error { return fmt.Errorf("field %s: missing or null", field) }
	if !sj.JobID.Set || sj.JobID.V <= 0 || sj.JobID.V > 0xffffffff {
		return report.Job{}, fmt.Errorf("field job_id: want a job id, got %d", sj.JobID.V)
	}
	state := sj.JobState.first()
	if state == "" {
		return report.Job{}, missing("job_state")
	}
	if !sj.UserID.Set || sj.UserID.Inf || sj.UserID.V < 0 {
		return report.Job{}, missing("user_id")
	}
	j := report.Job{
		JobID:        uint64(sj.JobID.V),
		Name:         sj.Name,
		User:         sj.UserName,
		UID:          int(sj.UserID.V),
		Account:      sj.Account,
		QOS:          sj.QOS,
		Partition:    sj.Partition,
		State:        state,
		Reason:       sj.StateReason,
		Nodes:        sj.Nodes,
		NodeCount:    int(sj.NodeCount.int(0)),
		CPUs:         int(sj.CPUs.int(0)),
		Gres:         JobGres(sj.TresPerNode, sj.TresPerJob),
		AllocGPUs:    AllocGPUs(sj.TresAlloc),
		SubmitMS:     ms(sj.SubmitTime),
		RestartCount: int(sj.RestartCount.int(0)),
		Requeue:      sj.Requeue != nil && *sj.Requeue,
		Comment:      sj.Comment,
		Priority:     sj.Priority.int(0),
		Nice:         niceOf(sj.Nice),
	}
	sj.array(&j)
	j.MemPerNodeBytes = memPerNode(sj.MemPerNode, sj.MemPerCPU, j.CPUs, j.NodeCount)
	if sj.TimeLimit.Set && !sj.TimeLimit.Inf {
		v := sj.TimeLimit.V
		j.TimeLimitMin = &v
	}
	switch {
	case state == StatePending:
		// start_time of a pending job is the scheduler's estimate (the same
		// value `squeue --start` prints), not a start.
		j.ExpectedStartMS = ms(sj.StartTime)
	default:
		j.StartMS = ms(sj.StartTime)
	}
	if Ended(state) {
		j.EndMS = ms(sj.EndTime)
		if j.StartMS > 0 && j.EndMS >= j.StartMS {
			j.ElapsedS = (j.EndMS - j.StartMS) / 1000
		}
	}
	return j, nil
}

// ms converts a Slurm epoch-seconds field to Unix ms; unset, infinite and
// non-positive are 0 (unknown).
func ms(n num) int64 {
	if !n.Set || n.Inf || n.V <= 0 || n.V > 253402300799 {
		return 0
	}
	return n.V * 1000
}

// JobGres is a job's GRES request in the "gpu:1" spelling: the per-node
// request, or the per-job one (--gpus) when there is none. Slurm prefixes
// each item with "gres:" (22.05) or "gres/" (23.02+); both are dropped.
func JobGres(perNode, perJob string) string {
	s := perNode
	if s == "" {
		s = perJob
	}
	if s == "" {
		return ""
	}
	items := strings.Split(s, ",")
	for i, it := range items {
		it = strings.TrimPrefix(it, "gres:")
		it = strings.TrimPrefix(it, "gres/")
		items[i] = it
	}
	return strings.Join(items, ",")
}

func jsonErr(err error) error {
	if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
		return fmt.Errorf("truncated JSON: %w", io.ErrUnexpectedEOF)
	}
	return err
}

// memPerNode is the memory the job asked per node, in bytes: --mem
// (memory_per_node, MiB) or --mem-per-cpu (memory_per_cpu, MiB) times the
// job's CPUs on one node. 0 when neither is set ("all the node's memory"
// included).
func memPerNode(perNode, perCPU num, cpus, nodes int) int64 {
	const maxMiB = 1 << 40
	switch {
	case perNode.Set && !perNode.Inf && perNode.V > 0 && perNode.V < maxMiB:
		return perNode.V << 20
	case perCPU.Set && !perCPU.Inf && perCPU.V > 0 && perCPU.V < maxMiB && cpus > 0:
		return perCPU.V << 20 * int64(cpus) / int64(max(nodes, 1))
	}
	return 0
}

// niceOf reads squeue --json's nice: Slurm 22.05 prints the job's nice as
// an unsigned 32-bit number (-50 is 4294967246) and null for none.
func niceOf(n num) int64 {
	if !n.Set || n.Inf {
		return 0
	}
	return int64(int32(uint32(n.V)))
}

// AllocGPUs counts the GPUs of a job's allocated TRES
// ("cpu=8,mem=4000M,node=2,billing=8,gres/gpu=4": 4). A job given whole
// nodes (--exclusive) holds their GPUs without asking for any, so its
// GRES request says none. Typed counts ("gres/gpu:a100=4") repeat the
// untyped one and are not added.
func AllocGPUs(tres string) int {
	for _, item := range strings.Split(tres, ",") {
		if v, ok := strings.CutPrefix(item, "gres/gpu="); ok {
			if n, err := strconv.Atoi(v); err == nil && n > 0 {
				return n
			}
		}
	}
	return 0
}
