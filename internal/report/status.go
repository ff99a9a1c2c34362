package report

// SeriesPoint is one point of a lineage's time series, as the coordinator
// appends it to isched:<cluster>:job:{<lineage>}:series (a bounded Redis
// list of JSON objects) and `isched report` reads it. Points without
// iter_ms are memory samples only.
type SeriesPoint struct {
	TMS    int64   `json:"t_ms"`
	Step   int64   `json:"step"`
	IterMS float64 `json:"iter_ms,omitempty"`
	RSS    int64   `json:"rss"`
	GPU    int64   `json:"gpu,omitempty"`
	// Loss is the last finite loss among the sample's iterations (nil:
	// none reported).
	Loss *float64 `json:"loss,omitempty"`
}

// JobStatus is the coordinator's view of one lineage, stored at
// isched:<cluster>:job:{<lineage>}:status and shown by `isched status`.
// Zero values mean unknown; the CLI says so rather than inventing.
type JobStatus struct {
	V          int    `json:"v"`
	Cluster    string `json:"cluster"`
	Lineage    string `json:"lineage"`
	JobID      uint64 `json:"job_id"`
	User       string `json:"user"`
	UID        int    `json:"uid"`
	State      string `json:"state"` // Slurm state of the job, or "ENDED"
	Partition  string `json:"partition"`
	Node       string `json:"node"`
	Attempt    int    `json:"attempt"`
	Plan       *Plan  `json:"plan,omitempty"`
	StartedMS  int64  `json:"started_ms"`
	EndedMS    int64  `json:"ended_ms,omitempty"`
	ExitStatus *int   `json:"exit_status,omitempty"`

	History []Span `json:"history"`
	// Continuations counts the attempts isched started after one ended
	// with work left or ran into its time limit (requeues other than
	// migrations); Slurm's own requeues (preemption) are not counted.
	Continuations int `json:"continuations,omitempty"`
	// ResumeFailures counts the attempts that were given a checkpoint to
	// resume from and whose first step was behind it: the job restarted
	// (a resume file it could not read, a script that ignores
	// ISCHED_RESUME_FROM) and redoes the work. The loop's own steps count,
	// not the offer.
	ResumeFailures int `json:"resume_failures,omitempty"`

	Step       int64 `json:"step"`        // last step seen (-1: none)
	TotalIters int64 `json:"total_iters"` // 0: unknown; the loop's own total when it says one, else the plan's
	// LoopTotal is the total the training loop itself printed (0: it never
	// said); PlanTotal the one computed from the plan (--total-iters, or
	// --samples/--epochs/--batch). TotalIters is LoopTotal when known.
	LoopTotal  int64   `json:"loop_total,omitempty"`
	PlanTotal  int64   `json:"plan_total,omitempty"`
	IterMS     float64 `json:"iter_ms"` // robust iteration time estimate
	IterLowMS  float64 `json:"iter_low_ms"`
	IterHighMS float64 `json:"iter_high_ms"`
	ETAMS      int64   `json:"eta_ms"` // predicted end (unix ms), 0: unknown
	ETALowMS   int64   `json:"eta_low_ms"`
	ETAHighMS  int64   `json:"eta_high_ms"`
	// ETABandCoverage is the stated coverage of [ETALowMS, ETAHighMS]
	// (0.8: it holds the real end of 80 % of runs at any point of them),
	// 0 while it is unknown; ETABandSource what the band rests on
	// (estimate.BandSource: "conformal", earlier runs' ETA misses on this
	// partition, or "default", too few of them: a conservative default
	// band of unknown coverage); ETABandRuns how many earlier runs.
	ETABandCoverage float64 `json:"eta_band_coverage,omitempty"`
	ETABandSource   string  `json:"eta_band_source,omitempty"`
	ETABandRuns     int     `json:"eta_band_runs,omitempty"`
	// ETASource says where the ETA comes from before the run's own first
	// iterations (estimate.PriorSource): "own", the same user's earlier
	// runs of this model configuration and batch on this partition (the
	// owner as Slurm reports it), or "pooled", other users' confirmed
	// ones; empty once the run's own iterations time it. ETAPriorRuns is
	// how many runs ("own") or users ("pooled") it rests on.
	ETASource    string `json:"eta_source,omitempty"`
	ETAPriorRuns int    `json:"eta_prior_runs,omitempty"`
	LimitMS      int64  `json:"limit_ms"` // when the current allocation's time limit ends, 0: unknown
	// Loss is the training loss the run reports; nil: it reports none.
	Loss *LossStatus `json:"loss,omitempty"`

	RSSBytes      int64            `json:"rss_bytes"`
	PeakRSSBytes  int64            `json:"peak_rss_bytes"`
	MemLimitBytes int64            `json:"mem_limit_bytes,omitempty"`
	RSSSlope      float64          `json:"rss_slope_bytes_per_iter"`
	GPUBytes      map[string]int64 `json:"gpu_bytes,omitempty"`
	PeakGPUBytes  map[string]int64 `json:"peak_gpu_bytes,omitempty"`
	// The job's memory cgroup, apart from the process memory above
	// (memory.stat): what the kernel cannot reclaim (the OOM risk) and page
	// cache, now and at their sampled peaks, and the kernel's own peak of
	// the cgroup, which counts both.
	UnreclaimBytes     int64 `json:"unreclaimable_bytes,omitempty"`
	PageCacheBytes     int64 `json:"page_cache_bytes,omitempty"`
	PeakUnreclaimBytes int64 `json:"peak_unreclaimable_bytes,omitempty"`
	PeakPageCacheBytes int64 `json:"peak_page_cache_bytes,omitempty"`
	CgroupPeakBytes    int64 `json:"cgroup_peak_bytes,omitempty"`

	// Verdict is the efficiency summary of an ended run (nil while it runs).
	Verdict *Verdict `json:"verdict,omitempty"`

	LastCheckpoint *Checkpoint `json:"last_checkpoint,omitempty"`
	CkptMS         float64     `json:"ckpt_ms"` // learned checkpoint duration
	// Speeds is how fast the run's model goes on each partition the
	// coordinator has a speed for, on the configured speeds' scale (higher
	// is faster): learned from confirmed receipts and running jobs where
	// measured, else the configured prior. The policy migrates on these.
	Speeds    []PartitionSpeed `json:"speeds,omitempty"`
	Events    []StatusEvent    `json:"events"`
	Decisions []Decision       `json:"decisions"`
	UpdatedMS int64            `json:"updated_ms"`
}

// PartitionSpeed is a model's speed on one partition.
type PartitionSpeed struct {
	Partition string  `json:"partition"`
	Speed     float64 `json:"speed"`
	Prior     float64 `json:"prior"`        // the configured speed (1 when none)
	N         int     `json:"measurements"` // 0: Speed is the prior
	Users     int     `json:"users"`
}

// Verdict is the seff-like summary of an ended run: what it used against
// what it asked for, and the advice for the next submission.
type Verdict struct {
	MemRequestBytes int64    `json:"mem_request_bytes,omitempty"`
	MemFraction     float64  `json:"mem_fraction,omitempty"`
	CPUSeconds      float64  `json:"cpu_seconds,omitempty"`
	Cores           int      `json:"cores,omitempty"`
	CPUEfficiency   float64  `json:"cpu_efficiency,omitempty"`
	MoveLostS       float64  `json:"move_lost_s,omitempty"`
	AskMemBytes     int64    `json:"ask_mem_bytes,omitempty"`
	AskCores        int      `json:"ask_cores,omitempty"`
	Recommendation  string   `json:"recommendation"`
	Lines           []string `json:"lines"`
}

// Span is one stretch of a lineage on one partition.
type Span struct {
	JobID     uint64 `json:"job_id"`
	Attempt   int    `json:"attempt"`
	Partition string `json:"partition"`
	Node      string `json:"node"`
	StartMS   int64  `json:"start_ms"`
	EndMS     int64  `json:"end_ms,omitempty"`
	StartStep int64  `json:"start_step"`
	EndStep   int64  `json:"end_step"`
	Reason    string `json:"reason,omitempty"` // why it ended
	// Ranks is the attempt's world size, the tasks of its step
	// (SLURM_NTASKS as the wrappers report it); 0: one, or not known
	// (a status written before it was kept).
	Ranks int `json:"ranks,omitempty"`
}

// StatusEvent is something the user should see (stall, NaN loss, memory).
type StatusEvent struct {
	AtMS    int64  `json:"at_ms"`
	Kind    string `json:"kind"` // "stall", "nan-loss", "memory-near-limit", "memory-growth", "oom", ...
	Message string `json:"message"`
}

// Decision is one thing the coordinator decided, with its reason.
type Decision struct {
	AtMS     int64  `json:"at_ms"`
	Kind     string `json:"kind"` // "checkpoint", "migrate", "continue", "extend", ...
	Reason   string `json:"reason"`
	ActionID string `json:"action_id,omitempty"`
	Result   string `json:"result,omitempty"`
}

// Receipt is what a finished run measured, for the planner.
type Receipt struct {
	Model     string  `json:"model"`
	Batch     int     `json:"batch"`
	Partition string  `json:"partition"`
	NodeType  string  `json:"node_type"`
	GPUs      int     `json:"gpus"`
	IterMS    float64 `json:"iter_ms"`
	PeakRSS   int64   `json:"peak_rss_bytes"`
	PeakGPU   int64   `json:"peak_gpu_bytes"`
	Iters     int64   `json:"iters"`
	User      string  `json:"user"`
	WallS     float64 `json:"wall_s"`
	EndedMS   int64   `json:"ended_ms"`
	// UID is the run's owner: the lineage's owner, authenticated by MUNGE
	// and matched to the job's owner in Slurm. nil in receipts written
	// before it was recorded (trusted by nobody's estimate but a file's).
	UID *int `json:"uid,omitempty"`
	// Confirmed: Slurm's job table, read by the agent, backs the run: the
	// job is the owner's, its comment names this model and batch, and the
	// reported run fits in the time Slurm gave the job. Only confirmed
	// receipts are pooled into other users' estimates.
	Confirmed bool `json:"slurm_confirmed,omitempty"`
	// Profiled: written by `isched profile` from a short measured window
	// of the user's own command (warm-up left out), kept in the user's own
	// receipts file, never in Redis; IterMS is the window's mean.
	Profiled bool `json:"profiled,omitempty"`
	// ETARatios: how far the run's own ETA was off at a few points of it
	// (estimate.DriftRatios), for the ETA bands of later runs of the same
	// configuration. Only when the run's last attempt passed those points
	// on the partition it ended on.
	ETARatios []ETARatio `json:"eta_ratios,omitempty"`
}

// ETARatio is how far a run's ETA was off at one point of the run: the mean
// time per step the run took from there to its end over the time per step
// predicted there (iteration estimate + checkpoint overhead). 1 is exact;
// 1.2: the rest of the run was 20 % slower than predicted.
type ETARatio struct {
	At    float64 `json:"at"` // progress then: step / total, in (0, 1)
	Ratio float64 `json:"ratio"`
}
