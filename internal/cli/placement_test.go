package cli

import (
	"errors"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/isched/isched/internal/plan"
)

// labPlans are the plans of resnet18 at 128 px, batch 32, on the lab
// catalogue (examples/site-lab.json), with the given partitions idle now
// and the others busy for an hour; nil idle: waits unknown.
func labPlans(t *testing.T, batch int, idle ...string) plan.Plans {
	t.Helper()
	return labPlansBusy(t, batch, time.Hour, idle...)
}

// labPlansBusy is labPlans with the busy partitions' wait.
func labPlansBusy(t *testing.T, batch int, busy time.Duration, idle ...string) plan.Plans {
	t.Helper()
	sb, err := os.ReadFile("../../examples/site-lab.json")
	if err != nil {
		t.Fatal(err)
	}
	site, err := plan.DecodeSite(sb)
	if err != nil {
		t.Fatal(err)
	}
	model, err := loadModel("testdata/resnet18_128.json")
	if err != nil {
		t.Fatal(err)
	}
	rows, err := site.Estimate(plan.Request{Model: model, Training: plan.Training{Optimizer: "momentum", Precision: "fp32"},
		Samples: 50000, Epochs: 10, Batches: []int{batch}})
	if err != nil {
		t.Fatal(err)
	}
	wait := func(ps *plan.PartitionSpec, nt *plan.NodeType) plan.Wait {
		switch {
		case idle == nil:
			return plan.Wait{Partition: ps.Name, Reason: "unknown"}
		case strings.Contains(","+strings.Join(idle, ",")+",", ","+ps.Name+","):
			return plan.Wait{Partition: ps.Name, Known: true, IdleNow: true}
		}
		return plan.Wait{Partition: ps.Name, Known: true, Wait: busy}
	}
	return plan.MakePlans(batch, plan.Options(rows, wait, plan.DefaultMigrationOverhead), plan.DefaultMigrationOverhead)
}

func TestPlace(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 3, 2, 10, 0, 0, 0, time.UTC)
	pol := func(s string) plan.Policy {
		p, err := plan.ParsePolicy(s, now)
		if err != nil {
			t.Fatal(err)
		}
		return p
	}
	est := func(p plan.Plans) *placeEstimate {
		return &placeEstimate{plans: p, sitePath: "site.json", modelKey: "fp:momentum:fp32", stateSource: "test"}
	}
	busyGPU := est(labPlans(t, 32, "dev", "cpu", "scavenger"))
	gpuSoon := est(labPlansBusy(t, 32, 2*time.Minute, "dev", "cpu", "scavenger"))
	allIdle := est(labPlans(t, 32, "dev", "gpu-dev", "cpu", "gpu", "scavenger"))
	unknown := est(labPlans(t, 32))
	none := est(plan.Plans{Batch: 4096})
	def := func() (string, error) { return "cpu", nil }
	noDef := func() (string, error) { return "", errors.New("Slurm has no default partition") }
	// want is the submission's placement in brief; "error: ..." a usage
	// error with that text
	type want struct {
		parts, ideal, fallbacks string
		migrate                 bool
		gres, idealGres         string
		cpus                    int
		memMiB                  int64
		time, idealTime         time.Duration
		iters                   int64
	}
	tests := []struct {
		name    string
		req     placeRequest
		est     *placeEstimate
		def     func() (string, error)
		want    want
		wantErr string
		check   func(t *testing.T, s submission)
	}{
		{name: "no model: the default partition, Slurm's defaults",
			req: placeRequest{policy: "auto"}, def: def,
			want:  want{parts: "cpu", ideal: "cpu"},
			check: func(t *testing.T, s submission) { wantText(t, s.note, "no estimate (no --model)") }},
		{name: "no model, no default partition",
			req: placeRequest{policy: "auto"}, def: noDef,
			wantErr: "no partition: pass --partition-ideal (Slurm has no default partition)"},
		{name: "no model: a policy that needs an estimate",
			req: placeRequest{policy: "cheapest"}, def: def,
			wantErr: "--policy cheapest needs an estimate"},
		{name: "no model: the user's partition, time, memory, CPUs and GRES",
			req: placeRequest{policy: "auto", ideal: "gpu", time: "30", mem: "2g", cpus: 2, gres: "gpu:1", totalIters: 500}, def: noDef,
			want: want{parts: "gpu", ideal: "gpu", gres: "gpu:1", idealGres: "gpu:1", cpus: 2, memMiB: 2048,
				time: 30 * time.Minute, idealTime: 30 * time.Minute, iters: 500}},
		{name: "no model, immediate with fallbacks: start wherever Slurm can, ideal first",
			req: placeRequest{policy: "immediate", ideal: "gpu", fallback: "gpu-dev,scavenger"}, def: noDef,
			want: want{parts: "gpu,gpu-dev,scavenger", ideal: "gpu", fallbacks: "gpu-dev,scavenger", migrate: true}},
		{name: "no model, fallbacks without immediate: start on the ideal",
			req: placeRequest{policy: "auto", ideal: "gpu", fallback: "scavenger"}, def: noDef,
			want: want{parts: "gpu", ideal: "gpu", fallbacks: "scavenger", migrate: true}},
		{name: "no model, fallbacks and --no-migrate",
			req: placeRequest{policy: "immediate", ideal: "gpu", fallback: "scavenger", noMigrate: true}, def: noDef,
			want: want{parts: "gpu", ideal: "gpu", fallbacks: "scavenger"}},
		{name: "bad --partition-ideal", req: placeRequest{policy: "auto", ideal: "a b"}, def: def,
			wantErr: `--partition-ideal "a b": not a partition name`},
		{name: "bad --fallback", req: placeRequest{policy: "auto", fallback: "dev,,cpu"}, def: def,
			wantErr: `--fallback "dev,,cpu": not a partition list`},
		{name: "bad --gres", req: placeRequest{policy: "auto", gres: "gpu:a:b:c"}, def: def,
			wantErr: `--gres "gpu:a:b:c": want e.g. gpu:1`},
		{name: "bad --time", req: placeRequest{policy: "auto", time: "0"}, def: def,
			wantErr: `--time "0": want a Slurm time`},
		{name: "bad --mem", req: placeRequest{policy: "auto", mem: "4X"}, def: def,
			wantErr: `--mem "4X": want e.g. 4000M or 4G`},
		{name: "estimate, gpu busy: start on a partition that is idle and move",
			req: placeRequest{policy: "auto"}, est: busyGPU, def: noDef,
			check: func(t *testing.T, s submission) {
				if s.ideal != "gpu" || !s.migrate || s.partitions[0] == "gpu" || !s.moves() {
					t.Errorf("got %v ideal %s migrate %v, want a start off gpu moving there", s.partitions, s.ideal, s.migrate)
				}
				wantStart(t, s, busyGPU)
			}},
		{name: "estimate, --partition-ideal gpu busy for an hour, auto: start on the allowed fallback, move",
			req: placeRequest{policy: "auto", ideal: "gpu", fallback: "cpu"}, est: busyGPU, def: noDef,
			check: func(t *testing.T, s submission) {
				if s.ideal != "gpu" || !s.migrate || strings.Join(s.partitions, ",") != "cpu" {
					t.Errorf("got %v ideal %s migrate %v, want cpu moving to gpu", s.partitions, s.ideal, s.migrate)
				}
				wantText(t, s.reason, "--partition-ideal gpu is busy: start now on cpu (idle")
			}},
		{name: "estimate, --partition-ideal gpu frees in 2 min, auto: wait for it",
			req: placeRequest{policy: "auto", ideal: "gpu", fallback: "cpu"}, est: gpuSoon, def: noDef,
			check: func(t *testing.T, s submission) {
				if s.ideal != "gpu" || strings.Join(s.partitions, ",") != "gpu" {
					t.Errorf("got %v ideal %s, want gpu alone", s.partitions, s.ideal)
				}
				wantText(t, s.reason, "--partition-ideal gpu: waiting 2 min for gpu ends in")
			}},
		{name: "estimate, --partition-ideal gpu frees in 2 min, immediate: start elsewhere anyway",
			req: placeRequest{policy: "immediate", ideal: "gpu", fallback: "cpu"}, est: gpuSoon, def: noDef,
			check: func(t *testing.T, s submission) {
				if strings.Join(s.partitions, ",") != "cpu" || !s.migrate {
					t.Errorf("got %v migrate %v, want cpu", s.partitions, s.migrate)
				}
			}},
		{name: "estimate, everything idle: the ideal partition, no move",
			req: placeRequest{policy: "auto"}, est: allIdle, def: noDef,
			check: func(t *testing.T, s submission) {
				if s.ideal != "gpu" || s.moves() || s.partitions[0] != "gpu" {
					t.Errorf("got %v ideal %s migrate %v, want gpu", s.partitions, s.ideal, s.migrate)
				}
				wantStart(t, s, allIdle)
				if s.idealGres != s.gres || s.idealTime != s.timeLimit {
					t.Errorf("ideal %s %v, start %s %v: want the same", s.idealGres, s.idealTime, s.gres, s.timeLimit)
				}
			}},
		{name: "estimate, waits unknown, immediate: the policy's choice",
			req: placeRequest{policy: "immediate"}, est: unknown, def: noDef,
			check: func(t *testing.T, s submission) {
				if s.ideal != "gpu" || s.partitions[0] != "gpu" {
					t.Errorf("got %v ideal %s, want gpu", s.partitions, s.ideal)
				}
				wantText(t, s.reason, "immediate: ")
				wantStart(t, s, unknown)
			}},
		{name: "estimate: no feasible partition",
			req: placeRequest{policy: "auto"}, est: none, def: noDef,
			wantErr: "no partition can run batch size 4096"},
		{name: "estimate: --partition-ideal not feasible",
			req: placeRequest{policy: "auto", ideal: "nope"}, est: allIdle, def: noDef,
			wantErr: "--partition-ideal nope: not a feasible partition for batch 32 in site.json"},
		{name: "estimate: --partition-ideal, no move",
			req: placeRequest{policy: "auto", ideal: "cpu"}, est: busyGPU, def: noDef,
			check: func(t *testing.T, s submission) {
				if s.ideal != "cpu" || s.partitions[0] != "cpu" || s.migrate {
					t.Errorf("got %v ideal %s migrate %v, want cpu, no move", s.partitions, s.ideal, s.migrate)
				}
				wantText(t, s.reason, "--partition-ideal cpu")
			}},
		{name: "estimate: --partition-ideal busy, immediate: start on an allowed idle partition",
			req: placeRequest{policy: "immediate", ideal: "gpu", fallback: "scavenger"}, est: busyGPU, def: noDef,
			check: func(t *testing.T, s submission) {
				if s.ideal != "gpu" || s.partitions[0] != "scavenger" || !s.migrate || strings.Join(s.fallbacks, ",") != "scavenger" {
					t.Errorf("got %v ideal %s fallbacks %v migrate %v, want scavenger to gpu", s.partitions, s.ideal, s.fallbacks, s.migrate)
				}
				wantText(t, s.reason, "--partition-ideal gpu is busy; scavenger is idle now")
			}},
		{name: "estimate: both ends named and --no-migrate",
			req: placeRequest{policy: "immediate", ideal: "gpu", fallback: "scavenger", noMigrate: true}, est: busyGPU, def: noDef,
			check: func(t *testing.T, s submission) {
				if s.migrate {
					t.Errorf("migrate with --no-migrate")
				}
			}},
		{name: "estimate: flags over the estimate, ideal keeps its own time when the job starts elsewhere",
			req: placeRequest{policy: "auto", time: "1:00:00", mem: "3G", cpus: 3, totalIters: 7}, est: busyGPU, def: noDef,
			check: func(t *testing.T, s submission) {
				if s.timeLimit != time.Hour || s.memMiB != 3072 || s.cpus != 3 || s.totalIters != 7 {
					t.Errorf("got time %v mem %d cpus %d iters %d", s.timeLimit, s.memMiB, s.cpus, s.totalIters)
				}
				if s.idealTime == time.Hour {
					t.Errorf("ideal time %v: want the estimate's for gpu", s.idealTime)
				}
			}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			tt.req.pol = pol(tt.req.policy)
			s, err := place(tt.req, tt.est, placeCluster{defaultPartition: tt.def}, now)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("error %v, want %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if tt.check != nil {
				tt.check(t, s)
				return
			}
			got := want{parts: strings.Join(s.partitions, ","), ideal: s.ideal, fallbacks: strings.Join(s.fallbacks, ","), migrate: s.migrate,
				gres: s.gres, idealGres: s.idealGres, cpus: s.cpus, memMiB: s.memMiB, time: s.timeLimit, idealTime: s.idealTime, iters: s.totalIters}
			if got != tt.want {
				t.Errorf("got  %+v\nwant %+v", got, tt.want)
			}
		})
	}
}

// wantStart checks that s asks for what the estimate's row on its first
// partition needs.
func wantStart(t *testing.T, s submission, est *placeEstimate) {
	t.Helper()
	var start *plan.Option
	for _, o := range est.plans.Options {
		if o.Partition.Name == s.partitions[0] {
			start = o
			break
		}
	}
	if start == nil {
		t.Fatalf("start %s is not among the options", s.partitions[0])
	}
	r := start.Row
	if s.gres != r.NodeType.GresOne() || s.cpus != r.NodeType.JobCPUs() || s.totalIters != r.Iters || s.memMiB <= 0 || s.timeLimit != plan.TimeLimit(r.Run(), start.Partition) {
		t.Errorf("got gres %q cpus %d iters %d mem %d time %v; want the row's (%q, %d, %d, %v)",
			s.gres, s.cpus, s.totalIters, s.memMiB, s.timeLimit, r.NodeType.GresOne(), r.NodeType.JobCPUs(), r.Iters, plan.TimeLimit(r.Run(), start.Partition))
	}
	wantText(t, s.note, fmt.Sprintf("estimate: batch 32 on %s", r.NodeType.Name))
	if s.modelKey != est.modelKey || s.batch != 32 || s.source != "test" || s.reason == "" {
		t.Errorf("model %q batch %d source %q reason %q", s.modelKey, s.batch, s.source, s.reason)
	}
}

func wantText(t *testing.T, got, want string) {
	t.Helper()
	if !strings.Contains(got, want) {
		t.Errorf("%q does not say %q", got, want)
	}
}

func TestCeilMiB(t *testing.T) {
	t.Parallel()
	for b, want := range map[int64]int64{0: 0, 1: 1, 1 << 20: 1, 1<<20 + 1: 2, 542*(1<<20) + 300*1024: 543} {
		if got := ceilMiB(b); got != want {
			t.Errorf("ceilMiB(%d) = %d, want %d", b, got, want)
		}
	}
}

// TestMemMiB: a --mem in KiB rounds up to whole MiB, never down.
func TestMemMiB(t *testing.T) {
	t.Parallel()
	for s, want := range map[string]int64{"1K": 1, "1024K": 1, "1025K": 2, "1500K": 2, "500": 500, "500M": 500, "2G": 2048, "1T": 1 << 20} {
		if got := memMiB(s); got != want {
			t.Errorf("memMiB(%q) = %d, want %d", s, got, want)
		}
	}
}
