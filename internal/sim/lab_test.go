package sim

import (
	"path/filepath"
	"slices"
	"testing"

	"github.com/isched/isched/internal/coordconfig"
)

// labReplayConfig is the simulation of the lab replay (issue 29 item 5,
// internal/e2e TestLabReplay): examples/site-lab.json under the policy of
// examples/coordinator-labreplay.json, with the lab's constants.
func labReplayConfig(t *testing.T) (Config, []Job) {
	t.Helper()
	root := "../.."
	site := siteFile(t, filepath.Join(root, "examples/site-lab.json"))
	pol, err := coordconfig.LoadPolicy(filepath.Join(root, "examples/coordinator-labreplay.json"))
	if err != nil {
		t.Fatal(err)
	}
	tr, err := ReadSacct("trace-lab.sacct", open(t, filepath.Join(root, "examples/trace-lab.sacct")))
	if err != nil {
		t.Fatal(err)
	}
	cfg := LabConfig(site, &pol)
	return cfg, tr
}

// TestLabTrace: in the simulation of the lab replay, isched starts the
// one-GPU jobs that find gpu full on cpu and moves them when gpu frees,
// sooner on average than Slurm alone; the jobs isched does not plan are
// not delayed.
func TestLabTrace(t *testing.T) {
	t.Parallel()
	cfg, tr := labReplayConfig(t)
	res := map[string]*Result{}
	for _, v := range Variants[:2] {
		cfg.Variant = v
		r, err := Run(cfg, tr)
		if err != nil {
			t.Fatal(err)
		}
		res[v.Name] = r
		for _, j := range r.Jobs {
			t.Logf("%s: job %d isched=%v JCT %.0f s wait %.0f s path %v", v.Name, j.ID, j.Managed, j.JCT, j.Wait, j.Path)
		}
	}
	is, sl := res["isched"], res["slurm"]
	var moved []int
	for _, j := range is.Jobs {
		if len(j.Path) > 1 && j.Path[0].Partition == "cpu" && j.Path[len(j.Path)-1].Partition == "gpu" {
			moved = append(moved, j.ID)
		}
	}
	// 3 and 4 onto one freed node (the second onto its partly used
	// room), 7 once a GPU frees that no pending job takes first (a round
	// deciding before Slurm's pass kept it on cpu for a minute more)
	if !slices.Equal(moved, []int{3, 4, 7}) {
		t.Errorf("jobs moved cpu -> gpu: %v, want [3 4 7]", moved)
	}
	for _, j := range is.Jobs {
		if j.ID == 7 && (len(j.Path) < 2 || j.Path[1].At > 260) {
			t.Errorf("job 7 moved at %v, want by 260 s (the lab: 253 s), when job 3's GPU frees", j.Path)
		}
	}
	if a, b := Summarize(is).MeanJCT, Summarize(sl).MeanJCT; a >= b {
		t.Errorf("mean JCT isched %.4f h, Slurm alone %.4f h: want isched lower", a, b)
	}
	if a, b := Summarize(is).OtherWait, Summarize(sl).OtherWait; a > b {
		t.Errorf("untouched jobs wait %.4f h with isched, %.4f h without", a, b)
	}
}
