// Package cli is the `isched` command: the user's side of isched.
//
//	isched estimate  memory, hours, cost and source per batch size and node type
//	isched plan      waits, run times and the plans with and without migration
//	isched submit    write the batch script, submit it with sbatch
//	isched profile   measure the training command briefly per batch size: receipts
//	isched status    a job's progress, ETA, memory, checkpoints and decisions
//	isched report    plot a job's iteration time and memory over its run
//	isched stop      the run is done: cancel its current job, never continued
//	isched simulate  replay a trace with Slurm alone and with isched (internal/sim)
//	isched site probe  measure a node type for the static model (admins)
//
// It reads the cluster state and the coordinator's records from Redis as
// the read-only ACL user `viewer` (ISCHED_REDIS_USER overrides), and runs
// Slurm's client commands through internal/slurm. Everything it needs from
// outside is in App, so tests drive Run with fakes and miniredis.
package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/user"
	"strconv"
	"time"

	"github.com/isched/isched/internal/clientconfig"
	"github.com/isched/isched/internal/retry"
	"github.com/isched/isched/internal/slurm"
	"github.com/isched/isched/internal/stream"
)

// Exit codes.
const (
	ExitOK    = 0
	ExitError = 1 // the command ran and failed
	ExitUsage = 2 // bad flags or arguments
)

// Store is what the CLI reads from Redis; *stream.Client implements it.
type Store interface {
	Keys() stream.Keys
	Get(ctx context.Context, key string) ([]byte, error)
	List(ctx context.Context, key string) ([][]byte, error)
	Close() error
}

// Slurm is what the CLI asks of Slurm; *slurm.Client implements it.
type Slurm interface {
	SubmitWith(ctx context.Context, script []byte, spec slurm.SubmitSpec) (string, error)
	Poll(ctx context.Context) (*slurm.State, error)
	ShowJob(ctx context.Context, jobID string) (*slurm.JobInfo, error)
	Cancel(ctx context.Context, jobID string) error
}

// App is the CLI with its dependencies. Zero fields get the real ones.
type App struct {
	Getenv func(string) string
	// Environ is the whole environment (default os.Environ): submit passes
	// its SBATCH_* variables on to sbatch.
	Environ func() []string
	// Env is the environment alone (Getenv is it over the configuration
	// files), for isched config's sources; nil: Getenv.
	Env func(string) string
	// Config is the configuration files read (nil: none); ConfigErr, a
	// file that could not be read: every command but help and version
	// stops on it.
	Config    *clientconfig.Config
	ConfigErr error
	Now       func() time.Time
	// OpenStore connects to Redis (default: stream.Open with
	// stream.ConfigFromEnv(Getenv, "viewer"); where the site keeps jobs
	// private, isched-relay's status queries: openDefault).
	OpenStore func(ctx context.Context) (Store, error)
	// RelayCred makes the MUNGE credential of a status-query connection
	// to the relay of cluster, restricted to relayUID (default:
	// relayproto.Credential with libmunge or the munge command).
	RelayCred func(ctx context.Context, cluster string, relayUID int) (string, error)
	Slurm     Slurm
	// Executable is this program's path, to find isched-wrapper beside it.
	Executable func() (string, error)
	// Getwd is the working directory (default os.Getwd).
	Getwd func() (string, error)
	// Stat is the file system, to find the command's program (default os.Stat).
	Stat func(string) (fs.FileInfo, error)
	// Lstat is Stat not following a final link (default os.Lstat): the
	// job's output and checkpoint directory as they are.
	Lstat func(string) (fs.FileInfo, error)
	// MakeJobDir makes a submission's checkpoint directory (default
	// os.MkdirAll, mode 0750); send then checks, by Lstat, that it is the
	// user's own.
	MakeJobDir func(dir string) error
	// Username is who runs the CLI (default: os/user, else $USER).
	Username func() string
	// UID is the uid that runs the CLI (default os.Getuid): the namespace
	// of the lineages it makes, and whose receipts it trusts.
	UID func() int
	// Random returns n random bytes (lineage ids); default crypto/rand.
	Random func(n int) []byte
	// Terminal reports whether w is a terminal (status --watch clears it).
	Terminal func(w io.Writer) bool
	// Prober runs `isched site probe`'s script (default: a child process).
	Prober ProbeRunner
	// Sleep waits d or until ctx ends (default: a timer); isched stop
	// --wait looks again after it.
	Sleep func(ctx context.Context, d time.Duration) error

	stdout, stderr io.Writer
	store          Store
	storeErr       error
	storeOpened    bool
	slurmCluster   struct {
		asked bool
		name  string
		err   error
	}
	others struct { // the clusters setting, read once (otherClusters)
		loaded bool
		list   []otherCluster
		err    error
	}
}

// Main runs the CLI with the real dependencies.
// The configuration files (the site's, then the user's) are under the
// environment: a variable that is set wins over them.
func Main(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) int {
	cfg, err := loadConfig(getenv)
	app := &App{Getenv: cfg.Getenv(getenv), Env: getenv, Config: cfg, ConfigErr: err, Environ: func() []string { return cfg.Environ(os.Environ()) }}
	return app.Run(ctx, args, stdout, stderr)
}

// Run runs one command and returns the exit code. Help (-h, --help,
// help, help CMD, CMD -h) goes to stdout with ExitOK; a usage mistake to
// stderr with ExitUsage and, for a mistyped command or flag, the closest
// known names.
func (a *App) Run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	a.defaults()
	a.stdout, a.stderr = stdout, stderr
	a.store, a.storeErr, a.storeOpened = nil, nil, false
	defer func() {
		if a.store != nil {
			_ = a.store.Close()
		}
		a.store, a.storeErr, a.storeOpened = nil, nil, false // an App may run again
	}()
	if len(args) == 0 {
		writeRootUsage(stderr, a.root())
		return ExitUsage
	}
	return a.execute(ctx, args)
}

var errUsage = errors.New("usage")

func usageErr(format string, a ...any) error {
	return fmt.Errorf("%w: %s", errUsage, fmt.Sprintf(format, a...))
}

func (a *App) defaults() {
	if a.Getenv == nil {
		a.Getenv = os.Getenv
	}
	if a.Environ == nil {
		a.Environ = os.Environ
	}
	if a.Now == nil {
		a.Now = time.Now
	}
	if a.Slurm == nil {
		a.Slurm = &slurm.Client{}
	}
	if a.OpenStore == nil {
		a.OpenStore = a.openDefault
	}
	if a.Executable == nil {
		a.Executable = os.Executable
	}
	if a.Stat == nil {
		a.Stat = os.Stat
	}
	if a.Lstat == nil {
		a.Lstat = os.Lstat
	}
	if a.MakeJobDir == nil {
		a.MakeJobDir = func(dir string) error { return os.MkdirAll(dir, 0o750) }
	}
	if a.Prober == nil {
		a.Prober = execProbe{}
	}
	if a.Sleep == nil {
		a.Sleep = retry.Sleep
	}
	if a.Getwd == nil {
		a.Getwd = os.Getwd
	}
	if a.Username == nil {
		a.Username = a.currentUser
	}
	if a.UID == nil {
		a.UID = os.Getuid
	}
	if a.Random == nil {
		a.Random = cryptoRandom
	}
	if a.Terminal == nil {
		a.Terminal = isTerminal
	}
}

// openViewer connects to Redis as the read-only viewer, on the cluster's
// keys (the default OpenStore).
func (a *App) openViewer(ctx context.Context) (Store, error) {
	cluster, err := a.clusterName(ctx)
	if err != nil {
		return nil, err
	}
	if a.Getenv("ISCHED_REDIS_ADDR") == "" {
		return nil, fmt.Errorf("no Redis address: set redis_addr in %s or ISCHED_REDIS_ADDR", clientconfig.SitePathFrom(a.rawEnv()))
	}
	cfg, err := stream.ConfigFromEnv(func(k string) string {
		if k == "ISCHED_CLUSTER" {
			return cluster
		}
		return a.Getenv(k)
	}, "viewer")
	if err != nil {
		return nil, err
	}
	return stream.Open(ctx, cfg)
}

// currentUser is who runs the CLI (the default Username): os/user, else $USER.
func (a *App) currentUser() string {
	if u, err := user.Current(); err == nil {
		return u.Username
	}
	return a.Getenv("USER")
}

// openStore connects to Redis once per command.
func (a *App) openStore(ctx context.Context) (Store, error) {
	if !a.storeOpened {
		a.storeOpened = true
		st, err := a.OpenStore(ctx)
		if err != nil {
			st = nil // not a typed nil in the interface
		}
		a.store, a.storeErr = st, err
	}
	return a.store, a.storeErr
}

// clusterNamer is the part of Slurm that names the cluster
// (*slurm.Client: `scontrol show config`).
type clusterNamer interface {
	ClusterName(ctx context.Context) (string, error)
}

// clusterName is the cluster in Redis keys: ISCHED_CLUSTER (the
// environment, or cluster in isched.conf), else Slurm's ClusterName, as
// isched-agent's own default. There is no built-in name; Slurm is asked
// once per run.
func (a *App) clusterName(ctx context.Context) (string, error) {
	if c := a.Getenv("ISCHED_CLUSTER"); c != "" {
		return c, nil
	}
	if !a.slurmCluster.asked {
		a.slurmCluster.asked = true
		if n, ok := a.Slurm.(clusterNamer); ok {
			a.slurmCluster.name, a.slurmCluster.err = n.ClusterName(ctx)
		} else {
			a.slurmCluster.err = errors.New("no Slurm to ask")
		}
	}
	if a.slurmCluster.err != nil {
		return "", fmt.Errorf("no cluster name: set cluster in %s or ISCHED_CLUSTER (Slurm's ClusterName: %w)",
			clientconfig.SitePathFrom(a.rawEnv()), a.slurmCluster.err)
	}
	return a.slurmCluster.name, nil
}

// cluster is clusterName, "" when there is none (the commands that need
// one check clusterName first).
func (a *App) cluster() string {
	c, _ := a.clusterName(context.Background())
	return c
}

// lineageNamespace is the prefix of the lineages this user's submissions
// make, <cluster>-u<uid>-, which the coordinator reserves for the uid.
func (a *App) lineageNamespace() string {
	return a.cluster() + "-u" + strconv.Itoa(a.UID()) + "-"
}

// readFile reads a user's input file with a size bound.
func readFile(path string) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, 64<<20+1))
	if err != nil {
		return nil, err
	}
	if len(b) > 64<<20 {
		return nil, fmt.Errorf("%s: larger than 64 MiB", path)
	}
	return b, nil
}

// clean makes user data (job names, comments, reasons) safe to print on a
// terminal: control characters are escaped.
func clean(s string) string {
	ok := true
	for _, c := range s {
		if c < 0x20 || c == 0x7f || (c >= 0x80 && c < 0xa0) {
			ok = false
			break
		}
	}
	if ok {
		return s
	}
	q := strconv.QuoteToGraphic(s)
	return q[1 : len(q)-1]
}
