package plan

import (
	"fmt"
	"reflect"
)

// AddCluster adds the partitions of another Slurm cluster's catalogue to
// s, so that one estimate compares the partitions of several clusters (the
// use case's feasible systems). Each comes in as PARTITION@CLUSTER with
// Cluster set. Node types are shared by name: a node type both catalogues
// name must be the same hardware at the same cost (its notes aside), so that receipts
// measured on one cluster inform the other through it and through nothing
// else; one the home catalogue lacks is added with its probe record.
func (s *Site) AddCluster(cluster string, o *Site) error {
	if cluster == "" {
		return fmt.Errorf("another cluster's catalogue (%s) needs the cluster's name", o.Name)
	}
	for i := range o.NodeTypes {
		nt := o.NodeTypes[i]
		if mine := s.NodeType(nt.Name); mine != nil {
			if !sameHardware(mine, &nt) {
				return fmt.Errorf("node type %q differs between the catalogues of %s and %s (cluster %s): the same name must be the same hardware at the same cost (a centre's own rate is its partitions' cost_factor); rename one of them",
					nt.Name, s.Name, o.Name, cluster)
			}
			continue
		}
		s.NodeTypes = append(s.NodeTypes, nt)
		if p := o.probes[nt.Name]; p != nil {
			if s.probes == nil {
				s.probes = map[string]*Probe{}
			}
			s.probes[nt.Name] = p
		}
	}
	for _, ps := range o.Partitions {
		if ps.cluster != "" {
			return fmt.Errorf("catalogue %s: partition %s already belongs to cluster %s", o.Name, ps.Name, ps.cluster)
		}
		ps.Name, ps.cluster = QualifiedPartition(ps.Name, cluster), cluster
		if s.Partition(ps.Name) != nil {
			return fmt.Errorf("partition %s is in the catalogue twice (is cluster %s named twice?)", ps.Name, cluster)
		}
		s.Partitions = append(s.Partitions, ps)
	}
	return nil
}

// sameHardware compares two node types but for their notes. Costs count:
// a centre that charges its own rate for the same nodes says so with its
// partitions' cost_factor.
func sameHardware(a, b *NodeType) bool {
	x, y := *a, *b
	x.Note, y.Note = "", ""
	return reflect.DeepEqual(x, y)
}
