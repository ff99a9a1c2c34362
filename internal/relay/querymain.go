package relay

import (
	"context"
	"flag"
	"fmt"
	"log/slog"
	"strconv"
	"strings"

	"github.com/isched/isched/internal/daemon"
	"github.com/isched/isched/internal/stream"
)

// queryOptions are isched-relay's status-query flags.
type queryOptions struct {
	passwordFile, user string
	seeAll             uidList
}

// uidList is a flag of comma-separated uids.
type uidList []int

func (l *uidList) String() string {
	s := make([]string, len(*l))
	for i, u := range *l {
		s[i] = strconv.Itoa(u)
	}
	return strings.Join(s, ",")
}

func (l *uidList) Set(v string) error {
	*l = nil
	for _, f := range strings.Split(v, ",") {
		if f = strings.TrimSpace(f); f == "" {
			continue
		}
		u, err := strconv.Atoi(f)
		if err != nil || u < 0 {
			return fmt.Errorf("uid %q: want a number ≥ 0", f)
		}
		*l = append(*l, u)
	}
	return nil
}

func (q *queryOptions) register(fs *flag.FlagSet, getenv func(string) string) {
	fs.StringVar(&q.passwordFile, "query-password-file", getenv("ISCHED_RELAY_QUERY_PASSWORD_FILE"),
		"password file of a read-only Redis user (the viewer's): turns on status queries, so that `isched status` on a site with Slurm's PrivateData=jobs reads each user's own records through the relay (MUNGE says whose); empty: off (env ISCHED_RELAY_QUERY_PASSWORD_FILE)")
	fs.StringVar(&q.user, "query-user", "viewer", "Redis ACL user of -query-password-file")
	fs.Var(&q.seeAll, "query-see-all-uids", "comma-separated uids whose status queries see every user's records, as PrivateData exempts them (SlurmUser's, the Slurm operators'); root always does")
}

// serveQueries opens Redis as the query user and turns status queries on
// when configured; stop closes that connection. ok false: return code.
func (o options) serveQueries(ctx context.Context, srv *Server, keys stream.Keys, getenv func(string) string, log *slog.Logger) (stop func(), code int, ok bool) {
	stop = func() {}
	if o.query.passwordFile == "" {
		return stop, 0, true
	}
	rcfg, err := stream.ConfigFromEnv(func(k string) string {
		switch k {
		case "ISCHED_CLUSTER":
			return o.cluster
		case "ISCHED_REDIS_USER":
			return o.query.user
		case "ISCHED_REDIS_PASSWORD_FILE":
			return o.query.passwordFile
		}
		return getenv(k)
	}, o.query.user)
	if err != nil {
		log.Error("redis configuration (status queries)", "err", err)
		return stop, daemon.ExitUsage, false
	}
	rcfg.Private = !o.readablePassword
	rdb, code, ok := daemon.ConnectRedis(ctx, rcfg, log)
	if !ok {
		return stop, code, false
	}
	if err := srv.ServeQueries(QueryConfig{Reader: rdb, Keys: keys, SeeAll: o.query.seeAll}); err != nil {
		_ = rdb.Close()
		log.Error("configuration", "err", err)
		return stop, daemon.ExitUsage, false
	}
	log.Info("status queries on", "redis_user", o.query.user, "see_all_uids", o.query.seeAll.String())
	return func() { _ = rdb.Close() }, 0, true
}
