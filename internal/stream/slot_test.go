package stream

import "testing"

func TestSlot(t *testing.T) {
	for _, c := range []struct {
		key  string
		want int
	}{
		// the Redis Cluster specification and CLUSTER KEYSLOT of Redis 7.0
		{"123456789", 0x31C3 % SlotCount}, // the spec's CRC16 check value
		{"foo", 12182},
		{"bar", 5061},
		{"{user1000}.following", 3443},
		{"user1000", 3443},
		{"foo{}{bar}", 8363}, // empty tag: the whole key
		{"{}", 15257},
		{"foo{{bar}}zap", 4015}, // the tag is "{bar"
		{"foo{bar}{zap}", 5061},
		{"isched:lab:job:{L1}:state", 11987},
		{"isched:lab:ingest", 8917},
	} {
		if got := Slot(c.key); got != c.want {
			t.Errorf("Slot(%q) = %d, want %d", c.key, got, c.want)
		}
	}
	k := Keys{Cluster: "lab"}
	for _, name := range []string{"train-7", "a", "L.1"} {
		s := Slot(k.JobState(name))
		for _, key := range k.JobKeys(name) {
			if Slot(key) != s {
				t.Errorf("%s: slot %d, want %d (one lineage, one slot)", key, Slot(key), s)
			}
		}
	}
}
