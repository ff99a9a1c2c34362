package verdict

import (
	"strings"
	"testing"
)

const (
	mib = int64(1) << 20
	gib = int64(1) << 30
)

func TestJudgeMemory(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name   string
		in     Input
		ask    int64
		frac   float64
		advice string
	}{{
		name:   "asked far too much",
		in:     Input{MemRequestBytes: 32 * gib, PeakRSSBytes: 6*gib + 100*mib},
		ask:    8 * gib,
		frac:   (6.0 + 100.0/1024) / 32,
		advice: "asked 32 GiB, used 6.1 GiB peak: ask --mem=8G next time",
	}, {
		name:   "fits",
		in:     Input{MemRequestBytes: 8 * gib, PeakRSSBytes: 6 * gib},
		frac:   6.0 / 8,
		advice: "memory request fits (75% of 8.0 GiB used)",
	}, {
		name:   "too close to the limit",
		in:     Input{MemRequestBytes: 8 * gib, PeakRSSBytes: 7*gib + 600*mib},
		ask:    10 * gib,
		frac:   (7 + 600.0/1024) / 8,
		advice: "used 95% of the 8.0 GiB asked: ask --mem=10G next time to stay clear of an OOM kill",
	}, {
		name:   "small job: 256 MiB steps",
		in:     Input{MemRequestBytes: 4 * gib, PeakRSSBytes: 643 * mib},
		ask:    1 * gib, // 643×1.2 = 772 MiB → 1024 MiB
		frac:   643.0 / 4096,
		advice: "asked 4.0 GiB, used 643 MiB peak: ask --mem=1G next time",
	}, {
		name:   "tiny job",
		in:     Input{MemRequestBytes: 2 * gib, PeakRSSBytes: 100 * mib},
		ask:    256 * mib,
		frac:   100.0 / 2048,
		advice: "ask --mem=256M next time",
	}, {
		name:   "no request known",
		in:     Input{PeakRSSBytes: 3 * gib},
		ask:    4 * gib,
		advice: "used 3.0 GiB peak: --mem=4G would do",
	}, {
		name:   "oom kill doubles the request",
		in:     Input{MemRequestBytes: 1 * gib, PeakRSSBytes: 1000 * mib, OOM: true},
		ask:    2 * gib,
		frac:   1000.0 / 1024,
		advice: "killed at its memory limit of 1.0 GiB: ask --mem=2G next time",
	}, {
		name:   "oom without a request",
		in:     Input{OOM: true},
		advice: "killed at its memory limit: ask for more memory next time",
	}, {
		name:   "nothing measured",
		in:     Input{},
		advice: "no advice: too little was measured",
	}}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			v := Judge(tt.in)
			if v.AskMemBytes != tt.ask {
				t.Errorf("ask %d MiB, want %d MiB", v.AskMemBytes/mib, tt.ask/mib)
			}
			if d := v.MemFraction - tt.frac; d > 1e-9 || d < -1e-9 {
				t.Errorf("memory fraction %.4f, want %.4f", v.MemFraction, tt.frac)
			}
			if !strings.Contains(v.Recommendation, tt.advice) {
				t.Errorf("recommendation %q, want it to contain %q", v.Recommendation, tt.advice)
			}
		})
	}
}

func TestJudgeCPU(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name   string
		in     Input
		eff    float64
		cores  int
		advice string
	}{{
		name:   "one busy core of eight",
		in:     Input{Cores: 8, WallSeconds: 100, CPUSeconds: 100},
		eff:    0.125,
		cores:  2, // 1 core × 1.2 → 2
		advice: "CPU efficiency 12% of 8 cores: --cpus-per-task=2 would do",
	}, {
		name:  "well used",
		in:    Input{Cores: 4, WallSeconds: 100, CPUSeconds: 350},
		eff:   0.875,
		cores: 0,
	}, {
		name:  "half is fine",
		in:    Input{Cores: 4, WallSeconds: 100, CPUSeconds: 200},
		eff:   0.5,
		cores: 0,
	}, {
		name:  "one core: nothing to give back",
		in:    Input{Cores: 1, WallSeconds: 100, CPUSeconds: 10},
		eff:   0.1,
		cores: 0,
	}, {
		name:  "would need as many: no advice",
		in:    Input{Cores: 2, WallSeconds: 100, CPUSeconds: 90},
		eff:   0.45,
		cores: 0,
	}, {
		name: "cores unknown",
		in:   Input{WallSeconds: 100, CPUSeconds: 90},
	}, {
		// issue 30: a single-threaded trainer on 4 CPUs, measured at 1.1
		// cores busy (p95, a tenth rounded up): ceil(1.1 − 0.15) = 1, where
		// the mean with its margin (0.95 × 1.2 = 1.14) would say 2
		name:   "single-threaded on four: the measured parallelism, one",
		in:     Input{Cores: 4, WallSeconds: 100, CPUSeconds: 95, BusyCores: 1.1},
		eff:    0.2375,
		cores:  1,
		advice: "CPU efficiency 24% of 4 cores, at most 1.1 busy at once in 95% of samples: --cpus-per-task=1 would do",
	}, {
		// 2.4 busy at once (DataLoader workers): ceil(2.25) = 3 of 8
		name:   "two workers and the loop: three of eight",
		in:     Input{Cores: 8, WallSeconds: 100, CPUSeconds: 220, BusyCores: 2.4},
		eff:    0.275,
		cores:  3,
		advice: "at most 2.4 busy at once in 95% of samples: --cpus-per-task=3 would do",
	}, {
		// bursts that fill the cores: ceil(3.75) = 4, as many as it has
		name:  "bursts use every core: no advice",
		in:    Input{Cores: 4, WallSeconds: 100, CPUSeconds: 150, BusyCores: 3.9},
		eff:   0.375,
		cores: 0,
	}}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			v := Judge(tt.in)
			if d := v.CPUEfficiency - tt.eff; d > 1e-9 || d < -1e-9 {
				t.Errorf("efficiency %.4f, want %.4f", v.CPUEfficiency, tt.eff)
			}
			if v.AskCores != tt.cores {
				t.Errorf("ask %d cores, want %d", v.AskCores, tt.cores)
			}
			if tt.advice != "" && !strings.Contains(v.Recommendation, tt.advice) {
				t.Errorf("recommendation %q, want it to contain %q", v.Recommendation, tt.advice)
			}
			if tt.advice == "" && strings.Contains(v.Recommendation, "cpus-per-task") {
				t.Errorf("recommendation %q advises cores", v.Recommendation)
			}
		})
	}
}

func TestRoundMem(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		in, want int64
		slurm    string
	}{
		{0, 0, "0G"}, {1, 256 * mib, "256M"}, {256 * mib, 256 * mib, "256M"}, {257 * mib, 512 * mib, "512M"},
		{1023 * mib, gib, "1G"}, {gib, gib, "1G"}, {gib + 1, 2 * gib, "2G"}, {7*gib + 1, 8 * gib, "8G"},
	} {
		if got := RoundMem(tt.in); got != tt.want {
			t.Errorf("RoundMem(%d) = %d, want %d", tt.in, got, tt.want)
		}
		if got := SlurmMem(tt.want); got != tt.slurm {
			t.Errorf("SlurmMem(%d) = %q, want %q", tt.want, got, tt.slurm)
		}
	}
}

func TestLines(t *testing.T) {
	t.Parallel()
	in := Input{WallSeconds: 600, CPUSeconds: 600, Cores: 4, MemRequestBytes: 32 * gib, MemRequestFrom: "--mem",
		PeakRSSBytes: 643 * mib, PageCacheBytes: 377 * mib, Iterations: 1200, Checkpoints: 3, Moves: 1, MoveLostSeconds: 95,
		GPUs: []GPU{{ID: "GPU-b", PeakBytes: 3 * gib, TotalBytes: 80 * gib, UtilPercent: 71, UtilKnown: true}, {ID: "GPU-a", PeakBytes: gib}}}
	got := strings.Join(Lines(in, Judge(in)), "\n")
	for _, want := range []string{
		"memory:     process peak 643 MiB of 32 GiB asked (--mem), 2%; page cache peak 377 MiB (reclaimable, not counted)",
		"CPU:        25% efficiency (10.0min CPU time over 4 cores × 10.0min wall)",
		"GPU GPU-a:  memory peak 1.0 GiB, utilisation unknown\nGPU GPU-b:  memory peak 3.0 GiB of 80 GiB (4%), utilisation 71% mean",
		"work:       1200 iterations, 3 checkpoints, 1 moves costing 1.6min",
		"next time:  asked 32 GiB, used 643 MiB peak: ask --mem=1G next time; CPU efficiency 25% of 4 cores: --cpus-per-task=2 would do",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("summary lacks %q:\n%s", want, got)
		}
	}
}
