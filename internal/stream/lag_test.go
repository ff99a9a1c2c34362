package stream

import "testing"

func TestTrimmedUnread(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name   string
		g      GroupLag
		behind bool
		want   int64
		ok     bool
	}{
		{"caught up", GroupLag{Length: 10, Added: 30, Read: 30, LastDelivered: "5-1", FirstEntry: "1-0", LastGenerated: "5-1"}, false, 0, true},
		{"caught up after a gap", GroupLag{Length: 10, Added: 30, Read: 23, Lag: 7, LastDelivered: "5-1", FirstEntry: "1-0", LastGenerated: "5-1"}, false, 7, true},
		{"in the middle", GroupLag{Length: 10, Added: 30, Read: 25, Lag: 5, LastDelivered: "3-0", FirstEntry: "2-0", LastGenerated: "9-0"}, false, 0, false},
		{"behind the first entry", GroupLag{Length: 10, Added: 40, Read: 12, Lag: 28, LastDelivered: "1-9", FirstEntry: "2-0", LastGenerated: "9-0"}, true, 18, true},
		{"never read", GroupLag{Length: 100, Added: 500, Lag: 100, LastDelivered: "0-0", FirstEntry: "2-0", LastGenerated: "9-0"}, true, 400, true},
		{"empty stream", GroupLag{Added: 4, Read: 4, LastDelivered: "1-0", LastGenerated: "9-0"}, false, 0, true},
		{"entries but no first entry: not told", GroupLag{Length: 4, Added: 4, Lag: 4, LastDelivered: "0-0", LastGenerated: "9-0"}, false, 0, false},
		{"lag unknown", GroupLag{Length: 10, Added: 30, Lag: -1, LastDelivered: "1-0", FirstEntry: "2-0", LastGenerated: "9-0"}, true, 0, false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			n, ok := c.g.TrimmedUnread()
			if b := c.g.Behind(); b != c.behind || n != c.want || ok != c.ok {
				t.Fatalf("Behind, TrimmedUnread = %v, %d, %v; want %v, %d, %v", b, n, ok, c.behind, c.want, c.ok)
			}
		})
	}
	if CompareIDs("10-0", "9-5") != 1 || CompareIDs("9-5", "9-10") != -1 || CompareIDs("7", "7-0") != 0 {
		t.Fatal("CompareIDs orders numerically, ms then seq")
	}
}
