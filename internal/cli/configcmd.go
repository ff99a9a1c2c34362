package cli

import (
	"context"
	"fmt"
	"text/tabwriter"

	"github.com/isched/isched/internal/clientconfig"
	"github.com/spf13/pflag"
)

// builtins are the values the CLI falls back to when nothing sets a key.
// None names a lab or a site: a site's isched.conf (scripts/dev-cluster
// writes the lab's) gives the cluster, Redis and relay; the cluster
// falls back to Slurm's ClusterName.
var builtins = map[string]string{"ISCHED_REDIS_USER": "viewer", "ISCHED_SITE": DefaultSitePath}

// configRow is one line of `isched config`.
type configRow struct {
	Key    string `json:"key"`
	Env    string `json:"env"`
	Value  string `json:"value"`
	Origin string `json:"origin"` // environment, FILE:LINE, built-in, or unset
}

// configRows are the effective settings and where each came from: the
// environment, a configuration file, the built-in default, or nothing.
func (a *App) configRows() []configRow {
	env := a.Env
	if env == nil {
		env = a.Getenv
	}
	var rows []configRow
	for _, k := range clientconfig.Keys {
		r := configRow{Key: k.Name, Env: k.Env}
		if v, ok := a.Config.Get(k.Env); ok {
			r.Value, r.Origin = v.Value, v.Origin
		}
		if v := env(k.Env); v != "" {
			r.Value, r.Origin = v, "environment ("+k.Env+")"
		}
		if r.Origin == "" && k.Env == "ISCHED_CLUSTER" {
			if c, err := a.clusterName(context.Background()); err == nil {
				r.Value, r.Origin = c, "Slurm (scontrol show config: ClusterName)"
			}
		}
		if r.Origin == "" {
			r.Value, r.Origin = builtins[k.Env], "built-in"
			if r.Value == "" {
				r.Origin = "unset"
			}
		}
		rows = append(rows, r)
	}
	return rows
}

// configCmd is `isched config`: each setting's effective value and source.
type configCmd struct {
	app    *App
	asJSON bool
}

func (c *configCmd) leaf() leaf {
	return leaf{
		use:   "config [--json]",
		short: "each setting (cluster, relay, Redis, site catalogue, account) and where it comes from",
		flags: func(fs *pflag.FlagSet) {
			fs.BoolVar(&c.asJSON, "json", false, "print the settings as JSON: key, env, value, origin")
		},
		run: c.run, args: noArgs,
	}
}

func (c *configCmd) run(_ context.Context, pos []string) error {
	a := c.app
	if len(pos) > 0 {
		return usageErr("isched config takes no arguments")
	}
	rows := a.configRows()
	if c.asJSON {
		return writeJSON(a.stdout, rows)
	}
	files := "none"
	if a.Config != nil && len(a.Config.Files) > 0 {
		files = fmt.Sprint(a.Config.Files)
	}
	fmt.Fprintf(a.stdout, "configuration files read: %s (the site's %s, then yours; the environment and flags override them)\n\n", files, clientconfig.SitePathFrom(a.rawEnv()))
	tw := tabwriter.NewWriter(a.stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "KEY\tVALUE\tFROM")
	for _, r := range rows {
		v := r.Value
		if v == "" {
			v = "-"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\n", r.Key, v, r.Origin)
	}
	return tw.Flush()
}

// loadConfig reads the site's and the user's configuration files for Main.
func loadConfig(getenv func(string) string) (*clientconfig.Config, error) {
	return clientconfig.LoadSite(getenv)
}

// rawEnv is the environment without the configuration files (Env; an App
// made without it, in tests, has Getenv only).
func (a *App) rawEnv() func(string) string {
	if a.Env != nil {
		return a.Env
	}
	return a.Getenv
}
