package slurm

import (
	"bytes"
	"fmt"
	"strconv"
	"strings"
	"time"
)

// PartitionInfo is one partition's configuration as `scontrol show
// partition -o` prints it. Slurm 22.05's `sinfo --json` has no partition
// records at all (and later JSON layouts spell limits differently), so the
// limits come from here.
type PartitionInfo struct {
	Name         string
	State        string // UP, DOWN, DRAIN, INACTIVE
	Default      bool
	Hidden       bool
	Nodes        string // host list as printed, e.g. "cpu[1-2]"
	TotalNodes   int
	TotalCPUs    int
	MaxTime      *time.Duration // nil: UNLIMITED
	DefaultTime  *time.Duration // nil: NONE (the job gets MaxTime)
	MinNodes     int
	MaxNodes     *int // nil: UNLIMITED
	PriorityTier int
	PreemptMode  string // OFF, REQUEUE, CANCEL, SUSPEND[,GANG]
	GraceTime    time.Duration
}

var knownPartitionKeys = map[string]bool{}

// ParsePartitions parses `scontrol show partition -o` output, one
// partition per line.
func ParsePartitions(b []byte) ([]PartitionInfo, error) {
	var out []PartitionInfo
	for n, line := range bytes.Split(b, []byte("\n")) {
		s := strings.TrimSpace(string(line))
		if s == "" {
			continue
		}
		f, _ := parseKV(s, knownPartitionKeys)
		p, err := partitionInfo(f)
		if err != nil {
			return nil, fmt.Errorf("scontrol show partition: line %d: %w", n+1, err)
		}
		out = append(out, p)
	}
	return out, nil
}

func partitionInfo(f map[string]string) (PartitionInfo, error) {
	p := PartitionInfo{Name: f["PartitionName"]}
	if p.Name == "" {
		return p, fmt.Errorf("field PartitionName: missing")
	}
	fail := func(field string, err error) (PartitionInfo, error) {
		return p, fmt.Errorf("partition %s: field %s: %w", p.Name, field, err)
	}
	p.State = f["State"]
	if p.State == "" {
		return fail("State", fmt.Errorf("missing"))
	}
	p.Default = f["Default"] == "YES"
	p.Hidden = f["Hidden"] == "YES"
	p.Nodes = f["Nodes"]
	if p.Nodes == "(null)" {
		p.Nodes = ""
	}
	p.PreemptMode = f["PreemptMode"]
	ints := []struct {
		key string
		dst *int
	}{{"TotalNodes", &p.TotalNodes}, {"TotalCPUs", &p.TotalCPUs}, {"MinNodes", &p.MinNodes}, {"PriorityTier", &p.PriorityTier}}
	for _, it := range ints {
		s, ok := f[it.key]
		if !ok {
			continue // older/newer versions may lack one; zero is a safe reading
		}
		n, err := strconv.Atoi(s)
		if err != nil {
			return fail(it.key, fmt.Errorf("want a number, got %q", s))
		}
		*it.dst = n
	}
	if s, ok := f["MaxNodes"]; ok && s != "UNLIMITED" {
		n, err := strconv.Atoi(s)
		if err != nil {
			return fail("MaxNodes", fmt.Errorf("want a number or UNLIMITED, got %q", s))
		}
		p.MaxNodes = &n
	}
	var err error
	if p.MaxTime, err = ParseDuration(f["MaxTime"]); err != nil {
		return fail("MaxTime", err)
	}
	if p.DefaultTime, err = ParseDuration(f["DefaultTime"]); err != nil {
		return fail("DefaultTime", err)
	}
	if s, ok := f["GraceTime"]; ok {
		n, err := strconv.Atoi(s)
		if err != nil {
			return fail("GraceTime", fmt.Errorf("want seconds, got %q", s))
		}
		p.GraceTime = time.Duration(n) * time.Second
	}
	return p, nil
}
