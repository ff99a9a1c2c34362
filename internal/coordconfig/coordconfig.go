// Package coordconfig is the coordinator's config file
// (coordinator.json): its one shape (Settings), the defaults, strict
// loading, validation that names the field, and the policy.Config it
// derives. The coordinator runs with it; `isched simulate
// --coordinator-config` decides with the same policy (LoadPolicy), so
// the file is read below both apps, by neither importing the other.
package coordconfig

import (
	"fmt"
	"net/netip"
	"strings"
	"time"

	"github.com/isched/isched/internal/daemon"
	"github.com/isched/isched/internal/policy"
)

// ConfigVersion is the config file format this coordinator reads (the
// file's "v"; a file without it is version 1, as written before "v").
const ConfigVersion = 1

// Settings is the coordinator's one configuration shape, built in one
// order: DefaultSettings, then the config file (Load: a key the file
// leaves out keeps its default), then the coordinator's command line,
// then Validate, whose error names the field. The file is JSON,
// strict (internal/daemon.DecodeJSON): systemd/coordinator.json is the
// packaged one (the defaults, no partition), examples/coordinator-lab.json
// the lab's, documented in docs/deployment.md.
//
// Every value means what it says: no zero or negative stands for "the
// default" or "off" (policy.Config's spellings are derived in one place,
// PolicySettings.Config). The coordinator's Config, what its New takes,
// holds the rest of its knobs, which no file sets.
type Settings struct {
	V int `json:"v"`
	// Cluster names the cluster in Redis keys where neither -cluster nor
	// $ISCHED_CLUSTER does; "": stream's default.
	Cluster string `json:"cluster"`
	// MetricsListen: address of /metrics; "" turns it off.
	MetricsListen string `json:"metrics_listen"`
	// JobMetricsFrom are the addresses (CIDR prefixes, or single
	// addresses) whose /metrics scrapes get the per-job series
	// (isched_job_*: every user's lineages, progress, memory and ETA);
	// loopback always does. Others get the aggregate metrics only, as
	// Slurm's PrivateData=jobs hides other users' jobs. Empty: loopback
	// only.
	JobMetricsFrom []string        `json:"job_metrics_from"`
	Tick           daemon.Duration `json:"tick"`
	StaleAfter     daemon.Duration `json:"stale_after"`
	LeaderTTL      daemon.Duration `json:"leader_ttl"`
	EndGrace       daemon.Duration `json:"end_grace"`
	EndedTTL       daemon.Duration `json:"ended_ttl"`
	MaxJobSeries   int             `json:"max_job_series"`
	AdminComment   bool            `json:"admin_comment"`
	Policy         PolicySettings  `json:"policy"`
}

// PolicySettings is the policy part of Settings: one field per knob of
// policy.Config. The defaults name no partition: the site's speeds and
// dev partitions are its own to write.
type PolicySettings struct {
	Margin   daemon.Duration `json:"margin"`
	MinGain  float64         `json:"min_gain"`
	MoveCost daemon.Duration `json:"move_cost"`
	// MinInterval: no migration within this of a move; "0s": none (no
	// hysteresis).
	MinInterval daemon.Duration `json:"min_interval"`
	// MaxMoves bounds migrations per lineage (a positive count or
	// "unbounded").
	MaxMoves daemon.Bound `json:"max_moves"`
	// MaxContinuations bounds continuations per lineage (rules 1 and 5):
	// a count, 0 for none (an ended job with work left is reported, never
	// requeued), or "unbounded".
	MaxContinuations daemon.Bound `json:"max_continuations"`
	// Speed is the relative throughput per partition; one not listed
	// counts 1. It is the prior of the speeds learned per model
	// (policy.LearnSpeeds).
	Speed map[string]float64 `json:"speed"`
	// DevPartitions are used in chunks; empty: none.
	DevPartitions []string `json:"dev_partitions"`
	// DevWindows ("18:00-08:00") restrict when dev partitions are used,
	// in TimeZone (an IANA name; "": the coordinator's local time).
	DevWindows  []string        `json:"dev_windows"`
	TimeZone    string          `json:"time_zone"`
	AllowExtend bool            `json:"allow_extend"`
	DefaultCkpt daemon.Duration `json:"default_ckpt"`
	// A requested checkpoint is given up after
	// max(ckpt_timeout_factor × its duration, min_ckpt_timeout).
	CkptTimeoutFactor float64         `json:"ckpt_timeout_factor"`
	MinCkptTimeout    daemon.Duration `json:"min_ckpt_timeout"`
	MinPending        daemon.Duration `json:"min_pending"`
	// TrimTimeLimits: rule 6 lowers a running job's time limit to its
	// predicted end at worst plus a margin when that frees at least
	// trim_min (for backfill; a miss is continued from the checkpoint).
	TrimTimeLimits bool            `json:"trim_time_limits"`
	TrimMin        daemon.Duration `json:"trim_min"`
	// OrderByRemaining: rule 7 exchanges the priorities of isched's
	// pending jobs (through their nice values) so that the least
	// predicted run left goes first; a job pending order_max_wait keeps
	// its place.
	OrderByRemaining bool            `json:"order_by_remaining"`
	OrderMaxWait     daemon.Duration `json:"order_max_wait"`
	// PreemptForShort: rule 8 checkpoints and requeues (held) one of
	// isched's running jobs so that a much shorter one of isched's waiting
	// behind it runs first, at most max_preemptions times per run.
	PreemptForShort bool `json:"preempt_for_short"`
	MaxPreemptions  int  `json:"max_preemptions"`
	// KeepPlace: rule 10 keeps a twin job pending on a run's ideal
	// partition while the run runs elsewhere, so that it ages in that
	// queue; when Slurm starts the twin, the run checkpoints and the twin
	// resumes from the checkpoint (issue 41, lever c). The agent submits
	// the twin from the job's saved batch script (its -script-dir, on by
	// default); without one the twin is refused and the run goes on.
	KeepPlace bool `json:"keep_place"`
	// Elastic: rule 9 grows runs submitted with a GPU range (isched
	// submit --gpus 1-4) onto idle GPUs and shrinks them back to their
	// base when jobs wait (docs/elastic.md): at most max_resizes growths
	// per run, scaling_efficiency the throughput kept per doubling for a
	// size a run has not measured, elastic_headroom GPUs per partition
	// kept idle for arrivals (runs above their base shrink when fewer than
	// half of them are idle; 0: the GPUs of a quarter of the partition's
	// nodes; negative: none).
	Elastic           bool    `json:"elastic"`
	MaxResizes        int     `json:"max_resizes"`
	ScalingEfficiency float64 `json:"scaling_efficiency"`
	ElasticHeadroom   int     `json:"elastic_headroom"`
}

// The coordinator's defaults for the settings that are its own (its
// Config.defaults uses them too, so each is written once).
const (
	DefaultTick       = 2 * time.Second
	DefaultStaleAfter = 20 * time.Second
	DefaultLeaderTTL  = 5 * time.Second
	DefaultEndGrace   = time.Minute
	DefaultEndedTTL   = 7 * 24 * time.Hour
	// DefaultMaxJobSeries bounds the per-job series: at most this many
	// running lineages are exported (5 gauges each); the rest are counted
	// in isched_coordinator_job_series_dropped.
	DefaultMaxJobSeries = 500
)

// DefaultSettings are the defaults: the coordinator's (the constants
// above) and policy.DefaultConfig's, so each default is written once.
func DefaultSettings() Settings {
	p := policy.DefaultConfig()
	return Settings{
		V:             ConfigVersion,
		MetricsListen: DefaultMetricsListen,
		Tick:          daemon.Duration(DefaultTick), StaleAfter: daemon.Duration(DefaultStaleAfter), LeaderTTL: daemon.Duration(DefaultLeaderTTL),
		EndGrace: daemon.Duration(DefaultEndGrace), EndedTTL: daemon.Duration(DefaultEndedTTL),
		MaxJobSeries: DefaultMaxJobSeries,
		Policy: PolicySettings{
			Margin: daemon.Duration(p.Margin), MinGain: p.MinGain, MoveCost: daemon.Duration(p.MoveCost),
			MinInterval: daemon.Duration(p.MinInterval), MaxMoves: daemon.Limit(p.MaxMoves),
			MaxContinuations: daemon.Limit(p.MaxContinuations), DefaultCkpt: daemon.Duration(p.DefaultCkpt),
			CkptTimeoutFactor: p.CkptTimeoutFactor, MinCkptTimeout: daemon.Duration(p.MinCkptTimeout),
			MinPending: daemon.Duration(p.MinPending), TrimMin: daemon.Duration(p.TrimMin),
			OrderMaxWait: daemon.Duration(p.OrderMaxWait), MaxPreemptions: p.MaxPreemptions,
			MaxResizes: p.MaxResizes, ScalingEfficiency: p.ScalingEfficiency,
		},
	}
}

// DefaultMetricsListen is the coordinator's default /metrics address.
const DefaultMetricsListen = "127.0.0.1:9470"

// Load reads the config file at path onto s (the defaults, or
// what an earlier layer set). It does not validate: the command line
// comes next, then Validate.
func Load(path string, s *Settings) error {
	return daemon.LoadJSON(path, s, ConfigVersion)
}

// LoadPolicy is the policy a coordinator started with the config file at
// path runs (the defaults under the file's keys): what a simulation of
// the site decides with (isched simulate --coordinator-config).
func LoadPolicy(path string) (policy.Config, error) {
	s := DefaultSettings()
	if err := Load(path, &s); err != nil {
		return policy.Config{}, err
	}
	if err := s.Validate(); err != nil {
		return policy.Config{}, fmt.Errorf("%s: %w", path, err)
	}
	c, err := s.Policy.Config()
	if err != nil {
		return policy.Config{}, fmt.Errorf("%s: %w", path, err)
	}
	return c, nil
}

// Validate checks s; the error names the first bad field.
func (s Settings) Validate() error {
	if s.V != ConfigVersion {
		return daemon.Errorf("v", "version %d is not supported: this coordinator reads version %d", s.V, ConfigVersion)
	}
	for _, d := range []struct {
		field string
		v     daemon.Duration
		zero  bool // "0s" is a setting
	}{
		{"tick", s.Tick, false}, {"stale_after", s.StaleAfter, false}, {"leader_ttl", s.LeaderTTL, false},
		{"end_grace", s.EndGrace, false}, {"ended_ttl", s.EndedTTL, false},
		{"policy.margin", s.Policy.Margin, false}, {"policy.move_cost", s.Policy.MoveCost, false},
		{"policy.min_interval", s.Policy.MinInterval, true}, {"policy.default_ckpt", s.Policy.DefaultCkpt, false},
		{"policy.min_ckpt_timeout", s.Policy.MinCkptTimeout, false}, {"policy.min_pending", s.Policy.MinPending, false},
		{"policy.trim_min", s.Policy.TrimMin, false},
		{"policy.order_max_wait", s.Policy.OrderMaxWait, false},
	} {
		switch {
		case d.v < 0:
			return daemon.Errorf(d.field, "%s is negative", d.v)
		case d.v == 0 && !d.zero:
			return daemon.Errorf(d.field, "must be positive (leave it out for the default)")
		}
	}
	if _, err := ParseJobMetricsFrom(s.JobMetricsFrom); err != nil {
		return daemon.Errorf("job_metrics_from", "%w", err)
	}
	if s.MaxJobSeries <= 0 {
		return daemon.Errorf("max_job_series", "must be positive (leave it out for the default %d)", DefaultMaxJobSeries)
	}
	return s.Policy.validate()
}

func (p PolicySettings) validate() error {
	for _, f := range []struct {
		field string
		v     float64
	}{{"policy.min_gain", p.MinGain}, {"policy.ckpt_timeout_factor", p.CkptTimeoutFactor}} {
		if !(f.v > 0) {
			return daemon.Errorf(f.field, "must be positive")
		}
	}
	if p.MaxPreemptions <= 0 {
		return daemon.Errorf("policy.max_preemptions", "must be positive (leave it out for the default %d)", policy.DefaultMaxPreemptions)
	}
	switch {
	case p.MaxResizes <= 0:
		return daemon.Errorf("policy.max_resizes", "must be positive (leave it out for the default %d)", policy.DefaultMaxResizes)
	case !(p.ScalingEfficiency > 0 && p.ScalingEfficiency <= 1):
		return daemon.Errorf("policy.scaling_efficiency", "must be in (0, 1] (leave it out for the default %g)", policy.DefaultScalingEfficiency)
	}
	if p.MaxMoves == daemon.Limit(0) {
		return daemon.Errorf("policy.max_moves", `0 is not a bound: leave it out for the default %d, or write "unbounded"`, policy.DefaultMaxMoves)
	}
	for k, v := range p.Speed {
		if !(v > 0) {
			return daemon.Errorf("policy.speed."+k, "must be positive")
		}
	}
	if _, err := p.windows(); err != nil {
		return err
	}
	_, err := p.location()
	return err
}

func (p PolicySettings) windows() ([]policy.Window, error) {
	var ws []policy.Window
	for i, s := range p.DevWindows {
		w, err := policy.ParseWindow(s)
		if err != nil {
			return nil, &daemon.FieldError{Field: fmt.Sprintf("policy.dev_windows[%d]", i), Err: err}
		}
		ws = append(ws, w)
	}
	return ws, nil
}

func (p PolicySettings) location() (*time.Location, error) {
	if p.TimeZone == "" {
		return nil, nil
	}
	loc, err := time.LoadLocation(p.TimeZone)
	if err != nil {
		return nil, &daemon.FieldError{Field: "policy.time_zone", Err: err}
	}
	return loc, nil
}

// Config is p as a policy.Config, in its spellings: there a zero field
// means the default, so "0s" (no hysteresis) is a negative MinInterval,
// "unbounded" a negative bound, and 0 continuations NoContinuations.
func (p PolicySettings) Config() (policy.Config, error) {
	ws, err := p.windows()
	if err != nil {
		return policy.Config{}, err
	}
	loc, err := p.location()
	if err != nil {
		return policy.Config{}, err
	}
	bound := func(b daemon.Bound) int {
		if b.Unbounded {
			return -1
		}
		return b.N
	}
	c := policy.Config{
		Margin: p.Margin.D(), MinGain: p.MinGain, MoveCost: p.MoveCost.D(), MinInterval: p.MinInterval.D(),
		MaxMoves: bound(p.MaxMoves), MaxContinuations: bound(p.MaxContinuations), Speed: p.Speed, DevPartitions: p.DevPartitions,
		DevWindows: ws, Location: loc, AllowExtend: p.AllowExtend, DefaultCkpt: p.DefaultCkpt.D(),
		CkptTimeoutFactor: p.CkptTimeoutFactor, MinCkptTimeout: p.MinCkptTimeout.D(), MinPending: p.MinPending.D(),
		TrimLimits: p.TrimTimeLimits, TrimMin: p.TrimMin.D(),
		OrderByRemaining: p.OrderByRemaining, OrderMaxWait: p.OrderMaxWait.D(),
		PreemptForShort: p.PreemptForShort, MaxPreemptions: p.MaxPreemptions,
		KeepPlace: p.KeepPlace,
		Elastic:   p.Elastic, MaxResizes: p.MaxResizes, ScalingEfficiency: p.ScalingEfficiency, ElasticHeadroom: p.ElasticHeadroom,
	}
	if c.MinInterval == 0 {
		c.MinInterval = -1
	}
	if c.MaxContinuations == 0 {
		c.MaxContinuations, c.NoContinuations = policy.DefaultMaxContinuations, true
	}
	return c, nil
}

// ParseJobMetricsFrom parses job_metrics_from: CIDR prefixes
// ("10.77.0.0/24") or single addresses ("10.77.0.5").
func ParseJobMetricsFrom(list []string) ([]netip.Prefix, error) {
	out := make([]netip.Prefix, 0, len(list))
	for _, s := range list {
		s = strings.TrimSpace(s)
		if p, err := netip.ParsePrefix(s); err == nil {
			out = append(out, p.Masked())
			continue
		}
		a, err := netip.ParseAddr(s)
		if err != nil {
			return nil, fmt.Errorf("%q: want a CIDR prefix (10.0.0.0/24) or an address", s)
		}
		out = append(out, netip.PrefixFrom(a.Unmap(), a.Unmap().BitLen()))
	}
	return out, nil
}
