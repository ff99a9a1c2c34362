package cli

import "github.com/isched/isched/internal/report"

// statusJSON is `isched status --json`: the coordinator's record
// (report.JobStatus) in the --json style. The record itself is stored in
// Redis with unix-millisecond times and millisecond durations and is read
// by the coordinator's next version; this view is only printed. Every
// field of the record is here, under its own key or a renamed one
// (TestJSONViewsCoverRecords).
type statusJSON struct {
	V         int         `json:"v"`      // the record's schema version
	Source    string      `json:"source"` // "coordinator"; "slurm" in slurmStatusJSON
	Cluster   string      `json:"cluster"`
	Lineage   string      `json:"lineage"`
	JobID     uint64      `json:"job_id"`
	User      string      `json:"user"`
	UID       int         `json:"uid"`
	State     string      `json:"state"` // Slurm state of the job, or "ENDED"
	Partition string      `json:"partition"`
	Node      string      `json:"node"`
	Attempt   int         `json:"attempt"`
	Plan      *statusPlan `json:"plan"` // null: the job's comment carried none
	Started   *jsonTime   `json:"started"`
	Ended     *jsonTime   `json:"ended"` // null: not over
	// ExitStatus is the job's exit status once ended, when known.
	ExitStatus *int `json:"exit_status,omitempty"`

	History        []attemptJSON `json:"history"`
	Continuations  int           `json:"continuations"`
	ResumeFailures int           `json:"resume_failures"`

	Step       int64   `json:"step"`        // last step seen (-1: none)
	TotalIters int64   `json:"total_iters"` // 0: unknown
	LoopTotal  int64   `json:"loop_total"`  // 0: the loop never said
	PlanTotal  int64   `json:"plan_total"`  // 0: the plan has none
	IterS      float64 `json:"iter_s"`      // iteration time estimate, 0: none yet
	IterLowS   float64 `json:"iter_low_s"`
	IterHighS  float64 `json:"iter_high_s"`
	// ETA is the predicted end, ETALow/High its band; null: unknown.
	ETA             *jsonTime `json:"eta"`
	ETALow          *jsonTime `json:"eta_low"`
	ETAHigh         *jsonTime `json:"eta_high"`
	ETABandCoverage float64   `json:"eta_band_coverage"`
	ETABandSource   string    `json:"eta_band_source"`
	ETABandRuns     int       `json:"eta_band_runs"`
	ETASource       string    `json:"eta_source"`
	ETAPriorRuns    int       `json:"eta_prior_runs"`
	LimitEnd        *jsonTime `json:"limit_end"` // the allocation's time limit; null: unknown
	// Loss is the loss the run reports (last, lowest, trend, recent
	// values); null: it reports none.
	Loss *report.LossStatus `json:"loss"`

	RSSBytes           int64            `json:"rss_bytes"`
	PeakRSSBytes       int64            `json:"peak_rss_bytes"`
	MemLimitBytes      int64            `json:"mem_limit_bytes"`
	RSSSlope           float64          `json:"rss_slope_bytes_per_iter"`
	GPUBytes           map[string]int64 `json:"gpu_bytes"`      // per GPU uuid; {} without GPUs
	PeakGPUBytes       map[string]int64 `json:"peak_gpu_bytes"` // per GPU uuid
	UnreclaimBytes     int64            `json:"unreclaimable_bytes"`
	PageCacheBytes     int64            `json:"page_cache_bytes"`
	PeakUnreclaimBytes int64            `json:"peak_unreclaimable_bytes"`
	PeakPageCacheBytes int64            `json:"peak_page_cache_bytes"`
	CgroupPeakBytes    int64            `json:"cgroup_peak_bytes"`

	Verdict        *verdictJSON            `json:"verdict"`         // null while it runs
	LastCheckpoint *checkpointJSON         `json:"last_checkpoint"` // null: none seen
	CkptS          float64                 `json:"ckpt_s"`          // learned checkpoint duration
	Speeds         []report.PartitionSpeed `json:"speeds"`          // every key present, as stored
	Events         []eventJSON             `json:"events"`
	Decisions      []decisionJSON          `json:"decisions"`
	Updated        *jsonTime               `json:"updated"`
}

// statusPlan is the plan in the job's comment (report.Plan).
type statusPlan struct {
	Lineage    string   `json:"lineage"`
	Cluster    string   `json:"cluster"`
	Ideal      string   `json:"ideal"`
	IdealGres  string   `json:"ideal_gres"`
	IdealTimeS int64    `json:"ideal_time_s"` // 0: the partition's default
	IdealCPUs  int      `json:"ideal_cpus"`   // 0: the submission's
	Fallbacks  []string `json:"fallbacks"`
	Total      int64    `json:"total_iters"`
	Model      string   `json:"model"`
	Batch      int      `json:"batch"`
	Migrate    bool     `json:"migrate"`
	// Elastic is the run's GPU range (--gpus 1-4); null: a fixed size.
	Elastic *report.Elastic `json:"elastic"`
}

type verdictJSON struct {
	MemRequestBytes int64    `json:"mem_request_bytes"`
	MemFraction     float64  `json:"mem_fraction"`
	CPUS            float64  `json:"cpu_s"` // CPU time used
	Cores           int      `json:"cores"`
	CPUEfficiency   float64  `json:"cpu_efficiency"`
	MoveLostS       float64  `json:"move_lost_s"`
	AskMemBytes     int64    `json:"ask_mem_bytes"`
	AskCores        int      `json:"ask_cores"`
	Recommendation  string   `json:"recommendation"`
	Lines           []string `json:"lines"`
}

type checkpointJSON struct {
	Path      string   `json:"path"`
	SizeBytes int64    `json:"size_bytes"`
	Step      *int64   `json:"step"` // null: not known
	MTime     jsonTime `json:"mtime"`
	Complete  bool     `json:"complete"`
	SHA256    string   `json:"sha256,omitempty"`
}

type eventJSON struct {
	At      jsonTime `json:"at"`
	Kind    string   `json:"kind"`
	Message string   `json:"message"`
}

type decisionJSON struct {
	At       jsonTime `json:"at"`
	Kind     string   `json:"kind"`
	Reason   string   `json:"reason"`
	ActionID string   `json:"action_id,omitempty"`
	Result   string   `json:"result,omitempty"`
}

// statusView is s in the --json style.
func statusView(s *report.JobStatus) statusJSON {
	v := statusJSON{
		V: s.V, Source: sourceCoordinator, Cluster: s.Cluster, Lineage: s.Lineage, JobID: s.JobID, User: s.User, UID: s.UID, State: s.State,
		Partition: s.Partition, Node: s.Node, Attempt: s.Attempt, Plan: planView(s.Plan),
		Started: msTimeOrNil(s.StartedMS), Ended: msTimeOrNil(s.EndedMS), ExitStatus: s.ExitStatus,
		History: attemptsJSON(s.History), Continuations: s.Continuations, ResumeFailures: s.ResumeFailures,
		Step: s.Step, TotalIters: s.TotalIters, LoopTotal: s.LoopTotal, PlanTotal: s.PlanTotal,
		IterS: msSeconds(s.IterMS), IterLowS: msSeconds(s.IterLowMS), IterHighS: msSeconds(s.IterHighMS),
		ETA: msTimeOrNil(s.ETAMS), ETALow: msTimeOrNil(s.ETALowMS), ETAHigh: msTimeOrNil(s.ETAHighMS),
		ETABandCoverage: s.ETABandCoverage, ETABandSource: s.ETABandSource, ETABandRuns: s.ETABandRuns,
		ETASource: s.ETASource, ETAPriorRuns: s.ETAPriorRuns, LimitEnd: msTimeOrNil(s.LimitMS), Loss: s.Loss,
		RSSBytes: s.RSSBytes, PeakRSSBytes: s.PeakRSSBytes, MemLimitBytes: s.MemLimitBytes, RSSSlope: s.RSSSlope,
		GPUBytes: nonNil(s.GPUBytes), PeakGPUBytes: nonNil(s.PeakGPUBytes),
		UnreclaimBytes: s.UnreclaimBytes, PageCacheBytes: s.PageCacheBytes, PeakUnreclaimBytes: s.PeakUnreclaimBytes,
		PeakPageCacheBytes: s.PeakPageCacheBytes, CgroupPeakBytes: s.CgroupPeakBytes,
		Verdict: verdictView(s.Verdict), LastCheckpoint: checkpointView(s.LastCheckpoint), CkptS: msSeconds(s.CkptMS),
		Speeds: append([]report.PartitionSpeed{}, s.Speeds...), Events: make([]eventJSON, len(s.Events)), Decisions: make([]decisionJSON, len(s.Decisions)),
		Updated: msTimeOrNil(s.UpdatedMS),
	}
	for i, e := range s.Events {
		v.Events[i] = eventJSON{At: msTime(e.AtMS), Kind: e.Kind, Message: e.Message}
	}
	for i, d := range s.Decisions {
		v.Decisions[i] = decisionJSON{At: msTime(d.AtMS), Kind: d.Kind, Reason: d.Reason, ActionID: d.ActionID, Result: d.Result}
	}
	return v
}

func nonNil(m map[string]int64) map[string]int64 {
	if m == nil {
		return map[string]int64{}
	}
	return m
}

func planView(p *report.Plan) *statusPlan {
	if p == nil {
		return nil
	}
	fb := p.Fallbacks
	if fb == nil {
		fb = []string{}
	}
	return &statusPlan{Lineage: p.Lineage, Cluster: p.Cluster, Ideal: p.Ideal, IdealGres: p.IdealGres, IdealTimeS: p.IdealTime * 60,
		IdealCPUs: p.IdealCPUs, Fallbacks: fb, Total: p.Total, Model: p.Model, Batch: p.Batch, Migrate: p.Migrate, Elastic: p.Elastic}
}

func verdictView(v *report.Verdict) *verdictJSON {
	if v == nil {
		return nil
	}
	lines := v.Lines
	if lines == nil {
		lines = []string{}
	}
	return &verdictJSON{MemRequestBytes: v.MemRequestBytes, MemFraction: v.MemFraction, CPUS: v.CPUSeconds, Cores: v.Cores,
		CPUEfficiency: v.CPUEfficiency, MoveLostS: v.MoveLostS, AskMemBytes: v.AskMemBytes, AskCores: v.AskCores,
		Recommendation: v.Recommendation, Lines: lines}
}

func checkpointView(c *report.Checkpoint) *checkpointJSON {
	if c == nil {
		return nil
	}
	return &checkpointJSON{Path: c.Path, SizeBytes: c.Size, Step: c.Step, MTime: msTime(c.MTimeMS), Complete: c.Complete, SHA256: c.SHA256}
}
