package report

import (
	"encoding/json"
	"fmt"
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
	return b.String()
}

// ParsePlanComment reads a plan from a job comment. ok is false when the
// comment carries no plan; err names the bad key when it carries a bad one.
func ParsePlanComment(comment string) (p Plan, ok bool, err error) {
	f := strings.Fields(comment)
	if len(f) == 0 || f[0] != PlanPrefix {
		return Plan{}, false, nil
	}
	bad := func(k, format string, a ...any) (Plan, bool, error) {
		return Plan{}, true, &FieldError{Field: "comment." + k, Reason: fmt.Sprintf(format, a...)}
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
		switch k {
		case "lineage":
			if err := lineage(k, v, true); err != nil {
				return bad(k, "want 1-64 of [A-Za-z0-9._-]")
			}
			p.Lineage = v
		case "cluster":
			if token(k, v, maxName, true, setToken) != nil {
				return bad(k, "not a cluster name")
			}
			p.Cluster = v
		case "ideal":
			if token(k, v, maxName, true, "._-") != nil {
				return bad(k, "not a partition name")
			}
			p.Ideal = v
		case "gres":
			if token(k, v, maxName, true, setGresArg) != nil {
				return bad(k, "not a GRES specification")
			}
			p.IdealGres = v
		case "time", "total", "batch", "cpus":
			n, err := strconv.ParseInt(v, 10, 64)
			if err != nil || n <= 0 || (k == "time" && n > maxTimeLimit) || (k == "batch" && n > 1<<20) || (k == "cpus" && n > MaxCPUs) {
				return bad(k, "want a positive number (got %s)", quote(v))
			}
			switch k {
			case "time":
				p.IdealTime = n
			case "total":
				p.Total = n
			case "cpus":
				p.IdealCPUs = int(n)
			default:
				p.Batch = int(n)
			}
		case "fallback":
			for _, part := range strings.Split(v, ",") {
				if token(k, part, maxName, true, "._-") != nil {
					return bad(k, "not a partition list")
				}
				p.Fallbacks = append(p.Fallbacks, part)
			}
		case "model":
			if token(k, v, maxName, true, "._:-") != nil {
				return bad(k, "not a model fingerprint")
			}
			p.Model = v
		case "migrate":
			p.Migrate = v == "1"
		default:
			return bad(k, "unknown key")
		}
	}
	if p.Ideal == "" {
		return bad("ideal", "required")
	}
	return p, true, nil
}
