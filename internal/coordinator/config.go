package coordinator

import (
	"fmt"
	"time"

	"github.com/isched/isched/internal/daemon"
	"github.com/isched/isched/internal/policy"
)

// FileConfig is the coordinator's optional config file (JSON, strict:
// unknown fields are errors): systemd/coordinator.json is the packaged one
// (the defaults, no partition), examples/coordinator-lab.json the lab's,
// documented in docs/deployment.md. A nil pointer is a field the file does
// not set; setDefaults gives it the default, Validate checks the rest, and
// every error names the field.
type FileConfig struct {
	Cluster string `json:"cluster"`
	// MetricsListen: address of /metrics; "" turns it off. -metrics-listen wins.
	MetricsListen *string          `json:"metrics_listen"`
	Tick          *daemon.Duration `json:"tick"`
	StaleAfter    *daemon.Duration `json:"stale_after"`
	LeaderTTL     *daemon.Duration `json:"leader_ttl"`
	EndGrace      *daemon.Duration `json:"end_grace"`
	EndedTTL      *daemon.Duration `json:"ended_ttl"`
	MaxJobSeries  *int             `json:"max_job_series"`
	AdminComment  bool             `json:"admin_comment"`
	Policy        PolicyConfig     `json:"policy"`
}

// PolicyConfig is the policy part of the config file: one field per knob
// of policy.Config. Absent fields take policy's defaults, which name no
// partition: the site's speeds and dev partitions are its own to write.
type PolicyConfig struct {
	Margin   *daemon.Duration `json:"margin"`
	MinGain  *float64         `json:"min_gain"`
	MoveCost *daemon.Duration `json:"move_cost"`
	// MinInterval: "0s" turns the hysteresis off.
	MinInterval *daemon.Duration `json:"min_interval"`
	// MaxMoves bounds migrations per lineage; negative: unbounded.
	MaxMoves *int `json:"max_moves"`
	// MaxContinuations bounds continuations per lineage (rules 1 and 5);
	// absent: the default (20); 0: none (an ended job with work left is
	// reported, never requeued); negative: unbounded.
	MaxContinuations *int `json:"max_continuations"`
	// Speed is the relative throughput per partition; one not listed
	// counts 1. It is the prior of the speeds learned per model
	// (policy.LearnSpeeds).
	Speed map[string]float64 `json:"speed"`
	// DevPartitions are used in chunks; absent or empty: none.
	DevPartitions []string `json:"dev_partitions"`
	// DevWindows ("18:00-08:00") restrict when dev partitions are used,
	// in TimeZone (an IANA name; absent: the coordinator's local time).
	DevWindows  []string         `json:"dev_windows"`
	TimeZone    string           `json:"time_zone"`
	AllowExtend bool             `json:"allow_extend"`
	DefaultCkpt *daemon.Duration `json:"default_ckpt"`
	// A requested checkpoint is given up after
	// max(ckpt_timeout_factor × its duration, min_ckpt_timeout).
	CkptTimeoutFactor *float64         `json:"ckpt_timeout_factor"`
	MinCkptTimeout    *daemon.Duration `json:"min_ckpt_timeout"`
	MinPending        *daemon.Duration `json:"min_pending"`
}

// LoadFileConfig reads and checks a config file; errors name the field.
func LoadFileConfig(path string) (FileConfig, error) {
	var fc FileConfig
	if err := daemon.LoadJSON(path, &fc, 1); err != nil {
		return fc, err
	}
	if err := fc.Validate(); err != nil {
		return fc, fmt.Errorf("config %s: %w", path, err)
	}
	return fc, nil
}

// setDefaults gives every field the file does not set its default: the
// coordinator's (Config's zero values) and policy.DefaultConfig's.
func (fc *FileConfig) setDefaults() {
	var d Config
	d.defaults()
	def := func(p **daemon.Duration, v time.Duration) {
		if *p == nil {
			*p = daemon.Ptr(daemon.Duration(v))
		}
	}
	def(&fc.Tick, d.Tick)
	def(&fc.StaleAfter, d.StaleAfter)
	def(&fc.LeaderTTL, d.LeaderTTL)
	def(&fc.EndGrace, d.EndGrace)
	def(&fc.EndedTTL, d.EndedTTL)
	if fc.MaxJobSeries == nil {
		fc.MaxJobSeries = daemon.Ptr(DefaultMaxJobSeries)
	}
	p, pd := &fc.Policy, policy.DefaultConfig()
	def(&p.Margin, pd.Margin)
	def(&p.MoveCost, pd.MoveCost)
	def(&p.MinInterval, pd.MinInterval)
	def(&p.DefaultCkpt, pd.DefaultCkpt)
	def(&p.MinCkptTimeout, pd.MinCkptTimeout)
	def(&p.MinPending, pd.MinPending)
	for _, f := range []struct {
		p **float64
		v float64
	}{{&p.MinGain, pd.MinGain}, {&p.CkptTimeoutFactor, pd.CkptTimeoutFactor}} {
		if *f.p == nil {
			*f.p = daemon.Ptr(f.v)
		}
	}
	if p.MaxMoves == nil {
		p.MaxMoves = daemon.Ptr(pd.MaxMoves)
	}
	if p.MaxContinuations == nil {
		p.MaxContinuations = daemon.Ptr(pd.MaxContinuations)
	}
}

// Validate checks the fields the file sets; the error names the first bad one.
func (fc FileConfig) Validate() error {
	for _, d := range []struct {
		field string
		v     *daemon.Duration
		zero  bool // "0s" is a setting
	}{
		{"tick", fc.Tick, false}, {"stale_after", fc.StaleAfter, false}, {"leader_ttl", fc.LeaderTTL, false},
		{"end_grace", fc.EndGrace, false}, {"ended_ttl", fc.EndedTTL, false},
		{"policy.margin", fc.Policy.Margin, false}, {"policy.move_cost", fc.Policy.MoveCost, false},
		{"policy.min_interval", fc.Policy.MinInterval, true}, {"policy.default_ckpt", fc.Policy.DefaultCkpt, false},
		{"policy.min_ckpt_timeout", fc.Policy.MinCkptTimeout, false}, {"policy.min_pending", fc.Policy.MinPending, false},
	} {
		switch {
		case d.v == nil:
		case *d.v < 0:
			return daemon.Errorf(d.field, "%s is negative", d.v)
		case *d.v == 0 && !d.zero:
			return daemon.Errorf(d.field, "must be positive (leave it out for the default)")
		}
	}
	if fc.MaxJobSeries != nil && *fc.MaxJobSeries <= 0 {
		return daemon.Errorf("max_job_series", "must be positive (leave it out for the default %d)", DefaultMaxJobSeries)
	}
	return fc.Policy.validate()
}

func (p PolicyConfig) validate() error {
	for _, f := range []struct {
		field string
		v     *float64
	}{{"policy.min_gain", p.MinGain}, {"policy.ckpt_timeout_factor", p.CkptTimeoutFactor}} {
		if f.v != nil && !(*f.v > 0) {
			return daemon.Errorf(f.field, "must be positive")
		}
	}
	if p.MaxMoves != nil && *p.MaxMoves == 0 {
		return daemon.Errorf("policy.max_moves", "0 is not a bound: leave it out for the default %d, or negative for unbounded", policy.DefaultMaxMoves)
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

func (p PolicyConfig) windows() ([]policy.Window, error) {
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

func (p PolicyConfig) location() (*time.Location, error) {
	if p.TimeZone == "" {
		return nil, nil
	}
	loc, err := time.LoadLocation(p.TimeZone)
	if err != nil {
		return nil, &daemon.FieldError{Field: "policy.time_zone", Err: err}
	}
	return loc, nil
}

// apply checks the file and puts its values, defaults for the fields it
// does not set, into cfg.
func (fc FileConfig) apply(cfg *Config) error {
	if err := fc.Validate(); err != nil {
		return err
	}
	fc.setDefaults()
	cfg.Tick, cfg.StaleAfter, cfg.LeaderTTL = fc.Tick.D(), fc.StaleAfter.D(), fc.LeaderTTL.D()
	cfg.EndGrace, cfg.EndedTTL = fc.EndGrace.D(), fc.EndedTTL.D()
	cfg.MaxJobSeries, cfg.AdminComment = *fc.MaxJobSeries, fc.AdminComment
	pol, err := fc.Policy.config()
	if err != nil {
		return err
	}
	cfg.Policy = pol
	return nil
}

// config is p (defaults set) as a policy.Config, in its spellings: a
// negative MinInterval for "0s", NoContinuations for max_continuations 0.
func (p PolicyConfig) config() (policy.Config, error) {
	ws, err := p.windows()
	if err != nil {
		return policy.Config{}, err
	}
	loc, err := p.location()
	if err != nil {
		return policy.Config{}, err
	}
	c := policy.Config{
		Margin: p.Margin.D(), MinGain: *p.MinGain, MoveCost: p.MoveCost.D(), MinInterval: p.MinInterval.D(),
		MaxMoves: *p.MaxMoves, MaxContinuations: *p.MaxContinuations, Speed: p.Speed, DevPartitions: p.DevPartitions,
		DevWindows: ws, Location: loc, AllowExtend: p.AllowExtend, DefaultCkpt: p.DefaultCkpt.D(),
		CkptTimeoutFactor: *p.CkptTimeoutFactor, MinCkptTimeout: p.MinCkptTimeout.D(), MinPending: p.MinPending.D(),
	}
	if c.MinInterval == 0 {
		c.MinInterval = -1 // "0s": no hysteresis (0 in policy.Config means the default)
	}
	if c.MaxContinuations == 0 {
		c.MaxContinuations, c.NoContinuations = policy.DefaultMaxContinuations, true
	}
	return c, nil
}
