package report

import (
	"cmp"
	"slices"
	"strings"
)

// The agent's view of the cluster. These bodies come from Slurm's own output,
// so text is checked loosely (valid UTF-8, bounded): one odd job name must
// not make a whole table undecodable. Numbers and identities stay strict.

// Snapshot is partition capacity as the agent last saw it.
type Snapshot struct {
	Cluster    string      `json:"cluster"`
	TakenMS    int64       `json:"taken_ms"`
	Partitions []Partition `json:"partitions"`
	Pending    int         `json:"pending"` // pending jobs, all partitions
	// Limits are the per-user limits of the cluster's accounting (QOS and
	// associations), with each user's use now; nil when the cluster has no
	// accounting or the agent could not read it.
	Limits []UserLimit `json:"limits,omitempty"`
}

// Validate checks the snapshot body. Partition names must be unique.
func (s *Snapshot) Validate() error {
	if s == nil {
		return fail("", "missing")
	}
	if err := first(clusterName("cluster", s.Cluster), unixMS("taken_ms", s.TakenMS, true)); err != nil {
		return err
	}
	seen := make(map[string]bool, len(s.Partitions))
	for i := range s.Partitions {
		p := joinPath("partitions", index(i))
		if err := within(p, s.Partitions[i].Validate()); err != nil {
			return err
		}
		if name := s.Partitions[i].Name; seen[name] {
			return fail(joinPath(p, "name"), "duplicate partition %s", quote(name))
		}
		seen[s.Partitions[i].Name] = true
	}
	for i := range s.Limits {
		if err := within(joinPath("limits", index(i)), s.Limits[i].Validate()); err != nil {
			return err
		}
	}
	return nonNeg("pending", s.Pending)
}

// Partition is one Slurm partition. Time limits are minutes; nil means
// UNLIMITED (MaxTime) or unset (DefaultTime, MaxNodes).
type Partition struct {
	Name           string     `json:"name"`
	State          string     `json:"state"` // "UP", "DOWN", "DRAIN", "INACTIVE"
	Default        bool       `json:"default"`
	NodesAlloc     int        `json:"nodes_alloc"`
	NodesIdle      int        `json:"nodes_idle"`
	NodesOther     int        `json:"nodes_other"`
	NodesTotal     int        `json:"nodes_total"`
	CPUsAlloc      int        `json:"cpus_alloc"`
	CPUsIdle       int        `json:"cpus_idle"`
	CPUsTotal      int        `json:"cpus_total"`
	GPUs           []GPUCount `json:"gpus"`
	PendingJobs    int        `json:"pending_jobs"`
	MaxTimeMin     *int64     `json:"max_time_min"`
	DefaultTimeMin *int64     `json:"default_time_min"`
	MinNodes       int        `json:"min_nodes"`
	MaxNodes       *int       `json:"max_nodes"`
	PriorityTier   int        `json:"priority_tier"`
	PreemptMode    string     `json:"preempt_mode"`
	// Mixed is what is free on the partly allocated nodes: a one-node job
	// that fits one of them starts without an idle node. One entry per
	// distinct room, the largest first, at most MaxMixed.
	Mixed []Room `json:"mixed,omitempty"`
}

// MaxMixed bounds Partition.Mixed.
const MaxMixed = 64

// Room is what is free on Nodes partly allocated nodes: GPUs (of GPUType,
// "" untyped or none), CPUs and memory (0: unknown).
type Room struct {
	GPUType string `json:"gpu_type,omitempty"`
	GPUs    int    `json:"gpus"`
	CPUs    int    `json:"cpus"`
	MemMiB  int64  `json:"mem_mib,omitempty"`
	Nodes   int    `json:"nodes"`
}

// SortRooms lists rooms with their node counts, the largest first (GPUs,
// then CPUs, then memory), at most MaxMixed; nil for none.
func SortRooms(count map[Room]int) []Room {
	if len(count) == 0 {
		return nil
	}
	out := make([]Room, 0, len(count))
	for r, n := range count {
		r.Nodes = n
		out = append(out, r)
	}
	slices.SortFunc(out, func(a, b Room) int {
		return cmp.Or(cmp.Compare(b.GPUs, a.GPUs), cmp.Compare(b.CPUs, a.CPUs), cmp.Compare(b.MemMiB, a.MemMiB),
			strings.Compare(a.GPUType, b.GPUType))
	})
	return out[:min(len(out), MaxMixed)]
}

// Validate checks one room.
func (r *Room) Validate() error {
	if r.MemMiB < 0 {
		return fail("mem_mib", "must not be negative (got %d)", r.MemMiB)
	}
	return first(
		printable("gpu_type", r.GPUType, maxName, false),
		nonNeg("gpus", r.GPUs),
		nonNeg("cpus", r.CPUs),
		nonNeg("nodes", r.Nodes),
	)
}

// Validate checks one partition. Node and CPU counts are not required to
// add up: they come from separate Slurm queries that can race.
func (p *Partition) Validate() error {
	if err := first(
		printable("name", p.Name, maxName, true),
		printable("state", p.State, 64, false),
		nonNeg("nodes_alloc", p.NodesAlloc),
		nonNeg("nodes_idle", p.NodesIdle),
		nonNeg("nodes_other", p.NodesOther),
		nonNeg("nodes_total", p.NodesTotal),
		nonNeg("cpus_alloc", p.CPUsAlloc),
		nonNeg("cpus_idle", p.CPUsIdle),
		nonNeg("cpus_total", p.CPUsTotal),
	); err != nil {
		return err
	}
	for i := range p.GPUs {
		if err := within(joinPath("gpus", index(i)), p.GPUs[i].Validate()); err != nil {
			return err
		}
	}
	if len(p.Mixed) > MaxMixed {
		return fail("mixed", "at most %d entries (got %d)", MaxMixed, len(p.Mixed))
	}
	for i := range p.Mixed {
		if err := within(joinPath("mixed", index(i)), p.Mixed[i].Validate()); err != nil {
			return err
		}
	}
	return first(
		nonNeg("pending_jobs", p.PendingJobs),
		nonNegPtr("max_time_min", p.MaxTimeMin),
		nonNegPtr("default_time_min", p.DefaultTimeMin),
		nonNeg("min_nodes", p.MinNodes),
		nonNegPtr("max_nodes", p.MaxNodes),
		nonNeg("priority_tier", p.PriorityTier),
		printable("preempt_mode", p.PreemptMode, 64, false),
	)
}

// GPUCount is GPUs of one type in a partition; Type is empty for untyped gres.
type GPUCount struct {
	Type  string `json:"type"`
	Alloc int    `json:"alloc"`
	Idle  int    `json:"idle"`
	Total int    `json:"total"`
}

// Validate checks one GPU count.
func (g *GPUCount) Validate() error {
	return first(
		printable("type", g.Type, maxName, false),
		nonNeg("alloc", g.Alloc),
		nonNeg("idle", g.Idle),
		nonNeg("total", g.Total),
	)
}

// JobTable is the cluster's job list as the agent last saw it.
type JobTable struct {
	Cluster string `json:"cluster"`
	TakenMS int64  `json:"taken_ms"`
	Jobs    []Job  `json:"jobs"`
}

// Validate checks the job table body. Job ids are not required to be
// unique: how array records are split differs between Slurm versions, and
// a duplicate must not hide the whole table.
func (t *JobTable) Validate() error {
	if t == nil {
		return fail("", "missing")
	}
	if err := first(clusterName("cluster", t.Cluster), unixMS("taken_ms", t.TakenMS, true)); err != nil {
		return err
	}
	for i := range t.Jobs {
		if err := within(joinPath("jobs", index(i)), t.Jobs[i].Validate()); err != nil {
			return err
		}
	}
	return nil
}

// Job is one row of the job table. Name and Comment are user data: any
// valid UTF-8, including shell metacharacters and escape sequences. They are
// never executed, and whoever prints them must escape them.
type Job struct {
	JobID       uint64 `json:"job_id"`
	ArrayJobID  uint64 `json:"array_job_id,omitempty"`
	ArrayTaskID *int   `json:"array_task_id,omitempty"`
	// ArrayTasks is the task range of an array's pending rest ("2-3%2"),
	// which squeue lists as one record under the array's job id; "" for
	// other jobs. Each element gets its own record once Slurm starts it.
	ArrayTasks string `json:"array_tasks,omitempty"`
	Name       string `json:"name"`
	User       string `json:"user"`
	UID        int    `json:"uid"`
	Account    string `json:"account"`
	QOS        string `json:"qos,omitempty"`
	Partition  string `json:"partition"` // comma-separated while pending on several
	State      string `json:"state"`     // "PENDING", "RUNNING", ...
	Reason     string `json:"reason"`
	Nodes      string `json:"nodes"` // Slurm host list, "gpu[1-2]"
	NodeCount  int    `json:"node_count"`
	CPUs       int    `json:"cpus"`
	Gres       string `json:"gres"` // e.g. "gpu:1"
	// AllocGPUs is the GPUs Slurm allocated to the started job, on all
	// of its nodes (0: none or unknown): a job given whole nodes holds
	// their GPUs without a GRES request.
	AllocGPUs       int    `json:"alloc_gpus,omitempty"`
	TimeLimitMin    *int64 `json:"time_limit_min"` // nil: UNLIMITED
	SubmitMS        int64  `json:"submit_ms"`
	StartMS         int64  `json:"start_ms"` // 0: not started (or unknown)
	EndMS           int64  `json:"end_ms"`   // 0: not ended (or unknown)
	ElapsedS        int64  `json:"elapsed_s"`
	RestartCount    int    `json:"restart_count"`
	Requeue         bool   `json:"requeue"`
	Comment         string `json:"comment,omitempty"`
	ExpectedStartMS int64  `json:"expected_start_ms,omitempty"` // squeue --start
	// MemPerNodeBytes is the memory the job asked per node (--mem, or
	// --mem-per-cpu times its CPUs on a node); 0 when unknown or "all".
	MemPerNodeBytes int64 `json:"mem_per_node_bytes,omitempty"`
	// Priority is Slurm's priority of the job (its nice value included),
	// Nice its nice value: rule 7 (policy.Order) exchanges the priorities
	// of isched's pending jobs through their nice values.
	Priority int64 `json:"priority,omitempty"`
	Nice     int64 `json:"nice,omitempty"`
}

// Validate checks one job row.
func (j *Job) Validate() error {
	return first(
		slurmID("job_id", j.JobID, true),
		slurmID("array_job_id", j.ArrayJobID, false),
		arrayTask("array_job_id", j.ArrayJobID, j.ArrayTaskID),
		printable("array_tasks", j.ArrayTasks, maxName, false),
		text("name", j.Name, MaxText, false),
		printable("user", j.User, maxName, false),
		uid("uid", j.UID),
		text("account", j.Account, maxName, false),
		printable("qos", j.QOS, maxName, false),
		printable("partition", j.Partition, MaxText, false),
		printable("state", j.State, 64, true),
		text("reason", j.Reason, MaxMessage, false),
		text("nodes", j.Nodes, MaxMessage, false),
		nonNeg("node_count", j.NodeCount),
		nonNeg("mem_per_node_bytes", j.MemPerNodeBytes),
		nonNeg("cpus", j.CPUs),
		nonNeg("alloc_gpus", j.AllocGPUs),
		text("gres", j.Gres, MaxText, false),
		nonNegPtr("time_limit_min", j.TimeLimitMin),
		unixMS("submit_ms", j.SubmitMS, false),
		unixMS("start_ms", j.StartMS, false),
		unixMS("end_ms", j.EndMS, false),
		nonNeg("elapsed_s", j.ElapsedS),
		nonNeg("restart_count", j.RestartCount),
		text("comment", j.Comment, MaxText, false),
		unixMS("expected_start_ms", j.ExpectedStartMS, false),
	)
}
