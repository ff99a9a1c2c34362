package report

import (
	"encoding/json"
	"fmt"
	"math"
	"strconv"
	"strings"
)

// PlanPrefix starts a job comment that carries an isched plan. `isched
// submit` writes it (sbatch --comment); the agent's job table carries it to
// the coordinator. A user can only write plans for their own jobs, so the
// plan is trusted as far as that job is concerned, and validated like any input.
const PlanPrefix = "isched:v1"

// MaxCPUs bounds a CPU count in a plan or an action (a node's CPUs per
// task).
const MaxCPUs = 1 << 16

// Plan says where a job would ideally run and what it may run on meanwhile.
type Plan struct {
	Lineage   string `json:"lineage,omitempty"`            // lineage id chosen by `isched submit`
	Cluster   string `json:"cluster,omitempty"`            // isched cluster key the job reports to; empty: any
	Ideal     string `json:"ideal,omitempty"`              // ideal partition
	IdealGres string `json:"ideal_gres,omitempty"`         // GRES on the ideal partition, e.g. "gpu:1"; empty: none
	IdealTime int64  `json:"ideal_time_minutes,omitempty"` // time limit on the ideal partition, minutes (0: partition default)
	// IdealCPUs is the CPUs per task on the ideal partition (its node
	// type's share per device); 0: keep the submission's. A move to the
	// ideal partition sets it: a job started on a whole CPU node would
	// otherwise hold every CPU of a GPU node, or not fit one at all.
	IdealCPUs int      `json:"ideal_cpus,omitempty"`
	Fallbacks []string `json:"fallbacks,omitempty"`   // partitions it may start on while the ideal one is busy
	Total     int64    `json:"total_iters,omitempty"` // total iterations, 0 when unknown
	Model     string   `json:"model,omitempty"`       // model fingerprint (for receipts), optional
	Batch     int      `json:"batch,omitempty"`       // batch size (for receipts), optional
	Migrate   bool     `json:"migrate,omitempty"`     // the user allows migration
	// Elastic is the range of GPUs (one task each) the run may be resized
	// within (`isched submit --gpus 1-4`, issue 42); nil: fixed size.
	Elastic *Elastic `json:"elastic,omitempty"`
}

// Elastic is an elastic run's size range, in GPUs (ranks): it is launched
// at Min and may grow to Max when GPUs idle, and shrink back to Min.
type Elastic struct {
	Min int `json:"min"`
	Max int `json:"max"`
}

// MaxElastic bounds an elastic run's largest size (ranks).
const MaxElastic = 1024

// String is the range as the plan comment and --gpus spell it ("1-4").
func (e Elastic) String() string { return strconv.Itoa(e.Min) + "-" + strconv.Itoa(e.Max) }

// ParseElastic reads "MIN-MAX" (or "N": a fixed size, nil): 1 <= MIN <=
// MAX <= MaxElastic.
func ParseElastic(s string) (*Elastic, error) {
	lo, hi, ranged := strings.Cut(s, "-")
	if !ranged {
		hi = lo
	}
	a, errA := strconv.Atoi(lo)
	b, errB := strconv.Atoi(hi)
	switch {
	case errA != nil || errB != nil:
		return nil, fmt.Errorf("%s: want MIN-MAX GPUs, as 1-4", quote(s))
	case a < 1 || b > MaxElastic || a > b:
		return nil, fmt.Errorf("%s: want 1 <= MIN <= MAX <= %d", quote(s), MaxElastic)
	case a == b:
		return nil, nil
	}
	return &Elastic{Min: a, Max: b}, nil
}

// UnmarshalJSON reads a plan in either spelling: snake_case (what isched
// writes and --json prints) or the Go field names of statuses stored
// before the plan had JSON names. encoding/json matches keys without
// regard to case, so the old names that differ from the new ones only in
// case need nothing; these three differ in more.
func (p *Plan) UnmarshalJSON(b []byte) error {
	type plain Plan
	var old struct {
		IdealGres        string
		IdealTime, Total int64
	}
	if err := json.Unmarshal(b, (*plain)(p)); err != nil {
		return err
	}
	if err := json.Unmarshal(b, &old); err != nil {
		return err
	}
	if p.IdealGres == "" {
		p.IdealGres = old.IdealGres
	}
	if p.IdealTime == 0 {
		p.IdealTime = old.IdealTime
	}
	if p.Total == 0 {
		p.Total = old.Total
	}
	return nil
}

// FormatComment renders the plan as a job comment (space-separated key=value).
func (p Plan) FormatComment() string {
	var b strings.Builder
	b.WriteString(PlanPrefix)
	add := func(k, v string) {
		if v != "" {
			b.WriteString(" " + k + "=" + v)
		}
	}
	add("lineage", p.Lineage)
	add("cluster", p.Cluster)
	add("ideal", p.Ideal)
	add("gres", p.IdealGres)
	if p.IdealTime > 0 {
		add("time", strconv.FormatInt(p.IdealTime, 10))
	}
	if p.IdealCPUs > 0 {
		add("cpus", strconv.Itoa(p.IdealCPUs))
	}
	add("fallback", strings.Join(p.Fallbacks, ","))
	if p.Total > 0 {
		add("total", strconv.FormatInt(p.Total, 10))
	}
	add("model", p.Model)
	if p.Batch > 0 {
		add("batch", strconv.Itoa(p.Batch))
	}
	if p.Migrate {
		add("migrate", "1")
	}
	if p.Elastic != nil {
		add("elastic", p.Elastic.String())
	}
	return b.String()
}

// ParsePlanComment reads a plan from a job comment. ok is false when the
// comment carries no plan; err names the bad key when it carries a bad one.
func ParsePlanComment(comment string) (p Plan, ok bool, err error) {
	f := strings.Fields(comment)
	if len(f) == 0 || f[0] != PlanPrefix {
		return Plan{}, false, nil
	}
	bad := func(k, reason string) (Plan, bool, error) {
		return Plan{}, true, &FieldError{Field: "comment." + k, Reason: reason}
	}
	seen := map[string]bool{}
	for _, kv := range f[1:] {
		k, v, found := strings.Cut(kv, "=")
		if !found || v == "" {
			return bad(k, "want key=value")
		}
		if seen[k] {
			return bad(k, "duplicate key")
		}
		seen[k] = true
		set, known := planKeys[k]
		if !known {
			return bad(k, "unknown key")
		}
		if reason := set(&p, k, v); reason != "" {
			return bad(k, reason)
		}
	}
	if p.Ideal == "" {
		return bad("ideal", "required")
	}
	return p, true, nil
}

// planKeys read the value of each key of a plan comment into a Plan; each
// returns why the value is wrong, or "".
var planKeys = map[string]func(p *Plan, k, v string) string{
	"lineage": func(p *Plan, k, v string) string {
		if lineage(k, v, true) != nil {
			return "want 1-64 of [A-Za-z0-9._-]"
		}
		p.Lineage = v
		return ""
	},
	"cluster": planToken(setToken, "not a cluster name", func(p *Plan, v string) { p.Cluster = v }),
	"ideal":   planToken("._-", "not a partition name", func(p *Plan, v string) { p.Ideal = v }),
	"gres":    planToken(setGresArg, "not a GRES specification", func(p *Plan, v string) { p.IdealGres = v }),
	"model":   planToken("._:-", "not a model fingerprint", func(p *Plan, v string) { p.Model = v }),
	"time":    planNumber(maxTimeLimit, func(p *Plan, n int64) { p.IdealTime = n }),
	"total":   planNumber(math.MaxInt64, func(p *Plan, n int64) { p.Total = n }),
	"batch":   planNumber(1<<20, func(p *Plan, n int64) { p.Batch = int(n) }),
	"cpus":    planNumber(MaxCPUs, func(p *Plan, n int64) { p.IdealCPUs = int(n) }),
	"fallback": func(p *Plan, k, v string) string {
		for _, part := range strings.Split(v, ",") {
			if token(k, part, maxName, true, "._-") != nil {
				return "not a partition list"
			}
			p.Fallbacks = append(p.Fallbacks, part)
		}
		return ""
	},
	"migrate": func(p *Plan, _, v string) string {
		p.Migrate = v == "1"
		return ""
	},
	"elastic": func(p *Plan, _, v string) string {
		e, err := ParseElastic(v)
		if err != nil || e == nil {
			return "want MIN-MAX GPUs with MIN < MAX"
		}
		p.Elastic = e
		return ""
	},
}

// planToken reads a token of maxName bytes of letters, digits and extra.
func planToken(extra, reason string, set func(*Plan, string)) func(*Plan, string, string) string {
	return func(p *Plan, k, v string) string {
		if token(k, v, maxName, true, extra) != nil {
			return reason
		}
		set(p, v)
		return ""
	}
}

// planNumber reads a number in 1..most.
func planNumber(most int64, set func(*Plan, int64)) func(*Plan, string, string) string {
	return func(p *Plan, _, v string) string {
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil || n <= 0 || n > most {
			return fmt.Sprintf("want a positive number (got %s)", quote(v))
		}
		set(p, n)
		return ""
	}
}

// JobPlan is the plan in job j's comment as it applies to j. The elements
// of an array (`isched submit --array`) share the comment, but each is a
// lineage of its own, the comment's lineage and "_<task id>"
// (ElementLineage): the name its batch script gives the wrapper. An
// array's pending rest of one task ("3", as Slurm 22.05 lists an element
// submitted again as --array=3 until it starts) is that element. ok is
// false for a job without a plan and for a pending rest of several tasks
// (j.ArrayTasks), which is no one element yet; err names the bad key of a
// bad plan, or an element's lineage that would be too long.
func JobPlan(j Job) (p Plan, ok bool, err error) {
	p, ok, err = ParsePlanComment(j.Comment)
	if !ok || err != nil {
		return p, ok, err
	}
	task, isElement := j.Element()
	if !isElement && j.ArrayTasks != "" {
		return Plan{}, false, nil
	}
	if isElement && p.Lineage != "" {
		p.Lineage = ElementLineage(p.Lineage, task)
		if err := lineage("comment.lineage", p.Lineage, true); err != nil {
			return Plan{}, true, err
		}
	}
	return p, true, nil
}

// Element is the array task job j runs: its ArrayTaskID, or the one task
// of a pending rest of one ("3", or "3%1"); ok is false for a job that is
// no one element (not an array's, or a rest of several tasks).
func (j Job) Element() (task int, ok bool) {
	if j.ArrayTaskID != nil {
		return *j.ArrayTaskID, true
	}
	one, _, _ := strings.Cut(j.ArrayTasks, "%")
	n, err := strconv.Atoi(one)
	if j.ArrayTasks == "" || err != nil || n < 0 {
		return 0, false
	}
	return n, true
}

// ElementLineage is the lineage of task task of an array submitted as
// lineage base.
func ElementLineage(base string, task int) string {
	return base + "_" + strconv.Itoa(task)
}
