package bench

import (
	"context"
	"encoding/json"
	"errors"
	"math"
	"math/rand/v2"
	"strconv"
	"time"

	"github.com/isched/isched/internal/report"
	"github.com/isched/isched/internal/stream"
)

// rows is the agent's job table rows for sims.
func (b *Bench) rows(sims []*sim) []report.Job {
	limit := int64(2880)
	now := time.Now()
	out := make([]report.Job, 0, len(sims))
	for _, s := range sims {
		j := report.Job{JobID: s.job.JobID, Name: "train", User: s.job.User, UID: s.job.UID, Account: "bench",
			Partition: s.job.Partition, State: "RUNNING", Reason: "None", Nodes: s.job.Node, NodeCount: 1, CPUs: 4,
			TimeLimitMin: &limit, SubmitMS: now.Add(-time.Minute).UnixMilli(), StartMS: now.UnixMilli(), Requeue: true}
		if b.cfg.GPUs > 0 {
			j.Gres = "gpu:" + strconv.Itoa(b.cfg.GPUs)
		}
		out = append(out, j)
	}
	return out
}

// tableCapacity is how many of rows one job table envelope holds (the
// largest prefix that encodes within report.MaxTablePayload, as internal/agent
// trims), and how many bytes all of them would need.
func tableCapacity(cluster string, rows []report.Job, now time.Time) (fit, need int, err error) {
	enc := func(n int) ([]byte, error) {
		env := report.NewEnvelope(report.KindJobs, now)
		env.Jobs = &report.JobTable{Cluster: cluster, TakenMS: now.UnixMilli(), Jobs: rows[:n]}
		return report.Encode(env)
	}
	// the size of the whole table, measured without the limit
	env := report.NewEnvelope(report.KindJobs, now)
	env.Jobs = &report.JobTable{Cluster: cluster, TakenMS: now.UnixMilli(), Jobs: rows}
	all, err := json.Marshal(env)
	if err != nil {
		return 0, 0, err
	}
	lo, hi := 0, len(rows)
	for lo < hi {
		mid := (lo + hi + 1) / 2
		_, err := enc(mid)
		switch {
		case err == nil:
			lo = mid
		case errors.Is(err, report.ErrTooLarge):
			hi = mid - 1
		default:
			return 0, 0, err
		}
	}
	return lo, len(all), nil
}

// publish writes the snapshot and the current job table as the agent does.
func (b *Bench) publish(ctx context.Context) error {
	now := time.Now()
	b.mu.Lock()
	rows := b.window
	b.mu.Unlock()
	if rows == nil {
		rows = []report.Job{}
	}
	if b.cfg.Slurm != nil { // a real agent reads it from squeue
		return b.cfg.Slurm.SetJobs(rows)
	}
	jenv := report.NewEnvelope(report.KindJobs, now)
	jenv.Jobs = &report.JobTable{Cluster: b.cfg.Cluster, TakenMS: now.UnixMilli(), Jobs: rows}
	jb, err := report.Encode(jenv)
	if err != nil {
		return err
	}
	senv := report.NewEnvelope(report.KindSnapshot, now)
	snap := snapshot(b.cfg.Cluster, now, b.cfg.Jobs+b.cfg.Aged)
	senv.Snapshot = &snap
	sb, err := report.Encode(senv)
	if err != nil {
		return err
	}
	ttl := max(3*b.cfg.AgentPoll, 15*time.Second) // the agent's SnapshotTTL
	if err := b.cfg.Agent.Set(ctx, b.keys.Snapshot(), sb, ttl); err != nil {
		return err
	}
	return b.cfg.Agent.Set(ctx, b.keys.Jobs(), jb, ttl)
}

// snapshot is a cluster big enough for jobs, all of them running where
// they should (no move is worth it), with some capacity idle.
func snapshot(cluster string, now time.Time, jobs int) report.Snapshot {
	nodes := max(jobs/4, 2)
	two, day := int64(120), int64(2880)
	return report.Snapshot{Cluster: cluster, TakenMS: now.UnixMilli(), Partitions: []report.Partition{
		{Name: "dev", State: "UP", NodesIdle: 1, NodesTotal: 1, CPUsIdle: 2, CPUsTotal: 2, MaxTimeMin: &two, GPUs: []report.GPUCount{}, PreemptMode: "OFF"},
		{Name: "gpu-dev", State: "UP", NodesIdle: 1, NodesTotal: 1, CPUsIdle: 2, CPUsTotal: 2, MaxTimeMin: &two,
			GPUs: []report.GPUCount{{Idle: 1, Total: 1}}, PreemptMode: "OFF"},
		{Name: "cpu", State: "UP", Default: true, NodesAlloc: nodes, NodesIdle: 2, NodesTotal: nodes + 2, CPUsAlloc: 4 * nodes,
			CPUsIdle: 8, CPUsTotal: 4*nodes + 8, MaxTimeMin: &day, GPUs: []report.GPUCount{}, PreemptMode: "OFF"},
		{Name: "gpu", State: "UP", NodesAlloc: nodes, NodesTotal: nodes, CPUsAlloc: 4 * nodes, CPUsTotal: 4 * nodes,
			MaxTimeMin: &day, GPUs: []report.GPUCount{{Alloc: 2 * nodes, Total: 2 * nodes}}, PreemptMode: "OFF"},
		{Name: "scavenger", State: "UP", NodesIdle: 2, NodesTotal: 4, CPUsIdle: 8, CPUsTotal: 16, MaxTimeMin: &day,
			GPUs: []report.GPUCount{}, PriorityTier: 1, PreemptMode: "REQUEUE"},
	}}
}

// simulate is one wrapper: its start report at once, then, from go on, a
// sample every Every (the first at a random phase, so the load is even)
// until ctx ends.
func (b *Bench) simulate(ctx context.Context, s *sim, goSignal <-chan struct{}) {
	rng := rand.New(rand.NewPCG(s.job.JobID, 7))
	s.startAt = time.Now()
	start := report.NewEnvelope(report.KindStart, s.startAt)
	start.Start = &report.Start{Argv: []string{"python", "train.py", "--epochs", "90"}, Cwd: "/home/" + s.job.User + "/run",
		Host: s.job.Node, PID: 4242, WrapperVersion: "bench", Device: "cpu", GPUs: []string{}, Cred: s.cred}
	if b.cfg.GPUs > 0 {
		start.Start.Device = "cuda"
		for g := range b.cfg.GPUs {
			start.Start.GPUs = append(start.Start.GPUs, strconv.Itoa(g))
		}
	}
	b.send(ctx, s, start, 0)
	select {
	case <-ctx.Done():
		return
	case <-goSignal:
	}
	next := b.goAt.Add(time.Duration(rng.Int64N(int64(b.cfg.Every))))
	t := time.NewTimer(time.Until(next))
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		e := b.sample(s, rng, time.Now()) // advances s.step to the sample's last step
		b.send(ctx, s, e, s.step)
		next = next.Add(b.cfg.Every)
		t.Reset(time.Until(next))
	}
}

// sample is what a wrapper sends every report interval: the process tree's
// memory and CPU, the GPUs, and the iterations seen since the last one.
func (b *Bench) sample(s *sim, rng *rand.Rand, now time.Time) *report.Envelope {
	e := report.NewEnvelope(report.KindSample, now)
	rss := int64(6<<30) + rng.Int64N(64<<20)
	smp := &report.Sample{CPU: &report.CPUStat{RSSBytes: rss, PeakRSSBytes: rss + 32<<20, CPUPercent: 380 + 20*rng.Float64(), Procs: 5}}
	if b.cfg.GPUs > 0 {
		g := &report.GPUStat{Devices: []report.GPUDevice{}, Procs: []report.GPUProc{}}
		for d := range b.cfg.GPUs {
			util, power := 90+10*rng.Float64(), 250+50*rng.Float64()
			uuid := "GPU-" + strconv.FormatUint(s.job.JobID, 16) + "-" + strconv.Itoa(d)
			g.Devices = append(g.Devices, report.GPUDevice{Index: d, UUID: uuid, Name: "NVIDIA A100-SXM4-80GB",
				UsedBytes: 70<<30 + rng.Int64N(1<<30), TotalBytes: 80 << 30, UtilPercent: &util, PowerWatts: &power})
			g.Procs = append(g.Procs, report.GPUProc{PID: 4242, Device: uuid, UsedBytes: 70 << 30})
		}
		smp.GPU = g
	}
	per := float64(b.cfg.Every.Milliseconds()) / float64(s.iters)
	for k := range s.iters {
		s.step++
		dur := per * (0.97 + 0.06*rng.Float64())
		loss := 2.3 * math.Exp(-float64(s.step)/5000)
		at := now.Add(-time.Duration(float64(s.iters-1-k) * per * float64(time.Millisecond)))
		smp.Iters = append(smp.Iters, report.Iter{Step: s.step, Epoch: int(s.step / 5000), Samples: 256, Loss: &loss,
			AtMS: at.UnixMilli(), DurMS: math.Round(dur*100) / 100, LoopDurMS: math.Round(dur*0.99*100) / 100, Source: report.SourceFile})
	}
	e.Sample = smp
	return e
}

// send numbers, signs and appends one report; lastStep > 0 makes it a
// probe sample when s is a probe and the window is on.
func (b *Bench) send(ctx context.Context, s *sim, e *report.Envelope, lastStep int64) {
	job := s.job
	e.Job = &job
	e.SID = s.sess.SID
	s.seq++
	e.Seq = s.seq
	p, err := report.Encode(e)
	if err != nil {
		b.cfg.Log.Error("report not encodable", "kind", e.Kind, "err", err)
		b.sendErrs.Add(1)
		return
	}
	mac := s.sess.Sign(p)
	cctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	sent := time.Now()
	if _, err := b.cfg.Reporter.Append(cctx, b.keys.Ingest(), p, mac, b.cfg.StreamMaxLen); err != nil {
		if ctx.Err() == nil {
			b.sendErrs.Add(1)
		}
		return
	}
	b.sent.Add(1)
	if b.measuring.Load() {
		b.winSent.Add(1)
		if s.probe != nil && lastStep > 0 {
			select {
			case s.probe <- probeSample{step: lastStep, sent: sent}:
			default: // the watcher is far behind: this sample is not measured
				b.lat.skip()
			}
		}
	}
}

// watchProbe measures each probe sample: it reads the lineage's status until
// the sample's last step is in it and records updated_ms − sent.
func (b *Bench) watchProbe(ctx context.Context, s *sim) {
	key := b.keys.JobStatus(s.job.Lineage)
	var st struct {
		Step      int64 `json:"step"`
		UpdatedMS int64 `json:"updated_ms"`
	}
	for ps := range s.probe {
		deadline := ps.sent.Add(b.cfg.LatencyDeadline)
		wait := 10 * time.Millisecond
		if err := sleep(ctx, time.Until(ps.sent.Add(wait))); err != nil {
			return
		}
		for {
			v, err := b.cfg.Admin.Get(ctx, key)
			if err == nil && json.Unmarshal(v, &st) == nil && st.Step >= ps.step {
				ms := float64(st.UpdatedMS) - float64(ps.sent.UnixMicro())/1000
				b.lat.add(max(ms, 0), st.Step > ps.step)
				break
			}
			if err != nil && !errors.Is(err, stream.ErrNotFound) && ctx.Err() != nil {
				return
			}
			if time.Now().After(deadline) {
				b.lat.miss()
				break
			}
			wait = min(2*wait, time.Second)
			if err := sleep(ctx, wait); err != nil {
				return
			}
		}
	}
}
