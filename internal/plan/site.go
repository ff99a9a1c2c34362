package plan

import (
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
	"time"
)

// SiteVersion is the site catalogue format version this package reads.
const SiteVersion = 1

// Site is a site catalogue: what kinds of nodes a cluster has, what they
// cost and which partitions hold them (examples/site-lab.json,
// examples/site-seed.json; docs/model-summary.md describes the fields).
type Site struct {
	V           int             `json:"v"`
	Name        string          `json:"name"`
	Description string          `json:"description,omitempty"`
	Currency    string          `json:"currency,omitempty"` // label printed after costs; may be empty
	NodeTypes   []NodeType      `json:"node_types"`
	Partitions  []PartitionSpec `json:"partitions"`
	// probes are the probe records of node types, by name: not part of
	// the catalogue's JSON, read from probes/ beside it (LoadProbes).
	probes map[string]*Probe
	env    *Footprint // the user's environment (UseEnvironment)
}

// Kinds of node type.
const (
	KindCPU = "cpu"
	KindGPU = "gpu"
)

// NodeType is one kind of node.
//
// A job gets one device: on a GPU node type one GPU and the node's cores
// divided by its GPUs; on a CPU node type the whole node.
type NodeType struct {
	Name              string `json:"name"`
	Kind              string `json:"kind"` // "cpu" or "gpu"
	CPUModel          string `json:"cpu_model,omitempty"`
	Cores             int    `json:"cores"`
	HostMemoryBytes   int64  `json:"host_memory_bytes"`
	GPUModel          string `json:"gpu_model,omitempty"`
	GPUsPerNode       int    `json:"gpus_per_node,omitempty"`
	DeviceMemoryBytes int64  `json:"device_memory_bytes,omitempty"`
	// Gres is the GRES to request one GPU, "gpu" (default) or "gpu:v100".
	Gres string `json:"gres,omitempty"`
	// PeakFLOPS is the peak of one GPU (gpu) or of the whole node (cpu), by
	// precision; fp16/bf16 fall back to fp32 when zero.
	PeakFLOPS PerPrecision `json:"peak_flops"`
	// Efficiency is the fraction of the peak that training reaches at a
	// large batch, by precision (defaults: DefaultEfficiency).
	Efficiency PerPrecision `json:"efficiency"`
	// HalfBatch is the batch size at which throughput is half of that at a
	// large batch (small batches leave a GPU idle); 0: no batch effect.
	HalfBatch float64 `json:"half_batch,omitempty"`
	// RelativeThroughput is training speed relative to the other node
	// types (any common unit); when set on both, it decides how receipts
	// measured on one node type scale to another, and it stands in for
	// PeakFLOPS when that is missing.
	RelativeThroughput float64 `json:"relative_throughput,omitempty"`
	CostPerNodeHour    float64 `json:"cost_per_node_hour,omitempty"`
	CostPerGPUHour     float64 `json:"cost_per_gpu_hour,omitempty"`
	// Emulated GPUs are GRES on fake devices (the local test cluster): a
	// job there computes on the CPU, so host memory is what must fit.
	Emulated bool   `json:"emulated,omitempty"`
	Note     string `json:"note,omitempty"`
}

// PerPrecision holds one number per training precision.
type PerPrecision struct {
	FP32 float64 `json:"fp32"`
	FP16 float64 `json:"fp16,omitempty"`
	BF16 float64 `json:"bf16,omitempty"`
}

// Get returns the value for a precision, falling back to fp32.
func (p PerPrecision) Get(precision string) float64 {
	switch precision {
	case PrecFP16:
		if p.FP16 > 0 {
			return p.FP16
		}
	case PrecBF16:
		if p.BF16 > 0 {
			return p.BF16
		}
	}
	return p.FP32
}

// DefaultEfficiency is used where a node type gives none: training reaches
// about half of a GPU's fp32 peak at a large batch (ResNet-50 on a V100 at
// ~390 images/s is 0.6), a fifth of its tensor-core half-precision peak,
// and a third of a CPU's vector peak (ResNet-50 on this machine's AVX-512
// cores measured 0.3, see docs/model-summary.md).
var DefaultEfficiency = map[string]PerPrecision{
	KindGPU: {FP32: 0.5, FP16: 0.2, BF16: 0.2},
	KindCPU: {FP32: 0.3, FP16: 0.3, BF16: 0.3},
}

// PartitionSpec is one partition.
type PartitionSpec struct {
	Name      string   `json:"name"`
	NodeTypes []string `json:"node_types"`
	// Nodes is the Slurm host list ("cpu[1-2]"); it lets the wait estimate
	// see jobs of overlapping partitions. NodeCount is used without it.
	Nodes     string `json:"nodes,omitempty"`
	NodeCount int    `json:"node_count,omitempty"`
	// MaxTime is Slurm's spelling ("2:00:00", "2-00:00:00", "UNLIMITED");
	// empty means unlimited.
	MaxTime        string      `json:"max_time,omitempty"`
	MaxNodesPerJob int         `json:"max_nodes_per_job,omitempty"`
	PerUser        *UserLimits `json:"per_user,omitempty"`
	// Preemptible partitions (a scavenger queue) are never the ideal one:
	// a job there can be requeued at any time.
	Preemptible bool `json:"preemptible,omitempty"`
	// CostFactor multiplies the node type's cost here (default 1).
	CostFactor float64 `json:"cost_factor,omitempty"`
	Default    bool    `json:"default,omitempty"`
	// cluster is the Slurm cluster of a partition that AddCluster brought
	// in from another catalogue (Name is then PARTITION@CLUSTER); empty
	// for the home cluster's. Not part of the catalogue's JSON.
	cluster string
}

// Cluster is the partition's Slurm cluster when it is not the home one
// (AddCluster), else "".
func (ps *PartitionSpec) Cluster() string { return ps.cluster }

// SlurmName is the partition's name in its own cluster (sbatch -p).
func (ps *PartitionSpec) SlurmName() string {
	if ps.cluster == "" {
		return ps.Name
	}
	return strings.TrimSuffix(ps.Name, "@"+ps.cluster)
}

// QualifiedPartition is how a partition of another cluster is named among
// the home cluster's: PARTITION@CLUSTER.
func QualifiedPartition(partition, cluster string) string {
	if cluster == "" {
		return partition
	}
	return partition + "@" + cluster
}

// UserLimits are per-user limits of a partition (QOS or association
// limits); zero means no limit. isched plans one-node jobs, so MaxNodes
// only rules out a partition that allows none.
type UserLimits struct {
	MaxNodes int    `json:"max_nodes,omitempty"`
	MaxCPUs  int    `json:"max_cpus,omitempty"`
	MaxGPUs  int    `json:"max_gpus,omitempty"`
	MaxTime  string `json:"max_time,omitempty"`
}

// DecodeSite reads a site catalogue strictly (see DecodeModel).
func DecodeSite(b []byte) (*Site, error) {
	var s Site
	if err := decodeStrict(b, &s); err != nil {
		return nil, err
	}
	if err := s.Validate(); err != nil {
		return nil, err
	}
	return &s, nil
}

func validName(s string) bool {
	if s == "" || len(s) > 64 {
		return false
	}
	for _, c := range s {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '.' || c == '_' || c == '-') {
			return false
		}
	}
	return true
}

func finiteNonNeg(v float64) bool {
	return v >= 0 && !math.IsInf(v, 0) && !math.IsNaN(v)
}

// Validate checks a catalogue's values and cross references.
func (s *Site) Validate() error {
	if err := firstBad([]fieldCheck{
		{s.V != SiteVersion, "v", "want %d (this build reads site catalogue version %d), got %d", []any{SiteVersion, SiteVersion, s.V}},
		{!printable(s.Name, 128) || s.Name == "", "name", "required, up to 128 printable characters", nil},
		{!printable(s.Currency, 16), "currency", "want up to 16 printable characters", nil},
		{len(s.NodeTypes) == 0, "node_types", "required: at least one node type", nil},
	}); err != nil {
		return err
	}
	types, err := s.validateNodeTypes()
	if err != nil {
		return err
	}
	if len(s.Partitions) == 0 {
		return fieldErr("partitions", "required: at least one partition")
	}
	parts := map[string]bool{}
	defaults := 0
	for i := range s.Partitions {
		ps := &s.Partitions[i]
		p := fmt.Sprintf("partitions[%d]", i)
		if !validName(ps.Name) {
			return fieldErr(p+".name", "want 1-64 of [A-Za-z0-9._-], got %q", ps.Name)
		}
		if parts[ps.Name] {
			return fieldErr(p+".name", "duplicate partition %q", ps.Name)
		}
		parts[ps.Name] = true
		if err := ps.validate(p, types); err != nil {
			return err
		}
		if ps.Default {
			defaults++
		}
	}
	if defaults > 1 {
		return fieldErr("partitions", "more than one default partition")
	}
	return nil
}

// validateNodeTypes checks each node type, that no name is used twice and
// that one of them anchors the unit; it returns them by name.
func (s *Site) validateNodeTypes() (map[string]*NodeType, error) {
	types := map[string]*NodeType{}
	anchored := false
	for i := range s.NodeTypes {
		nt := &s.NodeTypes[i]
		p := fmt.Sprintf("node_types[%d]", i)
		if err := nt.validate(p); err != nil {
			return nil, err
		}
		if types[nt.Name] != nil {
			return nil, fieldErr(p+".name", "duplicate node type %q", nt.Name)
		}
		types[nt.Name] = nt
		anchored = anchored || nt.PeakFLOPS.FP32 > 0
	}
	if !anchored {
		return nil, fieldErr("node_types", "at least one node type needs peak_flops.fp32 (relative_throughput alone has no unit)")
	}
	return types, nil
}

// validate checks a partition (at path p) past its name; types are the
// catalogue's node types.
func (ps *PartitionSpec) validate(p string, types map[string]*NodeType) error {
	if len(ps.NodeTypes) == 0 {
		return fieldErr(p+".node_types", "required: the node types of the partition")
	}
	for j, n := range ps.NodeTypes {
		if types[n] == nil {
			return fieldErr(fmt.Sprintf("%s.node_types[%d]", p, j), "unknown node type %q", n)
		}
	}
	if err := ps.validateNodes(p); err != nil {
		return err
	}
	if _, err := ParseSlurmTime(ps.MaxTime); err != nil {
		return fieldErr(p+".max_time", "%v", err)
	}
	if err := firstBad([]fieldCheck{
		{ps.MaxNodesPerJob < 0, p + ".max_nodes_per_job", "must not be negative", nil},
		{!finiteNonNeg(ps.CostFactor), p + ".cost_factor", "must be a non-negative number", nil},
	}); err != nil {
		return err
	}
	if u := ps.PerUser; u != nil {
		if u.MaxNodes < 0 || u.MaxCPUs < 0 || u.MaxGPUs < 0 {
			return fieldErr(p+".per_user", "limits must not be negative")
		}
		if _, err := ParseSlurmTime(u.MaxTime); err != nil {
			return fieldErr(p+".per_user.max_time", "%v", err)
		}
	}
	return nil
}

// validateNodes checks nodes (a hostlist) against node_count, or
// node_count alone.
func (ps *PartitionSpec) validateNodes(p string) error {
	if ps.Nodes == "" {
		if ps.NodeCount <= 0 {
			return fieldErr(p+".node_count", "required (positive) when nodes is not given")
		}
		return nil
	}
	hosts, err := ExpandHostlist(ps.Nodes)
	if err != nil {
		return fieldErr(p+".nodes", "%v", err)
	}
	if ps.NodeCount != 0 && ps.NodeCount != len(hosts) {
		return fieldErr(p+".node_count", "%d, but nodes %q lists %d", ps.NodeCount, ps.Nodes, len(hosts))
	}
	return nil
}

func (nt *NodeType) validate(p string) error {
	if err := firstBad(nt.checks(p)); err != nil {
		return err
	}
	for _, e := range []float64{nt.Efficiency.FP32, nt.Efficiency.FP16, nt.Efficiency.BF16} {
		if !finiteNonNeg(e) || e > 1 {
			return fieldErr(p+".efficiency", "want fractions between 0 and 1")
		}
	}
	if nt.Kind == KindGPU {
		return firstBad([]fieldCheck{
			{nt.GPUsPerNode <= 0, p + ".gpus_per_node", "required for a gpu node type", nil},
			{nt.DeviceMemoryBytes <= 0 && !nt.Emulated, p + ".device_memory_bytes", "required for a gpu node type", nil},
			{nt.Gres != "" && !validGres(nt.Gres), p + ".gres", "want a GRES name such as \"gpu\" or \"gpu:v100\", got %q", []any{nt.Gres}},
		})
	}
	if nt.GPUsPerNode != 0 || nt.DeviceMemoryBytes != 0 || nt.Gres != "" || nt.Emulated {
		return fieldErr(p+".kind", "a cpu node type has no GPUs (gpus_per_node, device_memory_bytes, gres, emulated)")
	}
	return nil
}

// checks are a node type's field checks, in the order validate reports
// them; p is its path ("node_types[2]").
func (nt *NodeType) checks(p string) []fieldCheck {
	allFinite := func(vs ...float64) bool {
		return !slices.ContainsFunc(vs, func(v float64) bool { return !finiteNonNeg(v) })
	}
	return []fieldCheck{
		{!validName(nt.Name), p + ".name", "want 1-64 of [A-Za-z0-9._-], got %q", []any{nt.Name}},
		{nt.Kind != KindCPU && nt.Kind != KindGPU, p + ".kind", "want \"cpu\" or \"gpu\", got %q", []any{nt.Kind}},
		{nt.Cores <= 0, p + ".cores", "required, must be positive", nil},
		{nt.HostMemoryBytes <= 0, p + ".host_memory_bytes", "required, must be positive", nil},
		{!printable(nt.CPUModel, 128), p + ".cpu_model", "want up to 128 printable characters", nil},
		{!printable(nt.GPUModel, 128), p + ".gpu_model", "want up to 128 printable characters", nil},
		{!printable(nt.Note, 1024), p + ".note", "want up to 1024 printable characters", nil},
		{!allFinite(nt.PeakFLOPS.FP32, nt.PeakFLOPS.FP16, nt.PeakFLOPS.BF16), p + ".peak_flops", "must be non-negative numbers", nil},
		{nt.PeakFLOPS.FP32 == 0 && nt.RelativeThroughput == 0, p + ".peak_flops.fp32", "required unless relative_throughput is given", nil},
		{!finiteNonNeg(nt.RelativeThroughput), p + ".relative_throughput", "must be a non-negative number", nil},
		{!finiteNonNeg(nt.HalfBatch), p + ".half_batch", "must be a non-negative number", nil},
		{!allFinite(nt.CostPerNodeHour, nt.CostPerGPUHour), p + ".cost_per_node_hour", "costs must be non-negative numbers", nil},
	}
}

func validGres(s string) bool {
	if s == "" || len(s) > 64 {
		return false
	}
	for _, c := range s {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '.' || c == '_' || c == '-' || c == ':') {
			return false
		}
	}
	return true
}

// NodeType returns the node type called name, or nil.
func (s *Site) NodeType(name string) *NodeType {
	for i := range s.NodeTypes {
		if s.NodeTypes[i].Name == name {
			return &s.NodeTypes[i]
		}
	}
	return nil
}

// Partition returns the partition called name, or nil.
func (s *Site) Partition(name string) *PartitionSpec {
	for i := range s.Partitions {
		if s.Partitions[i].Name == name {
			return &s.Partitions[i]
		}
	}
	return nil
}

// MaxTimeLimit returns the partition's MaxTime; 0 means unlimited.
func (ps *PartitionSpec) MaxTimeLimit() time.Duration {
	d, _ := ParseSlurmTime(ps.MaxTime) // validated
	return d
}

// costFactor returns CostFactor, 1 when unset.
func (ps *PartitionSpec) costFactor() float64 {
	if ps.CostFactor == 0 {
		return 1
	}
	return ps.CostFactor
}

// GresOne is the GRES request for one device of a GPU node type ("gpu:1",
// "gpu:v100:1"); "" on a CPU node type.
func (nt *NodeType) GresOne() string {
	if nt.Kind != KindGPU {
		return ""
	}
	g := nt.Gres
	if g == "" {
		g = "gpu"
	}
	return g + ":1"
}

// JobCPUs is the cores a one-device job gets on this node type.
func (nt *NodeType) JobCPUs() int {
	if nt.Kind == KindGPU {
		return max(1, nt.Cores/nt.GPUsPerNode)
	}
	return nt.Cores
}

// CostPerHour is what one one-device job costs per hour on the node type:
// the GPU-hour rate on GPU node types (the node-hour rate divided by the
// GPUs when only that is given), the node-hour rate on CPU node types.
func (nt *NodeType) CostPerHour() float64 {
	if nt.Kind == KindGPU {
		if nt.CostPerGPUHour > 0 {
			return nt.CostPerGPUHour
		}
		return nt.CostPerNodeHour / float64(nt.GPUsPerNode)
	}
	if nt.CostPerNodeHour > 0 {
		return nt.CostPerNodeHour
	}
	return nt.CostPerGPUHour
}

// DeviceMemory reports whether the binding memory of a job on this node
// type is device memory (a real GPU) rather than host RSS.
func (nt *NodeType) DeviceMemory() bool { return nt.Kind == KindGPU && !nt.Emulated }

// MemCapacity is the memory one job may use: a GPU's memory, or the node's
// host memory.
func (nt *NodeType) MemCapacity() int64 {
	if nt.DeviceMemory() {
		return nt.DeviceMemoryBytes
	}
	return nt.HostMemoryBytes
}

// ParseSlurmTime parses a Slurm time limit: "minutes", "minutes:seconds",
// "hours:minutes:seconds", "days-hours", "days-hours:minutes",
// "days-hours:minutes:seconds". "", "UNLIMITED" and "INFINITE" are 0
// (no limit).
func ParseSlurmTime(s string) (time.Duration, error) {
	s = strings.TrimSpace(s)
	switch strings.ToUpper(s) {
	case "", "UNLIMITED", "INFINITE":
		return 0, nil
	}
	bad := fmt.Errorf("%q is not a Slurm time (want e.g. 90, 2:00:00 or 2-00:00:00)", s)
	var days int64
	rest := s
	hasDays := false
	if d, r, ok := strings.Cut(s, "-"); ok {
		n, ok := slurmNum(d)
		if !ok {
			return 0, bad
		}
		days, rest, hasDays = n, r, true
	}
	parts := strings.Split(rest, ":")
	vals := make([]int64, len(parts))
	for i, p := range parts {
		n, ok := slurmNum(p)
		if !ok {
			return 0, bad
		}
		vals[i] = n
	}
	h, m, sec, ok := slurmHMS(hasDays, vals)
	if !ok {
		return 0, bad
	}
	total := ((days*24+h)*60+m)*60 + sec
	if total <= 0 || total > math.MaxInt32*60 {
		return 0, bad
	}
	return time.Duration(total) * time.Second, nil
}

// slurmNum reads one number of a Slurm time: up to 9 digits.
func slurmNum(t string) (int64, bool) {
	if t == "" || len(t) > 9 {
		return 0, false
	}
	n, err := strconv.ParseInt(t, 10, 64)
	return n, err == nil && n >= 0
}

// slurmHMS names the numbers of a Slurm time after its days (hasDays:
// "days-hours[:minutes[:seconds]]"; else "minutes[:seconds]" or
// "hours:minutes:seconds").
func slurmHMS(hasDays bool, vals []int64) (h, m, sec int64, ok bool) {
	switch {
	case hasDays && len(vals) == 1:
		return vals[0], 0, 0, true
	case hasDays && len(vals) == 2:
		return vals[0], vals[1], 0, true
	case len(vals) == 3:
		return vals[0], vals[1], vals[2], true
	case !hasDays && len(vals) == 1:
		return 0, vals[0], 0, true
	case !hasDays && len(vals) == 2:
		return 0, vals[0], vals[1], true
	}
	return 0, 0, 0, false
}

// ExpandHostlist expands a Slurm host list ("cpu[1-2],gpu[01-03,5],login")
// into host names.
func ExpandHostlist(s string) ([]string, error) {
	var out []string
	for len(s) > 0 {
		// one item: up to a comma outside brackets
		depth, end := 0, len(s)
		for i, c := range s {
			if c == '[' {
				depth++
			} else if c == ']' {
				depth--
			} else if c == ',' && depth == 0 {
				end = i
				break
			}
		}
		item := s[:end]
		s = strings.TrimPrefix(s[end:], ",")
		hosts, err := expandItem(item)
		if err != nil {
			return nil, err
		}
		out = append(out, hosts...)
		if len(out) > 100000 {
			return nil, fmt.Errorf("host list %q: more than 100000 hosts", item)
		}
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("empty host list")
	}
	return out, nil
}

func expandItem(item string) ([]string, error) {
	bad := fmt.Errorf("host list item %q: want name or prefix[1-3,5]suffix", item)
	open := strings.IndexByte(item, '[')
	if open < 0 {
		if item == "" || strings.ContainsAny(item, "]") || !validName(item) {
			return nil, bad
		}
		return []string{item}, nil
	}
	cl := strings.IndexByte(item[open:], ']')
	if cl < 0 {
		return nil, bad
	}
	cl += open
	prefix, ranges, suffix := item[:open], item[open+1:cl], item[cl+1:]
	tails, err := expandItemOrSelf(suffix)
	if err != nil {
		return nil, bad
	}
	var out []string
	for _, r := range strings.Split(ranges, ",") {
		lo, hi, isRange := strings.Cut(r, "-")
		if !isRange {
			hi = lo
		}
		a, err1 := strconv.Atoi(lo)
		b, err2 := strconv.Atoi(hi)
		if err1 != nil || err2 != nil || a < 0 || b < a || b-a > 100000 {
			return nil, bad
		}
		width := 0
		if len(lo) > 1 && lo[0] == '0' {
			width = len(lo)
		}
		for n := a; n <= b; n++ {
			for _, t := range tails {
				out = append(out, fmt.Sprintf("%s%0*d%s", prefix, width, n, t))
			}
		}
	}
	return out, nil
}

func expandItemOrSelf(s string) ([]string, error) {
	if s == "" {
		return []string{""}, nil
	}
	if !strings.Contains(s, "[") {
		return []string{s}, nil
	}
	return expandItem(s)
}
