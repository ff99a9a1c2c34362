package report

import (
	"errors"
	"reflect"
	"strings"
	"testing"
)

func TestPlanComment(t *testing.T) {
	t.Parallel()
	p := Plan{Lineage: "L-1", Cluster: "lab", Ideal: "gpu", IdealGres: "gpu:1", IdealTime: 90, Fallbacks: []string{"cpu", "dev"}, Total: 5000, Model: "resnet18-ab12", Batch: 32, Migrate: true}
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
	} {
		_, ok, err := ParsePlanComment(bad)
		var fe *FieldError
		if !ok || !errors.As(err, &fe) || !strings.HasPrefix(fe.Field, "comment.") {
			t.Errorf("%q: ok=%v err=%v, want a field error", bad, ok, err)
		}
	}
}
