package cli

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/isched/isched/internal/auth"
	"github.com/isched/isched/internal/clientconfig"
	"github.com/isched/isched/internal/relayproto"
	"github.com/isched/isched/internal/stream"
)

// Where the site keeps each user's jobs private (Slurm's PrivateData=jobs,
// or private_data = jobs in isched.conf), the CLI reads the coordinator's
// records through isched-relay's status queries: the relay learns the uid
// from MUNGE and answers only that user's lineages, job table rows and
// limits, and other users' receipts without names. No Redis password is
// needed, so the site keeps the viewer's to root and the relay.

// privateDataReader is a Slurm that tells its PrivateData
// (*slurm.Client: `scontrol show config`).
type privateDataReader interface {
	PrivateData(ctx context.Context) ([]string, error)
}

// privateJobs says whether the site hides each user's jobs from the
// others, and why: private_data (ISCHED_PRIVATE_DATA) when it says jobs or
// none, else Slurm's PrivateData (a Slurm that cannot be asked: not
// private, and the viewer path says what it lacks).
func (a *App) privateJobs(ctx context.Context) (bool, string) {
	switch v := a.Getenv("ISCHED_PRIVATE_DATA"); v {
	case "jobs":
		return true, "private_data = jobs"
	case "none":
		return false, "private_data = none"
	}
	r, ok := a.Slurm.(privateDataReader)
	if !ok {
		return false, "no Slurm to ask for PrivateData"
	}
	items, err := r.PrivateData(ctx)
	if err != nil {
		return false, "Slurm's PrivateData unknown: " + err.Error()
	}
	if slices.Contains(items, "jobs") {
		return true, "Slurm's PrivateData=" + strings.Join(items, ",")
	}
	return false, "Slurm's PrivateData has no jobs"
}

// openDefault is the default OpenStore: through the relay where jobs are
// private, else Redis as the viewer.
func (a *App) openDefault(ctx context.Context) (Store, error) {
	private, why := a.privateJobs(ctx)
	if !private {
		st, err := a.openViewer(ctx)
		if errors.Is(err, fs.ErrPermission) {
			err = fmt.Errorf("%w (%s; where the viewer's password is not for users, the site sets private_data = jobs and relay_addr)", err, why)
		}
		return st, err
	}
	return a.openRelayStore(ctx, why)
}

// errNoRelayForStatus: the site is private and no relay is configured.
var errNoRelayForStatus = errors.New("no relay for private status")

// openRelayStore connects to the relay's status queries.
func (a *App) openRelayStore(ctx context.Context, why string) (Store, error) {
	cluster, err := a.clusterName(ctx)
	if err != nil {
		return nil, err
	}
	addr, _, _ := strings.Cut(a.Getenv("ISCHED_RELAY_ADDR"), ",")
	if addr == "" {
		return nil, fmt.Errorf("%w: this site keeps each user's jobs private (%s): isched reads your records through isched-relay, and no relay_addr is set in %s or ISCHED_RELAY_ADDR (the viewer's Redis password is not for users there)",
			errNoRelayForStatus, why, clientconfig.SitePathFrom(a.rawEnv()))
	}
	keys, err := stream.NewKeys(cluster)
	if err != nil {
		return nil, err
	}
	relayUID, err := a.relayUID()
	if err != nil {
		return nil, err
	}
	cred := a.RelayCred
	if cred == nil {
		m := auth.DefaultMunger("")
		cred = func(ctx context.Context, cluster string, uid int) (string, error) {
			return relayproto.Credential(ctx, m, cluster, uid, time.Now())
		}
	}
	c := &relayproto.QueryClient{Addr: addr, Cred: func(ctx context.Context) (string, error) { return cred(ctx, cluster, relayUID) }}
	if err := c.Connect(ctx); err != nil {
		return nil, fmt.Errorf("this site keeps each user's jobs private (%s); isched-relay at %s answers status queries: %w", why, addr, err)
	}
	return relayStore{QueryClient: c, keys: keys}, nil
}

// relayUID is the relay's uid, to which the credential is restricted:
// relay_uid, else coordinator_uid, else 0 (as the wrapper's).
func (a *App) relayUID() (int, error) {
	for _, k := range []string{"ISCHED_RELAY_UID", "ISCHED_COORDINATOR_UID"} {
		if v := a.Getenv(k); v != "" {
			n, err := strconv.Atoi(v)
			if err != nil || n < 0 {
				return -1, fmt.Errorf("%s %q: want a numeric uid", k, v)
			}
			return n, nil
		}
	}
	return 0, nil
}

// relayStore is a Store over the relay's status queries.
type relayStore struct {
	*relayproto.QueryClient
	keys stream.Keys
}

func (s relayStore) Keys() stream.Keys { return s.keys }
