package sim

import (
	"fmt"
	"slices"
	"strconv"

	"github.com/isched/isched/internal/plan"
)

// node is one Slurm node and what is free on it.
type node struct {
	name             string
	nt               *plan.NodeType
	cpus, gpus       int
	freeCPU, freeGPU int
	parts            []int // partitions holding the node
	jobs             []int // running jobs (indexes), for preemption
}

// partition is one Slurm partition of the model.
type partition struct {
	spec    *plan.PartitionSpec
	name    string
	nodes   []int
	maxTime float64 // seconds; 0: unlimited
	tier    int     // higher preempts lower; preemptible partitions are 0
	dev     bool    // usable only inside the policy's dev windows
	gpus    int     // GPUs in the partition
	cpus    int
}

// cluster is the nodes and partitions of a site catalogue.
type cluster struct {
	site   *plan.Site
	nodes  []node
	parts  []partition
	byName map[string]int
}

// newCluster builds the nodes of every partition of site: from its host
// list when it has one (partitions naming the same host share the node),
// else NodeCount nodes of its own. A node takes the node type of the first
// single-type partition that names it. dev names the dev partitions.
func newCluster(site *plan.Site, dev []string) (*cluster, error) {
	c := &cluster{site: site, byName: map[string]int{}}
	nodeIdx := map[string]int{}
	order := make([]int, len(site.Partitions))
	for i := range order {
		order[i] = i
	}
	// single-type partitions first: they say which type a shared node is
	slices.SortStableFunc(order, func(a, b int) int {
		return len(site.Partitions[a].NodeTypes) - len(site.Partitions[b].NodeTypes)
	})
	c.parts = make([]partition, len(site.Partitions))
	for _, pi := range order {
		ps := &site.Partitions[pi]
		names, err := partitionHosts(ps)
		if err != nil {
			return nil, err
		}
		nt := site.NodeType(ps.NodeTypes[0])
		if nt == nil {
			return nil, fmt.Errorf("sim: partition %s: unknown node type %q", ps.Name, ps.NodeTypes[0])
		}
		p := partition{spec: ps, name: ps.Name, maxTime: ps.MaxTimeLimit().Seconds(), tier: 1, dev: slices.Contains(dev, ps.Name)}
		if ps.Preemptible {
			p.tier = 0
		}
		for _, h := range names {
			ni, ok := nodeIdx[h]
			if !ok {
				ni = len(c.nodes)
				nodeIdx[h] = ni
				c.nodes = append(c.nodes, node{name: h, nt: nt, cpus: nt.Cores, gpus: nt.GPUsPerNode, freeCPU: nt.Cores, freeGPU: nt.GPUsPerNode})
			}
			c.nodes[ni].parts = append(c.nodes[ni].parts, pi)
			p.nodes = append(p.nodes, ni)
			p.gpus += c.nodes[ni].gpus
			p.cpus += c.nodes[ni].cpus
		}
		c.parts[pi] = p
		c.byName[ps.Name] = pi
	}
	for i := range c.nodes {
		slices.Sort(c.nodes[i].parts)
	}
	return c, nil
}

func partitionHosts(ps *plan.PartitionSpec) ([]string, error) {
	if ps.Nodes != "" {
		h, err := plan.ExpandHostlist(ps.Nodes)
		if err != nil {
			return nil, fmt.Errorf("sim: partition %s: %w", ps.Name, err)
		}
		return h, nil
	}
	if ps.NodeCount <= 0 {
		return nil, fmt.Errorf("sim: partition %s: neither nodes nor node_count", ps.Name)
	}
	h := make([]string, ps.NodeCount)
	for i := range h {
		h[i] = ps.Name + "-" + strconv.Itoa(i+1)
	}
	return h, nil
}

// speed is the training throughput of one device of nt (the catalogue's
// fp32 figure): what the planner scales run times by, and what the
// coordinator is configured with per partition.
func (c *cluster) speed(nt *plan.NodeType) float64 { return speedOf(c.site, nt) }

func speedOf(site *plan.Site, nt *plan.NodeType) float64 {
	if s := site.Throughput(nt, plan.PrecFP32); s > 0 {
		return s
	}
	return 1
}

// partSpeed is a partition's speed (its first node type's).
func (c *cluster) partSpeed(pi int) float64 {
	return c.speed(c.site.NodeType(c.parts[pi].spec.NodeTypes[0]))
}

// gpuNode reports whether a node has GPUs; CPU and GPU nodes are counted
// apart in the utilisation.
func (n *node) gpuNode() bool { return n.gpus > 0 }
