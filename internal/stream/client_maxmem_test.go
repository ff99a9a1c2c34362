package stream

import "testing"

func TestParseMaxMemory(t *testing.T) {
	for _, tc := range []struct {
		info string
		want int64
		ok   bool
	}{
		{"# Memory\r\nused_memory:1000\r\nmaxmemory:67108864\r\nmaxmemory_human:64.00M\r\nmaxmemory_policy:noeviction\r\n", 64 << 20, true},
		{"# Memory\r\nmaxmemory_human:0B\r\nmaxmemory:0\r\n", 0, true},
		{"# Memory\r\nused_memory:1000\r\n", 0, false},
		{"maxmemory:lots\r\n", 0, false},
		{"maxmemory:-1\r\n", 0, false},
	} {
		got, err := ParseMaxMemory(tc.info)
		if (err == nil) != tc.ok || got != tc.want {
			t.Errorf("ParseMaxMemory(%q) = %d, %v; want %d, ok %v", tc.info, got, err, tc.want, tc.ok)
		}
	}
}
