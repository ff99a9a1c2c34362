// Package clientconfig reads the isched CLI's configuration files: the
// site's (/etc/isched/isched.conf, installed by the package and edited by
// the administrator) and the user's ($XDG_CONFIG_HOME/isched/isched.conf,
// else ~/.config/isched/isched.conf).
//
// Each setting stands for an environment variable the CLI already reads
// (cluster for ISCHED_CLUSTER, relay_addr for ISCHED_RELAY_ADDR, ...), so a
// site sets them once instead of every user exporting ISCHED_* variables.
// Precedence, highest first: a command's flags, the environment, the user's
// file, the site's file, the built-in default. `isched config` prints each
// effective value and where it came from.
//
// The format is one "key = value" per line; blank lines and lines starting
// with '#' are ignored; the value runs to the end of the line (surrounding
// spaces trimmed; no quoting, no escapes). A key given twice in one file,
// an unknown key and a bad value are errors naming the file, the line and
// the key.
package clientconfig

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
)

// SitePath is the site's file.
const SitePath = "/etc/isched/isched.conf"

// SiteEnv names a site file to read in place of SitePath, as SLURM_CONF
// does for slurm.conf: a site with several clusters gives each its own
// (the module that selects a cluster sets it), the dev cluster its lab's.
const SiteEnv = "ISCHED_CONF"

// SitePathFrom is the site's file: $ISCHED_CONF, else SitePath. One that is
// named must be an absolute path to a file that is there (LoadSite).
func SitePathFrom(getenv func(string) string) string {
	if p := getenv(SiteEnv); p != "" {
		return p
	}
	return SitePath
}

// LoadSite reads the site's file (SitePathFrom) and then the user's. A file
// named by ISCHED_CONF that is not there, or not absolute, is an error: a
// module that points at a wrong path must not leave the user on defaults.
func LoadSite(getenv func(string) string) (*Config, error) {
	site := SitePathFrom(getenv)
	if getenv(SiteEnv) != "" {
		if !filepath.IsAbs(site) {
			return &Config{values: map[string]Value{}}, fmt.Errorf("%w: %s=%q: want an absolute path", ErrConfig, SiteEnv, site)
		}
		if _, err := os.Stat(site); err != nil {
			return &Config{values: map[string]Value{}}, fmt.Errorf("%w: %s: %w", ErrConfig, SiteEnv, err)
		}
	}
	return Load(site, UserPath(getenv))
}

// ErrConfig marks a bad configuration file.
var ErrConfig = errors.New("bad isched configuration")

// Key is one setting.
type Key struct {
	Name  string // in the file
	Env   string // the environment variable it stands for
	Help  string
	check func(string) error
}

var (
	nameRE = regexp.MustCompile(`^[A-Za-z0-9._-]{1,64}$`)
	addrRE = regexp.MustCompile(`^[A-Za-z0-9.:\[\]_-]+(,[A-Za-z0-9.:\[\]_-]+)*$`)
)

func checkName(v string) error {
	if !nameRE.MatchString(v) {
		return errors.New("want 1-64 of [A-Za-z0-9._-]")
	}
	return nil
}

func checkAddrs(v string) error {
	if !addrRE.MatchString(v) {
		return errors.New("want host:port, or several separated by commas")
	}
	return nil
}

func checkAbs(v string) error {
	if !filepath.IsAbs(v) {
		return errors.New("want an absolute path")
	}
	return nil
}

// ParseBool reads a yes/no setting, in the file or the environment: 1,
// true, yes and 0, false, no, in any case; anything else is an error.
func ParseBool(v string) (bool, error) {
	switch strings.ToLower(v) {
	case "1", "true", "yes":
		return true, nil
	case "0", "false", "no":
		return false, nil
	}
	return false, errors.New("want 1 or 0")
}

func checkBool(v string) error {
	_, err := ParseBool(v)
	return err
}

func checkUID(v string) error {
	if n, err := strconv.ParseUint(v, 10, 31); err != nil || n > 1<<31-1 {
		return errors.New("want a numeric uid")
	}
	return nil
}

func checkAny(string) error { return nil }

func checkPrivateData(v string) error {
	switch v {
	case "auto", "jobs", "none":
		return nil
	}
	return errors.New("want auto, jobs or none")
}

// checkClusters checks NAME=CONF[,NAME=CONF…] (ParseClusters).
func checkClusters(v string) error {
	_, err := ParseClusters(v)
	return err
}

// OtherCluster is a Slurm cluster besides the home one that the CLI plans
// on and submits to (sbatch --clusters): its name and its isched.conf (the
// file that cluster's own login nodes have: its site catalogue, its relay).
type OtherCluster struct {
	Name, Conf string
}

// ParseClusters reads the clusters setting: NAME=CONF pairs separated by
// commas, each NAME a cluster name and CONF an absolute path.
func ParseClusters(v string) ([]OtherCluster, error) {
	var out []OtherCluster
	for _, item := range strings.Split(v, ",") {
		name, conf, ok := strings.Cut(strings.TrimSpace(item), "=")
		name, conf = strings.TrimSpace(name), strings.TrimSpace(conf)
		switch {
		case !ok:
			return nil, fmt.Errorf("%q: want NAME=CONF, e.g. lab2=/etc/isched/clusters/lab2.conf", item)
		case checkName(name) != nil:
			return nil, fmt.Errorf("%q: cluster name %q: want 1-64 of [A-Za-z0-9._-]", item, name)
		case !filepath.IsAbs(conf):
			return nil, fmt.Errorf("%q: configuration file %q: want an absolute path", item, conf)
		}
		for _, o := range out {
			if o.Name == name {
				return nil, fmt.Errorf("cluster %s named twice", name)
			}
		}
		out = append(out, OtherCluster{Name: name, Conf: conf})
	}
	return out, nil
}

// Keys are the settings, in the order `isched config` prints them.
var Keys = []Key{
	{"cluster", "ISCHED_CLUSTER", "the Slurm cluster's name in isched (its agent's and coordinator's -cluster)", checkName},
	{"relay_addr", "ISCHED_RELAY_ADDR", "host:port of isched-relay: jobs report through it and hold no Redis password", checkAddrs},
	{"relay_uid", "ISCHED_RELAY_UID", "uid isched-relay runs as", checkUID},
	{"report_direct", "ISCHED_REPORT_DIRECT", "1: jobs report straight to Redis with the reporter password, not through isched-relay (an opt-in: every job user then holds that password)", checkBool},
	{"coordinator_uid", "ISCHED_COORDINATOR_UID", "uid the coordinator runs as", checkUID},
	{"private_data", "ISCHED_PRIVATE_DATA", "auto (Slurm's PrivateData decides), jobs or none: with jobs private, isched status reads only your own records, through isched-relay (relay_addr), and needs no Redis password", checkPrivateData},
	{"redis_addr", "ISCHED_REDIS_ADDR", "Redis host:port (several: Redis Cluster or Sentinel)", checkAddrs},
	{"redis_master", "ISCHED_REDIS_MASTER", "Sentinel master name", checkName},
	{"redis_ca", "ISCHED_REDIS_CA", "CA file for Redis over TLS", checkAbs},
	{"redis_user", "ISCHED_REDIS_USER", "Redis ACL user the CLI reads as", checkName},
	{"redis_password_file", "ISCHED_REDIS_PASSWORD_FILE", "the CLI's Redis password file", checkAbs},
	{"redis_password_dir", "ISCHED_REDIS_PASSWORD_DIR", "directory of <user>.pass files", checkAbs},
	{"site", "ISCHED_SITE", "site catalogue (partitions, node types, costs)", checkAbs},
	{"clusters", "ISCHED_CLUSTERS", "other Slurm clusters to plan on and submit to (sbatch --clusters), NAME=CONF, comma-separated; CONF is that cluster's isched.conf (its site, its relay_addr): its partitions show as PARTITION@NAME", checkClusters},
	{"helper_dir", "ISCHED_HELPER_DIR", "directory of the Python helper isched.py", checkAbs},
	{"iter_pattern", "ISCHED_ITER_PATTERN", "the wrapper's default progress pattern", checkAny},
	{"account", "SBATCH_ACCOUNT", "default Slurm account of submitted jobs", checkName},
}

// Value is a setting's value and where it came from ("file:line").
type Value struct {
	Value, Origin string
}

// Config is the settings of the files read, the later file's over the
// earlier's.
type Config struct {
	values map[string]Value // by Key.Env
	Files  []string         // the files that were there and were read
}

// Load reads the files in order (a missing one is skipped); a later file's
// value wins. On an error it returns what it read before it, with the
// error.
func Load(paths ...string) (*Config, error) {
	c := &Config{values: map[string]Value{}}
	for _, p := range paths {
		f, err := os.Open(p)
		if errors.Is(err, fs.ErrNotExist) {
			continue
		}
		if err != nil {
			return c, fmt.Errorf("%w: %w", ErrConfig, err)
		}
		err = c.read(f, p)
		f.Close()
		if err != nil {
			return c, err
		}
		c.Files = append(c.Files, p)
	}
	return c, nil
}

// maxFile bounds a configuration file.
const maxFile = 64 << 10

func (c *Config) read(r io.Reader, path string) error {
	seen := map[string]int{}
	sc := bufio.NewScanner(io.LimitReader(r, maxFile+1))
	n, size := 0, 0
	for sc.Scan() {
		n++
		size += len(sc.Bytes()) + 1
		if size > maxFile {
			return fmt.Errorf("%w: %s: larger than %d bytes", ErrConfig, path, maxFile)
		}
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		k, v, err := parseLine(line)
		if err != nil {
			return fmt.Errorf("%w: %s:%d: %w", ErrConfig, path, n, err)
		}
		if first, dup := seen[k.Name]; dup {
			return fmt.Errorf("%w: %s:%d: %s given again (first on line %d)", ErrConfig, path, n, k.Name, first)
		}
		seen[k.Name] = n
		c.values[k.Env] = Value{Value: v, Origin: fmt.Sprintf("%s:%d", path, n)}
	}
	if err := sc.Err(); err != nil {
		return fmt.Errorf("%w: %s:%d: %w", ErrConfig, path, n+1, err)
	}
	return nil
}

func parseLine(line string) (Key, string, error) {
	name, value, ok := strings.Cut(line, "=")
	if !ok {
		return Key{}, "", fmt.Errorf("%q: want key = value", line)
	}
	name, value = strings.TrimSpace(name), strings.TrimSpace(value)
	i := slices.IndexFunc(Keys, func(k Key) bool { return k.Name == name })
	if i < 0 {
		return Key{}, "", fmt.Errorf("unknown key %q (known: %s)", name, strings.Join(KeyNames(), ", "))
	}
	k := Keys[i]
	if value == "" || strings.ContainsFunc(value, func(r rune) bool { return r < 0x20 || r == 0x7f }) {
		return Key{}, "", fmt.Errorf("%s: empty, or a control character in %q", name, value)
	}
	if err := k.check(value); err != nil {
		return Key{}, "", fmt.Errorf("%s = %q: %w", name, value, err)
	}
	return k, value, nil
}

// KeyNames are the keys' names.
func KeyNames() []string {
	var out []string
	for _, k := range Keys {
		out = append(out, k.Name)
	}
	return out
}

// Get is the files' value of an environment variable's setting.
func (c *Config) Get(env string) (Value, bool) {
	if c == nil {
		return Value{}, false
	}
	v, ok := c.values[env]
	return v, ok
}

// Getenv is getenv with the files under it: the environment's value when
// set, else the files'.
func (c *Config) Getenv(getenv func(string) string) func(string) string {
	return func(k string) string {
		if v := getenv(k); v != "" {
			return v
		}
		v, _ := c.Get(k)
		return v.Value
	}
}

// Environ is environ with the files' settings that it does not set.
func (c *Config) Environ(environ []string) []string {
	out := slices.Clone(environ)
	set := map[string]bool{}
	for _, kv := range environ {
		k, v, _ := strings.Cut(kv, "=")
		set[k] = v != ""
	}
	for _, k := range Keys {
		if v, ok := c.Get(k.Env); ok && !set[k.Env] {
			out = append(out, k.Env+"="+v.Value)
		}
	}
	return out
}

// UserPath is the user's file: $XDG_CONFIG_HOME/isched/isched.conf, else
// ~/.config/isched/isched.conf ("" when neither is known).
func UserPath(getenv func(string) string) string {
	if d := getenv("XDG_CONFIG_HOME"); filepath.IsAbs(d) {
		return filepath.Join(d, "isched", "isched.conf")
	}
	if h := getenv("HOME"); filepath.IsAbs(h) {
		return filepath.Join(h, ".config", "isched", "isched.conf")
	}
	return ""
}
