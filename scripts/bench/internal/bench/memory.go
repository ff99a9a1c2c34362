package bench

import (
	"context"
	"encoding/json"
	"fmt"
	"sync"
)

// Memory is the Redis memory the run's keys take (MEMORY USAGE, as admin).
type Memory struct {
	// PerJob is everything the run stored divided by the number of jobs:
	// the jobs' own keys plus their share of the coordinator's hashes, the
	// ingest stream and the agent's keys.
	PerJob float64
	// Own is one job's keys and its entries in the coordinator's hashes,
	// without the ingest stream (whose size is set by its MAXLEN, not by N).
	Own float64
	// Mean MEMORY USAGE of one plain job's keys.
	State, Status, Series float64
	// Shared keys.
	Sessions, Lineages, Stream, Agent int64
	StreamLen                         int64
	// AgedJob is one aged job's keys (state+status+series): a job whose
	// estimator window and series list are at their caps.
	AgedJob, AgedState, AgedSeries float64
	// AgedSeriesLen and AgedWindowLen say how close to the caps the aged
	// jobs got (the coordinator keeps 5000 series points and a 512-iteration
	// estimator window by default): the smallest of the aged jobs.
	AgedSeriesLen, AgedWindowLen int
}

// memory sums MEMORY USAGE over the run's keys, 8 requests at a time.
func (b *Bench) memory(ctx context.Context) (Memory, error) {
	type job struct {
		aged bool
		key  string
		kind int // 0 state, 1 status, 2 series
	}
	var jobs []job
	for _, s := range b.sims {
		for k, key := range b.keys.JobKeys(s.job.Lineage) {
			jobs = append(jobs, job{aged: s.aged, key: key, kind: k})
		}
	}
	var (
		mu       sync.Mutex
		sum      [2][3]int64 // [aged][kind]
		firstErr error
		wg       sync.WaitGroup
	)
	work := make(chan job)
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for j := range work {
				n, err := b.cfg.Admin.MemoryUsage(ctx, j.key)
				mu.Lock()
				if err != nil && firstErr == nil {
					firstErr = err
				}
				a := 0
				if j.aged {
					a = 1
				}
				sum[a][j.kind] += n
				mu.Unlock()
			}
		}()
	}
	for _, j := range jobs {
		work <- j
	}
	close(work)
	wg.Wait()
	if firstErr != nil {
		return Memory{}, firstErr
	}
	var m Memory
	var err error
	usage := func(key string) int64 {
		if err != nil {
			return 0
		}
		var n int64
		n, err = b.cfg.Admin.MemoryUsage(ctx, key)
		return n
	}
	m.Sessions = usage(b.keys.Sessions())
	m.Lineages = usage(b.keys.Lineages())
	m.Stream = usage(b.keys.Ingest())
	m.Agent = usage(b.keys.Jobs()) + usage(b.keys.Snapshot())
	if err != nil {
		return Memory{}, err
	}
	if m.StreamLen, err = b.cfg.Admin.Len(ctx, b.keys.Ingest()); err != nil {
		return Memory{}, err
	}
	n := float64(b.cfg.Jobs)
	m.State, m.Status, m.Series = float64(sum[0][0])/n, float64(sum[0][1])/n, float64(sum[0][2])/n
	all := float64(b.cfg.Jobs + b.cfg.Aged)
	m.Own = m.State + m.Status + m.Series + float64(m.Sessions+m.Lineages)/all
	m.PerJob = m.Own + float64(m.Stream+m.Agent)/all
	if b.cfg.Aged > 0 {
		a := float64(b.cfg.Aged)
		m.AgedState, m.AgedSeries = float64(sum[1][0])/a, float64(sum[1][2])/a
		m.AgedJob = float64(sum[1][0]+sum[1][1]+sum[1][2]) / a
		m.AgedSeriesLen, m.AgedWindowLen = -1, -1
		for _, s := range b.sims {
			if !s.aged {
				continue
			}
			pts, err := b.cfg.Admin.List(ctx, b.keys.JobSeries(s.job.Lineage))
			if err != nil {
				return Memory{}, err
			}
			var st struct {
				Iter struct {
					Window []json.RawMessage `json:"window"`
				} `json:"iter"`
			}
			raw, err := b.cfg.Admin.Get(ctx, b.keys.JobState(s.job.Lineage))
			if err == nil {
				err = json.Unmarshal(raw, &st)
			}
			if err != nil {
				return Memory{}, fmt.Errorf("bench: state of aged job %s: %w", s.job.Lineage, err)
			}
			if m.AgedSeriesLen < 0 || len(pts) < m.AgedSeriesLen {
				m.AgedSeriesLen = len(pts)
			}
			if m.AgedWindowLen < 0 || len(st.Iter.Window) < m.AgedWindowLen {
				m.AgedWindowLen = len(st.Iter.Window)
			}
		}
	}
	return m, nil
}

// Keys lists every key the run and the coordinator under test may have
// written (the cluster name is the run's own).
func (b *Bench) Keys() []string {
	k := b.keys
	out := []string{k.Ingest(), k.Actions(), k.Results(), k.Snapshot(), k.Jobs(),
		k.Leader(), k.Sessions(), k.Lineages(), k.Receipts(),
		k.AgentCursor(), k.AgentDone(), k.AgentInflight()}
	for _, s := range b.sims {
		out = append(out, k.JobKeys(s.job.Lineage)...)
	}
	return out
}

// Cleanup deletes every key of the run. Stop the coordinator first.
func (b *Bench) Cleanup(ctx context.Context) error {
	keys := b.Keys()
	for i := 0; i < len(keys); i += 500 {
		if err := b.cfg.Admin.Del(ctx, keys[i:min(i+500, len(keys))]...); err != nil {
			return err
		}
	}
	return nil
}
