package cli

import (
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/isched/isched/internal/plan"
	"github.com/isched/isched/internal/report"
	"github.com/isched/isched/internal/stream"
)

// placeRequest is what the user asked of a submission's placement: the
// flags that bear on it, as given (place checks them).
type placeRequest struct {
	policy     string      // --policy as given, for the messages
	pol        plan.Policy // --policy parsed
	ideal      string      // --partition-ideal
	fallback   string      // --fallback: comma-separated partitions
	gres       string      // --gres (or --gpus as gpu:N)
	time       string      // --time, Slurm spelling
	mem        string      // --mem, Slurm spelling
	cpus       int         // --cpus; 0: not given
	noMigrate  bool        // --no-migrate
	totalIters int64       // --total-iters; 0: not given
}

// placeEstimate is the estimate a submission with --model rests on: the
// plans of its one batch size and where they came from.
type placeEstimate struct {
	plans       plan.Plans
	sitePath    string // the catalogue, for the messages
	modelKey    string // plan.ConfigKey of the model and its training
	stateSource string // where the cluster state came from
	state       plan.ClusterState
}

// placeCluster is what placement reads of the cluster beyond the
// estimate's waits and the partitions' limits.
type placeCluster struct {
	// defaultPartition is called only when neither the estimate nor the
	// flags name a partition (it may ask Slurm).
	defaultPartition func() (string, error)
	// others are the other clusters a partition may be on
	// (PARTITION@CLUSTER; the clusters setting).
	others []string
}

// submission is the placement of a job: where it starts, where it should
// end up, what it asks for, and why.
type submission struct {
	// cluster is the Slurm cluster the job goes to (sbatch -M) when it is
	// not the home one; the partition names are that cluster's own
	cluster    string
	partitions []string // of the first submission (sbatch --partition)
	gres       string
	cpus       int
	memMiB     int64
	timeLimit  time.Duration
	run        time.Duration // the run predicted on the first start option (0: no estimate)
	ideal      string
	idealGres  string
	idealTime  time.Duration
	idealCPUs  int // CPUs per task on the ideal partition (0: keep the submission's)
	fallbacks  []string
	migrate    bool
	totalIters int64
	modelKey   string // "" without an estimate
	batch      int
	reason     string // why this choice ("" without an estimate)
	note       string // what the estimate said, or that there is none
	source     string // where the cluster state came from ("" without an estimate)
}

// place decides a submission from the request, the estimate (nil without
// --model) and the cluster: the estimate's choice under the policy, then
// the flags over it. It touches neither Slurm nor Redis, except through
// cl.defaultPartition.
func place(r placeRequest, est *placeEstimate, cl placeCluster, now time.Time) (submission, error) {
	s := submission{migrate: !r.noMigrate, totalIters: r.totalIters}
	if _, c := splitQualified(r.ideal); c != "" && !slices.Contains(cl.others, c) {
		return s, usageErr("--partition-ideal %s: cluster %s is not one of the clusters setting's (%s)", r.ideal, c, orNone(strings.Join(cl.others, ",")))
	}
	switch {
	case est != nil:
		if err := s.fromEstimate(r, est, now); err != nil {
			return s, err
		}
	case r.pol.Kind != plan.PolicyAuto && r.pol.Kind != plan.PolicyImmediate:
		return s, usageErr("--policy %s needs an estimate: pass --model, --samples, --epochs, --batch and a site catalogue", r.policy)
	default:
		s.note = "no estimate (no --model): Slurm's defaults for what is not given"
	}
	if err := s.partitionFlags(r, est != nil, cl.others); err != nil {
		return s, err
	}
	if len(s.partitions) == 0 {
		def, err := cl.defaultPartition()
		if err != nil {
			return s, usageErr("no partition: pass --partition-ideal (%v)", err)
		}
		s.partitions, s.ideal = []string{def}, def
	}
	if s.ideal == "" {
		s.ideal = s.partitions[0]
	}
	if err := s.resourceFlags(r, est != nil); err != nil {
		return s, err
	}
	if est == nil && r.fallback == "" {
		s.migrate = false // nothing to move between
	}
	return s, nil
}

// fromEstimate fills s from the estimate's choice: the partitions, the
// ideal one and the resources of the start's row.
func (s *submission) fromEstimate(r placeRequest, est *placeEstimate, now time.Time) error {
	ch, err := chooseOnOneCluster(r, est, now)
	if err != nil {
		return err
	}
	start := ch.Start[0]
	s.cluster = start.Partition.Cluster()
	for _, o := range ch.Start {
		s.partitions = append(s.partitions, o.Partition.SlurmName())
	}
	s.ideal = ch.Ideal.Partition.SlurmName()
	s.idealGres = ch.Ideal.Row.NodeType.GresOne()
	s.idealTime = plan.TimeLimit(ch.Ideal.Row.Run(), ch.Ideal.Partition)
	s.idealCPUs = ch.Ideal.Row.NodeType.JobCPUs()
	// the partitions of the first submission are fallbacks too, unless ideal
	for _, f := range ch.FallbackList(nil) {
		s.fallbacks = append(s.fallbacks, strings.TrimSuffix(f, "@"+s.cluster))
	}
	s.migrate = s.migrate && ch.Migrate
	if r.ideal != "" && r.fallback != "" {
		s.migrate = !r.noMigrate // the user named both ends
	}
	row := start.Row
	s.run = row.Run()
	s.gres = row.NodeType.GresOne()
	s.cpus = row.NodeType.JobCPUs()
	s.timeLimit = plan.TimeLimit(row.Run(), start.Partition)
	s.memMiB = ceilMiB(plan.MemRequest(row))
	if s.totalIters == 0 {
		s.totalIters = row.Iters
	}
	s.modelKey = est.modelKey
	s.batch = est.plans.Batch
	s.reason = ch.Reason
	s.source = est.stateSource
	s.note = fmt.Sprintf("estimate: batch %d on %s: peak %s %s, run %s (%s), %d iterations",
		s.batch, row.NodeType.Name, plan.FormatBytes(row.Mem), memKind(row.NodeType), plan.FormatDuration(start.Run), row.Source, row.Iters)
	return nil
}

// chooseOnOneCluster is chooseFor on one cluster: a job runs where it is
// submitted, so when the plans span several clusters the choice is made
// again among the partitions of one: the user's ideal partition's, else
// the one the first choice starts on.
func chooseOnOneCluster(r placeRequest, est *placeEstimate, now time.Time) (plan.Choice, error) {
	ch, err := chooseFor(r, est, now)
	if err != nil || !est.plans.Clusters() {
		return ch, err
	}
	c := ch.Start[0].Partition.Cluster()
	if r.ideal != "" {
		_, c = splitQualified(r.ideal)
	}
	if _, one := ch.Cluster(); one && c == ch.Start[0].Partition.Cluster() {
		return ch, nil
	}
	onOne := *est
	onOne.plans = est.plans.OnCluster(c)
	ch, err = chooseFor(r, &onOne, now)
	return ch, err
}

// splitQualified splits PARTITION@CLUSTER; cluster is "" for a home
// partition.
func splitQualified(name string) (partition, cluster string) {
	partition, cluster, _ = strings.Cut(name, "@")
	return partition, cluster
}

// chooseFor is the estimate's choice: under the policy, or on the
// partition the user named.
func chooseFor(r placeRequest, est *placeEstimate, now time.Time) (plan.Choice, error) {
	if r.ideal == "" {
		return est.plans.Choose(r.pol, now)
	}
	ps := est.plans
	var ch plan.Choice
	// the user's partition: its best option, no migration
	for _, opt := range ps.Options {
		if opt.Partition.Name == r.ideal {
			ch = plan.Choice{Start: []*plan.Option{opt}, Ideal: opt, Reason: "--partition-ideal " + r.ideal}
			break
		}
	}
	if ch.Ideal == nil {
		return ch, usageErr("--partition-ideal %s: not a feasible partition for batch %d in %s", r.ideal, ps.Batch, est.sitePath)
	}
	for _, opt := range ps.Options {
		if opt.Partition != ch.Ideal.Partition && !containsOpt(ch.Fallbacks, opt) {
			ch.Fallbacks = append(ch.Fallbacks, opt)
		}
	}
	switch {
	case ch.Ideal.Wait.IdleNow:
	case r.pol.Kind == plan.PolicyImmediate:
		startIdle(&ch, r, ps)
	case r.pol.Kind == plan.PolicyAuto:
		startIfPays(&ch, r, ps)
	}
	return ch, nil
}

// startIfPays is lever e with --policy auto and a busy ideal partition:
// start on an idle partition the user allowed (--fallback; none given:
// any the estimate fits) only when that ends sooner than waiting for
// the ideal one (plan.Plans.StartElsewhere); the reason says which.
func startIfPays(ch *plan.Choice, r placeRequest, ps plan.Plans) {
	start, why := ps.StartElsewhere(ch.Ideal, fallbackAllowed(r))
	if start == nil {
		ch.Reason = fmt.Sprintf("--partition-ideal %s: %s", r.ideal, why)
		return
	}
	ch.Start, ch.Migrate = []*plan.Option{start}, true
	ch.Reason = fmt.Sprintf("--partition-ideal %s is busy: %s", r.ideal, why)
}

// fallbackAllowed: the partitions --fallback names, or any when it
// names none.
func fallbackAllowed(r placeRequest) func(*plan.Option) bool {
	allowed := strings.Split(r.fallback, ",")
	return func(o *plan.Option) bool { return r.fallback == "" || slices.Contains(allowed, o.Partition.Name) }
}

// startIdle: with --policy immediate and a busy ideal partition, start on
// an idle partition the user allowed (--fallback), move to the ideal later.
func startIdle(ch *plan.Choice, r placeRequest, ps plan.Plans) {
	allowed := fallbackAllowed(r)
	for _, opt := range ps.Options {
		if opt.Wait.IdleNow && opt.Partition != ch.Ideal.Partition && allowed(opt) {
			ch.Start = []*plan.Option{opt}
			ch.Migrate = true
			ch.Reason = fmt.Sprintf("--partition-ideal %s is busy; %s is idle now (policy immediate): start there, move to %s when it frees", r.ideal, opt.Partition.Name, r.ideal)
			return
		}
	}
}

// partitionFlags applies --partition-ideal and --fallback. With an
// estimate the start is the estimate's (fromEstimate chose it on the
// user's partition).
func (s *submission) partitionFlags(r placeRequest, withEstimate bool, others []string) error {
	if r.ideal != "" {
		p, err := s.ownPartition(r.ideal, "--partition-ideal", withEstimate, others)
		if err != nil {
			return err
		}
		s.ideal = p
		if !withEstimate {
			s.partitions = []string{p}
		}
	}
	if r.fallback == "" {
		return nil
	}
	s.fallbacks = nil
	for _, f := range strings.Split(r.fallback, ",") {
		if p, c := splitQualified(f); !stream.ValidName(p) || (c != "" && !stream.ValidName(c)) {
			return usageErr("--fallback %q: not a partition list", r.fallback)
		}
		p, err := s.ownPartition(f, "--fallback", true, others) // on the ideal partition's cluster
		if err != nil {
			return err
		}
		s.fallbacks = append(s.fallbacks, p)
	}
	if !withEstimate && !r.noMigrate && r.policy == plan.PolicyImmediate {
		// no estimate: start wherever Slurm can, ideal first
		s.partitions = append(s.partitions, s.fallbacks...)
	}
	return nil
}

// ownPartition checks a partition the user named, PARTITION or
// PARTITION@CLUSTER, and returns its name in its own cluster. Every
// partition of a submission is on one cluster: the first named sets it
// unless the estimate (or an earlier flag, placed) did.
func (s *submission) ownPartition(name, flag string, placed bool, others []string) (string, error) {
	p, c := splitQualified(name)
	if !stream.ValidName(p) || (c != "" && !stream.ValidName(c)) {
		return "", usageErr("%s %q: not a partition name (PARTITION or PARTITION@CLUSTER)", flag, name)
	}
	if c != "" && !slices.Contains(others, c) {
		return "", usageErr("%s %s: cluster %s is not one of the clusters setting's (%s)", flag, name, c, orNone(strings.Join(others, ",")))
	}
	if !placed {
		s.cluster = c
	}
	if c != s.cluster {
		return "", usageErr("%s %s: the job goes to %s; a job runs on one cluster (it moves by requeue)", flag, name, clusterLabel(s.cluster))
	}
	return p, nil
}

// clusterLabel names a cluster in messages ("" is the home cluster).
func clusterLabel(c string) string {
	if c == "" {
		return "the home cluster"
	}
	return "cluster " + c
}

// resourceFlags applies --gres, --time, --mem and --cpus over the
// estimate's. GRES and time hold for the ideal partition too when the job
// starts there.
func (s *submission) resourceFlags(r placeRequest, withEstimate bool) error {
	startsIdeal := !withEstimate || s.ideal == s.partitions[0]
	if r.gres != "" {
		if !gresRE.MatchString(r.gres) {
			return usageErr("--gres %q: want e.g. gpu:1 or gpu:v100:1", r.gres)
		}
		s.gres = r.gres
		if startsIdeal {
			s.idealGres = r.gres
		}
	}
	if r.time != "" {
		d, err := plan.ParseSlurmTime(r.time)
		if err != nil || d == 0 {
			return usageErr("--time %q: want a Slurm time such as 90, 2:00:00 or 1-00:00:00", r.time)
		}
		s.timeLimit = d
		if startsIdeal {
			s.idealTime = d
		}
	}
	if r.mem != "" {
		m := strings.ToUpper(r.mem)
		if !memRE.MatchString(m) {
			return usageErr("--mem %q: want e.g. 4000M or 4G", r.mem)
		}
		s.memMiB = memMiB(m)
	}
	if r.cpus > 0 {
		s.cpus = r.cpus
		s.idealCPUs = 0 // the user's count, wherever the job runs
	}
	return nil
}

func containsOpt(list []*plan.Option, o *plan.Option) bool {
	for _, x := range list {
		if x.Partition == o.Partition {
			return true
		}
	}
	return false
}

// moves says whether the job starts off its ideal partition and moves there.
func (s *submission) moves() bool {
	return s.migrate && s.ideal != s.partitions[0]
}

// plan is the submission's plan for the coordinator (the job's comment).
func (s *submission) plan(lineage, cluster string) report.Plan {
	p := report.Plan{Lineage: lineage, Cluster: cluster, Ideal: s.ideal, IdealGres: s.idealGres, IdealTime: int64(s.idealTime / time.Minute),
		IdealCPUs: s.idealCPUs, Total: s.totalIters, Model: s.modelKey, Batch: s.batch, Migrate: s.migrate}
	for _, f := range s.fallbacks {
		if f != s.ideal {
			p.Fallbacks = append(p.Fallbacks, f)
		}
	}
	return p
}

// header is the script's account of the placement: where it runs, why,
// on what estimate and cluster state.
func (s *submission) header(fallbacks []string, policy string) []string {
	where := "runs on " + strings.Join(s.partitions, ",")
	if s.cluster != "" {
		where += " of cluster " + s.cluster
	}
	if s.moves() {
		where += "; moves to " + s.ideal + " (" + orNone(s.idealGres) + ") when it frees"
	}
	var also []string
	for _, f := range fallbacks {
		if !slices.Contains(s.partitions, f) {
			also = append(also, f)
		}
	}
	if len(also) > 0 {
		where += "; may also use " + strings.Join(also, ",")
	}
	h := []string{"plan: " + where + "."}
	if s.reason != "" {
		h = append(h, "why: "+s.reason+" (policy "+policy+").")
	}
	if s.note != "" {
		h = append(h, s.note+".")
	}
	if s.source != "" {
		h = append(h, "cluster state: "+s.source+".")
	}
	return h
}

// ceilMiB is b in MiB, rounded up: a request rounded down would ask Slurm
// for less than the estimate (and be killed at its peak).
func ceilMiB(b int64) int64 { return (b + (1<<20 - 1)) >> 20 }
