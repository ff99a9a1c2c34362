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

// ErrConfig marks a configuration problem.
var ErrConfig = errors.New("stream: bad configuration")

// ConfigFromEnv reads ISCHED_REDIS_ADDR (comma-separated), ISCHED_REDIS_MASTER,
// ISCHED_REDIS_USER (default user), ISCHED_REDIS_PASSWORD_FILE (default
// <ISCHED_REDIS_PASSWORD_DIR>/<user>.pass; with neither, no password),
// ISCHED_REDIS_CA and ISCHED_CLUSTER. There are no built-in address or
// cluster: a site names its own (the daemons' environment files, the
// CLI's isched.conf), and a missing one is an error that says which
// variable to set.
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
	for _, a := range strings.Split(getenv("ISCHED_REDIS_ADDR"), ",") {
		if a = strings.TrimSpace(a); a != "" {
			c.Addrs = append(c.Addrs, a)
		}
	}
	c.PasswordFile = getenv("ISCHED_REDIS_PASSWORD_FILE")
	if dir := getenv("ISCHED_REDIS_PASSWORD_DIR"); c.PasswordFile == "" && dir != "" {
		c.PasswordFile = dir + "/" + c.User + ".pass"
	}
	return c, c.validate()
}

func (c Config) validate() error {
	if len(c.Addrs) == 0 {
		return fmt.Errorf("%w: no Redis address: set ISCHED_REDIS_ADDR (host:port)", ErrConfig)
	}
	if c.Cluster == "" {
		return fmt.Errorf("%w: no cluster name: set ISCHED_CLUSTER (the -cluster of the site's isched-agent)", ErrConfig)
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
