package stream

import (
	"errors"
	"fmt"
	"os"
	"strings"
	"time"
)

// Config says how to reach Redis as one ACL user.
type Config struct {
	// Addrs: one address for a single server; several for Redis Cluster; with
	// MasterName set, Sentinel addresses (go-redis's universal client).
	Addrs      []string
	MasterName string
	User       string
	// PasswordFile holds the user's password (first line). Never in code or flags.
	PasswordFile string
	// Private makes Open refuse a password file readable by group or others:
	// set for the agent and the coordinator, whose passwords are real secrets.
	Private bool
	Cluster string
	// TLS is enabled by a non-empty CAFile (see docs/deployment.md).
	CAFile      string
	DialTimeout time.Duration
	// OpTimeout bounds every call that has no deadline of its own.
	OpTimeout time.Duration
	// MaxEntry, when > 0, makes consumer-group reads (ReadGroup,
	// ReadOwnPending) check each entry inside Redis before it is sent:
	// an entry with a field over MaxEntry bytes is deleted and returned
	// as Oversize, without its fields; Claim then returns ids only. For a
	// reader of a stream that untrusted users write (the coordinator).
	MaxEntry int
}

// The built-in defaults: the dev lab's (scripts/dev-cluster). A site sets
// its own through the environment, or for the CLI /etc/isched/isched.conf.
const (
	DefaultAddr        = "127.0.0.1:6390"
	DefaultCluster     = "lab"
	DefaultPasswordDir = "/var/lib/isched-dev/redis"
)

// ErrConfig marks a configuration problem.
var ErrConfig = errors.New("stream: bad configuration")

// ConfigFromEnv reads ISCHED_REDIS_ADDR (comma-separated), ISCHED_REDIS_MASTER,
// ISCHED_REDIS_USER (default user), ISCHED_REDIS_PASSWORD_FILE (default
// <ISCHED_REDIS_PASSWORD_DIR or /var/lib/isched-dev/redis>/<user>.pass),
// ISCHED_REDIS_CA and ISCHED_CLUSTER (default "lab").
func ConfigFromEnv(getenv func(string) string, user string) (Config, error) {
	c := Config{
		User:        user,
		Cluster:     getenv("ISCHED_CLUSTER"),
		MasterName:  getenv("ISCHED_REDIS_MASTER"),
		CAFile:      getenv("ISCHED_REDIS_CA"),
		DialTimeout: 2 * time.Second,
		OpTimeout:   3 * time.Second,
	}
	if u := getenv("ISCHED_REDIS_USER"); u != "" {
		c.User = u
	}
	addr := getenv("ISCHED_REDIS_ADDR")
	if addr == "" {
		addr = DefaultAddr
	}
	for _, a := range strings.Split(addr, ",") {
		if a = strings.TrimSpace(a); a != "" {
			c.Addrs = append(c.Addrs, a)
		}
	}
	if c.Cluster == "" {
		c.Cluster = DefaultCluster
	}
	c.PasswordFile = getenv("ISCHED_REDIS_PASSWORD_FILE")
	if c.PasswordFile == "" {
		dir := getenv("ISCHED_REDIS_PASSWORD_DIR")
		if dir == "" {
			dir = DefaultPasswordDir
		}
		c.PasswordFile = dir + "/" + c.User + ".pass"
	}
	return c, c.validate()
}

func (c Config) validate() error {
	if len(c.Addrs) == 0 {
		return fmt.Errorf("%w: no Redis address", ErrConfig)
	}
	if c.User == "" {
		return fmt.Errorf("%w: no Redis user", ErrConfig)
	}
	if !ValidName(c.Cluster) {
		return fmt.Errorf("%w: cluster name %q: want 1-64 of [A-Za-z0-9._-]", ErrConfig, c.Cluster)
	}
	return nil
}

// readPassword reads the first line of the password file, refusing a file
// readable by others when private is set.
func readPassword(path string, private bool) (string, error) {
	if path == "" {
		return "", nil
	}
	f, err := os.Open(path)
	if err != nil {
		return "", fmt.Errorf("%w: password file: %w", ErrConfig, err)
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return "", fmt.Errorf("%w: password file: %w", ErrConfig, err)
	}
	if !fi.Mode().IsRegular() {
		return "", fmt.Errorf("%w: password file %s is not a regular file", ErrConfig, path)
	}
	if private && fi.Mode().Perm()&0o077 != 0 {
		return "", fmt.Errorf("%w: password file %s has mode %04o: readable by others; chmod 600 it", ErrConfig, path, fi.Mode().Perm())
	}
	b := make([]byte, 4096)
	n, err := f.Read(b)
	if err != nil {
		return "", fmt.Errorf("%w: password file %s: %w", ErrConfig, path, err)
	}
	pw, _, _ := strings.Cut(string(b[:n]), "\n")
	pw = strings.TrimSpace(pw)
	if pw == "" {
		return "", fmt.Errorf("%w: password file %s is empty", ErrConfig, path)
	}
	return pw, nil
}
