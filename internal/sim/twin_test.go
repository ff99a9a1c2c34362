package sim

import (
	"testing"

	"github.com/isched/isched/internal/lifecycle"
)

// keepRun replays jobs on the tiny site's gpu and cpu partitions with every one-device job adopted
// and returns the finished replay, for its jobs' and twins' states.
func keepRun(t *testing.T, v Variant, jobs []Job, sched Sched) *sim {
	t.Helper()
	cfg := DefaultConfig(tinySite(t))
	cfg.Site.Partitions = cfg.Site.Partitions[:2] // gpu, and cpu 5× slower
	cfg.Variant, cfg.Adoption, cfg.Seed, cfg.Sched = v, 1, 1, sched
	s, err := newSim(cfg, jobs)
	if err != nil {
		t.Fatal(err)
	}
	s.loop()
	if s.refused != nil {
		t.Fatal(s.refused)
	}
	return s
}

// noTwinLeft: every twin is gone and every node is free once the replay
// has drained.
func noTwinLeft(t *testing.T, s *sim) {
	t.Helper()
	for i := s.nJobs; i < len(s.jobs); i++ {
		if st := s.jobs[i].state; st == stPending || st == stRunning {
			t.Errorf("the twin of job %d is left behind (state %d)", s.jobs[i].j.ID, st)
		}
	}
	for ni := range s.cl.nodes {
		if n := &s.cl.nodes[ni]; len(n.jobs) > 0 || n.freeGPU != n.gpus {
			t.Errorf("node %d still holds jobs %v", ni, n.jobs)
		}
	}
	for i := range s.nJobs {
		if js := &s.jobs[i]; js.managed && js.phase != lifecycle.Ended {
			t.Errorf("job %d ends in phase %s", js.j.ID, js.phase)
		}
	}
}

// TestKeepPlaceInReplay: job 2 starts on the CPU node (5× slower) while
// a 2-GPU job holds the GPU node for 2 h; job 3, a 2-GPU job submitted
// after it, waits for the GPU node too. Without rule 10, job 3 takes the
// node when it frees and job 2 moves there only when job 3 ends; with
// it, job 2's twin has waited longer than job 3, starts first, and job 2
// resumes there from the handover's checkpoint. Both of Slurm's models.
func TestKeepPlaceInReplay(t *testing.T) {
	t.Parallel()
	jobs := []Job{
		{ID: 1, User: "a", Submit: 0, Nodes: 1, CPUs: 4, GPUs: 2, Run: 7200, Limit: 7200, Partition: "gpu"},
		{ID: 2, User: "b", Submit: 60, Nodes: 1, CPUs: 4, GPUs: 1, Run: 3 * 3600, Partition: "gpu"},
		{ID: 3, User: "c", Submit: 600, Nodes: 1, CPUs: 4, GPUs: 2, Run: 7200, Limit: 7200, Partition: "gpu"},
	}
	keep := Variant{Name: "isched+keep", Isched: true, KeepPlace: true}
	for name, sched := range map[string]Sched{"EASY": {}, "multifactor": SlurmSched()} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			base := keepRun(t, isched, jobs, sched).result().Jobs
			s := keepRun(t, keep, jobs, sched)
			got := s.result().Jobs
			if p := base[1].Path; len(p) != 2 || p[1].At < base[2].Submit+base[2].Wait {
				t.Fatalf("without rule 10 job 2's attempts %+v: it should reach gpu after job 3 started", p)
			}
			r := got[1]
			if r.Twins != 1 || r.Handovers != 1 || r.Moves != 1 || !r.Done || len(r.Path) != 2 {
				t.Fatalf("job 2 with rule 10: %+v; want one twin, one handover, done in two attempts", r)
			}
			if hop := r.Path[1]; hop.Partition != "gpu" || hop.At > 7200+60 || hop.At >= got[2].Submit+got[2].Wait {
				t.Errorf("job 2 reached gpu at %g s (%s), job 3 started at %g s: the twin must start first, at the 2 h mark",
					hop.At, hop.Partition, got[2].Submit+got[2].Wait)
			}
			js := &s.jobs[1]
			if js.step0 != js.ckptReqStep || js.lost > 7 { // 5 s steps on cpu: the 30 s checkpoint's
				t.Errorf("job 2 resumed at step %d, the handover's checkpoint was at %d; %d steps lost", js.step0, js.ckptReqStep, js.lost)
			}
			if r.JCT >= base[1].JCT {
				t.Errorf("job 2's completion %g s with rule 10, not below %g s without", r.JCT, base[1].JCT)
			}
			if idle := s.twinIdle; idle != 30 {
				t.Errorf("the twin's GPU idled %g s during the handover, want the 30 s checkpoint", idle)
			}
			noTwinLeft(t, s)
		})
	}
}

// TestTwinCancelledWhenRunEndsElsewhere: a run that finishes on the CPU
// node before the GPU node frees leaves no twin behind, and the job that
// held the GPU node is not disturbed.
func TestTwinCancelledWhenRunEndsElsewhere(t *testing.T) {
	t.Parallel()
	jobs := []Job{
		{ID: 1, User: "a", Submit: 0, Nodes: 1, CPUs: 4, GPUs: 2, Run: 10 * 3600, Limit: 10 * 3600, Partition: "gpu"},
		{ID: 2, User: "b", Submit: 60, Nodes: 1, CPUs: 4, GPUs: 1, Run: 900, Partition: "gpu"},
	}
	s := keepRun(t, Variant{Name: "isched+keep", Isched: true, KeepPlace: true}, jobs, SlurmSched())
	got := s.result().Jobs
	if r := got[1]; r.Twins != 1 || r.Handovers != 0 || !r.Done || len(r.Path) != 1 || r.Path[0].Partition != "cpu" {
		t.Errorf("job 2: %+v; want a twin kept, no handover, done on cpu", r)
	}
	if r := got[0]; r.Attempts != 1 || r.Wait != 0 {
		t.Errorf("job 1: %+v", r)
	}
	noTwinLeft(t, s)
}
