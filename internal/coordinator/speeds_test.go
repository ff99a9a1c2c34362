package coordinator

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
	"slices"
	"testing"
	"time"

	"github.com/isched/isched/internal/estimate"
	"github.com/isched/isched/internal/policy"
	"github.com/isched/isched/internal/report"
	dto "github.com/prometheus/client_model/go"
)

func gaugeValue(t *testing.T, m *Metrics, model, partition string) float64 {
	t.Helper()
	var d dto.Metric
	if err := m.learnedSpeed.WithLabelValues(model, partition).Write(&d); err != nil {
		t.Fatal(err)
	}
	return d.GetGauge().GetValue()
}

// seedReceipts stores n receipts per partition of model, as an earlier
// leader left them.
func (e *env) seedReceipts(model string, confirmed bool, n int, iterMS map[string]float64) {
	e.t.Helper()
	var vals [][]byte
	for p, ms := range iterMS {
		for i := range n {
			user := []string{"alice", "bob"}[i%2]
			b, _ := json.Marshal(report.Receipt{Model: model, Batch: 32, Partition: p, IterMS: ms, User: user, Confirmed: confirmed})
			vals = append(vals, b)
		}
	}
	if err := e.store.PushList(context.Background(), "isched:lab:coord:receipts", 10000, vals...); err != nil {
		e.t.Fatal(err)
	}
}

// TestLearnedSpeedsDecideMigration: receipts that measured this model 4×
// slower on gpu than on cpu (configured: gpu 8, cpu 1) keep the job on
// cpu although gpu has room, the learned speeds are exported; without them
// (or with unconfirmed ones only) the configured speeds migrate it.
func TestLearnedSpeedsDecideMigration(t *testing.T) {
	t.Parallel()
	const model = "m:sgd:fp32"
	for _, tc := range []struct {
		name      string
		seed      func(e *env)
		wantMoves bool
	}{
		{"no receipts: the configured speeds", func(*env) {}, true},
		{"unconfirmed receipts teach nothing", func(e *env) {
			e.seedReceipts(model, false, 30, map[string]float64{"cpu": 500, "gpu": 2000})
		}, true},
		{"confirmed receipts: gpu slower for this model", func(e *env) {
			e.seedReceipts(model, true, 30, map[string]float64{"cpu": 500, "gpu": 2000})
		}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			e := newEnv(t)
			tc.seed(e)
			plan := report.Plan{Lineage: "L1", Model: model, Ideal: "gpu", IdealGres: "gpu:1", Fallbacks: []string{"cpu"}, Total: 100000, Migrate: true}
			running := job(40, 1001, "alice", "RUNNING", "cpu", plan.FormatComment())
			running.StartMS = e.now.Add(-time.Minute).UnixMilli()
			e.publish([]report.Job{running}, labPartitions(true))
			w := e.wrapper(40, 1001, "alice", "L1", "cpu")
			e.start(w)
			for i := int64(0); i < 5; i++ {
				e.sample(w, 1+i*20, 20, 500)
			}
			e.rounds(2)
			if moved := len(e.actions()) > 0; moved != tc.wantMoves {
				t.Errorf("moved %v, want %v: actions %+v", moved, tc.wantMoves, e.actions())
			}
			ls := e.c.speeds.learned
			cpu, cpuLearned := ls.Speed(model, "cpu", e.c.cfg.Policy.Speed)
			gpu, gpuLearned := ls.Speed(model, "gpu", e.c.cfg.Policy.Speed)
			// the run's status shows the speeds the policy used
			sp := map[string]report.PartitionSpeed{}
			for _, p := range e.lineage("L1").Status.Speeds {
				sp[p.Partition] = p
			}
			if g := sp["gpu"]; len(sp) != len(e.c.cfg.Policy.Speed) || math.Abs(g.Speed/gpu-1) > 0.005 || g.Prior != 8 || (g.N > 0) != gpuLearned {
				t.Errorf("status speeds %+v, want every configured partition, gpu %g (learned %v, prior 8)", sp, gpu, gpuLearned)
			}
			if tc.wantMoves {
				if gpuLearned || cpuLearned {
					t.Errorf("learned %g/%g without confirmed receipts on two partitions", cpu, gpu)
				}
				return
			}
			if c := sp["cpu"]; c.N != 31 || c.Users != 2 {
				t.Errorf("status speed on cpu %+v, want 31 measurements of 2 users", c)
			}
			if !cpuLearned || !gpuLearned || gpu >= cpu {
				t.Fatalf("learned cpu %g (%v), gpu %g (%v): want gpu slower", cpu, cpuLearned, gpu, gpuLearned)
			}
			// 30 receipts and the running job's own estimate on cpu
			if l := ls[model]["cpu"]; l.N != 31 || l.Users != 2 {
				t.Errorf("cpu learned from %d measurements of %d users, want 31 of 2", l.N, l.Users)
			}
			if g := gaugeValue(t, e.c.metrics, model, "gpu"); math.Abs(g-gpu) > 1e-12 {
				t.Errorf("isched_coordinator_learned_speed{gpu} = %g, want %g", g, gpu)
			}
		})
	}
}

// TestETAAfterAMoveUsesSpeeds: a lineage that moved on and has no
// iteration of its own there yet gets an ETA from the old partition's
// estimate converted by the speeds: configured (gpu 8 vs cpu 1), or the
// learned ones where receipts measured this model on both.
func TestETAAfterAMoveUsesSpeeds(t *testing.T) {
	t.Parallel()
	const model = "m:sgd:fp32"
	for _, tc := range []struct {
		name  string
		seed  bool
		ratio func(ls policy.LearnedSpeeds) float64
	}{
		{"configured speeds", false, func(policy.LearnedSpeeds) float64 { return 1.0 / 8 }},
		{"learned speeds", true, func(ls policy.LearnedSpeeds) float64 { return ls[model]["cpu"].Speed / ls[model]["gpu"].Speed }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			e := newEnv(t)
			if tc.seed {
				e.seedReceipts(model, true, 30, map[string]float64{"cpu": 500, "gpu": 250})
			}
			plan := report.Plan{Lineage: "L1", Model: model, Ideal: "cpu", Fallbacks: []string{"gpu"}, Total: 100000}
			running := job(40, 1001, "alice", "RUNNING", "cpu", plan.FormatComment())
			running.StartMS = e.now.Add(-time.Minute).UnixMilli()
			e.publish([]report.Job{running}, labPartitions(false))
			w := e.wrapper(40, 1001, "alice", "L1", "cpu")
			e.start(w)
			for i := int64(0); i < 5; i++ {
				e.sample(w, 1+i*20, 20, 500)
			}
			e.rounds(1)
			before := e.status("L1")
			if before.IterMS != 500 {
				t.Fatalf("iteration estimate on cpu %g ms, want 500", before.IterMS)
			}
			// the next attempt starts on gpu, no iteration yet
			running.Partition = "gpu"
			e.publish([]report.Job{running}, labPartitions(false))
			w2 := e.wrapper(40, 1001, "alice", "L1", "gpu")
			w2.job.Attempt = 1
			e.start(w2)
			e.rounds(2)
			st := e.status("L1")
			ratio := tc.ratio(e.c.speeds.learned)
			want := float64(e.now.UnixMilli()) + float64(st.TotalIters-st.Step)*500*ratio
			// 1%: the ETA was made at the start with the speeds learned then
			// (the running job's own cpu estimate among the measurements)
			if rem := want - float64(e.now.UnixMilli()); st.Partition != "gpu" || math.Abs(float64(st.ETAMS)-want) > 0.01*rem {
				t.Errorf("ETA on %s in %.0f s, want %.0f s (ratio %g)", st.Partition,
					float64(st.ETAMS-e.now.UnixMilli())/1000, (want-float64(e.now.UnixMilli()))/1000, ratio)
			}
			if tc.seed && math.Abs(ratio-1.0/8) < 0.01 {
				t.Errorf("learned ratio %g is the configured one", ratio)
			}
		})
	}
}

// TestETABandHoldsEarlierRuns: the ETA band of a running lineage holds
// the end its confirmed earlier runs' speed (same model, batch and
// partition) would give; unconfirmed receipts, another batch or another
// partition do not move it, and the ETA itself stays the run's own.
func withDrift(r report.Receipt, rs ...report.ETARatio) report.Receipt {
	r.ETARatios = rs
	return r
}

func TestETABandHoldsEarlierRuns(t *testing.T) {
	const model = "resnet18-abc:momentum:fp32"
	now := time.UnixMilli(1_700_000_600_000)
	lineageAt := func() *lineage {
		l := &lineage{Status: report.JobStatus{V: 1, Cluster: "lab", Lineage: "lab-1", JobID: 1, User: "alice",
			Partition: "cpu", State: "RUNNING", TotalIters: 1100, Plan: &report.Plan{Model: model, Batch: 8}}}
		for i := int64(1); i <= 100; i++ {
			l.Iter.Add(report.Iter{Step: i, AtMS: 1_700_000_000_000 + i*100, DurMS: 100})
		}
		l.Status.Step = 100
		return l
	}
	receipt := func(batch int, partition string, confirmed bool, ms float64) report.Receipt {
		return report.Receipt{Model: model, Batch: batch, Partition: partition, IterMS: ms, Iters: 1000, User: "bob", Confirmed: confirmed}
	}
	ownEnd := now.Add(1000 * 100 * time.Millisecond).UnixMilli() // 1000 steps left at 100 ms
	for _, tc := range []struct {
		name     string
		receipts []report.Receipt
		wantHigh int64
	}{
		{"no earlier runs: the run's own band", nil, ownEnd},
		{"a confirmed slower run at the same batch and partition", []report.Receipt{receipt(8, "cpu", true, 130)}, now.Add(130 * time.Second).UnixMilli()},
		{"unconfirmed: ignored", []report.Receipt{receipt(8, "cpu", false, 130)}, ownEnd},
		{"another batch: ignored", []report.Receipt{receipt(16, "cpu", true, 130)}, ownEnd},
		{"another partition: ignored", []report.Receipt{receipt(8, "gpu", true, 130)}, ownEnd},
		{"an earlier run whose ETA at 10 % was 1.25x short: the band holds 1.25x the rest", []report.Receipt{
			withDrift(receipt(8, "cpu", true, 100), report.ETARatio{At: 0.10, Ratio: 1.25}, report.ETARatio{At: 0.5, Ratio: 1.6})},
			now.Add(125 * time.Second).UnixMilli()},
		{"an unconfirmed run's drift: ignored", []report.Receipt{
			withDrift(receipt(8, "cpu", false, 100), report.ETARatio{At: 0.10, Ratio: 1.25})}, ownEnd},
		{"another batch's drift on the same partition counts", []report.Receipt{
			withDrift(receipt(64, "cpu", true, 900), report.ETARatio{At: 0.10, Ratio: 1.25})}, now.Add(125 * time.Second).UnixMilli()},
		{"another partition's drift: ignored", []report.Receipt{
			withDrift(receipt(8, "gpu", true, 100), report.ETARatio{At: 0.10, Ratio: 1.25})}, ownEnd},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, l := benchCoordinator(), lineageAt()
			for _, r := range tc.receipts {
				c.speeds.noteReceipt(r)
			}
			c.refreshEstimates(l, now)
			st := &l.Status
			// too few earlier runs to calibrate: the band is widened to
			// the default too (estimate.ETA.Calibrated)
			lo, hi := estimate.DefaultBandRatios[0], estimate.DefaultBandRatios[1]
			wantLow, wantHigh := now.Add(time.Duration(lo*100*float64(time.Second))).UnixMilli(), max(tc.wantHigh, now.Add(time.Duration(hi*100*float64(time.Second))).UnixMilli())
			if st.ETAMS != ownEnd || st.ETAHighMS != wantHigh || st.ETALowMS != wantLow || st.ETABandSource != string(estimate.BandDefault) || st.ETABandCoverage != 0 {
				t.Errorf("ETA %+d ms, band %+d..%+d ms from the run's own end (%s, coverage %v); want 0, %+d..%+d (default, 0)",
					st.ETAMS-ownEnd, st.ETALowMS-ownEnd, st.ETAHighMS-ownEnd, st.ETABandSource, st.ETABandCoverage, wantLow-ownEnd, wantHigh-ownEnd)
			}
		})
	}
	// the drift pool: at most maxDriftPerUser runs of one user (the
	// latest), at most maxDriftRuns in all
	var d speedBook
	for i := range 10 {
		d.noteReceipt(withDrift(receipt(8, "cpu", true, 100), report.ETARatio{At: 0.1, Ratio: 1 + float64(i)/100}))
	}
	st0 := lineageAt().Status
	if got := d.pastDrift(&st0); len(got) != maxDriftPerUser || got[0] != 1.06 {
		t.Errorf("one user's 10 runs: pool %v, want their latest %d from 1.06", got, maxDriftPerUser)
	}
	for i := range maxDriftRuns + 3 {
		r := withDrift(receipt(8, "cpu", true, 100), report.ETARatio{At: 0.1, Ratio: 1.5})
		r.User = fmt.Sprintf("u%d", i)
		d.noteReceipt(r)
	}
	if got := d.pastDrift(&st0); len(got) != maxDriftRuns || slices.Contains(got, 1.09) {
		t.Errorf("pool of %d with %v, want the latest %d (bob's gone)", len(got), got, maxDriftRuns)
	}
	// at most maxPastRuns per configuration, the latest
	var b speedBook
	for i := range maxPastRuns + 5 {
		b.noteReceipt(receipt(8, "cpu", true, float64(100+i)))
	}
	st := lineageAt().Status
	if got := b.pastRuns(&st); len(got) != maxPastRuns || got[0] != 105 {
		t.Errorf("kept %d runs from %v, want %d from 105", len(got), got[0], maxPastRuns)
	}
}

// A run's receipt says how far its own ETA was off at each point of
// estimate.DriftFracs: the mean time per step of the rest over the one
// predicted there. Here the speed falls from 100 to 150 ms per step at
// 10 %, so the 10 % ETA was 1.5x short and the later ones, made at the
// new speed, about right.
func TestReceiptCarriesETARatios(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	const lin = "lab-61"
	plan := report.Plan{Lineage: lin, Ideal: "cpu", Model: "m1", Batch: 8}
	j := job(61, 1001, "alice", "RUNNING", "cpu", plan.FormatComment())
	j.StartMS = e.now.UnixMilli()
	e.publish([]report.Job{j}, nil)
	w := e.attemptWrapper(61, lin, 0)
	e.start(w)
	const total = 1000
	for from := int64(1); from <= total; from += 50 {
		ms := 100.0
		if from > 100 {
			ms = 150
		}
		e.now = e.now.Add(time.Duration(50*ms) * time.Millisecond)
		env := report.NewEnvelope(report.KindSample, e.now)
		env.Sample = &report.Sample{}
		for i := range int64(50) {
			env.Sample.Iters = append(env.Sample.Iters, report.Iter{Step: from + i, AtMS: e.now.UnixMilli(), DurMS: ms, Source: report.SourcePattern, Total: total})
		}
		e.send(w, env)
		e.rounds(1)
	}
	e.end(w, 0)
	e.rounds(2)
	r := e.oneReceipt()
	t.Logf("receipt ETA ratios %+v", r.ETARatios)
	if len(r.ETARatios) != len(estimate.DriftFracs) {
		t.Fatalf("ETA ratios %+v, want %d (at %v)", r.ETARatios, len(estimate.DriftFracs), estimate.DriftFracs)
	}
	for i := range estimate.DriftFracs {
		want := 1.0 // made at the new speed
		switch estimate.DriftFracs[i] {
		case 0.05:
			want = (50*100 + 900*150) / 950.0 / 100
		case 0.10:
			want = 1.5
		}
		got := r.ETARatios[i]
		if got.At != estimate.DriftFracs[i] || math.Abs(got.Ratio-want) > 0.02 {
			t.Errorf("ratio %d = %+v, want at %v about %v", i, got, estimate.DriftFracs[i], want)
		}
	}
}

// TestReceiptWaitsForNewerJobTable: a short run can start and end between
// two job tables. Its receipt is not judged on a table taken before its
// end that still shows the job pending: it waits for a newer table, and
// is settled on what there is once StaleAfter passes without one.
func TestReceiptWaitsForNewerJobTable(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name          string
		next          string // the state of the job in the next table; "" = no next table
		wantConfirmed bool
	}{
		{"the next table shows the job ran", "COMPLETED", true},
		{"the next table still shows it pending", "PENDING", false},
		{"no newer table within StaleAfter", "", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			e := newEnv(t)
			const lin = "lab-62"
			plan := report.Plan{Lineage: lin, Ideal: "cpu", Model: "m1", Batch: 8}
			j := job(62, 1001, "alice", "PENDING", "cpu", plan.FormatComment())
			e.publish([]report.Job{j}, nil) // taken before the job started
			w := e.attemptWrapper(62, lin, 0)
			e.start(w)
			const total = 40
			e.now = e.now.Add(4 * time.Second)
			env := report.NewEnvelope(report.KindSample, e.now)
			env.Sample = &report.Sample{}
			for i := range int64(total) {
				env.Sample.Iters = append(env.Sample.Iters, report.Iter{Step: i + 1, AtMS: e.now.UnixMilli(), DurMS: 100, Source: report.SourcePattern, Total: total})
			}
			e.send(w, env)
			e.end(w, 0)
			e.rounds(2)
			if rs := e.receipts(); len(rs) != 0 {
				t.Fatalf("receipt written on a job table older than the run's end: %v", rs)
			}
			if !e.lineage(lin).ended() {
				t.Fatal("the run that reached its total did not end")
			}
			switch tc.next {
			case "":
				e.now = e.now.Add(e.c.cfg.StaleAfter + time.Second)
				e.rounds(1)
			default:
				j.State = tc.next
				if tc.next == "COMPLETED" {
					j.StartMS, j.EndMS = e.now.Add(-4500*time.Millisecond).UnixMilli(), e.now.UnixMilli()
				}
				e.now = e.now.Add(time.Second)
				e.publish([]report.Job{j}, nil)
				e.rounds(1)
			}
			r := e.oneReceipt()
			if r.Confirmed != tc.wantConfirmed || r.Iters != total {
				t.Fatalf("receipt %+v: confirmed %v, want %v, %d iterations", r, r.Confirmed, tc.wantConfirmed, total)
			}
			if tc.wantConfirmed && r.User != "alice" {
				t.Errorf("confirmed receipt's user %q, want Slurm's alice", r.User)
			}
			if n := len(e.c.heldReceipts); n != 0 {
				t.Errorf("%d receipts still held", n)
			}
		})
	}
}

// oneReceipt is the only receipt the coordinator wrote, decoded.
func (e *env) oneReceipt() report.Receipt {
	e.t.Helper()
	rs := e.receipts()
	if len(rs) != 1 {
		e.t.Fatalf("%d receipts, want 1: %v", len(rs), rs)
	}
	var r report.Receipt
	if err := json.Unmarshal([]byte(rs[0]), &r); err != nil {
		e.t.Fatal(err)
	}
	return r
}

func TestSig3(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ in, want float64 }{
		{3.8149, 3.81}, {0.0012345, 0.00123}, {1234.5, 1230}, {8, 8}, {0, 0}, {-2.345, -2.35},
	} {
		if got := sig3(tc.in); math.Abs(got-tc.want) > 1e-12*math.Abs(tc.want) {
			t.Errorf("sig3(%g) = %g, want %g", tc.in, got, tc.want)
		}
	}
}

// TestETAPriorBeforeFirstIteration: before a running lineage's own first
// iterations its ETA comes from its owner's confirmed earlier runs of the
// same model, batch and partition (the owner as Slurm's job table gives
// it), else other users' confirmed ones; the status says which, and the
// run's own iterations replace it.
func TestETAPriorBeforeFirstIteration(t *testing.T) {
	const model = "resnet18-abc:momentum:fp32"
	const me = 1001
	now := time.UnixMilli(1_700_000_600_000)
	uid := func(u int) *int { return &u }
	receipt := func(owner int, user string, confirmed bool, ms float64) report.Receipt {
		return report.Receipt{Model: model, Batch: 8, Partition: "cpu", IterMS: ms, Iters: 1000, User: user, UID: uid(owner), Confirmed: confirmed}
	}
	in := func(ms float64) int64 { return now.Add(time.Duration(1000*ms) * time.Millisecond).UnixMilli() } // 1000 steps left
	for _, tc := range []struct {
		name     string
		state    string
		receipts []report.Receipt
		wantETA  int64
		wantSrc  estimate.PriorSource
		wantN    int
	}{
		{"no earlier runs: unknown", "RUNNING", nil, 0, "", 0},
		{"own runs first, however many others", "RUNNING", []report.Receipt{receipt(me, "alice", true, 120), receipt(me, "alice", true, 140),
			receipt(1002, "bob", true, 500), receipt(1003, "carol", true, 500), receipt(1004, "dan", true, 500)}, in(130), estimate.PriorOwn, 2},
		{"others only: median of each user's median", "RUNNING", []report.Receipt{receipt(1002, "bob", true, 200), receipt(1003, "carol", true, 300),
			receipt(1003, "carol", true, 300)}, in(250), estimate.PriorPooled, 2},
		{"own but unconfirmed: not used", "RUNNING", []report.Receipt{receipt(me, "alice", false, 120), receipt(1002, "bob", true, 300)},
			in(300), estimate.PriorPooled, 1},
		{"a receipt naming the user is not theirs: the uid decides", "RUNNING", []report.Receipt{receipt(1002, "alice", true, 300)},
			in(300), estimate.PriorPooled, 1},
		{"pending: no ETA before the run starts", "PENDING", []report.Receipt{receipt(me, "alice", true, 120)}, 0, "", 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := benchCoordinator()
			l := &lineage{Status: report.JobStatus{V: 1, Cluster: "lab", Lineage: "lab-1", JobID: 7, User: "alice", UID: me, Step: -1,
				Partition: "cpu", State: tc.state, TotalIters: 1000, Plan: &report.Plan{Model: model, Batch: 8}}}
			for _, r := range tc.receipts {
				c.speeds.noteReceipt(r)
			}
			c.refreshEstimates(l, now)
			st := &l.Status
			if st.ETAMS != tc.wantETA || st.ETASource != string(tc.wantSrc) || st.ETAPriorRuns != tc.wantN {
				t.Errorf("ETA %+d ms from now, source %q of %d, want %+d ms, %q of %d", st.ETAMS-now.UnixMilli(), st.ETASource, st.ETAPriorRuns,
					tc.wantETA-now.UnixMilli(), tc.wantSrc, tc.wantN)
			}
			if tc.wantETA != 0 && (st.ETALowMS > st.ETAMS || st.ETAHighMS < st.ETAMS) {
				t.Errorf("band %d..%d does not hold the ETA %d", st.ETALowMS, st.ETAHighMS, st.ETAMS)
			}
		})
	}
	// the run's own iterations replace the prior and clear its source
	c := benchCoordinator()
	c.speeds.noteReceipt(receipt(me, "alice", true, 500))
	l := &lineage{Status: report.JobStatus{V: 1, Cluster: "lab", Lineage: "lab-1", JobID: 7, User: "alice", UID: me, Step: -1,
		Partition: "cpu", State: "RUNNING", TotalIters: 1100, Plan: &report.Plan{Model: model, Batch: 8}}}
	c.refreshEstimates(l, now)
	if l.Status.ETASource != string(estimate.PriorOwn) {
		t.Fatalf("before the iterations: source %q, want own", l.Status.ETASource)
	}
	for i := int64(1); i <= 100; i++ {
		l.Iter.Add(report.Iter{Step: i, AtMS: 1_700_000_000_000 + i*100, DurMS: 100})
	}
	l.Status.Step = 100
	c.refreshEstimates(l, now)
	if st := &l.Status; st.ETASource != "" || st.ETAPriorRuns != 0 || st.ETAMS != now.Add(100*time.Second).UnixMilli() {
		t.Errorf("after 100 iterations at 100 ms: ETA %+d ms from now, source %q of %d; want +100000, none", st.ETAMS-now.UnixMilli(), st.ETASource, st.ETAPriorRuns)
	}
}
