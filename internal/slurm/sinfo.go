package slurm

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
)

// Node is one node as `sinfo --json` reports it.
type Node struct {
	Name       string
	State      string   // base state, upper case: IDLE, MIXED, ALLOCATED, DOWN, ...
	Flags      []string // upper case: DRAIN, NOT_RESPONDING, COMPLETING, ...
	CPUs       int
	AllocCPUs  int
	IdleCPUs   int
	Gres       string // configured, e.g. "gpu:2" or "gpu:tesla:2(S:0)"
	GresUsed   string // allocated, e.g. "gpu:1(IDX:0)"
	TRES       string // configured TRES, e.g. "cpu=4,mem=8000M,gres/gpu=2"
	TRESUsed   string
	Partitions []string
	Reason     string
}

type sinfoNode struct {
	Name       string   `json:"name"`
	State      words    `json:"state"`
	StateFlags []string `json:"state_flags"`
	CPUs       num      `json:"cpus"`
	AllocCPUs  num      `json:"alloc_cpus"`
	IdleCPUs   num      `json:"idle_cpus"`
	Gres       string   `json:"gres"`
	GresUsed   string   `json:"gres_used"`
	TRES       string   `json:"tres"`
	TRESUsed   string   `json:"tres_used"`
	Partitions []string `json:"partitions"`
	Reason     string   `json:"reason"`
}

// ParseSinfo parses `sinfo --json` output into nodes. In 22.05 (openapi
// v0.0.38) a node's state is a lower-case word plus "state_flags"; from
// 23.02 it is a list of upper-case words whose first is the base state. Both
// are read into Node.State and Node.Flags.
func ParseSinfo(b []byte) ([]Node, error) {
	var doc struct {
		Nodes  *[]json.RawMessage `json:"nodes"`
		Errors slurmErrors        `json:"errors"`
	}
	if err := json.Unmarshal(b, &doc); err != nil {
		return nil, fmt.Errorf("sinfo --json: %w", jsonErr(err))
	}
	if err := doc.Errors.err("sinfo --json"); err != nil {
		return nil, err
	}
	if doc.Nodes == nil {
		return nil, fmt.Errorf("sinfo --json: no \"nodes\" member (is this sinfo --json output?)")
	}
	out := make([]Node, 0, len(*doc.Nodes))
	for i, raw := range *doc.Nodes {
		var sn sinfoNode
		if err := json.Unmarshal(raw, &sn); err != nil {
			return nil, fmt.Errorf("sinfo --json: nodes[%d]%s: %w", i, nodeLabel(raw), nodeDiagnose(raw, err))
		}
		if sn.Name == "" {
			return nil, fmt.Errorf("sinfo --json: nodes[%d]: field name: missing", i)
		}
		if len(sn.State) == 0 {
			return nil, fmt.Errorf("sinfo --json: nodes[%d] (node %s): field state: missing", i, sn.Name)
		}
		if !sn.CPUs.Set {
			return nil, fmt.Errorf("sinfo --json: nodes[%d] (node %s): field cpus: missing", i, sn.Name)
		}
		n := Node{
			Name:       sn.Name,
			State:      strings.ToUpper(sn.State[0]),
			CPUs:       int(sn.CPUs.int(0)),
			AllocCPUs:  int(sn.AllocCPUs.int(0)),
			IdleCPUs:   int(sn.IdleCPUs.int(0)),
			Gres:       sn.Gres,
			GresUsed:   sn.GresUsed,
			TRES:       sn.TRES,
			TRESUsed:   sn.TRESUsed,
			Partitions: sn.Partitions,
			Reason:     sn.Reason,
		}
		for _, f := range sn.State[1:] {
			n.Flags = append(n.Flags, strings.ToUpper(f))
		}
		for _, f := range sn.StateFlags {
			n.Flags = append(n.Flags, strings.ToUpper(f))
		}
		if !sn.IdleCPUs.Set {
			n.IdleCPUs = max(n.CPUs-n.AllocCPUs, 0)
		}
		out = append(out, n)
	}
	return out, nil
}

func nodeLabel(raw []byte) string {
	var n struct {
		Name string `json:"name"`
	}
	if json.Unmarshal(raw, &n) == nil && n.Name != "" {
		return " (node " + n.Name + ")"
	}
	return ""
}

func nodeDiagnose(raw []byte, err error) error {
	var members map[string]json.RawMessage
	if json.Unmarshal(bytes.TrimSpace(raw), &members) != nil {
		return err
	}
	var probe sinfoNode
	for _, f := range []struct {
		name string
		dst  any
	}{{"state", &probe.State}, {"cpus", &probe.CPUs}, {"alloc_cpus", &probe.AllocCPUs}, {"idle_cpus", &probe.IdleCPUs}} {
		if v, ok := members[f.name]; ok {
			if ferr := json.Unmarshal(v, f.dst); ferr != nil {
				return fmt.Errorf("field %s: %w", f.name, ferr)
			}
		}
	}
	var ute *json.UnmarshalTypeError
	if errors.As(err, &ute) && ute.Field != "" {
		return fmt.Errorf("field %s: want %s, got JSON %s", ute.Field, ute.Type, ute.Value)
	}
	return err
}
