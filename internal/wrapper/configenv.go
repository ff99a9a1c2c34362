package wrapper

import "github.com/isched/isched/internal/clientconfig"

// configKeys are the settings a wrapper takes from isched.conf where its
// environment has none: where to report and who the coordinator is. Not
// Redis's: the CLI's there are the read-only viewer's, and a wrapper that
// reports straight to Redis (the opt-in) is given its own.
var configKeys = map[string]bool{
	"ISCHED_RELAY_ADDR": true, "ISCHED_RELAY_UID": true, "ISCHED_COORDINATOR_UID": true,
	"ISCHED_CLUSTER": true, "ISCHED_ITER_PATTERN": true,
}

// ConfigEnv is getenv with configKeys read from the site's and the user's
// isched.conf (clientconfig.LoadSite: $ISCHED_CONF or
// /etc/isched/isched.conf, then ~/.config/isched/isched.conf) where the
// environment has none. A batch script a user wrote (srun isched-wrapper
// -- python train.py) then reports through the site's relay as a script
// isched submit wrote does. A bad file is returned as err, to be logged:
// the training runs whatever the files say, on the environment alone.
func ConfigEnv(getenv func(string) string) (func(string) string, error) {
	cfg, err := clientconfig.LoadSite(getenv)
	if err != nil {
		return getenv, err
	}
	merged := cfg.Getenv(getenv)
	// the environment's explicit opt-in to direct reports beats a relay
	// the files name (precedence: flags, environment, files): a job that
	// says ISCHED_REPORT_DIRECT=1 reports to the Redis it was given
	direct, _ := envBool(getenv, "ISCHED_REPORT_DIRECT")
	return func(k string) string {
		if configKeys[k] && !(direct && k == "ISCHED_RELAY_ADDR") {
			return merged(k)
		}
		return getenv(k)
	}, nil
}
