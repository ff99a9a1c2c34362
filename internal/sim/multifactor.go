package sim

import (
	"math"
	"slices"
)

// Sched is Slurm's scheduler as the replay models it.
type Sched struct {
	// Backfill selects priority/multifactor and sched/backfill (many
	// reservations inside BfWindow, docs/evaluation.md); false the older
	// model: partition tier, then eligibility time, and one EASY
	// reservation per partition (what the lab replay was validated on).
	Backfill bool
	// The multifactor weights (slurm.conf PriorityWeightAge,
	// PriorityWeightFairshare, PriorityWeightPartition). Every partition
	// of the catalogues has the same PriorityJobFactor, so the partition
	// term orders nothing; PriorityTier (preemptible partitions below the
	// others) orders before the priority, as in Slurm.
	WeightAge, WeightFairshare, WeightPartition float64
	// MaxAge (PriorityMaxAge), HalfLife (PriorityDecayHalfLife) and
	// CalcPeriod (PriorityCalcPeriod), seconds.
	MaxAge, HalfLife, CalcPeriod float64
	// BfWindow, BfInterval (seconds) and BfMaxJobTest: SchedulerParameters
	// bf_window, bf_interval and bf_max_job_test.
	BfWindow, BfInterval float64
	BfMaxJobTest         int
	// Quota is each account's GrpTRES=gres/gpu limit (GPUs in use by its
	// running jobs); an account missing or 0 has none.
	Quota map[string]int
	// Shares are the accounts' fair-share shares (any scale); nil: equal.
	Shares map[string]float64
}

// SlurmSched is the multifactor and backfill scheduler with Slurm's
// defaults where Slurm has them (PriorityMaxAge and PriorityDecayHalfLife
// 7 days, PriorityCalcPeriod 5 minutes, bf_window 1 day, bf_interval 30 s,
// bf_max_job_test 500) and the weights of the configuration example in
// Slurm's multifactor documentation (age 1 000, fair-share 10 000,
// partition 1 000), Slurm's own default weights being 0 (FIFO).
func SlurmSched() Sched {
	return Sched{Backfill: true, WeightAge: 1000, WeightFairshare: 10000, WeightPartition: 1000,
		MaxAge: 7 * 86400, HalfLife: 7 * 86400, CalcPeriod: 300, BfWindow: 86400, BfInterval: 30, BfMaxJobTest: 500}
}

// accounts are the Slurm accounts of a replay: their limits, shares and
// decayed usage (GPU-seconds, as TRESBillingWeights=GRES/gpu=1 bills).
type accounts struct {
	id      map[string]int
	names   []string   // by id
	users   [][]string // each account's users, sorted: its associations
	quota   []int      // GrpTRES gres/gpu; 0: none
	share   []float64  // normalized shares
	usage   []float64  // decayed GPU-seconds
	running []int      // GPUs of running jobs
	last    []float64  // when usage was last brought up to date
	factor  []float64  // fair-share factor, recomputed every CalcPeriod
	calcAt  float64    // when the factors were computed (-Inf: never)
}

func newAccounts(cfg Sched, jobs []Job) *accounts {
	a := &accounts{id: map[string]int{}, calcAt: math.Inf(-1)}
	seen := map[[2]string]bool{}
	for k := range jobs {
		name := jobs[k].account()
		if ua := [2]string{jobs[k].User, name}; !seen[ua] {
			seen[ua] = true
			a.addUser(name, jobs[k].User, cfg)
		}
	}
	for k := range a.users {
		slices.Sort(a.users[k])
	}
	n := len(a.quota)
	a.usage, a.running, a.last, a.factor = make([]float64, n), make([]int, n), make([]float64, n), make([]float64, n)
	var total float64
	for _, s := range a.share {
		total += s
	}
	for k := range a.share {
		a.share[k] /= max(total, 1e-300)
		a.factor[k] = 1
	}
	return a
}

// addUser adds user to account name's users, and the account (its
// limit and share from cfg) when it is new.
func (a *accounts) addUser(name, user string, cfg Sched) {
	k, ok := a.id[name]
	if !ok {
		k = len(a.quota)
		a.id[name] = k
		a.names = append(a.names, name)
		a.users = append(a.users, nil)
		a.quota = append(a.quota, cfg.Quota[name])
		sh := 1.0
		if cfg.Shares != nil {
			sh = cfg.Shares[name]
		}
		a.share = append(a.share, sh)
	}
	a.users[k] = append(a.users[k], user)
}

// advance decays account k's usage to now and adds its running GPUs'
// use since the last update.
func (a *accounts) advance(k int, now, halfLife float64) {
	dt := now - a.last[k]
	if dt <= 0 {
		return
	}
	d := 1.0
	if halfLife > 0 {
		d = math.Exp2(-dt / halfLife)
	}
	a.usage[k] = a.usage[k]*d + float64(a.running[k])*dt
	a.last[k] = now
}

// use adds (sign 1) or removes (-1) gpus to account k's running jobs.
func (a *accounts) use(k, gpus, sign int, now, halfLife float64) {
	a.advance(k, now, halfLife)
	a.running[k] += sign * gpus
}

// held: the account's GrpTRES limit keeps a job of gpus GPUs pending
// (Reason AssocGrpGRES).
func (a *accounts) held(k, gpus int) bool {
	return gpus > 0 && a.quota[k] > 0 && a.running[k]+gpus > a.quota[k]
}

// refresh recomputes the fair-share factors if CalcPeriod has passed:
// Slurm's classic formula 2^(-U/S), U the account's share of all decayed
// usage, S its normalized shares.
func (a *accounts) refresh(now float64, cfg Sched) {
	if now-a.calcAt < cfg.CalcPeriod {
		return
	}
	a.calcAt = now
	var total float64
	for k := range a.usage {
		a.advance(k, now, cfg.HalfLife)
		total += a.usage[k]
	}
	for k := range a.factor {
		a.factor[k] = fairShareFactor(a.usage[k], total, a.share[k])
	}
}

// fairShareFactor is 2^(-U/S): U = usage / total (0 when nothing was
// used), S the normalized shares (an account without shares gets 0 once
// it has used anything).
func fairShareFactor(usage, total, share float64) float64 {
	if total <= 0 || usage <= 0 {
		return 1
	}
	if share <= 0 {
		return 0
	}
	return math.Exp2(-(usage / total) / share)
}

// priority is a pending job's multifactor priority at now: the age
// factor (time eligible over PriorityMaxAge, at most 1), the account's
// fair-share factor and the partition factor (1), weighted.
func priority(cfg Sched, age, fairShare float64) float64 {
	af := 1.0
	if cfg.MaxAge > 0 {
		af = min(max(age, 0)/cfg.MaxAge, 1)
	}
	return cfg.WeightAge*af + cfg.WeightFairshare*fairShare + cfg.WeightPartition
}

// sortByPriority orders the pending jobs as Slurm evaluates them:
// PriorityTier, then priority, then eligibility (submit) time, then id.
func (s *sim) sortByPriority() {
	keys := s.keys[:0]
	cfg := &s.cfg.Sched
	for _, i := range s.pending {
		js := &s.jobs[i]
		if js.state != stPending {
			continue
		}
		keys = append(keys, prioKey{s.tierOf(js), s.priorityOf(js, cfg), js.order, i})
	}
	slices.SortFunc(keys, func(a, b prioKey) int {
		if a.tier != b.tier {
			return b.tier - a.tier
		}
		if a.prio != b.prio {
			return cmpFloat(b.prio, a.prio)
		}
		if a.order != b.order {
			return cmpFloat(a.order, b.order)
		}
		return a.i - b.i
	})
	s.pending = s.pending[:0]
	for k, kk := range keys {
		if k > 0 && kk.i == keys[k-1].i {
			continue // a job requeued twice between passes
		}
		s.pending = append(s.pending, kk.i)
	}
	s.keys = keys
}

// priorityOf is a pending job's multifactor priority less its nice value
// (rule 7 sets the nice values of isched's jobs).
func (s *sim) priorityOf(js *jobState, cfg *Sched) float64 {
	return priority(*cfg, s.now-js.order, s.accts.factor[js.acct]) - js.nice
}

// prioKey is a pending job's place in the queue.
type prioKey struct {
	tier  int
	prio  float64
	order float64
	i     int
}
