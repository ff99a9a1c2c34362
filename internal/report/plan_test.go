package report

import (
	"encoding/json"
	"errors"
	"reflect"
	"strings"
	"testing"
)

func TestPlanComment(t *testing.T) {
	t.Parallel()
	p := Plan{Lineage: "L-1", Cluster: "lab", Ideal: "gpu", IdealGres: "gpu:1", IdealTime: 90, IdealCPUs: 12, Fallbacks: []string{"cpu", "dev"}, Total: 5000, Model: "resnet18-ab12", Batch: 32, Migrate: true,
		Elastic: &Elastic{Min: 1, Max: 4}}
	got, ok, err := ParsePlanComment(p.FormatComment())
	if err != nil || !ok || !reflect.DeepEqual(got, p) {
		t.Fatalf("round trip: %+v %v %v", got, ok, err)
	}
	if _, ok, err := ParsePlanComment("just a comment"); ok || err != nil {
		t.Errorf("plain comment: %v %v", ok, err)
	}
	for _, bad := range []string{
		"isched:v1 ideal=gpu total=-3",
		"isched:v1 ideal=gpu;rm",
		"isched:v1 ideal=gpu ideal=cpu",
		"isched:v1 gres=gpu:1",
		"isched:v1 ideal=gpu lineage=$(id)",
		"isched:v1 ideal=gpu evil=1",
		"isched:v1 ideal=gpu fallback=cpu,,dev",
		"isched:v1 ideal",
		"isched:v1 ideal=gpu cpus=0",
		"isched:v1 ideal=gpu cpus=99999999",
		"isched:v1 ideal=gpu cpus=two",
		"isched:v1 ideal=gpu elastic=2",
		"isched:v1 ideal=gpu elastic=4-1",
		"isched:v1 ideal=gpu elastic=0-2",
		"isched:v1 ideal=gpu elastic=1-x",
	} {
		_, ok, err := ParsePlanComment(bad)
		var fe *FieldError
		if !ok || !errors.As(err, &fe) || !strings.HasPrefix(fe.Field, "comment.") {
			t.Errorf("%q: ok=%v err=%v, want a field error", bad, ok, err)
		}
	}
}

// TestPlanJSON: the plan's JSON is snake_case (status --json), and a
// status stored by an older coordinator (Go field names) still reads.
func TestPlanJSON(t *testing.T) {
	t.Parallel()
	p := Plan{Lineage: "L-1", Cluster: "lab", Ideal: "gpu", IdealGres: "gpu:1", IdealTime: 90, Fallbacks: []string{"cpu"},
		Total: 5000, Model: "m", Batch: 32, Migrate: true}
	b, err := json.Marshal(p)
	if err != nil {
		t.Fatal(err)
	}
	want := `{"lineage":"L-1","cluster":"lab","ideal":"gpu","ideal_gres":"gpu:1","ideal_time_minutes":90,"fallbacks":["cpu"],"total_iters":5000,"model":"m","batch":32,"migrate":true}`
	if string(b) != want {
		t.Errorf("json: %s\nwant %s", b, want)
	}
	for _, in := range []string{want,
		`{"Lineage":"L-1","Cluster":"lab","Ideal":"gpu","IdealGres":"gpu:1","IdealTime":90,"Fallbacks":["cpu"],"Total":5000,"Model":"m","Batch":32,"Migrate":true}`} {
		var got Plan
		if err := json.Unmarshal([]byte(in), &got); err != nil {
			t.Fatalf("%s: %v", in, err)
		}
		if !reflect.DeepEqual(got, p) {
			t.Errorf("%s: %+v, want %+v", in, got, p)
		}
	}
}

// TestJobPlan: an array's elements share the comment but are lineages of
// their own; its pending rest is no element yet.
func TestJobPlan(t *testing.T) {
	comment := Plan{Lineage: "lab-u1001-sweep-0a0b0c0d", Ideal: "gpu"}.FormatComment()
	task := func(n int) *int { return &n }
	long := Plan{Lineage: strings.Repeat("x", 62), Ideal: "gpu"}.FormatComment()
	tests := []struct {
		name    string
		job     Job
		ok      bool
		lineage string
		err     string
	}{
		{"plain job", Job{JobID: 7, Comment: comment}, true, "lab-u1001-sweep-0a0b0c0d", ""},
		{"element 0", Job{JobID: 15, ArrayJobID: 11, ArrayTaskID: task(0), Comment: comment}, true, "lab-u1001-sweep-0a0b0c0d_0", ""},
		{"element 12", Job{JobID: 11, ArrayJobID: 11, ArrayTaskID: task(12), Comment: comment}, true, "lab-u1001-sweep-0a0b0c0d_12", ""},
		{"pending rest", Job{JobID: 11, ArrayTasks: "2-3%2", Comment: comment}, false, "", ""},
		{"pending rest of two", Job{JobID: 11, ArrayTasks: "2,5", Comment: comment}, false, "", ""},
		{"pending rest of one task", Job{JobID: 13, ArrayTasks: "3", Comment: comment}, true, "lab-u1001-sweep-0a0b0c0d_3", ""},
		{"pending rest of one, throttled", Job{JobID: 13, ArrayTasks: "3%1", Comment: comment}, true, "lab-u1001-sweep-0a0b0c0d_3", ""},
		{"no plan", Job{JobID: 8, Comment: "my run"}, false, "", ""},
		{"element too long", Job{JobID: 9, ArrayJobID: 9, ArrayTaskID: task(100), Comment: long}, true, "", "comment.lineage"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p, ok, err := JobPlan(tt.job)
			if ok != tt.ok || p.Lineage != tt.lineage {
				t.Errorf("JobPlan = %q, ok %v; want %q, ok %v", p.Lineage, ok, tt.lineage, tt.ok)
			}
			if (err != nil) != (tt.err != "") || err != nil && !strings.Contains(err.Error(), tt.err) {
				t.Errorf("err = %v, want one naming %q", err, tt.err)
			}
		})
	}
}

// TestElement: which array task a job runs, as JobPlan reads it.
func TestElement(t *testing.T) {
	t.Parallel()
	task := func(n int) *int { return &n }
	for _, tt := range []struct {
		job  Job
		task int
		ok   bool
	}{
		{Job{JobID: 7}, 0, false},
		{Job{JobID: 15, ArrayJobID: 11, ArrayTaskID: task(0)}, 0, true},
		{Job{JobID: 13, ArrayTasks: "3"}, 3, true},
		{Job{JobID: 13, ArrayTasks: "3%1"}, 3, true},
		{Job{JobID: 11, ArrayTasks: "2-3%2"}, 0, false},
		{Job{JobID: 11, ArrayTasks: "?"}, 0, false},
	} {
		if got, ok := tt.job.Element(); got != tt.task || ok != tt.ok {
			t.Errorf("%+v: Element() = %d, %v; want %d, %v", tt.job, got, ok, tt.task, tt.ok)
		}
	}
}

func TestParseElastic(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		in   string
		want *Elastic
		err  bool
	}{
		{"1-4", &Elastic{1, 4}, false},
		{"2-8", &Elastic{2, 8}, false},
		{"2", nil, false},
		{"3-3", nil, false},
		{"4-1", nil, true},
		{"0-2", nil, true},
		{"1-2000", nil, true},
		{"a-b", nil, true},
		{"", nil, true},
	} {
		got, err := ParseElastic(c.in)
		if (err != nil) != c.err || !reflect.DeepEqual(got, c.want) {
			t.Errorf("ParseElastic(%q) = %v, %v; want %v, error %v", c.in, got, err, c.want, c.err)
		}
	}
}
