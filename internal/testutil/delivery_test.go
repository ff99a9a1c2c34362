package testutil

import (
	"slices"
	"strings"
	"testing"
)

func TestFirstCopies(t *testing.T) {
	s := func(sid string, seq uint64, wire string) Sent { return Sent{SID: sid, Seq: seq, Wire: wire} }
	for _, tc := range []struct {
		name   string
		in     []Sent
		first  []int
		copies int
		err    string
	}{
		{name: "empty"},
		{name: "in order", in: []Sent{s("a", 1, "x1"), s("a", 2, "x2"), s("a", 3, "x3")}, first: []int{0, 1, 2}},
		{name: "two sessions interleaved", in: []Sent{s("a", 1, "a1"), s("b", 1, "b1"), s("a", 2, "a2"), s("b", 2, "b2")}, first: []int{0, 1, 2, 3}},
		{name: "retransmission", in: []Sent{s("a", 1, "x1"), s("a", 2, "x2"), s("a", 2, "x2"), s("a", 3, "x3")}, first: []int{0, 1, 3}, copies: 1},
		{name: "start twice", in: []Sent{s("a", 1, "x1"), s("a", 1, "x1"), s("a", 2, "x2")}, first: []int{0, 2}, copies: 1},
		{name: "copy after another session's report", in: []Sent{s("a", 1, "a1"), s("b", 1, "b1"), s("a", 1, "a1")}, first: []int{0, 1}, copies: 1},
		{name: "gap", in: []Sent{s("a", 1, "x1"), s("a", 3, "x3")}, err: "seq 3 after 1"},
		{name: "first report missing", in: []Sent{s("a", 2, "x2")}, err: "seq 2 after 0"},
		{name: "older number again", in: []Sent{s("a", 1, "x1"), s("a", 2, "x2"), s("a", 1, "x1")}, err: "seq 1 after 2"},
		{name: "other bytes", in: []Sent{s("a", 1, "x1"), s("a", 1, "y1")}, err: "other bytes"},
		{name: "seq zero", in: []Sent{s("a", 0, "")}, err: "seq 0 after 0"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			first, copies, err := FirstCopies(tc.in)
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("err %v, want one naming %q", err, tc.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if !slices.Equal(first, tc.first) || copies != tc.copies {
				t.Errorf("first %v copies %d, want %v and %d", first, copies, tc.first, tc.copies)
			}
		})
	}
}
