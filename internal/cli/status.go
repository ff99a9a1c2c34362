package cli

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"sort"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/isched/isched/internal/estimate"
	"github.com/isched/isched/internal/plan"
	"github.com/isched/isched/internal/report"
	"github.com/isched/isched/internal/slurm"
	"github.com/isched/isched/internal/stream"
	"github.com/spf13/pflag"
)

// statusCmd is `isched status`: the coordinator's status of one run, or
// the list of the user's runs.
type statusCmd struct {
	app    *App
	asJSON bool
	watch  bool
	every  time.Duration
}

func (c *statusCmd) leaf() leaf {
	return leaf{
		use:   "status [JOB|LINEAGE] [--json] [--watch]",
		short: "a job's partitions, progress, ETA, memory, checkpoints and decisions; with no job, your runs",
		flags: func(fs *pflag.FlagSet) {
			fs.BoolVar(&c.asJSON, "json", false, "print the coordinator's record of the job as JSON (RFC 3339 times, seconds, bytes: docs/json.md)")
			fs.BoolVar(&c.watch, "watch", false, "refresh until the job ends (Ctrl-C to stop)")
			fs.DurationVar(&c.every, "interval", 5*time.Second, "refresh interval of --watch")
		},
		run: c.run, args: c.app.completeJobs,
	}
}

func (c *statusCmd) run(ctx context.Context, pos []string) error {
	a := c.app
	if len(pos) > 1 {
		return usageErr("one job id or lineage at a time, got %q", pos)
	}
	if c.every < 500*time.Millisecond {
		return usageErr("--interval must be at least 500ms")
	}
	if len(pos) == 0 {
		return a.listJobs(ctx, c.asJSON)
	}
	if shown, err := a.showArray(ctx, pos[0], c.asJSON); shown || err != nil {
		return err
	}
	for first := true; ; first = false {
		st, err := a.showOne(ctx, pos[0], c.asJSON, c.watch, first)
		if err != nil || !c.watch || (st != nil && st.State == "ENDED") {
			return err
		}
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(c.every):
		}
	}
}

// target is what a JOB|LINEAGE argument resolved to.
type target struct {
	lineage string
	job     *report.Job // from the job table, when listed there
	how     string      // how the lineage was found
	// for a job id: the id, its owner's uid as Slurm says (-1 unknown),
	// and whether the lineage is the wrapper's default name (only that
	// job reports into it)
	jobArg   string
	ownerUID int
	dflt     bool
	// acct: the job as Slurm's accounting keeps it (sacct), read when
	// slurmctld no longer knows it; nil without accounting
	acct *slurm.AcctJob
	// info: the job as slurmctld shows it (scontrol), when asked
	info *slurm.JobInfo
	// unknown: a job id Slurm says it does not know (scontrol: Invalid
	// job id, and no accounting record) that neither the job table nor the
	// submission history lists;
	// unless the coordinator has a record in its default lineage, nobody
	// knows the job (a mistyped id, or one long gone)
	unknown bool
}

// errNoSuchJob: neither Slurm nor isched knows the job id.
var errNoSuchJob = errors.New("no such job in Slurm or in isched's records")

// noSuchJob is the error for a target nobody knows, nil for one that some
// record names: s, the coordinator's record of its lineage, or found, that
// the lineage has other records (samples).
func (t target) noSuchJob(s *report.JobStatus, found bool) error {
	if !t.unknown || s != nil || found {
		return nil
	}
	return fmt.Errorf("job %s: %w", t.jobArg, errNoSuchJob)
}

// mismatch says why a lineage's record is not the job's that was asked
// for, "" when it is (or nothing tells): the record of a lineage another
// uid owns, or a default-named lineage that tracks another job. The
// coordinator lets nobody else's job into a job's lineage; this keeps a
// record written before that rule, or a lineage name a job's comment
// shares with another user's, from being shown as the job's.
func (t target) mismatch(s *report.JobStatus) string {
	if t.jobArg == "" || s.JobID == 0 {
		return ""
	}
	if t.ownerUID >= 0 && s.UID != t.ownerUID {
		return fmt.Sprintf("lineage %s tracks job %d of uid %d, but job %s belongs to uid %d", t.lineage, s.JobID, s.UID, t.jobArg, t.ownerUID)
	}
	id := t.jobArg
	if t.job != nil {
		id = strconv.FormatUint(t.job.JobID, 10)
	}
	if t.dflt && !strings.Contains(id, "_") && strconv.FormatUint(s.JobID, 10) != id {
		return fmt.Sprintf("lineage %s tracks job %d, not job %s", t.lineage, s.JobID, t.jobArg)
	}
	return ""
}

func isJobID(s string) bool { return slurm.ValidJobID(s) }

// resolve finds the lineage of a job id: the plan in the job's comment, from
// the agent's job table, else from Slurm (scontrol show job), else the
// wrapper's default <cluster>-<job id>.
func (a *App) resolve(ctx context.Context, arg string, jobs *report.JobTable) (target, error) {
	if !isJobID(arg) {
		return resolveLineage(arg, jobs)
	}
	if t, ok := a.resolveInTable(arg, jobs); ok {
		return t, nil
	}
	owner := -1
	info, err := a.Slurm.ShowJob(ctx, arg)
	if err == nil {
		owner = info.UID
		// "A_T" asked: element T's, also where Slurm shows it still in the
		// array's pending rest (its record's id is then the array's)
		if l := commentLineage(info.Comment, cmp.Or(elementKey(arg), info.ID())); l != "" {
			return target{lineage: l, how: "plan in the job's comment (scontrol)", jobArg: arg, ownerUID: owner, info: info}, nil
		}
	}
	var acct *slurm.AcctJob
	if errors.Is(err, slurm.ErrNotFound) {
		// slurmctld forgot the job (MinJobAge): its accounting has not
		acct = a.acctJob(ctx, arg)
		if acct != nil {
			owner = acct.UID
			if l := commentLineage(acct.Comment, acct.JobID); l != "" {
				return target{lineage: l, how: "plan in the job's comment (Slurm accounting)", jobArg: arg, ownerUID: owner, acct: acct}, nil
			}
		}
	}
	if l := a.recall(arg); l != "" {
		return target{lineage: l, how: "from your submission history " + a.historyPath(), jobArg: arg, ownerUID: owner, acct: acct, info: info}, nil
	}
	if errors.Is(err, slurm.ErrNotFound) && acct == nil {
		// not a job of this cluster: one this user sent to another
		if l := a.recallElsewhere(arg); l != "" {
			return target{lineage: l, how: "from your submission history " + a.historyPath() + " (cluster " + a.lineageCluster(l) + ")", jobArg: arg, ownerUID: -1}, nil
		}
	}
	return target{lineage: a.cluster() + "-" + arg, how: "the wrapper's default (job not in the job table)", jobArg: arg, ownerUID: owner, dflt: true,
		acct: acct, info: info, unknown: errors.Is(err, slurm.ErrNotFound) && acct == nil}, nil
}

// resolveLineage is the target of a lineage id, with the job in the table
// whose plan names it, if any.
func resolveLineage(arg string, jobs *report.JobTable) (target, error) {
	if !stream.ValidName(arg) {
		return target{}, usageErr("%q is neither a job id nor a lineage id", arg)
	}
	t := target{lineage: arg, how: "given"}
	if jobs != nil {
		for i := range jobs.Jobs {
			if p, ok, _ := report.JobPlan(jobs.Jobs[i]); ok && p.Lineage == arg {
				t.job = &jobs.Jobs[i]
			}
		}
	}
	return t, nil
}

// resolveInTable finds a job id in the agent's job table; false when it
// is not there.
func (a *App) resolveInTable(arg string, jobs *report.JobTable) (target, bool) {
	if jobs == nil {
		return target{}, false
	}
	for i := range jobs.Jobs {
		j := &jobs.Jobs[i]
		if strconv.FormatUint(j.JobID, 10) != arg && jobKey(j) != arg {
			continue
		}
		if p, ok, err := report.JobPlan(*j); ok && err == nil && p.Lineage != "" {
			return target{lineage: p.Lineage, job: j, how: "plan in the job's comment", jobArg: arg, ownerUID: j.UID}, true
		}
		return target{lineage: a.cluster() + "-" + jobKey(j), job: j, how: "no isched plan in the comment: the wrapper's default",
			jobArg: arg, ownerUID: j.UID, dflt: true}, true
	}
	return target{}, false
}

// acctReader is a Slurm that can read its accounting (*slurm.Client).
type acctReader interface {
	AcctJob(ctx context.Context, jobID string) (*slurm.AcctJob, error)
}

// acctJob is the job's accounting record, nil when there is none or no
// accounting to ask.
func (a *App) acctJob(ctx context.Context, id string) *slurm.AcctJob {
	ar, ok := a.Slurm.(acctReader)
	if !ok {
		return nil
	}
	j, err := ar.AcctJob(ctx, id)
	if err != nil {
		return nil
	}
	return j
}

func jobKey(j *report.Job) string {
	task, isElement := j.Element()
	switch {
	case isElement && j.ArrayTaskID != nil:
		return strconv.FormatUint(j.ArrayJobID, 10) + "_" + strconv.Itoa(task)
	case isElement: // a pending rest of one task holds the array's id
		return strconv.FormatUint(j.JobID, 10) + "_" + strconv.Itoa(task)
	case j.ArrayTasks != "":
		return strconv.FormatUint(j.JobID, 10) + "_[" + j.ArrayTasks + "]" // squeue's spelling of a pending rest
	}
	return strconv.FormatUint(j.JobID, 10)
}

// jobTable reads the agent's job table from Redis; nil when unavailable.
func (a *App) jobTable(ctx context.Context) (*report.JobTable, error) {
	st, err := a.openStore(ctx)
	if err != nil {
		return nil, err
	}
	return jobTableIn(ctx, st)
}

// jobTableIn reads the agent's job table under st's keys.
func jobTableIn(ctx context.Context, st Store) (*report.JobTable, error) {
	b, err := st.Get(ctx, st.Keys().Jobs())
	if err != nil {
		return nil, err
	}
	env, err := report.DecodeTableOf(b, report.KindJobs)
	if err != nil {
		return nil, fmt.Errorf("job table: %w", err)
	}
	return env.Jobs, nil
}

// located is a status argument resolved, with the store of the cluster
// its lineage is on and whether that cluster's job table could be read.
type located struct {
	st     Store
	t      target
	jobErr error // the job table's read error; nil: read
}

// locate resolves a status argument on the cluster its lineage is on: a
// lineage of another cluster of the clusters setting is read under that
// cluster's keys, as is a job id the submission history puts there.
func (a *App) locate(ctx context.Context, arg string) (located, error) {
	st, err := a.storeFor(ctx, a.lineageCluster(arg))
	if err != nil {
		return located{}, fmt.Errorf("redis: %w", err)
	}
	jobs, jerr := jobTableIn(ctx, st)
	t, err := a.resolve(ctx, arg, jobs)
	if err != nil {
		return located{}, err
	}
	if c := a.lineageCluster(t.lineage); c != "" && c != a.lineageCluster(arg) {
		if st, err = a.storeFor(ctx, c); err != nil {
			return located{}, fmt.Errorf("redis: %w", err)
		}
		_, jerr = jobTableIn(ctx, st)
		t.job = nil
	}
	return located{st: st, t: t, jobErr: jerr}, nil
}

func (a *App) showOne(ctx context.Context, arg string, asJSON, watch, first bool) (*report.JobStatus, error) {
	loc, err := a.locate(ctx, arg)
	if err != nil {
		return nil, err
	}
	st, t, jerr := loc.st, loc.t, loc.jobErr
	s, err := readStatus(ctx, st, t.lineage)
	if err != nil && !errors.Is(err, stream.ErrNotFound) {
		return nil, err
	}
	if err := t.noSuchJob(s, false); err != nil {
		return nil, err
	}
	if s != nil {
		if why := t.mismatch(s); why != "" {
			return nil, fmt.Errorf("%s: not shown as job %s's status", why, arg)
		}
		if t.job != nil && t.jobArg == "" && t.job.UID != s.UID && s.JobID != 0 {
			t.job = nil // another user's job names the lineage in its comment: not this record's
		}
	}
	if asJSON {
		return s, a.writeStatusJSON(s, t, st.Keys().JobStatus(t.lineage))
	}
	if watch && !first {
		if a.Terminal(a.stdout) {
			fmt.Fprint(a.stdout, "\x1b[H\x1b[2J")
		} else {
			fmt.Fprintln(a.stdout, "---")
		}
	}
	now := a.Now()
	if s == nil {
		a.writeNoStatus(t, jerr, st.Keys().JobStatus(t.lineage), now)
		return nil, nil
	}
	writeStatus(a.stdout, s, t.job, now)
	return s, nil
}

// writeStatusJSON prints the coordinator's record of the target, else what
// Slurm says of its job (slurmStatus); an error when neither knows it.
func (a *App) writeStatusJSON(s *report.JobStatus, t target, key string) error {
	if s != nil {
		return writeJSON(a.stdout, statusView(s))
	}
	note := fmt.Sprintf("no isched status yet (key %s): the coordinator has not seen the job start, or none follows this cluster", key)
	v, ok := slurmStatus(t, cmp.Or(a.lineageCluster(t.lineage), a.cluster()), note)
	if !ok {
		return fmt.Errorf("no status for lineage %s (key %s): the coordinator has not seen the job yet, and Slurm does not show it", t.lineage, key)
	}
	return writeJSON(a.stdout, v)
}

// writeNoStatus shows a target the coordinator has no status of: its job
// in Slurm's job table or accounting, and why there is no status.
func (a *App) writeNoStatus(t target, jerr error, key string, now time.Time) {
	fmt.Fprintf(a.stdout, "lineage %s (%s)\n", t.lineage, t.how)
	if t.job != nil {
		writeSlurmJob(a.stdout, t.job, now)
	} else if t.acct != nil {
		writeAcctJob(a.stdout, t.acct)
		return // an old job: its record in accounting is all there is
	} else if jerr != nil {
		fmt.Fprintf(a.stdout, "job table: unavailable (%s)\n", shortErr(jerr))
	}
	fmt.Fprintf(a.stdout, "no isched status yet (key %s): the coordinator has not seen the job start (is isched-coordinator running?)\n", key)
}

// writeAcctJob prints a job's accounting record and the verdict the
// coordinator left in its AdminComment.
func writeAcctJob(w io.Writer, j *slurm.AcctJob) {
	fmt.Fprintf(w, "slurm accounting: job %s of %s %s on %s after %s, exit %s\n", clean(j.JobID), clean(j.User), clean(j.State),
		clean(j.Partition), j.Elapsed, clean(j.ExitCode))
	if j.AdminComment != "" {
		fmt.Fprintf(w, "verdict: %s\n", clean(j.AdminComment))
	} else {
		fmt.Fprintln(w, "verdict: none in the job's AdminComment (the coordinator writes it when the run ends)")
	}
	fmt.Fprintln(w, "no isched status: the coordinator's record of the run has expired")
}

func writeSlurmJob(w io.Writer, j *report.Job, now time.Time) {
	fmt.Fprintf(w, "slurm: job %s %s on %s", jobKey(j), j.State, clean(j.Partition))
	if j.Nodes != "" {
		fmt.Fprintf(w, " (%s)", clean(j.Nodes))
	}
	if j.Reason != "" && j.Reason != "None" {
		fmt.Fprintf(w, ", reason %s", clean(j.Reason))
	}
	if j.ExpectedStartMS > 0 {
		fmt.Fprintf(w, ", Slurm expects it to start %s", when(time.UnixMilli(j.ExpectedStartMS), now))
	}
	fmt.Fprintln(w)
}

// when prints a time relative to now: "14:32:10 (in 12 min)".
func when(t, now time.Time) string {
	t = t.In(now.Location())
	layout := "15:04:05"
	if t.Format("2006-01-02") != now.Format("2006-01-02") {
		layout = "2006-01-02 15:04"
	}
	d := t.Sub(now)
	switch {
	case d > time.Second:
		return fmt.Sprintf("%s (in %s)", t.Format(layout), ago(d))
	case d < -time.Second:
		return fmt.Sprintf("%s (%s ago)", t.Format(layout), ago(-d))
	}
	return t.Format(layout) + " (now)"
}

func clock(ms int64, now time.Time) string {
	if ms <= 0 {
		return ""
	}
	t := time.UnixMilli(ms).In(now.Location())
	if t.Format("2006-01-02") != now.Format("2006-01-02") {
		return t.Format("01-02 15:04")
	}
	return t.Format("15:04:05")
}

// ProgressBar draws done/total in width cells.
func ProgressBar(done, total int64, width int) string {
	if total <= 0 || width <= 0 {
		return ""
	}
	f := float64(max(done, 0)) / float64(total)
	f = min(f, 1)
	n := int(f*float64(width) + 0.5)
	return "[" + strings.Repeat("#", n) + strings.Repeat(".", width-n) + "]"
}

func writeStatus(w io.Writer, s *report.JobStatus, job *report.Job, now time.Time) {
	writeStatusHeader(w, s, job, now)
	writePlanLine(w, s.Plan)
	writeProgress(w, s, now)
	writeMemory(w, s)
	writeCheckpoint(w, s, now)
	writeHistory(w, s, now)
	writeDecisionsAndEvents(w, s, now)
	writeVerdict(w, s)
	if s.UpdatedMS > 0 {
		fmt.Fprintf(w, "updated %s ago\n", ago(now.Sub(time.UnixMilli(s.UpdatedMS))))
	}
}

// writeStatusHeader writes the job's line (and what Slurm says of it while
// it is pending).
func writeStatusHeader(w io.Writer, s *report.JobStatus, job *report.Job, now time.Time) {
	fmt.Fprintf(w, "job %d · lineage %s · user %s · %s", s.JobID, s.Lineage, clean(s.User), clean(s.State))
	if s.Partition != "" {
		fmt.Fprintf(w, " on %s", clean(s.Partition))
		if s.Node != "" {
			fmt.Fprintf(w, " (%s)", clean(s.Node))
		}
	}
	fmt.Fprintf(w, ", attempt %d\n", s.Attempt)
	if job != nil && job.JobID != s.JobID {
		fmt.Fprintf(w, "note: the job table lists this lineage as job %d\n", job.JobID)
	}
	if job != nil && job.State == "PENDING" {
		writeSlurmJob(w, job, now)
	}
}

// writePlanLine writes the plan the job was submitted with, if any.
func writePlanLine(w io.Writer, p *report.Plan) {
	if p == nil {
		return
	}
	fmt.Fprintf(w, "plan:       ideal %s", clean(p.Ideal))
	if p.IdealGres != "" {
		fmt.Fprintf(w, " (%s)", clean(p.IdealGres))
	}
	if len(p.Fallbacks) > 0 {
		fmt.Fprintf(w, ", fallbacks %s", clean(strings.Join(p.Fallbacks, ",")))
	}
	if p.Migrate {
		fmt.Fprint(w, ", may move")
	}
	if p.Elastic != nil {
		fmt.Fprintf(w, ", elastic %s GPUs", p.Elastic)
	}
	if p.Batch > 0 {
		fmt.Fprintf(w, ", batch %d", p.Batch)
	}
	fmt.Fprintln(w)
}

// writeProgress writes progress, speed, ETA and the time limit.
func writeProgress(w io.Writer, s *report.JobStatus, now time.Time) {
	step := max(s.Step, 0)
	switch {
	case s.TotalIters > 0:
		fmt.Fprintf(w, "progress:   %s %d/%d iterations (%.1f%%)\n", ProgressBar(step, s.TotalIters, 30), step, s.TotalIters,
			100*float64(step)/float64(s.TotalIters))
		if s.LoopTotal > 0 && s.PlanTotal > 0 && s.LoopTotal != s.PlanTotal {
			fmt.Fprintf(w, "total:      %d (your loop says; the plan computed %d)\n", s.LoopTotal, s.PlanTotal)
		}
	case s.Step >= 0:
		fmt.Fprintf(w, "progress:   %d iterations (total unknown)\n", step)
	default:
		fmt.Fprintln(w, "progress:   no iteration seen yet")
	}
	if s.IterMS > 0 {
		fmt.Fprintf(w, "speed:      %s/iteration (%s to %s)\n", ms(s.IterMS), ms(s.IterLowMS), ms(s.IterHighMS))
	}
	if len(s.Speeds) > 0 {
		fmt.Fprintf(w, "speeds:     %s\n", speedsLine(s.Speeds))
	}
	fmt.Fprintf(w, "ETA:        %s\n", eta(s, now))
	if s.Loss != nil {
		fmt.Fprintf(w, "loss:       %s\n", lossLine(s.Loss))
	}
	if s.LimitMS > 0 && s.State != "ENDED" {
		fmt.Fprintf(w, "time limit: %s\n", when(time.UnixMilli(s.LimitMS), now))
	}
}

// lossLine says the run's reported loss: the last, the lowest, the trend.
func lossLine(l *report.LossStatus) string {
	var b strings.Builder
	if l.N > 0 {
		fmt.Fprintf(&b, "%.4g at step %d", l.Last, l.Step)
		if l.MinStep != l.Step {
			fmt.Fprintf(&b, " (lowest %.4g at step %d)", l.Min, l.MinStep)
		}
		switch {
		case l.FromStep == 0:
		case math.Abs(l.Trend) < 0.02:
			fmt.Fprintf(&b, ", flat since step %d", l.FromStep)
		case l.Trend < 0:
			fmt.Fprintf(&b, ", falling %.0f%% since step %d", -100*l.Trend, l.FromStep)
		default:
			fmt.Fprintf(&b, ", rising %.0f%% since step %d", 100*l.Trend, l.FromStep)
		}
	}
	if l.NonFinite > 0 {
		if b.Len() > 0 {
			b.WriteString("; ")
		}
		fmt.Fprintf(&b, "%d NaN or infinite", l.NonFinite)
	}
	return b.String()
}

// speedsLine says the model's speed per partition and where each comes
// from: "cpu 1 (configured), gpu 3.85 (learned from 4 measurements of 2 users; configured 4)".
func speedsLine(sp []report.PartitionSpeed) string {
	parts := make([]string, 0, len(sp))
	for _, p := range sp {
		g := strconv.FormatFloat(p.Speed, 'g', 3, 64)
		if p.N == 0 {
			parts = append(parts, fmt.Sprintf("%s %s (configured)", clean(p.Partition), g))
			continue
		}
		parts = append(parts, fmt.Sprintf("%s %s (learned from %d measurements of %d users; configured %s)", clean(p.Partition), g, p.N, p.Users,
			strconv.FormatFloat(p.Prior, 'g', 3, 64)))
	}
	return strings.Join(parts, ", ")
}

// writeMemory writes the process's memory, its cgroup's apart, and each GPU's.
func writeMemory(w io.Writer, s *report.JobStatus) {
	writeProcessMemory(w, s)
	ids := make([]string, 0, len(s.GPUBytes))
	for id := range s.GPUBytes {
		ids = append(ids, id)
	}
	sort.Strings(ids)
	for _, id := range ids {
		fmt.Fprintf(w, "  GPU %s: %s (peak %s)\n", clean(id), plan.FormatBytes(s.GPUBytes[id]), plan.FormatBytes(s.PeakGPUBytes[id]))
	}
}

// writeCheckpoint writes the last checkpoint seen.
func writeCheckpoint(w io.Writer, s *report.JobStatus, now time.Time) {
	if c := s.LastCheckpoint; c != nil {
		fmt.Fprintf(w, "checkpoint: %s", clean(c.Path))
		if c.Step != nil {
			fmt.Fprintf(w, " at step %d", *c.Step)
		}
		if c.Size > 0 {
			fmt.Fprintf(w, ", %s", plan.FormatBytes(c.Size))
		}
		if c.MTimeMS > 0 {
			fmt.Fprintf(w, ", %s", when(time.UnixMilli(c.MTimeMS), now))
		}
		if s.CkptMS > 0 {
			fmt.Fprintf(w, " (checkpoints take ~%s)", ms(s.CkptMS))
		}
		fmt.Fprintln(w)
	} else {
		fmt.Fprintln(w, "checkpoint: none yet")
	}
}

// writeHistory writes the partitions the lineage ran on.
func writeHistory(w io.Writer, s *report.JobStatus, now time.Time) {
	if len(s.History) > 0 {
		fmt.Fprintln(w, "partitions:")
		tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
		for _, sp := range s.History {
			end, steps := "", fmt.Sprintf("steps %d-", sp.StartStep)
			if sp.EndMS > 0 {
				end = clock(sp.EndMS, now)
				steps += strconv.FormatInt(sp.EndStep, 10)
			}
			line := fmt.Sprintf("  %s\t%s\tjob %d attempt %d%s\t%s-%s\t%s", clean(sp.Partition), clean(sp.Node), sp.JobID, sp.Attempt,
				ranksNote(sp.Ranks), clock(sp.StartMS, now), end, steps)
			if sp.Reason != "" {
				line += "\t" + clean(sp.Reason)
			}
			fmt.Fprintln(tw, line)
		}
		tw.Flush()
		if c := chain(s); c != "" {
			fmt.Fprintln(w, "attempts:   "+c)
		}
	}
}

// writeDecisionsAndEvents writes the coordinator's decisions and the job's
// events.
func writeDecisionsAndEvents(w io.Writer, s *report.JobStatus, now time.Time) {
	if len(s.Decisions) > 0 {
		fmt.Fprintln(w, "decisions:")
		for _, d := range s.Decisions {
			fmt.Fprintf(w, "  %s %s: %s", clock(d.AtMS, now), clean(d.Kind), clean(d.Reason))
			if d.Result != "" {
				fmt.Fprintf(w, " [%s]", clean(d.Result))
			}
			fmt.Fprintln(w)
		}
	}
	if len(s.Events) > 0 {
		fmt.Fprintln(w, "events:")
		for _, e := range s.Events {
			fmt.Fprintf(w, "  %s %s: %s\n", clock(e.AtMS, now), clean(e.Kind), clean(e.Message))
		}
	}
}

// ago prints a short age: "3 s", "12 min", "2.5 h".
func ago(d time.Duration) string {
	if d < time.Minute {
		return fmt.Sprintf("%d s", int(max(d, 0).Seconds()))
	}
	return plan.FormatDuration(d)
}

func ms(v float64) string {
	d := time.Duration(v * float64(time.Millisecond))
	switch {
	case d < time.Second:
		return fmt.Sprintf("%.0f ms", v)
	case d < time.Minute:
		return fmt.Sprintf("%.2f s", d.Seconds())
	}
	return d.Round(time.Second).String()
}

// eta prints the predicted end with its band, or why it is unknown.
func eta(s *report.JobStatus, now time.Time) string {
	switch {
	case s.State == "ENDED":
		if s.EndedMS > 0 {
			code := ""
			if s.ExitStatus != nil {
				code = fmt.Sprintf(", exit status %d", *s.ExitStatus)
			}
			return "ended " + when(time.UnixMilli(s.EndedMS), now) + code
		}
		return "ended"
	case s.ETAMS > 0:
		out := when(time.UnixMilli(s.ETAMS), now)
		if s.ETALowMS > 0 && s.ETAHighMS > 0 {
			band := clock(s.ETALowMS, now) + "–" + clock(s.ETAHighMS, now)
			switch {
			case s.ETABandCoverage > 0: // calibrated on earlier runs (estimate.ETA.Calibrated)
				out += fmt.Sprintf("; %.0f %% band %s (from %d earlier runs)", 100*s.ETABandCoverage, band, s.ETABandRuns)
			case s.ETABandSource != "":
				out += fmt.Sprintf("; band %s (coverage unknown: %d earlier runs, too few to calibrate)", band, s.ETABandRuns)
			default: // a coordinator from before calibrated bands
				out += fmt.Sprintf("; band %s to %s", clock(s.ETALowMS, now), clock(s.ETAHighMS, now))
			}
		}
		return out + etaSourceText(s)
	case s.TotalIters <= 0:
		return "unknown: total iterations unknown (pass --total-iters to the wrapper, or total= from the training loop)"
	case s.IterMS <= 0:
		return "unknown: no iteration times yet, and no earlier confirmed run of this model and batch on this partition"
	}
	return "unknown: the coordinator has not predicted it yet"
}

// etaSourceText says what an ETA made before the run's own first
// iterations rests on (report.JobStatus.ETASource); "" after them.
func etaSourceText(s *report.JobStatus) string {
	where := "of this model and batch on " + clean(s.Partition)
	switch estimate.PriorSource(s.ETASource) {
	case estimate.PriorOwn:
		return fmt.Sprintf(" (before the first iterations: from your %d earlier run(s) %s)", s.ETAPriorRuns, where)
	case estimate.PriorPooled:
		return fmt.Sprintf(" (before the first iterations: from %d other user(s)' Slurm-confirmed runs %s; none of yours)", s.ETAPriorRuns, where)
	case "":
		return ""
	}
	return " (source " + clean(s.ETASource) + ")"
}

// listJobs shows the caller's isched jobs from the job table.
// listedJob is one of the user's isched jobs in a cluster's job table.
type listedJob struct {
	cluster string // "" for the home cluster
	job     *report.Job
	plan    report.Plan
	status  *report.JobStatus
}

// myJobs are the user's isched jobs of one cluster's job table, with their
// status under st's keys.
func (a *App) myJobs(ctx context.Context, st Store, jobs *report.JobTable, cluster string) []listedJob {
	me := a.Username()
	var rows []listedJob
	for i := range jobs.Jobs {
		j := &jobs.Jobs[i]
		if me != "" && j.User != me {
			continue
		}
		p, ok, err := rowPlan(*j)
		if !ok || err != nil {
			continue
		}
		r := listedJob{cluster: cluster, job: j, plan: p}
		if st != nil && stream.ValidName(p.Lineage) { // not a pending rest of several
			r.status, _ = readStatus(ctx, st, p.Lineage)
		}
		rows = append(rows, r)
	}
	return rows
}

// listJobs lists the user's isched jobs: the home cluster's, then those of
// the other clusters of the clusters setting (JOB@CLUSTER).
func (a *App) listJobs(ctx context.Context, asJSON bool) error {
	jobs, err := a.jobTable(ctx)
	if err != nil {
		// no agent publishes this cluster: the submissions Slurm still shows
		jobs = a.historyTable(ctx)
		fmt.Fprintf(a.stderr, "isched status: no job table (%v): listing your submissions (%s) that Slurm still shows\n", shortErr(err), a.historyPath())
	}
	st, _ := a.openStore(ctx)
	rows := a.myJobs(ctx, st, jobs, "")
	for _, c := range a.otherNames() {
		cst, err := a.storeFor(ctx, c)
		if err != nil {
			continue
		}
		if cj, err := jobTableIn(ctx, cst); err == nil {
			rows = append(rows, a.myJobs(ctx, cst, cj, c)...)
		}
	}
	if asJSON {
		return a.writeRowsJSON(rows)
	}
	if len(rows) == 0 {
		fmt.Fprintf(a.stdout, "no isched jobs of %s in the job table\n", a.Username())
		return nil
	}
	return a.writeJobList(rows)
}

// writeRowsJSON prints rows as `isched status --json` lists runs: the
// coordinator's record of each, else what Slurm says of it.
func (a *App) writeRowsJSON(rows []listedJob) error {
	out := []any{}
	for _, r := range rows {
		if r.status != nil {
			out = append(out, statusView(r.status))
		} else if v, ok := slurmStatus(target{lineage: r.plan.Lineage, job: r.job}, cmp.Or(r.cluster, a.cluster()), "no isched status yet: the coordinator has not seen the job start"); ok {
			out = append(out, v)
		}
	}
	return writeJSON(a.stdout, out)
}

func (a *App) writeJobList(rows []listedJob) error {
	now := a.Now()
	tw := tabwriter.NewWriter(a.stdout, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "JOB\tLINEAGE\tSTATE\tPARTITION\tPROGRESS\tETA")
	for _, r := range rows {
		prog, e := "-", "-"
		if s := r.status; s != nil {
			if s.TotalIters > 0 {
				prog = fmt.Sprintf("%d/%d", max(s.Step, 0), s.TotalIters)
			} else if s.Step >= 0 {
				prog = strconv.FormatInt(s.Step, 10)
			}
			if s.ETAMS > 0 {
				e = when(time.UnixMilli(s.ETAMS), now)
			}
		}
		id := jobKey(r.job)
		if r.cluster != "" {
			id += "@" + r.cluster
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\n", id, r.plan.Lineage, clean(r.job.State), clean(r.job.Partition), prog, e)
	}
	return tw.Flush()
}

// chain says how a lineage's attempts follow each other (job ids and
// attempts, isched's continuations): "" for a single attempt.
func chain(s *report.JobStatus) string {
	if len(s.History) < 2 {
		return ""
	}
	ids := make([]string, len(s.History))
	var newJobs []string // the jobs a run went on in after the first (resubmitted)
	for i, sp := range s.History {
		ids[i] = fmt.Sprintf("job %d.%d", sp.JobID, sp.Attempt)
		if i > 0 && sp.JobID != s.History[i-1].JobID {
			newJobs = append(newJobs, fmt.Sprintf("job %d", sp.JobID))
		}
	}
	out := fmt.Sprintf("%d (%s)", len(s.History), strings.Join(ids, " → "))
	if len(newJobs) > 0 {
		out += ", resubmitted as " + strings.Join(newJobs, ", then ")
	}
	switch s.Continuations {
	case 0:
	case 1:
		out += ", continued once by isched"
	default:
		out += fmt.Sprintf(", continued %d times by isched", s.Continuations)
	}
	if s.ResumeFailures > 0 {
		// the loop's own first step said it started over: work redone
		out += fmt.Sprintf("; RESTARTED %d time(s) behind the checkpoint it was given (see the resume-failed events)", s.ResumeFailures)
	}
	return out
}

// ranksNote is ", N ranks" for an attempt of several ranks (its world
// size), "" for one.
func ranksNote(n int) string {
	if n > 1 {
		return fmt.Sprintf(", %d ranks", n)
	}
	return ""
}
