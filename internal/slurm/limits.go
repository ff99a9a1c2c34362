package slurm

import (
	"bytes"
	"context"
	"fmt"
	"sort"
	"strconv"
	"strings"

	"github.com/isched/isched/internal/report"
)

// The sacctmgr queries of the limits, parsable (-P: '|' between fields, no
// trailing one) and without a header (-n). Their columns are what
// ParseQOS and ParseAssociations read, in this order.
var (
	qosArgs     = []string{"-n", "-P", "show", "qos", "format=Name,MaxTRESPU,MaxJobsPU,MaxSubmitPU,GrpTRES,MaxTRES"}
	assocFormat = "format=Cluster,Account,User,Partition,QOS,DefaultQOS,GrpTRES,MaxJobs,GrpJobs"
	userArgs    = []string{"-n", "-P", "show", "user", "format=User,DefaultAccount"}
)

// QOS is the per-user part of one QOS (sacctmgr show qos).
type QOS struct {
	Name string
	// MaxTRESPerUser is MaxTRESPU by TRES name ("cpu", "gres/gpu", "mem"
	// in MB, "node"); MaxJobsPerUser 0 when unset.
	MaxTRESPerUser map[string]int64
	MaxJobsPerUser int64
}

// Association is one association (sacctmgr show assoc): a user's, or an
// account's own (User empty), whose GrpTRES and GrpJobs all the account's
// users share (a site's quota per group).
type Association struct {
	Cluster, Account, User, Partition string
	QOS                               []string
	DefaultQOS                        string
	GrpTRES                           map[string]int64
	MaxJobs, GrpJobs                  int64
	// DefaultAccount: Account is User's default account (sacctmgr show
	// user), or the default is not known (Limits sets it).
	DefaultAccount bool
}

// Limits fetches the accounting's QOS and the associations of this
// cluster (ClusterName from `scontrol show config`: a slurmdbd serves
// several) with sacctmgr. Without slurmdbd sacctmgr fails: the error says
// so, and a caller without accounting simply has no limits.
func (c *Client) Limits(ctx context.Context) ([]QOS, []Association, error) {
	conf, err := c.run(ctx, or(c.Scontrol, "scontrol"), []string{"show", "config"}, nil)
	if err != nil {
		return nil, nil, err
	}
	cluster := ConfigValue(conf, "ClusterName")
	if !validClusterName(cluster) {
		return nil, nil, fmt.Errorf("scontrol show config: ClusterName %q: want letters, digits, '_' or '-'", cluster)
	}
	qb, err := c.run(ctx, "sacctmgr", qosArgs, nil)
	if err != nil {
		return nil, nil, err
	}
	qos, err := ParseQOS(qb)
	if err != nil {
		return nil, nil, err
	}
	ab, err := c.run(ctx, "sacctmgr", []string{"-n", "-P", "show", "assoc", "where", "cluster=" + cluster, assocFormat}, nil)
	if err != nil {
		return nil, nil, err
	}
	assocs, err := ParseAssociations(ab)
	if err != nil {
		return nil, nil, err
	}
	ub, err := c.run(ctx, "sacctmgr", userArgs, nil)
	if err != nil {
		return nil, nil, err
	}
	defaults, err := ParseUserDefaults(ub)
	if err != nil {
		return nil, nil, err
	}
	markDefaultAccounts(assocs, defaults)
	return qos, assocs, nil
}

// markDefaultAccounts sets each user association's DefaultAccount: its
// account is the user's default, or the user has none listed (then every
// account of the user's counts as it, as before the accounts were told
// apart).
func markDefaultAccounts(assocs []Association, defaults map[string]string) {
	for i := range assocs {
		a := &assocs[i]
		def, ok := defaults[a.User]
		a.DefaultAccount = a.User != "" && (!ok || def == a.Account)
	}
}

// ParseUserDefaults parses `sacctmgr -n -P show user
// format=User,DefaultAccount`: each user's default account.
func ParseUserDefaults(b []byte) (map[string]string, error) {
	out := map[string]string{}
	err := eachRow(b, "sacctmgr show user", 2, func(f []string) error {
		if f[0] == "" {
			return fmt.Errorf("no user name")
		}
		out[f[0]] = f[1]
		return nil
	})
	return out, err
}

// ConfigValue is the value of key in `scontrol show config` output
// ("ClusterName             = lab"); "" when absent.
func ConfigValue(conf []byte, key string) string {
	for _, line := range strings.Split(string(conf), "\n") {
		k, v, ok := strings.Cut(line, "=")
		if ok && strings.TrimSpace(k) == key {
			return strings.TrimSpace(v)
		}
	}
	return ""
}

func validClusterName(s string) bool {
	if s == "" || len(s) > 64 {
		return false
	}
	for _, r := range s {
		if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '_' || r == '-') {
			return false
		}
	}
	return true
}

// ParseQOS parses `sacctmgr -n -P show qos
// format=Name,MaxTRESPU,MaxJobsPU,MaxSubmitPU,GrpTRES,MaxTRES`.
func ParseQOS(b []byte) ([]QOS, error) {
	var out []QOS
	err := eachRow(b, "sacctmgr show qos", 6, func(f []string) error {
		tres, err := ParseTRES(f[1])
		if err != nil {
			return fmt.Errorf("MaxTRESPU: %w", err)
		}
		jobs, err := optInt(f[2])
		if err != nil {
			return fmt.Errorf("MaxJobsPU: %w", err)
		}
		out = append(out, QOS{Name: f[0], MaxTRESPerUser: tres, MaxJobsPerUser: jobs})
		return nil
	})
	return out, err
}

// ParseAssociations parses `sacctmgr -n -P show assoc
// format=Cluster,Account,User,Partition,QOS,DefaultQOS,GrpTRES,MaxJobs,GrpJobs`.
func ParseAssociations(b []byte) ([]Association, error) {
	var out []Association
	err := eachRow(b, "sacctmgr show assoc", 9, func(f []string) error {
		a := Association{Cluster: f[0], Account: f[1], User: f[2], Partition: f[3], DefaultQOS: f[5]}
		if f[4] != "" {
			a.QOS = strings.Split(f[4], ",")
		}
		var err error
		if a.GrpTRES, err = ParseTRES(f[6]); err != nil {
			return fmt.Errorf("GrpTRES: %w", err)
		}
		if a.MaxJobs, err = optInt(f[7]); err != nil {
			return fmt.Errorf("MaxJobs: %w", err)
		}
		if a.GrpJobs, err = optInt(f[8]); err != nil {
			return fmt.Errorf("GrpJobs: %w", err)
		}
		out = append(out, a)
		return nil
	})
	return out, err
}

// eachRow splits parsable sacctmgr output into rows of exactly n fields,
// naming the line of a bad one.
func eachRow(b []byte, what string, n int, row func([]string) error) error {
	for i, line := range bytes.Split(b, []byte("\n")) {
		if len(bytes.TrimSpace(line)) == 0 {
			continue
		}
		f := strings.Split(string(line), "|")
		if len(f) != n {
			return fmt.Errorf("%s line %d: %d fields, want %d: %q", what, i+1, len(f), n, line)
		}
		if err := row(f); err != nil {
			return fmt.Errorf("%s line %d: %w", what, i+1, err)
		}
	}
	return nil
}

// ParseTRES parses a TRES list such as "cpu=8,gres/gpu=2,mem=16G,node=2";
// memory is in MB (Slurm's unit: M, G, T suffixes), counts are plain. An
// empty list is nil.
func ParseTRES(s string) (map[string]int64, error) {
	if s == "" {
		return nil, nil
	}
	out := map[string]int64{}
	for _, item := range strings.Split(s, ",") {
		name, v, ok := strings.Cut(item, "=")
		if !ok || name == "" {
			return nil, fmt.Errorf("TRES %q: want name=count", item)
		}
		mult := int64(1)
		if name == "mem" {
			switch {
			case strings.HasSuffix(v, "T"):
				mult, v = 1<<20, strings.TrimSuffix(v, "T")
			case strings.HasSuffix(v, "G"):
				mult, v = 1<<10, strings.TrimSuffix(v, "G")
			case strings.HasSuffix(v, "M"):
				v = strings.TrimSuffix(v, "M")
			}
		}
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil || n < 0 {
			return nil, fmt.Errorf("TRES %q: want a count", item)
		}
		out[name] = n * mult
	}
	return out, nil
}

// optInt is an optional sacctmgr count: empty is 0 (unset).
func optInt(s string) (int64, error) {
	if s == "" {
		return 0, nil
	}
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil || n < 0 {
		return 0, fmt.Errorf("want a count, got %q", s)
	}
	return n, nil
}

// BuildLimits turns the accounting's QOS and associations of cluster
// (every association when cluster is empty) into the per-user limits Slurm
// enforces, each with the user's use now from jobs (running ones; under a
// QOS, those of that QOS). Only cpu, gres/gpu and running-job limits are
// kept: what placement can act on. The result is sorted by user, QOS,
// resource.
func BuildLimits(cluster string, qos []QOS, assocs []Association, jobs []report.Job) []report.UserLimit {
	byName := map[string]QOS{}
	for _, q := range qos {
		byName[q.Name] = q
	}
	use := usage(jobs)
	accounts := accountRows(cluster, assocs)
	var out []report.UserLimit
	for _, a := range assocs {
		if cluster != "" && a.Cluster != cluster || a.User == "" {
			continue
		}
		out = append(out, assocLimits(a, use)...)
		if acct, ok := accounts[accountKey{a.Cluster, a.Account}]; ok && a.Partition == "" {
			out = append(out, accountLimits(a, acct, use)...)
		}
		for _, name := range a.QOS {
			if q, ok := byName[name]; ok {
				out = append(out, qosLimits(a, q, use)...)
			}
		}
	}
	sort.SliceStable(out, func(i, j int) bool {
		x, y := out[i], out[j]
		if x.User != y.User {
			return x.User < y.User
		}
		if x.QOS != y.QOS {
			return x.QOS < y.QOS
		}
		return x.Resource < y.Resource
	})
	return out
}

// held is what one user's running jobs hold, in all (key QOS "") and under
// each QOS.
type held struct{ cpus, gpus, jobs int64 }

type useKey struct{ user, account, qos, partition string }

// usage sums the running jobs by user and account, in all, per QOS and per
// partition.
func usage(jobs []report.Job) map[useKey]held {
	out := map[useKey]held{}
	for _, j := range jobs {
		if !JobState(j.State).In(StateRunning, StateSuspended, StateCompleting) {
			continue
		}
		gpus, _ := GPUs(j.Gres) // per node; an unreadable request counts none
		h := held{cpus: int64(j.CPUs), gpus: int64(sum(gpus) * max(1, j.NodeCount)), jobs: 1}
		for _, k := range []useKey{
			{j.User, j.Account, "", ""}, {j.User, j.Account, "", j.Partition},
			{j.User, "", j.QOS, ""}, {"", j.Account, "", ""},
		} {
			t := out[k]
			t.cpus, t.gpus, t.jobs = t.cpus+h.cpus, t.gpus+h.gpus, t.jobs+h.jobs
			out[k] = t
		}
	}
	return out
}

// assocLimits are an association's own limits: GrpTRES over all the
// user's jobs in it, MaxJobs and GrpJobs (the tighter) on running jobs.
func assocLimits(a Association, use map[useKey]held) []report.UserLimit {
	u := use[useKey{a.User, a.Account, "", a.Partition}]
	jobs, reason := a.MaxJobs, "AssocMaxJobsLimit"
	if a.GrpJobs > 0 && (jobs == 0 || a.GrpJobs < jobs) {
		jobs, reason = a.GrpJobs, "AssocGrpJobsLimit"
	}
	return limitRows(report.UserLimit{User: a.User, Account: a.Account, Partition: a.Partition, DefaultAccount: a.DefaultAccount},
		limitSpec{report.LimitCPU, a.GrpTRES["cpu"], u.cpus, "AssocGrpCpuLimit"},
		limitSpec{report.LimitGPU, a.GrpTRES["gres/gpu"], u.gpus, "AssocGrpGRES"},
		limitSpec{report.LimitJobs, jobs, u.jobs, reason})
}

type accountKey struct{ cluster, account string }

// accountRows are the accounts' own associations of cluster (all clusters
// when empty) that set a quota, by cluster and account.
func accountRows(cluster string, assocs []Association) map[accountKey]Association {
	out := map[accountKey]Association{}
	for _, a := range assocs {
		if a.User == "" && (cluster == "" || a.Cluster == cluster) && (len(a.GrpTRES) > 0 || a.GrpJobs > 0) {
			out[accountKey{a.Cluster, a.Account}] = a
		}
	}
	return out
}

// accountLimits are the quota of user association a's account (acct, the
// account's own row) as a's limits: GrpTRES and GrpJobs over every user's
// running jobs in the account, Slurm's AssocGrp* reasons. Only the
// account's own row is read, not its parents' (sacctmgr's tree).
func accountLimits(a, acct Association, use map[useKey]held) []report.UserLimit {
	u := use[useKey{"", a.Account, "", ""}]
	return limitRows(report.UserLimit{User: a.User, Account: a.Account, DefaultAccount: a.DefaultAccount},
		limitSpec{report.LimitCPU, acct.GrpTRES["cpu"], u.cpus, "AssocGrpCpuLimit"},
		limitSpec{report.LimitGPU, acct.GrpTRES["gres/gpu"], u.gpus, "AssocGrpGRES"},
		limitSpec{report.LimitJobs, acct.GrpJobs, u.jobs, "AssocGrpJobsLimit"})
}

// qosLimits are a QOS's per-user limits for the association's user.
func qosLimits(a Association, q QOS, use map[useKey]held) []report.UserLimit {
	u := use[useKey{a.User, "", q.Name, ""}]
	return limitRows(report.UserLimit{User: a.User, Account: a.Account, QOS: q.Name, Default: q.Name == defaultQOS(a), DefaultAccount: a.DefaultAccount},
		limitSpec{report.LimitCPU, q.MaxTRESPerUser["cpu"], u.cpus, "QOSMaxCpuPerUserLimit"},
		limitSpec{report.LimitGPU, q.MaxTRESPerUser["gres/gpu"], u.gpus, "QOSMaxGRESPerUser"},
		limitSpec{report.LimitJobs, q.MaxJobsPerUser, u.jobs, "QOSMaxJobsPerUserLimit"})
}

// defaultQOS is the QOS a job of the association's user runs under when it
// names none: its DefaultQOS, else its only QOS, else normal (Slurm's).
func defaultQOS(a Association) string {
	switch {
	case a.DefaultQOS != "":
		return a.DefaultQOS
	case len(a.QOS) == 1:
		return a.QOS[0]
	}
	return "normal"
}

// limitSpec is one limit of a QOS or association: 0 is unset.
type limitSpec struct {
	resource   string
	max, used  int64
	slurmState string
}

// limitRows are base with each set limit of specs.
func limitRows(base report.UserLimit, specs ...limitSpec) []report.UserLimit {
	var out []report.UserLimit
	for _, sp := range specs {
		if sp.max > 0 {
			l := base
			l.Resource, l.Max, l.Used, l.Reason = sp.resource, sp.max, sp.used, sp.slurmState
			out = append(out, l)
		}
	}
	return out
}
