package policy

import (
	"fmt"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/isched/isched/internal/report"
)

func TestResize(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC)
	on := Config{Elastic: true}
	run := func(mod func(*ElasticRun)) ElasticRun {
		r := ElasticRun{JobID: 7, Queue: "gpu", Size: 1, Min: 1, Max: 4, PerNode: 8, Remaining: 10 * time.Hour,
			Attained: time.Hour, LimitRoom: -1, LastMoveAt: now.Add(-time.Hour)}
		if mod != nil {
			mod(&r)
		}
		return r
	}
	idle := map[string]QueueRoom{"gpu": {Idle: 7, MostFree: 7}}
	cases := []struct {
		name   string
		cfg    Config
		runs   []ElasticRun
		rooms  map[string]QueueRoom
		want   ResizeChoice // JobID 0: none
		reason string       // in the reason either way
	}{
		{"off", Config{}, []ElasticRun{run(nil)}, idle, ResizeChoice{}, "off"},
		{"grows to the size that gains most", on, []ElasticRun{run(nil)}, idle,
			ResizeChoice{JobID: 7, From: 1, To: 4, Nodes: 1, Gres: "gpu:4"}, "scaling efficiency 0.81, modelled from 1 GPUs"},
		{"a job waiting on the partition stops growth", on, []ElasticRun{run(nil)},
			map[string]QueueRoom{"gpu": {Idle: 7, MostFree: 7, Demand: 1}}, ResizeChoice{}, "jobs wait on gpu for 1 GPUs"},
		{"headroom left idle for arrivals", Config{Elastic: true, ElasticHeadroom: 5}, []ElasticRun{run(nil)}, idle,
			ResizeChoice{JobID: 7, From: 1, To: 3, Nodes: 1, Gres: "gpu:3"}, "3 GPUs"},
		{"only the GPUs of one node", on, []ElasticRun{run(nil)}, map[string]QueueRoom{"gpu": {Idle: 7, MostFree: 2}},
			ResizeChoice{JobID: 7, From: 1, To: 2, Nodes: 1, Gres: "gpu:2"}, "2 GPUs"},
		{"its own node's idle GPUs count", on, []ElasticRun{run(func(r *ElasticRun) { r.FreeBeside = 3 })},
			map[string]QueueRoom{"gpu": {Idle: 3, MostFree: 3}}, ResizeChoice{JobID: 7, From: 1, To: 4, Nodes: 1, Gres: "gpu:4"}, ""},
		{"past a node: whole nodes", on, []ElasticRun{run(func(r *ElasticRun) { r.Size, r.Min, r.Max, r.PerNode = 2, 2, 4, 2 })},
			map[string]QueueRoom{"gpu": {Idle: 2, MostFree: 2, FreeNodes: 1}}, ResizeChoice{JobID: 7, From: 2, To: 4, Nodes: 2, Gres: "gpu:2"}, ""},
		{"past a node without a whole node", on, []ElasticRun{run(func(r *ElasticRun) { r.Size, r.Min, r.Max, r.PerNode = 2, 2, 4, 2 })},
			map[string]QueueRoom{"gpu": {Idle: 2, MostFree: 1}}, ResizeChoice{}, "no larger size fits"},
		{"hysteresis after a move", on, []ElasticRun{run(func(r *ElasticRun) { r.LastMoveAt = now.Add(-time.Minute) })}, idle,
			ResizeChoice{}, "hysteresis"},
		{"bound on resizes", on, []ElasticRun{run(func(r *ElasticRun) { r.Resizes = DefaultMaxResizes })}, idle,
			ResizeChoice{}, "resized 8 times"},
		{"no prediction yet", on, []ElasticRun{run(func(r *ElasticRun) { r.Remaining = 0 })}, idle, ResizeChoice{}, "no prediction"},
		// 3 min left: at 4 GPUs (3.24×) 124 s sooner, under 1.5 × 2 × (30 s + 15 s)
		{"too little left to pay", on, []ElasticRun{run(func(r *ElasticRun) { r.Remaining = 3 * time.Minute })}, idle,
			ResizeChoice{}, "the gain does not exceed"},
		{"measured: two GPUs no faster than one", on, []ElasticRun{run(func(r *ElasticRun) { r.Max, r.Rates = 2, map[int]float64{1: 5, 2: 5} })},
			idle, ResizeChoice{}, "scaling efficiency 0.50, measured"},
		{"measured rates are used", on, []ElasticRun{run(func(r *ElasticRun) { r.Rates = map[int]float64{1: 5, 2: 9.5} })}, idle,
			ResizeChoice{JobID: 7, From: 1, To: 4, Nodes: 1, Gres: "gpu:4"}, "modelled from 2 GPUs"},
		{"shrinks when jobs wait for more than idle", on, []ElasticRun{run(func(r *ElasticRun) { r.Size = 4 })},
			map[string]QueueRoom{"gpu": {Idle: 1, MostFree: 1, Demand: 2}},
			ResizeChoice{JobID: 7, From: 4, To: 1, Nodes: 1, Gres: "gpu:1", Shrink: true}, "3 above its base"},
		{"the run with most above its base shrinks first", on, []ElasticRun{
			run(func(r *ElasticRun) { r.Size = 2 }), run(func(r *ElasticRun) { r.JobID, r.Size = 9, 4 })},
			map[string]QueueRoom{"gpu": {Demand: 1}}, ResizeChoice{JobID: 9, From: 4, To: 1, Nodes: 1, Gres: "gpu:1", Shrink: true}, ""},
		{"a shrink ignores the bound on resizes and hysteresis", on, []ElasticRun{run(func(r *ElasticRun) {
			r.Size, r.Resizes, r.LastMoveAt = 2, 99, now
		})}, map[string]QueueRoom{"gpu": {Demand: 1}}, ResizeChoice{JobID: 7, From: 2, To: 1, Nodes: 1, Gres: "gpu:1", Shrink: true}, ""},
		{"no shrink when the waiting jobs fit the idle GPUs", on, []ElasticRun{run(func(r *ElasticRun) { r.Size = 2 })},
			map[string]QueueRoom{"gpu": {Idle: 2, MostFree: 2, Demand: 2}}, ResizeChoice{}, "jobs wait on gpu for 2 GPUs"},
		{"no shrink of a run about to end", on, []ElasticRun{run(func(r *ElasticRun) { r.Size, r.Remaining = 4, 20*time.Second })},
			map[string]QueueRoom{"gpu": {Demand: 1}}, ResizeChoice{}, "ends within 20s"},
		{"the owner's limit bounds growth", on, []ElasticRun{run(func(r *ElasticRun) { r.LimitRoom = 1 })}, idle,
			ResizeChoice{JobID: 7, From: 1, To: 2, Nodes: 1, Gres: "gpu:2"}, ""},
		{"no growth at the owner's limit", on, []ElasticRun{run(func(r *ElasticRun) { r.LimitRoom = 0 })}, idle,
			ResizeChoice{}, "limits allow no more GPUs"},
		{"shrinks for its account's jobs held by the same limit", on, []ElasticRun{run(func(r *ElasticRun) { r.Size, r.HeldDemand = 3, 1 })},
			idle, ResizeChoice{JobID: 7, From: 3, To: 1, Nodes: 1, Gres: "gpu:1", Shrink: true}, "its owner's other jobs wait for 1 GPUs under the same limit"},
		{"waiting jobs elsewhere do not shrink it", on, []ElasticRun{run(func(r *ElasticRun) { r.Size, r.Max = 4, 4 })},
			map[string]QueueRoom{"gpu": {Idle: 4, MostFree: 4}, "cpu": {Demand: 8}}, ResizeChoice{}, "largest size"},
		// 16 nodes of 8: a quarter of the nodes is 32 GPUs kept idle
		{"the default headroom: a quarter of the nodes' GPUs", on, []ElasticRun{run(nil)},
			map[string]QueueRoom{"gpu": {Idle: 34, MostFree: 8, FreeNodes: 2, GPUs: 128, Nodes: 16}},
			ResizeChoice{JobID: 7, From: 1, To: 3, Nodes: 1, Gres: "gpu:3"}, "3 GPUs"},
		{"no growth into the default headroom", on, []ElasticRun{run(nil)},
			map[string]QueueRoom{"gpu": {Idle: 32, MostFree: 8, FreeNodes: 2, GPUs: 128, Nodes: 16}}, ResizeChoice{}, "32 kept for arrivals"},
		{"a headroom of none", Config{Elastic: true, ElasticHeadroom: -1}, []ElasticRun{run(nil)},
			map[string]QueueRoom{"gpu": {Idle: 7, MostFree: 7, GPUs: 128, Nodes: 16}}, ResizeChoice{JobID: 7, From: 1, To: 4, Nodes: 1, Gres: "gpu:4"}, ""},
		{"shrinks when arrivals took over half the headroom", on, []ElasticRun{run(func(r *ElasticRun) { r.Size = 4 })},
			map[string]QueueRoom{"gpu": {Idle: 15, MostFree: 3, GPUs: 128, Nodes: 16}},
			ResizeChoice{JobID: 7, From: 4, To: 1, Nodes: 1, Gres: "gpu:1", Shrink: true}, "15 GPUs idle on gpu, under half the 32 kept for arrivals"},
		{"half the headroom idle: no shrink, no growth", on, []ElasticRun{run(func(r *ElasticRun) { r.Size = 2 })},
			map[string]QueueRoom{"gpu": {Idle: 16, MostFree: 3, GPUs: 128, Nodes: 16}}, ResizeChoice{}, "16 idle GPUs on gpu, 32 kept for arrivals"},
		{"a run at its base is left alone", on, []ElasticRun{run(nil)},
			map[string]QueueRoom{"gpu": {Idle: 0, GPUs: 128, Nodes: 16}}, ResizeChoice{}, "0 idle GPUs on gpu, 32 kept"},
		{"a run about to end keeps its GPUs", on, []ElasticRun{run(func(r *ElasticRun) { r.Size, r.Remaining = 4, 20*time.Second })},
			map[string]QueueRoom{"gpu": {Idle: 0, GPUs: 128, Nodes: 16}}, ResizeChoice{}, "ends within 20s"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			all, why := Resize(c.cfg, c.runs, c.rooms, now)
			if len(all) != min(int(c.want.JobID), 1) {
				t.Fatalf("got %+v (%q), want %+v", all, why, c.want)
			}
			text := why
			if len(all) == 1 {
				got := all[0]
				text = got.Reason
				got.Reason, got.Queue = "", ""
				if got != c.want {
					t.Errorf("got %+v, want %+v", got, c.want)
				}
			}
			if !strings.Contains(text, c.reason) {
				t.Errorf("reason %q does not say %q", text, c.reason)
			}
		})
	}
}

// TestResizeSeveral: shrinks until the freed GPUs cover the wait (and a
// held owner's jobs), then one growth per partition, in one round.
func TestResizeSeveral(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC)
	run := func(id uint64, owner, queue string, size int) ElasticRun {
		return ElasticRun{JobID: id, Owner: owner, Queue: queue, Size: size, Min: 1, Max: 4, PerNode: 8, Remaining: 10 * time.Hour,
			Attained: time.Hour, LimitRoom: -1}
	}
	held := func(r ElasticRun) ElasticRun { r.HeldDemand, r.LimitRoom = 2, 0; return r }
	for _, c := range []struct {
		name  string
		runs  []ElasticRun
		rooms map[string]QueueRoom
		want  string // job:from->to, in order
	}{
		{"two shrinks cover a wait of 5", []ElasticRun{run(1, "a", "gpu", 3), run(2, "b", "gpu", 4), run(3, "c", "gpu", 2)},
			map[string]QueueRoom{"gpu": {Idle: 0, Demand: 5}}, "2:4->1 1:3->1"},
		{"one growth per partition", []ElasticRun{run(1, "a", "gpu", 1), run(2, "b", "gpu", 1), run(3, "c", "old", 1)},
			map[string]QueueRoom{"gpu": {Idle: 8, MostFree: 8}, "old": {Idle: 8, MostFree: 8}}, "1:1->4 3:1->4"},
		{"a held owner's demand shrinks one of its runs, not both", []ElasticRun{held(run(1, "a", "gpu", 3)), held(run(2, "a", "gpu", 3))},
			map[string]QueueRoom{"gpu": {}}, "1:3->1"},
		{"a shrink on one partition, a growth on another", []ElasticRun{run(1, "a", "gpu", 4), run(2, "b", "old", 1)},
			map[string]QueueRoom{"gpu": {Demand: 1}, "old": {Idle: 3, MostFree: 3}}, "1:4->1 2:1->3"},
		// 16 nodes of 8 keep 32 idle: shrinks stop once 16 (half) are
		{"shrinks restore half the headroom", []ElasticRun{run(1, "a", "gpu", 3), run(2, "b", "gpu", 4), run(3, "c", "gpu", 2)},
			map[string]QueueRoom{"gpu": {Idle: 12, GPUs: 128, Nodes: 16}}, "2:4->1 1:3->1"},
	} {
		t.Run(c.name, func(t *testing.T) {
			all, why := Resize(Config{Elastic: true}, c.runs, c.rooms, now)
			var got []string
			for _, r := range all {
				got = append(got, fmt.Sprintf("%d:%d->%d", r.JobID, r.From, r.To))
			}
			if strings.Join(got, " ") != c.want {
				t.Errorf("resizes %v (%q), want %s", got, why, c.want)
			}
		})
	}
	if q := (QueueRoom{Idle: 5, MostFree: 3, FreeNodes: 1}).Reserve(4); q != (QueueRoom{Idle: 1, MostFree: 0, FreeNodes: 1}) {
		t.Errorf("Reserve(4): %+v", q)
	}
}

func TestElasticRate(t *testing.T) {
	t.Parallel()
	r := ElasticRun{Size: 2, Min: 1, Max: 8, Rates: map[int]float64{1: 10, 4: 30}}
	for _, c := range []struct {
		size  int
		want  float64
		basis string
	}{
		{1, 10, "measured"},
		{4, 30, "measured"},
		{2, 10 * 2 * 0.9, "modelled from 1"}, // the nearest below
		{8, 30 * 2 * 0.9, "modelled from 4"},
	} {
		got, basis := r.rate(c.size, 0.9)
		if math.Abs(got-c.want) > 1e-9 || !strings.HasPrefix(basis, c.basis) {
			t.Errorf("rate(%d) = %g (%s), want %g (%s)", c.size, got, basis, c.want, c.basis)
		}
	}
	above := ElasticRun{Size: 1, Min: 1, Max: 4, Rates: map[int]float64{2: 18}}
	if got, basis := above.rate(1, 0.9); math.Abs(got-10) > 1e-9 || basis != "modelled from 2 GPUs" {
		t.Errorf("from above: %g (%s), want 10 from 2 GPUs", got, basis)
	}
}

func TestGPULimitRoom(t *testing.T) {
	t.Parallel()
	snap := &report.Snapshot{Limits: []report.UserLimit{
		{User: "alice", Resource: report.LimitGPU, Max: 8, Used: 3, Reason: "AssocGrpGRES"},
		{User: "alice", Partition: "gpu", Resource: report.LimitGPU, Max: 4, Used: 3, Reason: "AssocMaxGRESPerUser"},
		{User: "alice", QOS: "long", Resource: report.LimitGPU, Max: 2, Used: 2, Reason: "QOSMaxGRESPerUser"},
		{User: "alice", Resource: report.LimitCPU, Max: 1, Used: 1, Reason: "AssocGrpCpuLimit"},
		{User: "bob", Resource: report.LimitGPU, Max: 1, Used: 1},
	}}
	for _, c := range []struct {
		user, qos, part string
		want            int
	}{
		{"alice", "", "gpu", 1},     // the partition's per-user limit is the tighter
		{"alice", "", "gpu-old", 5}, // the association's
		{"alice", "long", "gpu", 0}, // the QOS's, in full use
		{"carol", "", "gpu", -1},    // no limit
		{"bob", "", "gpu", 0},
	} {
		if got := GPULimitRoom(snap, c.user, c.qos, "", c.part); got != c.want {
			t.Errorf("GPULimitRoom(%s, %q, %s) = %d, want %d", c.user, c.qos, c.part, got, c.want)
		}
	}
	if got := GPULimitRoom(nil, "alice", "", "", "gpu"); got != -1 {
		t.Errorf("no snapshot: %d, want -1", got)
	}
}

func TestServable(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		gpus, nodes, reclaim int
		want                 bool
	}{
		{1, 1, 1, true},
		{2, 0, 3, true},  // nodes 0: one
		{4, 1, 3, false}, // a whole node no shrink frees
		{2, 2, 8, false}, // several nodes
		{0, 1, 8, false}, // no GPUs
	} {
		if got := Servable(c.gpus, c.nodes, c.reclaim); got != c.want {
			t.Errorf("Servable(%d, %d, %d) = %v, want %v", c.gpus, c.nodes, c.reclaim, got, c.want)
		}
	}
}

func TestHeadroom(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name string
		set  int
		room QueueRoom
		want int // GPUs kept idle; runs shrink under want/2 idle
	}{
		{"a quarter of 64 nodes of 8", 0, QueueRoom{GPUs: 512, Nodes: 64}, 128},
		{"rounded down to whole nodes: 15 of 60", 0, QueueRoom{GPUs: 480, Nodes: 60}, 120},
		{"5 of 22 nodes", 0, QueueRoom{GPUs: 176, Nodes: 22}, 40},
		{"under four nodes: none", 0, QueueRoom{GPUs: 4, Nodes: 2}, 0},
		{"nodes unknown: none", 0, QueueRoom{GPUs: 64}, 0},
		{"the site's count", 10, QueueRoom{GPUs: 512, Nodes: 64}, 10},
		{"none (negative)", -1, QueueRoom{GPUs: 512, Nodes: 64}, 0},
	} {
		t.Run(c.name, func(t *testing.T) {
			cfg := Config{ElasticHeadroom: c.set}
			if got := cfg.headroom(c.room); got != c.want {
				t.Errorf("headroom = %d, want %d", got, c.want)
			}
			q := c.room
			for _, idle := range []int{c.want/2 - 1, c.want / 2} {
				q.Idle = idle
				if got := cfg.short(q); got != (idle < c.want/2) {
					t.Errorf("short at %d idle = %v", idle, got)
				}
			}
		})
	}
}
