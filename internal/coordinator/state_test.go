package coordinator

import (
	"slices"
	"testing"
)

func TestAppendLast(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		s    []int
		v, n int
		want []int
	}{
		{"empty", nil, 1, 3, []int{1}},
		{"under the cap", []int{1, 2}, 3, 3, []int{1, 2, 3}},
		{"at the cap: the oldest goes", []int{1, 2, 3}, 4, 3, []int{2, 3, 4}},
		{"over the cap (an older state): trimmed to it", []int{1, 2, 3, 4}, 5, 2, []int{4, 5}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			if got := appendLast(slices.Clone(tt.s), tt.v, tt.n); !slices.Equal(got, tt.want) {
				t.Errorf("appendLast(%v, %d, %d) = %v, want %v", tt.s, tt.v, tt.n, got, tt.want)
			}
		})
	}
}
