//go:build integration && labreplay

package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/isched/isched/internal/coordconfig"
	"github.com/isched/isched/internal/plan"
	"github.com/isched/isched/internal/report"
	"github.com/isched/isched/internal/sim"
	"github.com/isched/isched/internal/testutil"
)

// TestLabReplay is issue 29's item 5: the same small trace
// (examples/trace-lab.sacct) replayed on the lab cluster, with the real
// agent, coordinator and wrappers running fake trainers whose step time
// follows the catalogue speed of where they run, and in the simulation
// (internal/sim) with the same policy and the lab's constants. Both plan
// isched's submissions with sim.PlanSubmission (the planner, on the
// agent's snapshot in Redis here). It prints a row per job and fails when
// the median completion time differs by more than 10 % or fewer than two
// thirds of isched's jobs go through the same partitions.
//
// It is not part of make test (it owns the lab for about 8 minutes):
// make bench-lab-replay runs it and writes bin/bench-lab/replay.txt.
func TestLabReplay(t *testing.T) {
	testutil.OwnLab(t)
	root := testutil.RepoRoot()
	site := readSite(t, filepath.Join(root, "examples/site-lab.json"))
	traceFile := "examples/trace-lab.sacct"
	if f := os.Getenv("ISCHED_LABREPLAY_TRACE"); f != "" {
		traceFile = f
	}
	trace := readSacctTrace(t, filepath.Join(root, traceFile))
	variant := labVariant(t, os.Getenv("ISCHED_LABREPLAY_VARIANT"))
	policyJSON := policyOf(t, filepath.Join(root, "examples/coordinator-labreplay.json"))
	if variant.KeepPlace {
		policyJSON = withKeepPlace(t, policyJSON)
	}
	// the agent submits twins of root's jobs (the replay's jobs are root's)
	w := newWorldWith(t, policyJSON, testutil.NeedRedis, &world{cluster: fmt.Sprintf("e2e%d", time.Now().UnixNano()%1e9),
		agentArgs: []string{"-allow-root-submit"}})
	pol, err := coordconfig.LoadPolicy(w.config) // the running coordinator's
	if err != nil {
		t.Fatal(err)
	}
	cfg := sim.LabConfig(site, &pol)
	cfg.Variant = variant
	cfg.CkptDur = labConstant(t, "CKPT", cfg.CkptDur)
	cfg.Start = labConstant(t, "START", cfg.Start)
	cfg.Restart = labConstant(t, "RESTART", cfg.Restart)

	lab := replayOnLab(t, w, cfg, trace)
	res, err := sim.Run(cfg, trace)
	if err != nil {
		t.Fatal(err)
	}
	v, err := sim.Validate(lab, res)
	if err != nil {
		t.Fatal(err)
	}
	var b strings.Builder
	fmt.Fprintf(&b, "lab replay of %s (%d jobs, %s), %s\nsimulation: tick %gs, poll %gs, step %gs, checkpoint every %gs, checkpoint lands in %gs, start-up %gs, restart %gs\n\n",
		traceFile, len(trace), cfg.Variant.Name, time.Now().UTC().Format(time.RFC3339), cfg.Tick, cfg.Poll, cfg.StepSeconds, cfg.CkptEvery, cfg.CkptDur, cfg.Start, cfg.Restart)
	if err := sim.WriteValidation(&b, v); err != nil {
		t.Fatal(err)
	}
	t.Log("\n" + b.String())
	if out := os.Getenv("ISCHED_LABREPLAY_OUT"); out != "" {
		if !filepath.IsAbs(out) {
			out = filepath.Join(root, out)
		}
		if err := os.WriteFile(out, []byte(b.String()), 0o644); err != nil {
			t.Error(err)
		}
	}
	if v.MedianErr > 0.10 {
		t.Errorf("median completion time error %.1f%%, want at most 10%%", 100*v.MedianErr)
	}
	if 3*v.SamePaths < 2*v.IschedJobs { // (none in the slurm variant)
		t.Errorf("%d of %d isched jobs went through the same partitions, want at least two thirds", v.SamePaths, v.IschedJobs)
	}
}

// labVariant is the replay's variant named by ISCHED_LABREPLAY_VARIANT:
// isched (the default), slurm (every job where its user asked) or
// isched+keep (rule 10: twins keep the runs' places, keep_place on).
func labVariant(t *testing.T, name string) sim.Variant {
	t.Helper()
	if name == "" {
		name = "isched"
	}
	for _, v := range sim.Variants {
		if v.Name == name && (name == "isched" || name == "slurm" || name == "isched+keep") {
			return v
		}
	}
	t.Fatalf("ISCHED_LABREPLAY_VARIANT=%q: want isched, slurm or isched+keep", name)
	return sim.Variant{}
}

// withKeepPlace is a policy object with keep_place on.
func withKeepPlace(t *testing.T, policyJSON string) string {
	t.Helper()
	var m map[string]any
	if err := json.Unmarshal([]byte(policyJSON), &m); err != nil {
		t.Fatal(err)
	}
	m["keep_place"] = true
	b, err := json.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// policyOf is the policy object of a coordinator config file.
func policyOf(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var c struct{ Policy json.RawMessage }
	if err := json.Unmarshal(b, &c); err != nil || len(c.Policy) == 0 {
		t.Fatalf("%s: no policy object (%v)", path, err)
	}
	return string(c.Policy)
}

// labConstant is $ISCHED_LABREPLAY_<name> seconds, else def: the
// simulation's lab delays, to see how the comparison depends on them.
func labConstant(t *testing.T, name string, def float64) float64 {
	s := os.Getenv("ISCHED_LABREPLAY_" + name)
	if s == "" {
		return def
	}
	f, err := strconv.ParseFloat(s, 64)
	if err != nil || f < 0 {
		t.Fatalf("ISCHED_LABREPLAY_%s=%q: want seconds", name, s)
	}
	return f
}

func readSite(t *testing.T, path string) *plan.Site {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	s, err := plan.DecodeSite(b)
	if err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	return s
}

func readSacctTrace(t *testing.T, path string) []sim.Job {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	tr, err := sim.ReadSacct(path, f)
	if err != nil {
		t.Fatal(err)
	}
	return tr
}

// labJob is a trace job submitted to the lab.
type labJob struct {
	j       *sim.Job
	id      string
	lineage string // "" for a job isched did not plan
	submit  time.Time
}

// replayOnLab submits trace at its times from now on, isched's jobs as
// sim.PlanSubmission places them on the agent's view of the lab, the
// others where their users asked, and returns how each went.
func replayOnLab(t *testing.T, w *world, cfg sim.Config, trace []sim.Job) []sim.Observed {
	t0 := time.Now().Add(2 * time.Second)
	waitFor(t, w, 30*time.Second, "the agent's first snapshot", func() bool { _, ok := w.snapshot(); return ok })
	var jobs []labJob
	for k := range trace {
		j := &trace[k]
		time.Sleep(time.Until(t0.Add(secDuration(j.Submit))))
		lj := labJob{j: j, submit: time.Now()}
		if cfg.Variant.Isched && j.Nodes == 1 && j.GPUs == 1 {
			lj.id, lj.lineage = submitPlanned(t, w, cfg, j)
		} else {
			lj.id = submitAsAsked(t, w, cfg, j)
		}
		t.Logf("%5.1fs job %d (%s) submitted as %s", time.Since(t0).Seconds(), j.ID, orDash(lj.lineage), lj.id)
		jobs = append(jobs, lj)
	}
	out := make([]sim.Observed, len(jobs))
	for i, lj := range jobs {
		out[i] = observeOnLab(t, w, t0, lj)
	}
	return out
}

// submitPlanned submits j through isched's planner: the agent's snapshot
// and job table, the coordinator's predicted ends, sim.PlanSubmission; a
// fake trainer of j's steps whose step takes the catalogue's time on the
// node type it lands on.
func submitPlanned(t *testing.T, w *world, cfg sim.Config, j *sim.Job) (id, lineage string) {
	r, ok := cfg.RunSpec(j)
	if !ok {
		t.Fatalf("job %d: partition %q is not in the site", j.ID, j.Partition)
	}
	site := cfg.PlannerSite()
	sub, err := sim.PlanSubmission(site, labState(t, w), r, cfg.Variant.Policy, time.Now())
	if err != nil {
		t.Fatalf("job %d: plan: %v", j.ID, err)
	}
	lineage = fmt.Sprintf("lr%d-%d", time.Now().UnixNano()%1e6, j.ID)
	sub.Plan.Lineage, sub.Plan.Model = lineage, "trace"
	cpuT, gpuT := site.NodeType("lab-cpu"), site.NodeType("lab-gpu")
	cpuSpeed, gpuSpeed := site.Throughput(cpuT, plan.PrecFP32), site.Throughput(gpuT, plan.PrecFP32)
	args := []string{"-p", strings.Join(sub.Partitions, ","), "-c", strconv.Itoa(sub.CPUs), "-t", slurmMinutes(sub.Limit)}
	if sub.Gres != "" {
		args = append(args, "--gres="+sub.Gres)
	}
	// in the script, so that the agent can submit it again as a twin
	job := w.submitTrainerWith(trainOpts{InScript: cfg.Variant.KeepPlace}, sub.Plan, args, "--steps", strconv.FormatInt(r.Total, 10),
		"--period", strconv.FormatFloat(r.Work/cpuSpeed, 'f', 4, 64), "--gpu-speedup", strconv.FormatFloat(gpuSpeed/cpuSpeed, 'f', 3, 64),
		"--ckpt-every", strconv.FormatInt(int64(cfg.CkptEvery/cfg.StepSeconds), 10))
	t.Logf("job %d planned on %s (ideal %s, migrate %v, %s CPUs %d, limit %s)", j.ID, strings.Join(sub.Partitions, ","), sub.Plan.Ideal,
		sub.Plan.Migrate, orDash(sub.Gres), sub.CPUs, sub.Limit)
	return job.id, lineage
}

// submitAsAsked submits j where its user asked: a job that sleeps its run.
func submitAsAsked(t *testing.T, w *world, cfg sim.Config, j *sim.Job) string {
	ps := cfg.Site.Partition(j.Partition)
	if ps == nil {
		t.Fatalf("job %d: partition %q is not in the site", j.ID, j.Partition)
	}
	limit := plan.TimeLimit(secDuration(j.Run), ps)
	args := []string{"-J", "isched-e2e-trace-" + strconv.Itoa(j.ID), "-p", j.Partition, "-N", strconv.Itoa(j.Nodes),
		"-c", strconv.Itoa(j.CPUs), "-t", slurmMinutes(limit), "--mem=100M", "-o", "/dev/null"}
	if j.GPUs > 0 {
		args = append(args, "--gres=gpu:"+strconv.Itoa(j.GPUs))
	}
	return w.sbatch(append(args, "--wrap", fmt.Sprintf("sleep %.1f", j.Run))...)
}

// labState is what `isched submit` reads of the cluster: the agent's
// snapshot and job table, and the coordinator's predicted end of each
// running isched job.
func labState(t *testing.T, w *world) plan.ClusterState {
	c, err := w.client("coordinator")
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ctx := context.Background()
	read := func(key string) *report.Envelope {
		b, err := c.Get(ctx, key)
		if err != nil {
			t.Fatalf("%s: %v", key, err)
		}
		env, err := report.DecodeTable(b)
		if err != nil {
			t.Fatalf("%s: %v", key, err)
		}
		return env
	}
	cs := plan.ClusterState{Snapshot: read(c.Keys().Snapshot()).Snapshot, Jobs: read(c.Keys().Jobs()).Jobs, PredictedEnd: map[uint64]time.Time{}}
	for _, j := range cs.Jobs.Jobs {
		p, ok, err := report.ParsePlanComment(j.Comment)
		if j.State != "RUNNING" || !ok || err != nil {
			continue
		}
		if st, ok := w.status(p.Lineage); ok && st.JobID == j.JobID && st.ETAMS > 0 {
			cs.PredictedEnd[j.JobID] = time.UnixMilli(st.ETAMS)
		}
	}
	return cs
}

// observeOnLab waits for lj to end and returns how it went, in seconds
// from t0: an isched job's attempts from the coordinator's history, the
// end from Slurm's accounting.
func observeOnLab(t *testing.T, w *world, t0 time.Time, lj labJob) sim.Observed {
	o := sim.Observed{ID: lj.j.ID, Submit: lj.submit.Sub(t0).Seconds()}
	var acct map[string]string
	last := lj.id
	if lj.lineage != "" { // a twin that took over ends the run
		st := w.endedStatus(lj.lineage, 15*time.Minute)
		last = strconv.FormatUint(st.JobID, 10)
	}
	waitFor(t, w, 15*time.Minute, "job "+last+" to end in Slurm's accounting", func() bool {
		acct = sacctJob(last)
		return acct["State"] == "COMPLETED" || strings.HasPrefix(acct["State"], "FAILED") || strings.HasPrefix(acct["State"], "CANCELLED") || acct["State"] == "TIMEOUT"
	})
	if acct["State"] != "COMPLETED" {
		t.Errorf("job %d (%s) ended %s", lj.j.ID, last, acct["State"])
	}
	end := slurmTime(t, acct["End"])
	if lj.lineage == "" {
		start := slurmTime(t, acct["Start"])
		o.Path = []sim.Hop{{At: start.Sub(t0).Seconds(), Partition: acct["Partition"]}}
	} else {
		st := w.endedStatus(lj.lineage, 2*time.Minute)
		for _, s := range st.History {
			o.Path = append(o.Path, sim.Hop{At: time.UnixMilli(s.StartMS).Sub(t0).Seconds(), Partition: s.Partition})
		}
	}
	if len(o.Path) > 0 {
		o.Wait = max(0, o.Path[0].At-o.Submit) // Slurm's accounting counts whole seconds
	}
	o.JCT = end.Sub(lj.submit).Seconds()
	return o
}

// sacctJob is a job's allocation line in Slurm's accounting.
func sacctJob(id string) map[string]string {
	fields := []string{"State", "Start", "End", "Partition"}
	out, err := exec.Command("sacct", "-X", "-n", "-P", "-j", id, "-o", strings.Join(fields, ",")).Output()
	m := map[string]string{}
	if err != nil {
		return m
	}
	line := strings.TrimSpace(strings.Split(string(out), "\n")[0])
	for k, v := range strings.Split(line, "|") {
		if k < len(fields) {
			m[fields[k]] = v
		}
	}
	return m
}

// slurmTime reads Slurm's local time to the second.
func slurmTime(t *testing.T, s string) time.Time {
	t.Helper()
	tm, err := time.ParseInLocation("2006-01-02T15:04:05", s, time.Local)
	if err != nil {
		t.Fatalf("Slurm time %q: %v", s, err)
	}
	return tm
}

func slurmMinutes(d time.Duration) string {
	return strconv.Itoa(int(math.Ceil(d.Minutes())))
}

func secDuration(s float64) time.Duration { return time.Duration(s * float64(time.Second)) }

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}
