package slurm

import (
	"reflect"
	"slices"
	"strings"
	"testing"
)

func TestParseArraySpec(t *testing.T) {
	t.Parallel()
	tests := []struct {
		in   string
		want ArraySpec
		err  string
	}{
		{"0-15", ArraySpec{Count: 16, MaxTask: 15}, ""},
		{"3", ArraySpec{Count: 1, MaxTask: 3}, ""},
		{"0,6,16-32", ArraySpec{Count: 19, MaxTask: 32}, ""},
		{"0-15:4", ArraySpec{Count: 4, MaxTask: 12}, ""},
		{"1-10:3%2", ArraySpec{Count: 4, MaxTask: 10, Throttle: 2}, ""},
		{"0-3%1", ArraySpec{Count: 4, MaxTask: 3, Throttle: 1}, ""},
		{"0-3,2-5,4", ArraySpec{Count: 6, MaxTask: 5}, ""},
		{"0-4000000", ArraySpec{Count: 4000001, MaxTask: 4000000}, ""},
		{"", ArraySpec{}, "no task ids"},
		{"%2", ArraySpec{}, "no task ids"},
		{"0-3%0", ArraySpec{}, "want a positive count"},
		{"0-3%x", ArraySpec{}, "want a positive count"},
		{"5-2", ArraySpec{}, `"5-2": the range ends before it starts`},
		{"3:2", ArraySpec{}, "needs a range"},
		{"0-9:0", ArraySpec{}, `step "0"`},
		{"a-b", ArraySpec{}, `task id "a"`},
		{"-1", ArraySpec{}, `task id ""`},
		{"0,,2", ArraySpec{}, `task id ""`},
		{"4000001", ArraySpec{}, "over 4000000"},
	}
	for _, tt := range tests {
		got, err := ParseArraySpec(tt.in)
		if tt.err != "" {
			if err == nil || !strings.Contains(err.Error(), tt.err) {
				t.Errorf("ParseArraySpec(%q) = %+v, %v; want an error with %q", tt.in, got, err, tt.err)
			}
			continue
		}
		tasks := got.Tasks
		got.Tasks = nil
		if err != nil || !reflect.DeepEqual(got, tt.want) {
			t.Errorf("ParseArraySpec(%q) = %+v, %v; want %+v", tt.in, got, err, tt.want)
		}
		want := got.Count
		if want > MaxListedTasks {
			want = 0 // too many to list
		}
		if len(tasks) != want {
			t.Errorf("ParseArraySpec(%q): %d tasks listed for %d elements", tt.in, len(tasks), got.Count)
		}
	}
	if got, _ := ParseArraySpec("9,1-7:3,4"); !slices.Equal(got.Tasks, []int{1, 4, 7, 9}) {
		t.Errorf("tasks of 9,1-7:3,4: %v, want 1 4 7 9 in order, once each", got.Tasks)
	}
}
