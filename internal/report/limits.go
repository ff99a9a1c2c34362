package report

// UserLimit is one limit Slurm enforces on what a user may hold at once,
// with what the user holds against it now (the agent reads both: sacctmgr
// for the limit, squeue for the jobs). A limit of a QOS applies to the
// user's jobs that run under that QOS; an association's (QOS empty) to all
// the user's jobs, on Partition only when it is set.
type UserLimit struct {
	User    string `json:"user"`
	Account string `json:"account,omitempty"`
	QOS     string `json:"qos,omitempty"` // empty: the association's limit
	// Default: QOS is the user's default QOS (what a job that names none
	// runs under).
	Default bool `json:"default,omitempty"`
	// DefaultAccount: Account is the user's default account (a job that
	// names none runs in it), or which is the default is not known; an
	// association's limit binds a job naming no account only then.
	DefaultAccount bool   `json:"default_account,omitempty"`
	Partition      string `json:"partition,omitempty"` // empty: every partition
	// Resource is what is counted: "cpu", "gpu" (gres/gpu) or "jobs"
	// (running jobs).
	Resource string `json:"resource"`
	Max      int64  `json:"max"`
	Used     int64  `json:"used"`
	// Reason is Slurm's pending reason when the limit holds a job
	// (QOSMaxCpuPerUserLimit, AssocGrpCpuLimit, ...): the name users see
	// in squeue.
	Reason string `json:"reason"`
}

// Limit resources.
const (
	LimitCPU  = "cpu"
	LimitGPU  = "gpu"
	LimitJobs = "jobs"
)

// Binds reports whether the limit binds a job under qos in account on
// partition part: an association's limit (the user's, or the quota of its
// account) binds its user's jobs in that account (account empty: the
// user's default account), on its partition when it has one; a QOS's
// binds the jobs under that QOS in any account, which is the user's
// default QOS when qos is empty (a job that names none, or whose QOS is
// unknown).
func (l *UserLimit) Binds(qos, account, part string) bool {
	switch {
	case l.QOS == "" && l.Account != "" && account != "" && account != l.Account:
		return false
	case l.QOS == "" && l.Account != "" && account == "" && !l.DefaultAccount:
		return false
	case l.QOS == "":
		return l.Partition == "" || l.Partition == part
	case qos == "":
		return l.Default
	}
	return l.QOS == qos
}

// Validate checks one limit.
func (l *UserLimit) Validate() error {
	if err := first(
		printable("user", l.User, maxName, true),
		printable("account", l.Account, maxName, false),
		printable("qos", l.QOS, maxName, false),
		printable("partition", l.Partition, maxName, false),
		printable("reason", l.Reason, maxName, true),
		nonNeg("max", l.Max),
		nonNeg("used", l.Used),
	); err != nil {
		return err
	}
	switch l.Resource {
	case LimitCPU, LimitGPU, LimitJobs:
		return nil
	}
	return fail("resource", "want cpu, gpu or jobs (got %s)", quote(l.Resource))
}
