package slurm

import (
	"bytes"
	"fmt"
	"strconv"
	"strings"
	"time"
)

// JobInfo is one job as `scontrol show job -o` prints it: what the agent
// checks right before acting on a job.
type JobInfo struct {
	JobID       string // "123"
	ArrayJobID  string // "" unless an array task
	ArrayTaskID string // "4", or "2-3%2" for a pending array remainder
	Name        string
	User        string // "alice" from UserId=alice(1001)
	UID         int    // -1 when Slurm could not resolve it
	State       string // JobState: PENDING, RUNNING, COMPLETING, ...
	Reason      string
	Partition   string
	NodeList    string
	Restarts    int
	Requeue     bool
	BatchFlag   bool
	TimeLimit   *time.Duration // nil: UNLIMITED or unset
	StartTime   time.Time      // zero when Unknown/None
	EndTime     time.Time      // the end, or while it runs the limit's; zero when Unknown/None
	Comment     string
	TresPerNode string // as printed, e.g. "gres:gpu:1"
	TresPerJob  string

	// Fields holds every Key=Value pair of the line, as printed.
	Fields map[string]string
}

// ID returns the id to pass to Slurm commands for this record: "A_T" for an
// array task, else JobID.
func (j *JobInfo) ID() string {
	if j.ArrayJobID != "" && j.ArrayTaskID != "" && isDigits(j.ArrayTaskID) {
		return j.ArrayJobID + "_" + j.ArrayTaskID
	}
	return j.JobID
}

// Tasks is the job's task count (NumTasks; 1 when Slurm does not say).
func (j *JobInfo) Tasks() int {
	if n, err := strconv.Atoi(j.Fields["NumTasks"]); err == nil && n > 0 {
		return n
	}
	return 1
}

// Nodes is the job's node count: the node= of its TRES, which follows an
// update while the job is pending (22.05 still prints the old NumNodes
// then: testdata/22.05/show_job_resized_pending.txt), else NumNodes (its
// lower bound when a range), else 1.
func (j *JobInfo) Nodes() int {
	for _, kv := range strings.Split(j.Fields["TRES"], ",") {
		if v, ok := strings.CutPrefix(kv, "node="); ok {
			if n, err := strconv.Atoi(v); err == nil && n > 0 {
				return n
			}
		}
	}
	lo, _, _ := strings.Cut(j.Fields["NumNodes"], "-")
	if n, err := strconv.Atoi(lo); err == nil && n > 0 {
		return n
	}
	return 1
}

// CPUsPerTask is the job's CPUs per task (CPUs/Task; 0 when Slurm does
// not say).
func (j *JobInfo) CPUsPerTask() int {
	n, _ := strconv.Atoi(j.Fields["CPUs/Task"])
	return n
}

// Held reports whether a pending job is held (by a user, an admin, or
// requeuehold): Slurm gives held jobs priority 0.
func (j *JobInfo) Held() bool {
	if j.State != StatePending {
		return false
	}
	r := strings.ToLower(j.Reason)
	return j.Fields["Priority"] == "0" || strings.Contains(r, "held")
}

// Ended reports whether the job is in a final state (it will never run
// again unless requeued by an operator).
func (j *JobInfo) Ended() bool { return Ended(j.State) }

// Ended reports whether a Slurm job state is final.
func Ended(state string) bool { return JobState(state).Ended() }

// freeText are keys whose values may contain spaces; a following token is
// part of the value unless it starts a known key.
var freeText = map[string]bool{
	"JobName": true, "Comment": true, "AdminComment": true, "SystemComment": true,
	"Command": true, "WorkDir": true, "StdErr": true, "StdIn": true, "StdOut": true,
	"Extra": true, "Reason": true, "Dependency": true, "Features": true, "MailUser": true,
	"Prefer": true, "ClusterFeatures": true, "BurstBuffer": true, "Reservation": true,
}

// knownJobKeys are the keys `scontrol show job` prints (Slurm 22.05
// slurm_sprint_job_info, plus later versions' additions).
var knownJobKeys = func() map[string]bool {
	m := map[string]bool{}
	for _, k := range strings.Fields(`JobId ArrayJobId ArrayTaskId ArrayTaskThrottle HetJobId HetJobOffset
		HetJobIdSet JobName UserId GroupId MCS_label Priority Nice Account QOS WCKey JobState Reason
		FedOrigin FedViableSiblings FedActiveSiblings Dependency Requeue Restarts BatchFlag Reboot ExitCode
		DerivedExitCode RunTime TimeLimit TimeMin SubmitTime EligibleTime AccrueTime StartTime EndTime
		Deadline PreemptEligibleTime PreemptTime SuspendTime SecsPreSuspend LastSchedEval Scheduler
		ResizeTime Partition AllocNode:Sid ReqNodeList ExcNodeList NodeList SchedNodeList BatchHost
		NumNodes NumCPUs NumTasks CPUs/Task ReqB:S:C:T TRES Socks/Node NtasksPerN:B:S:C CoreSpec
		ThreadSpec JOB_GRES Nodes CPU_IDs Mem GRES MinCPUsNode MinMemoryNode MinMemoryCPU MinTmpDiskNode
		Features ClusterFeatures Prefer Reservation DelayBoot OverSubscribe Contiguous Licenses Network
		Command WorkDir AdminComment SystemComment Comment StdErr StdIn StdOut BatchScript Switches
		Wait-for-Switch BurstBuffer BurstBufferState CpuFreqMin CpuFreqMax CpuFreqGov Power CpusPerTres
		MemPerTres TresBind TresFreq TresPerJob TresPerNode TresPerSocket TresPerTask MailUser MailType
		NtasksPerTRES Container ContainerID Extra KillOInInvalidDependent SegmentSize
		SpreadJob ResvPorts ReqTRES AllocTRES OOMKillStep`) {
		m[k] = true
	}
	return m
}()

// keyOf returns the key of a "Key=Value" token, or "" when the token does
// not look like one.
func keyOf(tok string) string {
	i := strings.IndexByte(tok, '=')
	if i <= 0 {
		return ""
	}
	k := tok[:i]
	c := k[0]
	if !('A' <= c && c <= 'Z' || 'a' <= c && c <= 'z') {
		return ""
	}
	for j := 1; j < len(k); j++ {
		c := k[j]
		if !('A' <= c && c <= 'Z' || 'a' <= c && c <= 'z' || '0' <= c && c <= '9' || c == '_' || c == ':' || c == '/' || c == '-') {
			return ""
		}
	}
	return k
}

// parseKV splits one `scontrol ... -o` line into its Key=Value pairs. Values
// of free-text keys may contain spaces (a comment "isched lineage=abc"): a
// token continues such a value unless it starts a known key.
func parseKV(line string, known map[string]bool) (map[string]string, []string) {
	fields := map[string]string{}
	var order []string
	cur := ""
	var val strings.Builder
	flush := func() {
		if cur != "" {
			fields[cur] = strings.TrimRight(val.String(), " ")
		}
	}
	// Split on single spaces so that runs of spaces inside a free-text value
	// survive ("a  b"); empty tokens are separators of a run.
	for _, tok := range strings.Split(line, " ") {
		k := keyOf(tok)
		starts := k != "" && (cur == "" || !freeText[cur] || known[k])
		if starts {
			flush()
			cur = k
			order = append(order, k)
			val.Reset()
			val.WriteString(tok[len(k)+1:])
			continue
		}
		if cur == "" {
			continue
		}
		if freeText[cur] {
			val.WriteByte(' ')
			val.WriteString(tok)
		}
	}
	flush()
	return fields, order
}

// ParseShowJob parses `scontrol show job -o` output: one line per job (an
// array job id prints all its tasks).
func ParseShowJob(b []byte) ([]JobInfo, error) {
	var out []JobInfo
	for n, line := range bytes.Split(b, []byte("\n")) {
		s := strings.TrimRight(string(line), " \r")
		if strings.TrimSpace(s) == "" {
			continue
		}
		f, _ := parseKV(s, knownJobKeys)
		j, err := jobInfo(f)
		if err != nil {
			return nil, fmt.Errorf("scontrol show job: line %d: %w", n+1, err)
		}
		out = append(out, j)
	}
	return out, nil
}

func jobInfo(f map[string]string) (JobInfo, error) {
	j := JobInfo{Fields: f, UID: -1}
	id, ok := f["JobId"]
	if !ok || !isDigits(id) {
		return j, fmt.Errorf("field JobId: want digits, got %q", id)
	}
	j.JobID = id
	fail := func(field string, err error) (JobInfo, error) {
		return j, fmt.Errorf("job %s: field %s: %w", id, field, err)
	}
	j.ArrayJobID = f["ArrayJobId"]
	j.ArrayTaskID = f["ArrayTaskId"]
	j.Name = f["JobName"]
	j.State = f["JobState"]
	if j.State == "" {
		return fail("JobState", fmt.Errorf("missing"))
	}
	j.Reason = f["Reason"]
	j.Partition = f["Partition"]
	j.NodeList = f["NodeList"]
	j.Comment = f["Comment"]
	j.TresPerNode = f["TresPerNode"]
	j.TresPerJob = f["TresPerJob"]
	u, ok := f["UserId"]
	if !ok {
		return fail("UserId", fmt.Errorf("missing"))
	}
	if err := j.setUser(u); err != nil {
		return fail("UserId", err)
	}
	j.Requeue = f["Requeue"] == "1"
	j.BatchFlag = f["BatchFlag"] == "1"
	if field, err := j.setTimes(f); err != nil {
		return fail(field, err)
	}
	return j, nil
}

// setUser reads UserId: "alice(1001)"; an unknown user prints as
// "(null)(1001)" or "1001".
func (j *JobInfo) setUser(u string) error {
	name, rest, paren := strings.Cut(u, "(")
	if paren {
		uid, err := strconv.Atoi(strings.TrimSuffix(rest, ")"))
		if err != nil {
			return fmt.Errorf("want name(uid), got %q", u)
		}
		j.UID = uid
		j.User = name
	} else if uid, err := strconv.Atoi(u); err == nil {
		j.UID = uid
	} else {
		j.User = u
	}
	return nil
}

// setTimes reads Restarts, TimeLimit, StartTime and EndTime where f has them; on
// error, the field that is wrong.
func (j *JobInfo) setTimes(f map[string]string) (string, error) {
	if s, ok := f["Restarts"]; ok {
		n, err := strconv.Atoi(s)
		if err != nil {
			return "Restarts", fmt.Errorf("want a number, got %q", s)
		}
		j.Restarts = n
	}
	if s, ok := f["TimeLimit"]; ok {
		d, err := ParseDuration(s)
		if err != nil {
			return "TimeLimit", err
		}
		j.TimeLimit = d
	}
	for _, tf := range []struct {
		name string
		to   *time.Time
	}{{"StartTime", &j.StartTime}, {"EndTime", &j.EndTime}} {
		if s := f[tf.name]; s != "" {
			t, err := parseTimestamp(s)
			if err != nil {
				return tf.name, err
			}
			*tf.to = t
		}
	}
	return "", nil
}

// parseTimestamp reads Slurm's standard time format (SLURM_TIME_FORMAT=
// standard, UTC by ExecRunner's TZ); "Unknown", "None", "N/A" are zero.
func parseTimestamp(s string) (time.Time, error) {
	switch s {
	case "", "Unknown", "None", "N/A", "(null)":
		return time.Time{}, nil
	}
	t, err := time.ParseInLocation("2006-01-02T15:04:05", s, time.UTC)
	if err != nil {
		return time.Time{}, fmt.Errorf("want YYYY-MM-DDTHH:MM:SS, got %q", s)
	}
	return t, nil
}

// ParseDuration reads a Slurm time limit: "UNLIMITED"/"INFINITE" and
// "NONE"/"N/A" are nil; otherwise minutes, "MM:SS", "HH:MM:SS",
// "D-HH", "D-HH:MM" or "D-HH:MM:SS".
func ParseDuration(s string) (*time.Duration, error) {
	switch strings.ToUpper(s) {
	case "UNLIMITED", "INFINITE", "NONE", "N/A", "":
		return nil, nil
	}
	bad := fmt.Errorf("want [D-]HH:MM:SS, minutes or UNLIMITED, got %q", s)
	days := 0
	rest := s
	if d, r, ok := strings.Cut(s, "-"); ok {
		n, err := strconv.Atoi(d)
		if err != nil || n < 0 {
			return nil, bad
		}
		days, rest = n, r
	}
	parts := strings.Split(rest, ":")
	nums := make([]int, len(parts))
	for i, p := range parts {
		n, err := strconv.Atoi(p)
		if err != nil || n < 0 || len(p) == 0 {
			return nil, bad
		}
		nums[i] = n
	}
	var h, m, sec int
	switch {
	case days > 0 || strings.Contains(s, "-"):
		switch len(nums) {
		case 1:
			h = nums[0]
		case 2:
			h, m = nums[0], nums[1]
		case 3:
			h, m, sec = nums[0], nums[1], nums[2]
		default:
			return nil, bad
		}
	default:
		switch len(nums) {
		case 1:
			m = nums[0]
		case 2:
			m, sec = nums[0], nums[1]
		case 3:
			h, m, sec = nums[0], nums[1], nums[2]
		default:
			return nil, bad
		}
	}
	d := time.Duration(days)*24*time.Hour + time.Duration(h)*time.Hour + time.Duration(m)*time.Minute + time.Duration(sec)*time.Second
	return &d, nil
}

func isDigits(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return false
		}
	}
	return true
}
