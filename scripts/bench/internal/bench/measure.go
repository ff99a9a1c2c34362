package bench

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"net/http"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"
)

// Result is what one run measured.
type Result struct {
	Jobs, Aged   int
	Every        time.Duration
	Iters        int
	Window       time.Duration
	Ramp         time.Duration // starting every job, batch by batch
	CredIssue    time.Duration // of which making MUNGE credentials
	Drain        time.Duration // after the window until every report was judged (-1: not within the deadline)
	Backlog      float64       // reports appended but not judged yet at the end of the window
	SendErrors   int64
	IngestMeanMS float64 // coordinator's own judge+apply time per report (its histogram)
	// WriteMeanMS: the coordinator's mean time for a round's batch to land
	// (its histogram): the status's updated_ms is stamped when the batch
	// is queued, so a report's state is in Redis about this much later
	WriteMeanMS float64

	// TableCapacity is how many of these jobs one job table envelope holds;
	// TableBytesNeeded what a table of all of them would take.
	TableCapacity, TableBytesNeeded int

	Offered, Accepted float64 // reports/s appended, and accepted by the coordinator, in the window
	RejectedInWindow  float64
	Rejected          map[string]float64 // by reason, whole run
	Decisions         map[string]float64 // by kind, whole run

	Latency LatencySummary

	CoordRSS, CoordHWM int64   // bytes, end of the window
	CoordCPU, GenCPU   float64 // cores, mean over the window
	RedisCPU           float64 // cores, whole redis-server (shared with anything else using it)
	RedisRSS           int64
	Memory             Memory
	// A real agent (Result.AgentReal): its RSS and peak at the end of the
	// window, its CPU over the window, and the Slurm commands it ran in the
	// window by kind and per minute.
	AgentReal          bool
	AgentRSS, AgentHWM int64
	AgentCPU           float64
	SlurmCalls         map[string]int64 `json:",omitempty"`
	SlurmPerMin        float64
	// Trimmed is the coordinator's count of reports the ingest stream's
	// MAXLEN removed before it read them (isched_coordinator_ingest_trimmed_unread_total);
	// Unjudged the reports appended but never judged when the run ended
	// (the drain gave up): lost reports, as the generator counts them.
	Trimmed, Unjudged float64
	// Soak: the samples of a soak run and their verdicts.
	Soak         []SoakSample  `json:",omitempty"`
	SoakVerdicts []SoakVerdict `json:",omitempty"`
	// CoordLogWarnings counts the coordinator's WARN/ERROR log lines by
	// message (filled in by the caller, who owns the log).
	CoordLogWarnings map[string]int `json:",omitempty"`
}

// LatencySummary is the decision latency of the probe samples, in ms.
type LatencySummary struct {
	N, Missed, Skipped, Bounded int
	P50, P90, P99, Max          float64
}

type latencies struct {
	mu                      sync.Mutex
	ms                      []float64
	missed, skipped, bounds int
}

func (l *latencies) add(ms float64, bound bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.ms = append(l.ms, ms)
	if bound {
		l.bounds++
	}
}

func (l *latencies) miss() { l.mu.Lock(); l.missed++; l.mu.Unlock() }
func (l *latencies) skip() { l.mu.Lock(); l.skipped++; l.mu.Unlock() }

// summary counts a missed sample as slower than every measured one.
func (l *latencies) summary() LatencySummary {
	l.mu.Lock()
	defer l.mu.Unlock()
	all := slices.Clone(l.ms)
	slices.Sort(all)
	for range l.missed {
		all = append(all, math.Inf(1))
	}
	s := LatencySummary{N: len(l.ms), Missed: l.missed, Skipped: l.skipped, Bounded: l.bounds}
	if len(all) > 0 {
		s.P50, s.P90, s.P99, s.Max = Quantile(all, 0.5), Quantile(all, 0.9), Quantile(all, 0.99), all[len(all)-1]
	}
	return s
}

// Quantile is the nearest-rank q-quantile of sorted values.
func Quantile(sorted []float64, q float64) float64 {
	if len(sorted) == 0 {
		return math.NaN()
	}
	i := int(math.Ceil(q*float64(len(sorted)))) - 1
	return sorted[min(max(i, 0), len(sorted)-1)]
}

// Metrics are the coordinator's Prometheus figures the benchmark reads.
type Metrics struct {
	Reports   map[string]float64 // isched_coordinator_reports_total by verdict
	Rejected  map[string]float64 // isched_coordinator_reports_rejected_total by reason (non-zero only)
	Decisions map[string]float64 // isched_coordinator_decisions_total by kind
	Lineages  float64
	// isched_coordinator_ingest_duration_seconds
	IngestSum, IngestCount float64
	// isched_coordinator_batch_write_duration_seconds
	WriteSum, WriteCount float64
	// isched_coordinator_ingest_trimmed_unread_total, _ingest_lag
	Trimmed, Lag float64
	// HeapGoal is go_memstats_next_gc_bytes: the heap size at which the next
	// collection starts, set by the last one from the heap it found live
	// (twice it at GOGC=100). A leak raises it; a burst of garbage does not.
	HeapGoal float64
}

// ParseMetrics reads the Prometheus text format.
func ParseMetrics(r io.Reader) (Metrics, error) {
	m := Metrics{Reports: map[string]float64{}, Rejected: map[string]float64{}, Decisions: map[string]float64{}}
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if line == "" || line[0] == '#' {
			continue
		}
		i := strings.LastIndexByte(line, ' ')
		if i < 0 {
			continue
		}
		v, err := strconv.ParseFloat(line[i+1:], 64)
		if err != nil {
			continue
		}
		name, labels := line[:i], ""
		if j := strings.IndexByte(name, '{'); j >= 0 {
			name, labels = name[:j], name[j:]
		}
		label := func(k string) string {
			_, rest, ok := strings.Cut(labels, k+`="`)
			if !ok {
				return ""
			}
			val, _, _ := strings.Cut(rest, `"`)
			return val
		}
		switch name {
		case "isched_coordinator_reports_total":
			m.Reports[label("verdict")] = v
		case "isched_coordinator_reports_rejected_total":
			if v > 0 {
				m.Rejected[label("reason")] = v
			}
		case "isched_coordinator_decisions_total":
			m.Decisions[label("kind")] = v
		case "isched_coordinator_lineages":
			m.Lineages = v
		case "isched_coordinator_ingest_duration_seconds_sum":
			m.IngestSum = v
		case "isched_coordinator_ingest_duration_seconds_count":
			m.IngestCount = v
		case "isched_coordinator_batch_write_duration_seconds_sum":
			m.WriteSum = v
		case "isched_coordinator_batch_write_duration_seconds_count":
			m.WriteCount = v
		case "isched_coordinator_ingest_trimmed_unread_total":
			m.Trimmed = v
		case "isched_coordinator_ingest_lag":
			m.Lag = v
		case "go_memstats_next_gc_bytes":
			m.HeapGoal = v
		}
	}
	return m, sc.Err()
}

// Proc is a process's memory and CPU time.
type Proc struct {
	RSS, HWM int64 // bytes (VmRSS, VmHWM)
	CPU      time.Duration
}

// clockTick is USER_HZ: 100 on every Linux the project targets.
const clockTick = 100

// ReadProc reads /proc/<pid>/stat and /proc/<pid>/status.
func ReadProc(pid int) (Proc, error) {
	var p Proc
	stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return p, err
	}
	p.CPU, err = parseStatCPU(stat)
	if err != nil {
		return p, err
	}
	status, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return p, err
	}
	for line := range strings.Lines(string(status)) {
		k, v, ok := strings.Cut(line, ":")
		if !ok {
			continue
		}
		f := strings.Fields(v)
		if len(f) == 0 {
			continue
		}
		n, _ := strconv.ParseInt(f[0], 10, 64)
		switch k {
		case "VmRSS":
			p.RSS = n << 10
		case "VmHWM":
			p.HWM = n << 10
		}
	}
	return p, nil
}

// parseStatCPU returns utime+stime from a /proc/<pid>/stat line.
func parseStatCPU(stat []byte) (time.Duration, error) {
	i := bytes.LastIndexByte(stat, ')')
	if i < 0 {
		return 0, fmt.Errorf("bench: /proc stat: no comm")
	}
	f := strings.Fields(string(stat[i+1:]))
	if len(f) < 13 {
		return 0, fmt.Errorf("bench: /proc stat: %d fields", len(f))
	}
	// f[0] is field 3 (state); utime and stime are fields 14 and 15
	u, err1 := strconv.ParseInt(f[11], 10, 64)
	s, err2 := strconv.ParseInt(f[12], 10, 64)
	if err1 != nil || err2 != nil {
		return 0, fmt.Errorf("bench: /proc stat: utime/stime not numbers")
	}
	return time.Duration(u+s) * time.Second / clockTick, nil
}

func selfCPU() time.Duration {
	b, err := os.ReadFile("/proc/self/stat")
	if err != nil {
		return 0
	}
	d, _ := parseStatCPU(b)
	return d
}

// HTTPObserver observes a coordinator process by pid and /metrics URL,
// and with Pprof (the base of its /debug/pprof/, isched-coordinator -pprof)
// its live heap.
type HTTPObserver struct {
	URL   string
	PID   int
	Pprof string
}

// LiveHeap implements HeapProber: it asks the process (the coordinator;
// with only Pprof set, any Go program serving /debug/pprof/) for its heap
// profile with gc=1, which runs a full collection first, and reads the
// HeapAlloc the profile reports after it. 0 without Pprof.
func (o HTTPObserver) LiveHeap(ctx context.Context) (int64, error) {
	if o.Pprof == "" {
		return 0, nil
	}
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	u := strings.TrimSuffix(o.Pprof, "/") + "/heap?gc=1&debug=1"
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return 0, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return 0, fmt.Errorf("bench: %s: %s", u, resp.Status)
	}
	return ParseHeapAlloc(resp.Body)
}

// ParseHeapAlloc reads "# HeapAlloc = N" from a Go heap profile in its
// debug=1 text form (the runtime.MemStats it appends).
func ParseHeapAlloc(r io.Reader) (int64, error) {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 64<<10), 1<<20)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "# HeapAlloc = "); ok {
			n, err := strconv.ParseInt(strings.TrimSpace(v), 10, 64)
			if err != nil {
				return 0, fmt.Errorf("bench: heap profile: HeapAlloc %q: %w", v, err)
			}
			return n, nil
		}
	}
	if err := sc.Err(); err != nil {
		return 0, fmt.Errorf("bench: heap profile: %w", err)
	}
	return 0, errors.New("bench: heap profile: no HeapAlloc line (not a debug=1 Go heap profile?)")
}

// Metrics implements Observer.
func (o HTTPObserver) Metrics(ctx context.Context) (Metrics, error) {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, o.URL, nil)
	if err != nil {
		return Metrics{}, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return Metrics{}, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return Metrics{}, fmt.Errorf("bench: %s: %s", o.URL, resp.Status)
	}
	return ParseMetrics(resp.Body)
}

// Proc implements Observer.
func (o HTTPObserver) Proc() (Proc, error) { return ReadProc(o.PID) }

// MarshalJSON writes a missed quantile (infinite) as null.
func (s LatencySummary) MarshalJSON() ([]byte, error) {
	f := func(v float64) *float64 {
		if math.IsInf(v, 0) || math.IsNaN(v) {
			return nil
		}
		return &v
	}
	type out struct {
		N, Missed, Skipped, Bounded int
		P50, P90, P99, Max          *float64
	}
	return json.Marshal(out{s.N, s.Missed, s.Skipped, s.Bounded, f(s.P50), f(s.P90), f(s.P99), f(s.Max)})
}
