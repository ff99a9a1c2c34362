package cli

import (
	"context"
	"fmt"
	"strconv"
	"strings"

	"github.com/isched/isched/internal/report"
	"github.com/isched/isched/internal/slurm"
	"github.com/isched/isched/internal/stream"
)

// Arrays. The elements of `isched submit --array` share one plan comment
// and each is a run of its own, lineage <lineage>_<task>
// (report.ElementLineage). `isched status ARRAY_JOB_ID` or `isched
// status LINEAGE` (the array's) shows them together: the elements the job
// table lists, its pending rest, and the elements that ended and left it,
// found by the array recorded in the submission history.

// commentLineage is the lineage a job's comment gives the job Slurm
// names key ("104_3" for element 3 of array 104), "" for none (no plan,
// or an array's pending rest "104_[2-3]").
func commentLineage(comment, key string) string {
	j := report.Job{Comment: comment}
	if _, task, isElement := strings.Cut(key, "_"); isElement {
		j.ArrayTasks = task // an element's "3", or a rest's "[2-3]": no one element
	}
	p, ok, err := report.JobPlan(j)
	if !ok || err != nil {
		return ""
	}
	return p.Lineage
}

// elementKey is arg when it names an array's element ("104_3"), else "".
func elementKey(arg string) string {
	if _, task, ok := strings.Cut(arg, "_"); ok && task != "" && strings.Trim(task, "0123456789") == "" {
		return arg
	}
	return ""
}

// rowPlan is the plan of a row of the user's job list: an element's
// (report.JobPlan), and for an array's pending rest, whose elements
// have no lineage yet, the array's with its task range in place of a task.
func rowPlan(j report.Job) (report.Plan, bool, error) {
	if p, ok, err := report.JobPlan(j); ok || err != nil {
		return p, ok, err
	}
	p, ok, err := report.ParsePlanComment(j.Comment)
	if ok && err == nil && p.Lineage != "" {
		p.Lineage += "_[" + j.ArrayTasks + "]"
	}
	return p, ok, err
}

// arrayRef is an array of the user's: its job id, the lineage it was
// submitted as, and its --array.
type arrayRef struct {
	jobID   uint64 // the array's job id, 0 when not known
	lineage string // the lineage it was submitted as, "" when not known
	spec    string // its --array, from the history; "" when not there
}

// arrayOf finds the array arg names (its job id, or the lineage it was
// submitted as) among the user's jobs of the job table (nil: none) and in
// the submission history; ok is false when arg names no array of the
// user's.
func (a *App) arrayOf(arg string, jobs *report.JobTable) (arrayRef, bool) {
	var ref arrayRef
	for _, s := range a.submissions(a.cluster()) {
		if s.array != "" && (s.jobID == arg || s.lineage == arg) {
			ref.lineage, ref.spec = s.lineage, s.array
			ref.jobID, _ = strconv.ParseUint(s.jobID, 10, 64)
		}
	}
	var listed []report.Job
	if jobs != nil {
		listed = jobs.Jobs
	}
	me := a.Username()
	for _, j := range listed {
		if me != "" && j.User != me {
			continue
		}
		id := j.ArrayJobID
		if j.ArrayTasks != "" {
			id = j.JobID
		}
		p, ok, _ := report.ParsePlanComment(j.Comment)
		if id == 0 || !ok {
			continue
		}
		if strconv.FormatUint(id, 10) == arg || p.Lineage == arg {
			ref.jobID, ref.lineage = id, p.Lineage
		}
	}
	return ref, ref.jobID != 0 || ref.lineage != ""
}

// members are the rows of the array's elements and rest, then those of
// elements the history's --array names that the table no longer lists,
// from the coordinator's records (slurm.ArraySpec.Tasks: at most
// slurm.MaxListedTasks looked up).
func (a *App) members(ctx context.Context, st Store, ref arrayRef, rows []listedJob) []listedJob {
	var out []listedJob
	listed := map[string]bool{}
	for _, r := range rows {
		p, ok, _ := report.ParsePlanComment(r.job.Comment)
		if !ok || p.Lineage != ref.lineage || (r.job.ArrayTaskID == nil && r.job.ArrayTasks == "") {
			continue
		}
		out = append(out, r)
		listed[r.plan.Lineage] = true
	}
	if ref.spec == "" || st == nil {
		return out
	}
	spec, err := slurm.ParseArraySpec(ref.spec)
	if err != nil {
		return out
	}
	for _, task := range spec.Tasks {
		name := report.ElementLineage(ref.lineage, task)
		if listed[name] {
			continue
		}
		s, err := readStatus(ctx, st, name)
		if err != nil || s == nil {
			continue
		}
		t := task
		j := &report.Job{JobID: s.JobID, ArrayJobID: ref.jobID, ArrayTaskID: &t, State: s.State, Partition: s.Partition}
		out = append(out, listedJob{job: j, plan: report.Plan{Lineage: name}, status: s})
	}
	return out
}

// arrayElements is the array arg names, if any, and its elements'
// lineages (those in the job table and the coordinator's records).
func (a *App) arrayElements(ctx context.Context, arg string) (arrayRef, []string, bool) {
	st, rows, ref, ok := a.findArray(ctx, arg)
	if !ok {
		return arrayRef{}, nil, false
	}
	var out []string
	for _, r := range a.members(ctx, st, ref, rows) {
		if stream.ValidName(r.plan.Lineage) { // not a pending rest of several
			out = append(out, r.plan.Lineage)
		}
	}
	return ref, out, true
}

// findArray finds the array arg names among the user's jobs of the job
// table and in the history (ok false when arg names none: a job id of an
// element, A_T, never does), then lists the user's jobs with their
// records as the list form does (without a job table, the history's).
// Only an array costs the listing: a status, stop or report of one run
// pays one read of the job table here.
func (a *App) findArray(ctx context.Context, arg string) (Store, []listedJob, arrayRef, bool) {
	if !isJobID(arg) && !stream.ValidName(arg) || strings.Contains(arg, "_") && isJobID(arg) {
		return nil, nil, arrayRef{}, false
	}
	jobs, _ := a.jobTable(ctx) // nil without one
	ref, ok := a.arrayOf(arg, jobs)
	if !ok {
		return nil, nil, arrayRef{}, false
	}
	if jobs == nil {
		jobs = a.historyTable(ctx)
	}
	st, _ := a.openStore(ctx)
	return st, a.myJobs(ctx, st, jobs, ""), ref, true
}

// showArray prints an array's elements as `isched status` lists runs;
// false when arg names no array.
func (a *App) showArray(ctx context.Context, arg string, asJSON bool) (bool, error) {
	st, rows, ref, ok := a.findArray(ctx, arg)
	if !ok {
		return false, nil
	}
	members := a.members(ctx, st, ref, rows)
	if asJSON {
		return true, a.writeRowsJSON(members)
	}
	fmt.Fprintf(a.stdout, "array %s, lineage %s: element <task> is lineage %s_<task>\n", arrayName(ref), ref.lineage, ref.lineage)
	if len(members) == 0 {
		fmt.Fprintln(a.stdout, "no element in the job table or the coordinator's records yet")
		return true, nil
	}
	return true, a.writeJobList(members)
}

// elementExamples names an array's first elements as `isched report`
// takes them: their lineages.
func elementExamples(ref arrayRef, elements []string) string {
	if len(elements) == 0 {
		return ref.lineage + "_<task>"
	}
	if len(elements) > 2 {
		return strings.Join(elements[:2], ", ") + ", ..."
	}
	return strings.Join(elements, ", ")
}

func arrayName(ref arrayRef) string {
	name := "job " + strconv.FormatUint(ref.jobID, 10)
	if ref.jobID == 0 {
		name = "(job id not known)"
	}
	if ref.spec != "" {
		name += " (--array=" + ref.spec + ")"
	}
	return name
}
