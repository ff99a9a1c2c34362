package cli

// Several clusters (issue 27, item 3). The clusters setting names Slurm
// clusters besides the home one, each with its catalogue: estimate, plan
// and submit compare their partitions (PARTITION@CLUSTER) with the home
// cluster's, submit sends the job to the cluster it chose (sbatch -M),
// and status follows a lineage on the cluster its name carries
// (<cluster>-u<uid>-…). Each cluster has its own agent and coordinator;
// their records share one Redis under their cluster's keys.

import (
	"context"
	"fmt"
	"strings"

	"github.com/isched/isched/internal/clientconfig"
	"github.com/isched/isched/internal/plan"
	"github.com/isched/isched/internal/stream"
)

// clusterSite is another cluster's catalogue, as its own partitions name
// it.
type clusterSite struct {
	name string
	site *plan.Site
}

// otherClusters is the clusters setting, parsed; nil when unset.
func (a *App) otherClusters() ([]clientconfig.OtherCluster, error) {
	v := a.Getenv("ISCHED_CLUSTERS")
	if v == "" {
		return nil, nil
	}
	cs, err := clientconfig.ParseClusters(v)
	if err != nil {
		return nil, usageErr("ISCHED_CLUSTERS (clusters in isched.conf): %v", err)
	}
	return cs, nil
}

// addClusters loads the other clusters' catalogues and adds their
// partitions to l.site.
func (a *App) addClusters(l *loaded) error {
	others, err := a.otherClusters()
	if err != nil || len(others) == 0 {
		return err
	}
	home := a.cluster()
	for _, oc := range others {
		if oc.Name == home {
			return usageErr("ISCHED_CLUSTERS (clusters in isched.conf) names %s, the home cluster: list the others only", home)
		}
		s, err := loadSite(oc.Site)
		if err != nil {
			return fmt.Errorf("cluster %s: %w", oc.Name, err)
		}
		if err := l.site.AddCluster(oc.Name, s); err != nil {
			return fmt.Errorf("cluster %s: %w", oc.Name, err)
		}
		l.others = append(l.others, clusterSite{oc.Name, s})
	}
	return nil
}

// otherWaits estimates the waits on the other clusters' partitions from
// their agents' snapshots in Redis, keyed as the merged catalogue names
// them; a cluster without one has unknown waits, and the source says why.
func (a *App) otherWaits(ctx context.Context, l *loaded) {
	now := a.Now()
	for _, c := range l.others {
		st, err := a.storeFor(ctx, c.name)
		var v clusterView
		if err == nil {
			v, err = a.stateFromStore(ctx, st, now)
		}
		if err != nil {
			l.view.source += fmt.Sprintf("; %s: %v: waits unknown", c.name, err)
			continue
		}
		l.view.source += "; " + c.name + ": " + v.source
		for i := range c.site.Partitions {
			ps := &c.site.Partitions[i]
			for _, n := range ps.NodeTypes {
				nt := c.site.NodeType(n)
				w := c.site.EstimateWait(v.state, ps.Name, a.need(l.in, nt), now)
				w.Partition = plan.QualifiedPartition(ps.Name, c.name)
				l.waits[w.Partition+"/"+nt.Name] = w
			}
		}
	}
}

// keyedStore reads another cluster's records over the home store's
// connection; closing it leaves that connection to its owner.
type keyedStore struct {
	Store
	keys stream.Keys
}

func (s keyedStore) Keys() stream.Keys { return s.keys }
func (s keyedStore) Close() error      { return nil }

// storeFor is the store of a cluster's keys ("" or the home cluster: the
// home store).
func (a *App) storeFor(ctx context.Context, cluster string) (Store, error) {
	st, err := a.openStore(ctx)
	if err != nil || cluster == "" || cluster == a.cluster() {
		return st, err
	}
	k, err := stream.NewKeys(cluster)
	if err != nil {
		return nil, err
	}
	return keyedStore{Store: st, keys: k}, nil
}

// lineageCluster is the configured other cluster a lineage's name carries
// (<cluster>-u<uid>-…), "" for the home cluster or none.
func (a *App) lineageCluster(lineage string) string {
	others, err := a.otherClusters()
	if err != nil {
		return ""
	}
	for _, oc := range others {
		if strings.HasPrefix(lineage, oc.Name+"-u") {
			return oc.Name
		}
	}
	return ""
}
