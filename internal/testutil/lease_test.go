package testutil

import (
	"os"
	"path/filepath"
	"syscall"
	"testing"
)

// probe reports whether another open file could take the named lease in
// mode now (without waiting).
func probe(t *testing.T, name string, mode int) bool {
	t.Helper()
	f, err := os.OpenFile(filepath.Join(DevDir(), "test-leases", name+".lock"), os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	err = syscall.Flock(int(f.Fd()), mode|syscall.LOCK_NB)
	if err != nil && err != syscall.EWOULDBLOCK {
		t.Fatal(err)
	}
	return err == nil
}

func TestLeaseModes(t *testing.T) {
	t.Setenv("ISCHED_DEV_DIR", t.TempDir())
	if err := os.MkdirAll(filepath.Join(DevDir(), "test-leases"), 0o755); err != nil {
		t.Fatal(err)
	}
	type want struct {
		name string
		mode int
		free bool
	}
	cases := []struct {
		name string
		take func(testing.TB)
		want []want
	}{
		{"use: others share the lab and the partition, nobody owns them", func(t testing.TB) { UseLab(t, "cpu") }, []want{
			{"lab", lockShared, true}, {"lab", lockExclusive, false},
			{"partition-cpu", lockShared, true}, {"partition-cpu", lockExclusive, false},
			{"partition-gpu", lockExclusive, true},
		}},
		{"claim: the partition is this test's alone, the lab shared", func(t testing.TB) { ClaimPartitions(t, "gpu") }, []want{
			{"lab", lockShared, true}, {"lab", lockExclusive, false},
			{"partition-gpu", lockShared, false}, {"partition-cpu", lockExclusive, true},
		}},
		{"own: nobody uses the lab", OwnLab, []want{
			{"lab", lockShared, false}, {"partition-gpu", lockExclusive, true},
		}},
		{"use, then claim: the lease grows to the union", func(t testing.TB) { UseLab(t, "cpu"); ClaimPartitions(t, "gpu") }, []want{
			{"lab", lockExclusive, false}, {"partition-cpu", lockExclusive, false}, {"partition-cpu", lockShared, true},
			{"partition-gpu", lockShared, false},
		}},
		{"claim, then use: exclusive stays exclusive", func(t testing.TB) { ClaimPartitions(t, "gpu"); UseLab(t, "gpu") }, []want{
			{"partition-gpu", lockShared, false},
		}},
		{"use, then own: the lab becomes this test's", func(t testing.TB) { UseLab(t, "cpu"); OwnLab(t) }, []want{
			{"lab", lockShared, false},
		}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Run("held", func(t *testing.T) {
				tc.take(t)
				for _, w := range tc.want {
					if got := probe(t, w.name, w.mode); got != w.free {
						t.Errorf("%s %s: free %v, want %v", w.name, modeName(w.mode), got, w.free)
					}
				}
			})
			// the subtest's cleanup released everything
			for _, n := range []string{"lab", "partition-cpu", "partition-gpu"} {
				if !probe(t, n, lockExclusive) {
					t.Errorf("%s still held after the test ended", n)
				}
			}
		})
	}
}

// A subtest of a test that owns the lab is covered by it: taking its own
// lease on another open file would wait for its parent forever.
func TestLeaseSubtestOfOwner(t *testing.T) {
	t.Setenv("ISCHED_DEV_DIR", t.TempDir())
	t.Run("owner", func(t *testing.T) {
		OwnLab(t)
		t.Run("sub", func(t *testing.T) {
			UseLab(t, "cpu") // returns: covered
			if Leased(t) {
				t.Error("the subtest took a lease of its own")
			}
		})
	})
	if !probe(t, "lab", lockExclusive) {
		t.Error("the lab still held after the owner ended")
	}
}
