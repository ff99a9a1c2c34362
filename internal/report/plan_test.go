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
	p := Plan{Lineage: "L-1", Cluster: "lab", Ideal: "gpu", IdealGres: "gpu:1", IdealTime: 90, IdealCPUs: 12, Fallbacks: []string{"cpu", "dev"}, Total: 5000, Model: "resnet18-ab12", Batch: 32, Migrate: true}
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
