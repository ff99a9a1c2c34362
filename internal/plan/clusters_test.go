package plan

import (
	"strings"
	"testing"
	"time"
)

func TestAddCluster(t *testing.T) {
	t.Parallel()
	site := mustSite(t, "../../examples/site-lab.json")
	if err := site.AddCluster("lab2", mustSite(t, "../../examples/site-lab2.json")); err != nil {
		t.Fatal(err)
	}
	if n := len(site.NodeTypes); n != 4 {
		t.Errorf("%d node types, want lab's 4 (lab2's are lab's by name)", n)
	}
	ps := site.Partition("gpu@lab2")
	if ps == nil || ps.cluster != "lab2" || ps.SlurmName() != "gpu" || ps.Nodes != "l2gpu1" {
		t.Fatalf("gpu@lab2: %+v", ps)
	}
	if home := site.Partition("gpu"); home == nil || home.cluster != "" || home.SlurmName() != "gpu" {
		t.Fatalf("lab's gpu: %+v", home)
	}

	bad := []struct {
		name    string
		cluster string
		edit    func(*Site)
		want    string
	}{
		{"a node type of the same name, other hardware", "lab2", func(o *Site) { o.NodeTypes[1].GPUsPerNode = 8 }, `node type "lab-gpu" differs`},
		{"the same name at another rate", "lab2", func(o *Site) { o.NodeTypes[0].CostPerNodeHour *= 2 }, "cost_factor"},
		{"no cluster name", "", func(*Site) {}, "needs the cluster's name"},
		{"the same cluster twice", "lab2", nil, "partition cpu@lab2 is in the catalogue twice"},
	}
	for _, tt := range bad {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			home := mustSite(t, "../../examples/site-lab.json")
			other := mustSite(t, "../../examples/site-lab2.json")
			if tt.edit == nil {
				if err := home.AddCluster(tt.cluster, mustSite(t, "../../examples/site-lab2.json")); err != nil {
					t.Fatal(err)
				}
			} else {
				tt.edit(other)
			}
			err := home.AddCluster(tt.cluster, other)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("AddCluster: %v, want an error containing %q", err, tt.want)
			}
		})
	}
}

// A job moves by requeue, so a migration plan never crosses clusters: with
// lab's gpu busy for 3 h and lab2's for 1 h, the plan that starts on an idle
// partition moves to the gpu of the cluster it started on.
func TestNoMigrationAcrossClusters(t *testing.T) {
	t.Parallel()
	site := mustSite(t, "../../examples/site-lab.json")
	if err := site.AddCluster("lab2", mustSite(t, "../../examples/site-lab2.json")); err != nil {
		t.Fatal(err)
	}
	m := &Model{V: 1, Name: "net", Parameters: 1e6, TrainableParameters: 1e6, ParamBytes: 4,
		ActivationBytesPerSample: 1 << 20, FLOPsPerSample: 1e9, InputShape: []int{3, 32, 32}}
	rows, err := site.Estimate(Request{Model: m, Training: Training{"sgd", PrecFP32}, Samples: 10000, Epochs: 48, Batches: []int{32}})
	if err != nil {
		t.Fatal(err)
	}
	ov := DefaultMigrationOverhead
	tests := []struct {
		name    string
		waits   map[string]time.Duration // absent: idle
		with    string
		without string
	}{
		{"only lab's dev is idle: no move to lab2's sooner gpu", map[string]time.Duration{"gpu": 3 * time.Hour, "gpu-dev": 4 * time.Hour, "cpu": time.Hour,
			"scavenger": 5 * time.Hour, "gpu@lab2": time.Hour, "cpu@lab2": time.Hour}, "dev>gpu", "gpu@lab2"},
		{"lab2's cpu idle too: start there, move to lab2's gpu", map[string]time.Duration{"gpu": 3 * time.Hour, "gpu-dev": 4 * time.Hour, "cpu": time.Hour,
			"scavenger": 5 * time.Hour, "gpu@lab2": time.Hour}, "cpu@lab2>gpu@lab2", "gpu@lab2"},
		{"lab2's gpu idle: go there", map[string]time.Duration{"gpu": 3 * time.Hour, "gpu-dev": 4 * time.Hour, "scavenger": 5 * time.Hour, "dev": time.Hour, "cpu": time.Hour},
			"", "gpu@lab2"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			p := MakePlans(32, Options(rows, waitsOf(tt.waits), ov), ov)
			got := ""
			if p.With != nil {
				got = p.With.From.Partition.Name + ">" + p.With.To.Partition.Name
			}
			if got != tt.with || name(p.Without) != tt.without {
				t.Errorf("with migration %q, without %s; want %q, %s", got, name(p.Without), tt.with, tt.without)
			}
		})
	}
}
