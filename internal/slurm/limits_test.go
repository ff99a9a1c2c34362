package slurm

import (
	"context"
	"os"
	"reflect"
	"strings"
	"testing"

	"github.com/isched/isched/internal/report"
)

// The captures: sacctmgr of Debian's slurmdbd 22.05.8 over MariaDB 10.11
// with QOS capped (MaxTRESPerUser=cpu=2 MaxJobsPerUser=2) and gpulimit
// (MaxTRESPerUser=cpu=8,mem=16G,node=2 MaxJobsPerUser=4 GrpTRES=cpu=20
// MaxSubmitJobsPerUser=10 MaxTRES=cpu=4), bob's association with
// GrpTRES=cpu=6,mem=8000 MaxJobs=5 GrpJobs=7 (testdata/README.md).
func TestParseQOSCaptured(t *testing.T) {
	b, err := os.ReadFile("testdata/22.05/sacctmgr-qos.txt")
	if err != nil {
		t.Fatal(err)
	}
	got, err := ParseQOS(b)
	if err != nil {
		t.Fatal(err)
	}
	want := []QOS{
		{Name: "normal"},
		{Name: "capped", MaxTRESPerUser: map[string]int64{"cpu": 2}, MaxJobsPerUser: 2},
		{Name: "gpulimit", MaxTRESPerUser: map[string]int64{"cpu": 8, "mem": 16 << 10, "node": 2}, MaxJobsPerUser: 4},
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("ParseQOS:\n got %+v\nwant %+v", got, want)
	}
}

func TestParseAssociationsCaptured(t *testing.T) {
	b, err := os.ReadFile("testdata/22.05/sacctmgr-assoc.txt")
	if err != nil {
		t.Fatal(err)
	}
	got, err := ParseAssociations(b)
	if err != nil {
		t.Fatal(err)
	}
	// the accounts' own rows (root, research) have no user
	want := []Association{
		{Cluster: "lab", Account: "root", QOS: []string{"normal"}},
		{Cluster: "lab", Account: "root", User: "root", QOS: []string{"normal"}},
		{Cluster: "lab", Account: "research", QOS: []string{"normal"}},
		{Cluster: "lab", Account: "research", User: "alice", QOS: []string{"capped", "normal"}, DefaultQOS: "normal"},
		{Cluster: "lab", Account: "research", User: "bob", QOS: []string{"capped", "gpulimit", "normal"}, DefaultQOS: "capped",
			GrpTRES: map[string]int64{"cpu": 6, "mem": 8000}, MaxJobs: 5, GrpJobs: 7},
		{Cluster: "lab", Account: "research", User: "root", QOS: []string{"normal"}},
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("ParseAssociations:\n got %+v\nwant %+v", got, want)
	}
}

// TestAccountQuotaCaptured: a quota on account physics's own row
// (GrpTRES=gres/gpu=1,cpu=8, captured on the lab) becomes a limit of each
// of its users (alice, bob, root), counting every user's running jobs in
// the account: alice's
// GPU job holds the account's one GPU, so bob is at the quota too.
// Research sets none: its users get no account limit.
func TestAccountQuotaCaptured(t *testing.T) {
	b, err := os.ReadFile("testdata/22.05/sacctmgr-assoc-account.txt")
	if err != nil {
		t.Fatal(err)
	}
	assocs, err := ParseAssociations(b)
	if err != nil {
		t.Fatal(err)
	}
	jobs := []report.Job{
		{User: "alice", Account: "physics", QOS: "normal", State: "RUNNING", CPUs: 2, Gres: "gpu:1", Partition: "gpu"},
		{User: "bob", Account: "physics", QOS: "normal", State: "RUNNING", CPUs: 3, Partition: "cpu"},
		{User: "bob", Account: "physics", QOS: "normal", State: "PENDING", CPUs: 2, Gres: "gpu:1", Partition: "gpu"},
		{User: "alice", Account: "research", QOS: "normal", State: "RUNNING", CPUs: 4, Gres: "gpu:2", Partition: "gpu"},
	}
	got := BuildLimits("lab", nil, assocs, jobs)
	want := []report.UserLimit{
		{User: "alice", Account: "physics", Resource: "cpu", Max: 8, Used: 5, Reason: "AssocGrpCpuLimit"},
		{User: "alice", Account: "physics", Resource: "gpu", Max: 1, Used: 1, Reason: "AssocGrpGRES"},
		{User: "bob", Account: "physics", Resource: "cpu", Max: 8, Used: 5, Reason: "AssocGrpCpuLimit"},
		{User: "bob", Account: "physics", Resource: "gpu", Max: 1, Used: 1, Reason: "AssocGrpGRES"},
		{User: "root", Account: "physics", Resource: "cpu", Max: 8, Used: 5, Reason: "AssocGrpCpuLimit"},
		{User: "root", Account: "physics", Resource: "gpu", Max: 1, Used: 1, Reason: "AssocGrpGRES"},
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("BuildLimits:\n got %+v\nwant %+v", got, want)
	}
	for i := range got {
		if err := got[i].Validate(); err != nil {
			t.Errorf("limit %d: %v", i, err)
		}
	}
}

func TestParseLimitsErrorsNameTheLine(t *testing.T) {
	for _, c := range []struct {
		name, in, want string
		parse          func([]byte) error
	}{
		{"qos fields", "normal||||\n", "sacctmgr show qos line 1: 5 fields, want 6", func(b []byte) error { _, err := ParseQOS(b); return err }},
		{"qos tres", "normal|||||\nx|cpu=two||||\n", `line 2: MaxTRESPU: TRES "cpu=two": want a count`, func(b []byte) error { _, err := ParseQOS(b); return err }},
		{"assoc jobs", "lab|a|u||normal|||-1|\n", `sacctmgr show assoc line 1: MaxJobs: want a count, got "-1"`, func(b []byte) error { _, err := ParseAssociations(b); return err }},
	} {
		if err := c.parse([]byte(c.in)); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: error %v, want %q", c.name, err, c.want)
		}
	}
}

func TestParseTRES(t *testing.T) {
	for in, want := range map[string]map[string]int64{
		"":                                nil,
		"cpu=8":                           {"cpu": 8},
		"cpu=8,gres/gpu=2,mem=16G,node=2": {"cpu": 8, "gres/gpu": 2, "mem": 16384, "node": 2},
		"mem=8000M":                       {"mem": 8000},
		"mem=1T,gres/gpu:a100=1":          {"mem": 1 << 20, "gres/gpu:a100": 1},
	} {
		got, err := ParseTRES(in)
		if err != nil || !reflect.DeepEqual(got, want) {
			t.Errorf("ParseTRES(%q) = %v, %v; want %v", in, got, err, want)
		}
	}
	for _, bad := range []string{"cpu", "=3", "cpu=-1", "mem=4X"} {
		if _, err := ParseTRES(bad); err == nil {
			t.Errorf("ParseTRES(%q): no error", bad)
		}
	}
}

// TestBuildLimits: bob runs two jobs under capped (1 + 1 CPUs, one with a
// GPU on each of its 2 nodes) and one under normal (4 CPUs); a pending job
// holds nothing. capped's per-user limits count the capped jobs (2 CPUs,
// 2 jobs); bob's association counts all three (6 CPUs, 3 jobs, 2 GPUs);
// its MaxJobs 5 is tighter than GrpJobs 7.
func TestBuildLimits(t *testing.T) {
	qos := []QOS{{Name: "normal"}, {Name: "capped", MaxTRESPerUser: map[string]int64{"cpu": 2, "gres/gpu": 1}, MaxJobsPerUser: 2}}
	assocs := []Association{
		{Cluster: "lab", Account: "research", User: "bob", QOS: []string{"capped", "normal"},
			GrpTRES: map[string]int64{"cpu": 6, "mem": 8000}, MaxJobs: 5, GrpJobs: 7},
		{Cluster: "lab", Account: "research", User: "alice", QOS: []string{"normal"}},
		{Cluster: "other", Account: "research", User: "bob", GrpTRES: map[string]int64{"cpu": 1}},
	}
	jobs := []report.Job{
		{User: "bob", Account: "research", QOS: "capped", State: "RUNNING", CPUs: 1, Partition: "cpu"},
		{User: "bob", Account: "research", QOS: "capped", State: "RUNNING", CPUs: 1, Gres: "gpu:1", NodeCount: 2, Partition: "gpu"},
		{User: "bob", Account: "research", QOS: "normal", State: "RUNNING", CPUs: 4, Partition: "cpu"},
		{User: "bob", Account: "research", QOS: "capped", State: "PENDING", CPUs: 8, Partition: "cpu"},
		{User: "alice", Account: "research", QOS: "normal", State: "RUNNING", CPUs: 4, Partition: "cpu"},
	}
	got := BuildLimits("lab", qos, assocs, jobs)
	want := []report.UserLimit{
		{User: "bob", Account: "research", Resource: "cpu", Max: 6, Used: 6, Reason: "AssocGrpCpuLimit"},
		{User: "bob", Account: "research", Resource: "jobs", Max: 5, Used: 3, Reason: "AssocMaxJobsLimit"},
		{User: "bob", Account: "research", QOS: "capped", Resource: "cpu", Max: 2, Used: 2, Reason: "QOSMaxCpuPerUserLimit"},
		{User: "bob", Account: "research", QOS: "capped", Resource: "gpu", Max: 1, Used: 2, Reason: "QOSMaxGRESPerUser"},
		{User: "bob", Account: "research", QOS: "capped", Resource: "jobs", Max: 2, Used: 2, Reason: "QOSMaxJobsPerUserLimit"},
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("BuildLimits:\n got %+v\nwant %+v", got, want)
	}
	for i := range got {
		if err := got[i].Validate(); err != nil {
			t.Errorf("limit %d: %v", i, err)
		}
	}
}

// TestClientLimits: the cluster name comes from scontrol show config (the
// dev cluster's, captured), and only its associations are asked for.
func TestClientLimits(t *testing.T) {
	files := map[string]string{"scontrol": "show_config.txt", "qos": "sacctmgr-qos.txt", "assoc": "sacctmgr-assoc.txt", "user": "sacctmgr-user.txt"}
	var calls []string
	c := &Client{Runner: RunnerFunc(func(_ context.Context, name string, args []string, _ []byte) ([]byte, error) {
		calls = append(calls, name+" "+strings.Join(args, " "))
		f := files[name]
		if name == "sacctmgr" {
			f = files[args[3]]
		}
		return os.ReadFile("testdata/22.05/" + f)
	})}
	qos, assocs, err := c.Limits(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if len(qos) != 3 || len(assocs) != 6 {
		t.Errorf("%d QOS and %d associations, want 3 and 6", len(qos), len(assocs))
	}
	// alice's and bob's default account is research (sacctmgr-user.txt),
	// root's root: each association says whether it is its user's default
	var defaults []string
	for _, a := range assocs {
		if a.DefaultAccount {
			defaults = append(defaults, a.User+"@"+a.Account)
		}
	}
	if want := []string{"root@root", "alice@research", "bob@research"}; !reflect.DeepEqual(defaults, want) {
		t.Errorf("default accounts %v, want %v", defaults, want)
	}
	want := []string{
		"scontrol show config",
		"sacctmgr -n -P show qos format=Name,MaxTRESPU,MaxJobsPU,MaxSubmitPU,GrpTRES,MaxTRES",
		"sacctmgr -n -P show assoc where cluster=lab format=Cluster,Account,User,Partition,QOS,DefaultQOS,GrpTRES,MaxJobs,GrpJobs",
		"sacctmgr -n -P show user format=User,DefaultAccount",
	}
	if !reflect.DeepEqual(calls, want) {
		t.Errorf("commands:\n got %q\nwant %q", calls, want)
	}
	files["scontrol"] = "sacctmgr-qos.txt" // no ClusterName line
	if _, _, err := c.Limits(context.Background()); err == nil || !strings.Contains(err.Error(), `ClusterName ""`) {
		t.Errorf("without a cluster name: %v", err)
	}
}
