package plan

import (
	"slices"
	"strings"
	"testing"
	"time"
)

// labRows estimates a run that takes about 4 h on lab-cpu (and 1 h on the
// pretend 4x lab-gpu).
func labRows(t *testing.T) (*Site, []Row) {
	t.Helper()
	site := mustSite(t, "../../examples/site-lab.json")
	m := &Model{V: 1, Name: "net", Parameters: 1e6, TrainableParameters: 1e6, ParamBytes: 4,
		ActivationBytesPerSample: 1 << 20, FLOPsPerSample: 1e9, InputShape: []int{3, 32, 32}}
	rows, err := site.Estimate(Request{Model: m, Training: Training{"sgd", PrecFP32}, Samples: 10000, Epochs: 48, Batches: []int{32}})
	if err != nil {
		t.Fatal(err)
	}
	return site, rows
}

// waits: partition name -> wait; absent: idle now.
func waitsOf(m map[string]time.Duration) func(*PartitionSpec, *NodeType) Wait {
	return func(ps *PartitionSpec, nt *NodeType) Wait {
		d, busy := m[ps.Name]
		if !busy {
			return Wait{Partition: ps.Name, Known: true, IdleNow: true, Reason: "idle now"}
		}
		if d < 0 {
			return Wait{Partition: ps.Name, Reason: "unknown: test"}
		}
		return Wait{Partition: ps.Name, Known: true, Wait: d, Reason: "test"}
	}
}

func TestMakePlans(t *testing.T) {
	t.Parallel()
	_, rows := labRows(t)
	var cpuRun, gpuRun time.Duration
	for _, r := range rows {
		switch r.NodeType.Name {
		case "lab-cpu":
			cpuRun = r.Run()
		case "lab-gpu":
			gpuRun = r.Run()
		}
	}
	if cpuRun < 3*time.Hour || gpuRun*4 != cpuRun {
		t.Fatalf("test set-up: cpu run %v, gpu run %v", cpuRun, gpuRun)
	}
	ov := DefaultMigrationOverhead
	busy := map[string]time.Duration{"gpu": time.Hour, "gpu-dev": 3 * time.Hour, "scavenger": 5 * time.Hour}
	tests := []struct {
		name      string
		waits     map[string]time.Duration
		recommend string
		without   string
		with      string // "from>to", "" none
		reason    string
	}{
		// dev computes as fast as cpu (the same machine) for half the price
		{"gpu busy for an hour: start on dev, move", busy, "with", "gpu", "dev>gpu", "start now on dev, move to gpu when it frees (in ~1.0 h, 24% done)"},
		{"dev busy too: start on cpu", map[string]time.Duration{"gpu": time.Hour, "gpu-dev": 3 * time.Hour, "scavenger": 5 * time.Hour, "dev": 2 * time.Hour},
			"with", "gpu", "cpu>gpu", "start now on cpu"},
		{"gpu frees in 5 min: wait for it", map[string]time.Duration{"gpu": 5 * time.Minute, "gpu-dev": time.Hour, "scavenger": time.Hour},
			"without", "gpu", "dev>gpu", "waiting 5 min for gpu"},
		{"gpu idle: go there", map[string]time.Duration{}, "without", "gpu", "", "gpu is idle now and the fastest"},
		{"nothing idle", map[string]time.Duration{"gpu": time.Hour, "gpu-dev": 2 * time.Hour, "cpu": time.Hour, "dev": time.Hour, "scavenger": time.Hour},
			"without", "gpu", "", "nothing suitable is idle"},
		{"waits unknown", map[string]time.Duration{"gpu": -1, "gpu-dev": -1, "cpu": -1, "dev": -1, "scavenger": -1},
			"without", "gpu", "", "no wait is known"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			opts := Options(rows, waitsOf(tt.waits), ov)
			p := MakePlans(32, opts, ov)
			if p.Ideal == nil || p.Ideal.Partition.Name != "gpu" {
				t.Fatalf("ideal %v, want gpu (fastest, not preemptible)", p.Ideal)
			}
			if p.Recommend != tt.recommend || p.Without == nil || p.Without.Partition.Name != tt.without || !strings.Contains(p.Reason, tt.reason) {
				t.Fatalf("recommend %s without %v: %q; want %s, %s, reason containing %q", p.Recommend, name(p.Without), p.Reason, tt.recommend, tt.without, tt.reason)
			}
			got := ""
			if p.With != nil {
				got = p.With.From.Partition.Name + ">" + p.With.To.Partition.Name
			}
			if got != tt.with {
				t.Fatalf("with migration %q, want %q", got, tt.with)
			}
		})
	}
	// the migration arithmetic: 1 h on dev (a quarter of its run), the
	// move, the rest at the gpu's speed
	p := MakePlans(32, Options(rows, waitsOf(busy), ov), ov)
	m := p.With
	done := float64(time.Hour) / float64(m.From.Row.Run())
	rest := time.Duration((1 - done) * float64(gpuRun))
	if d := m.Total - (time.Hour + ov + rest); d < -time.Millisecond || d > time.Millisecond || !near(m.Done, done, 1e-9) {
		t.Errorf("migration total %v done %.3f, want %v and %.3f", m.Total, m.Done, time.Hour+ov+rest, done)
	}
	if wantCost := m.From.Rate*1 + m.To.Rate*(ov+rest).Hours(); !near(m.Cost, wantCost, 1e-6) {
		t.Errorf("migration cost %.4f, want %.4f", m.Cost, wantCost)
	}
	// dev's 2 h limit: a 4 h run there needs 3 chunks of (2 h - 5 min)
	for _, o := range p.Options {
		if o.Partition.Name == "dev" && (o.Fit.Chunks != 3 || o.Run != o.Row.Run()+2*ov) {
			t.Errorf("dev: %d chunks, run %v", o.Fit.Chunks, o.Run)
		}
		if o.Partition.Name == "scavenger" && o.Rate != o.Row.CostPerHour*0.5 {
			t.Errorf("scavenger rate %v, want half of %v", o.Rate, o.Row.CostPerHour)
		}
	}
}

func name(o *Option) string {
	if o == nil {
		return "none"
	}
	return o.Name()
}

func TestChoose(t *testing.T) {
	t.Parallel()
	_, rows := labRows(t)
	ov := DefaultMigrationOverhead
	busy := map[string]time.Duration{"gpu": time.Hour, "gpu-dev": 3 * time.Hour, "scavenger": 5 * time.Hour}
	p := MakePlans(32, Options(rows, waitsOf(busy), ov), ov)
	tests := []struct {
		policy  string
		start   string
		ideal   string
		migrate bool
		err     string
	}{
		{"auto", "dev", "gpu", true, ""},
		{"immediate", "dev", "gpu", true, ""},
		{"ideal", "gpu", "gpu", false, ""},
		{"cheapest", "scavenger", "scavenger", false, ""},      // half-price pretend GPUs
		{"deadline=+30h", "scavenger", "scavenger", false, ""}, // the cheapest, and it ends within 30 h
		{"deadline=+5h", "dev", "dev", false, ""},              // in chunks on dev: cheaper than moving, and in time
		{"deadline=+2h", "dev", "gpu", true, ""},               // only starting now and moving makes it
		{"deadline=+1h", "", "", false, "no plan is predicted to end before"},
		{"deadline=", "", "", false, "needs a time"},
		{"fastest", "", "", false, "want auto"},
	}
	for _, tt := range tests {
		pol, err := ParsePolicy(tt.policy, t0)
		var c Choice
		if err == nil {
			c, err = p.Choose(pol, t0)
		}
		if tt.err != "" {
			if err == nil || !strings.Contains(err.Error(), tt.err) {
				t.Errorf("%s: error %v, want %q", tt.policy, err, tt.err)
			}
			continue
		}
		if err != nil {
			t.Errorf("%s: %v", tt.policy, err)
			continue
		}
		if c.Start[0].Partition.Name != tt.start || c.Ideal.Partition.Name != tt.ideal || c.Migrate != tt.migrate {
			t.Errorf("%s: start %s ideal %s migrate %v; want %s %s %v (%s)", tt.policy, c.Start[0].Partition.Name, c.Ideal.Partition.Name, c.Migrate,
				tt.start, tt.ideal, tt.migrate, c.Reason)
		}
		for _, f := range c.Fallbacks {
			if f.Partition == c.Ideal.Partition {
				t.Errorf("%s: the ideal partition is among the fallbacks", tt.policy)
			}
		}
	}
}

func TestParsePolicyDeadline(t *testing.T) {
	t.Parallel()
	p, err := ParsePolicy("deadline=2026-05-10T08:00", t0)
	if err != nil || !p.Deadline.Equal(time.Date(2026, 5, 10, 8, 0, 0, 0, time.UTC)) {
		t.Fatalf("%v %v", p, err)
	}
	if _, err := ParsePolicy("deadline=2026-05-01T08:00", t0); err == nil || !strings.Contains(err.Error(), "past") {
		t.Fatalf("past deadline: %v", err)
	}
}

func TestTimeLimitAndMem(t *testing.T) {
	t.Parallel()
	dev := &PartitionSpec{Name: "dev", MaxTime: "2:00:00"}
	for _, tt := range []struct {
		run  time.Duration
		ps   *PartitionSpec
		want time.Duration
	}{
		{time.Hour, nil, 85 * time.Minute},
		{61 * time.Second, nil, 12 * time.Minute},
		{3 * time.Hour, dev, 2 * time.Hour},
	} {
		if got := TimeLimit(tt.run, tt.ps); got != tt.want {
			t.Errorf("TimeLimit(%v) = %v, want %v", tt.run, got, tt.want)
		}
	}
	nt := &NodeType{HostMemoryBytes: 4 << 30}
	if got := MemRequest(&Row{NodeType: nt, HostMem: 1000 << 20}); got != 1280<<20 {
		t.Errorf("MemRequest(1000 MiB) = %d MiB", got>>20)
	}
	if got := MemRequest(&Row{NodeType: nt, HostMem: 4 << 30}); got != 4<<30 {
		t.Errorf("MemRequest is not capped at the node: %d MiB", got>>20)
	}
}

func TestFallbackList(t *testing.T) {
	t.Parallel()
	opt := func(name string) *Option { return &Option{Partition: &PartitionSpec{Name: name}} }
	gpu, cpu, dev, scav := opt("gpu"), opt("cpu"), opt("dev"), opt("scavenger")
	tests := []struct {
		name  string
		c     Choice
		given []string
		want  []string
	}{
		{"start on the ideal", Choice{Start: []*Option{gpu}, Ideal: gpu, Fallbacks: []*Option{cpu, dev}}, nil, []string{"cpu", "dev"}},
		{"start elsewhere, first", Choice{Start: []*Option{cpu}, Ideal: gpu, Fallbacks: []*Option{dev, scav}}, nil, []string{"cpu", "dev", "scavenger"}},
		{"the user's first, no repeats", Choice{Start: []*Option{cpu, dev}, Ideal: gpu, Fallbacks: []*Option{scav, gpu}}, []string{"scavenger"},
			[]string{"dev", "cpu", "scavenger"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			if got := tc.c.FallbackList(tc.given); !slices.Equal(got, tc.want) {
				t.Errorf("FallbackList(%v) = %v, want %v", tc.given, got, tc.want)
			}
		})
	}
}

// TestStartElsewhere is lever e with the ideal partition fixed (gpu): a
// run of about 1 h there, 4 h on cpu and dev, starts elsewhere only when
// the fallback's work before gpu frees outweighs the move.
func TestStartElsewhere(t *testing.T) {
	t.Parallel()
	_, rows := labRows(t)
	ov := DefaultMigrationOverhead
	onlyCPU := func(o *Option) bool { return o.Partition.Name == "cpu" }
	anyOne := func(*Option) bool { return true }
	tests := []struct {
		name    string
		waits   map[string]time.Duration
		allowed func(*Option) bool
		start   string // "" wait for gpu
		why     string
	}{
		{"gpu busy for 3 h: start on cpu, move", map[string]time.Duration{"gpu": 3 * time.Hour, "dev": time.Hour, "gpu-dev": time.Hour, "scavenger": time.Hour},
			onlyCPU, "cpu", "start now on cpu (idle, 4.1 h), move to gpu when it frees: ends in 3.3 h; waiting 3.0 h for gpu ends in 4.0 h"},
		// 10 min on cpu is 2.5 min of gpu work: less than the 3 min move
		{"gpu frees in 10 min: wait", map[string]time.Duration{"gpu": 10 * time.Minute, "dev": time.Hour, "gpu-dev": time.Hour, "scavenger": time.Hour},
			onlyCPU, "", "waiting 10 min for gpu ends in 1.2 h; starting now on cpu (idle, 4.1 h) would end in 1.2 h, not sooner by more than 4 min: waiting"},
		{"gpu busy for 40 h: the whole run on cpu", map[string]time.Duration{"gpu": 40 * time.Hour, "dev": time.Hour, "gpu-dev": time.Hour, "scavenger": time.Hour},
			onlyCPU, "cpu", "it ends there before gpu frees: ends in 4.1 h"},
		{"only disallowed partitions idle", map[string]time.Duration{"gpu": 3 * time.Hour, "cpu": time.Hour, "gpu-dev": time.Hour, "scavenger": time.Hour},
			onlyCPU, "", "no partition it may start on is idle"},
		// dev computes as fast but restarts at its 2 h limit on the way
		{"dev and cpu idle and allowed: cpu, no restart", map[string]time.Duration{"gpu": 3 * time.Hour, "gpu-dev": time.Hour, "scavenger": time.Hour},
			anyOne, "cpu", "move to gpu when it frees: ends in 3.3 h"},
		{"gpu idle", map[string]time.Duration{"dev": time.Hour}, onlyCPU, "", "gpu is idle now"},
		{"gpu's wait unknown", map[string]time.Duration{"gpu": -1}, onlyCPU, "", "the wait for gpu is unknown"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			p := MakePlans(32, Options(rows, waitsOf(tt.waits), ov), ov)
			start, why := p.StartElsewhere(p.Ideal, tt.allowed)
			if got := ""; start != nil {
				got = start.Partition.Name
				if got != tt.start {
					t.Fatalf("start %s, want %q: %s", got, tt.start, why)
				}
			} else if tt.start != "" {
				t.Fatalf("wait for gpu, want a start on %s: %s", tt.start, why)
			}
			if !strings.Contains(why, tt.why) {
				t.Errorf("why %q, want %q", why, tt.why)
			}
		})
	}
}
