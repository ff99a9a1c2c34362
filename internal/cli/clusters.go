package cli

// Several clusters (issue 27, item 3). The clusters setting names Slurm
// clusters besides the home one, each with its isched.conf (the one that
// cluster's own login nodes have): estimate, plan and submit compare their
// partitions (PARTITION@CLUSTER, from the file's site catalogue) with the
// home cluster's, submit sends the job to the cluster it chose (sbatch
// --clusters) to report through that cluster's relay, and status follows
// a lineage on the cluster its name carries (<cluster>-u<uid>-…). Each
// cluster has its own agent, coordinator and relay; their records share
// one Redis under their cluster's keys.

import (
	"context"
	"fmt"
	"os"
	"slices"
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

// otherCluster is another cluster of the clusters setting, its file read.
type otherCluster struct {
	name, confPath string
	conf           *clientconfig.Config
}

// getenv is the cluster's own setting of an isched variable, "" when its
// file does not set it.
func (c otherCluster) getenv(k string) string {
	v, _ := c.conf.Get(k)
	return v.Value
}

// otherClusters is the clusters setting with each cluster's file read
// (once per run); nil when unset.
func (a *App) otherClusters() ([]otherCluster, error) {
	if !a.others.loaded {
		a.others.loaded = true
		a.others.list, a.others.err = a.readOtherClusters()
	}
	return a.others.list, a.others.err
}

func (a *App) readOtherClusters() ([]otherCluster, error) {
	v := a.Getenv("ISCHED_CLUSTERS")
	if v == "" {
		return nil, nil
	}
	cs, err := clientconfig.ParseClusters(v)
	if err != nil {
		return nil, usageErr("ISCHED_CLUSTERS (clusters in isched.conf): %v", err)
	}
	home := a.cluster()
	var out []otherCluster
	for _, c := range cs {
		if c.Name == home {
			return nil, usageErr("ISCHED_CLUSTERS (clusters in isched.conf) names %s, the home cluster: list the others only", home)
		}
		if _, err := os.Stat(c.Conf); err != nil {
			return nil, fmt.Errorf("cluster %s: %w", c.Name, err)
		}
		conf, err := clientconfig.Load(c.Conf)
		if err != nil {
			return nil, fmt.Errorf("cluster %s: %w", c.Name, err)
		}
		oc := otherCluster{name: c.Name, confPath: c.Conf, conf: conf}
		if n := oc.getenv("ISCHED_CLUSTER"); n != "" && n != c.Name {
			return nil, fmt.Errorf("cluster %s: %s says cluster = %s", c.Name, c.Conf, n)
		}
		if r := oc.getenv("ISCHED_REDIS_ADDR"); r != "" && r != a.Getenv("ISCHED_REDIS_ADDR") {
			return nil, fmt.Errorf("cluster %s: %s names Redis %s, this cluster's is %s: the clusters must share one Redis (their keys are apart)",
				c.Name, c.Conf, r, a.Getenv("ISCHED_REDIS_ADDR"))
		}
		out = append(out, oc)
	}
	return out, nil
}

// otherNames are the names of the other clusters (none on an error,
// which the commands that plan report).
func (a *App) otherNames() []string {
	others, _ := a.otherClusters()
	var names []string
	for _, o := range others {
		names = append(names, o.name)
	}
	return names
}

// addClusters loads the other clusters' catalogues and adds their
// partitions to l.site.
func (a *App) addClusters(l *loaded) error {
	others, err := a.otherClusters()
	if err != nil {
		return err
	}
	for _, oc := range others {
		path := oc.getenv("ISCHED_SITE")
		if path == "" {
			return fmt.Errorf("cluster %s: %s sets no site (the cluster's catalogue)", oc.name, oc.confPath)
		}
		s, err := loadSite(path)
		if err != nil {
			return fmt.Errorf("cluster %s: %w", oc.name, err)
		}
		if err := l.site.AddCluster(oc.name, s); err != nil {
			return fmt.Errorf("cluster %s: %w", oc.name, err)
		}
		l.others = append(l.others, clusterSite{oc.name, s})
	}
	return nil
}

// jobGetenv is where a job on cluster finds its settings: that cluster's
// file for the variables that reach isched there (its relay, its
// coordinator's uid), else this CLI's; the home cluster: this CLI's.
func (a *App) jobGetenv(cluster string) func(string) string {
	if cluster == "" {
		return a.Getenv
	}
	others, _ := a.otherClusters()
	for _, oc := range others {
		if oc.name != cluster {
			continue
		}
		return func(k string) string {
			if slices.Contains(relayEnv, k) || k == "ISCHED_COORDINATOR_UID" {
				return oc.getenv(k) // never this cluster's relay: it takes its own cluster's reports only
			}
			if v := oc.getenv(k); v != "" {
				return v
			}
			return a.Getenv(k)
		}
	}
	return a.Getenv
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
	for _, name := range a.otherNames() {
		if strings.HasPrefix(lineage, name+"-u") {
			return name
		}
	}
	return ""
}
