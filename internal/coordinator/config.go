package coordinator

import "github.com/isched/isched/internal/coordconfig"

// The config file's shape, defaults, loading and validation live in
// internal/coordconfig, below this package and the CLI (isched simulate
// reads the same file's policy).

// configOf validates s and derives what New takes from it: the one place
// where Settings become Config and policy.Config.
func configOf(s coordconfig.Settings) (Config, error) {
	if err := s.Validate(); err != nil {
		return Config{}, err
	}
	pol, err := s.Policy.Config()
	if err != nil {
		return Config{}, err
	}
	return Config{
		Tick: s.Tick.D(), StaleAfter: s.StaleAfter.D(), LeaderTTL: s.LeaderTTL.D(),
		EndGrace: s.EndGrace.D(), EndedTTL: s.EndedTTL.D(),
		MaxJobSeries: s.MaxJobSeries, AdminComment: s.AdminComment,
		Policy: pol,
	}, nil
}
