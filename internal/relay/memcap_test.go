package relay

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"testing"

	"github.com/isched/isched/internal/report"
)

const gib = int64(1) << 30

// TestEntryCostCoversMeasured: EntryCost is above what Redis 7.0.15 was
// measured to take per entry (XADD of m, mac, uid; used_memory delta over
// 2 000 or 20 000 entries, scripts in the commit that added this).
func TestEntryCostCoversMeasured(t *testing.T) {
	for _, m := range []struct {
		report int
		bytes  int64
	}{{600, 727}, {2000, 2590}, {65536, 81988}} {
		if c := EntryCost(m.report); c < m.bytes {
			t.Errorf("EntryCost(%d) = %d, below the %d bytes measured", m.report, c, m.bytes)
		}
	}
	if c := EntryCost(report.MaxPayload); c != 83072 {
		t.Errorf("EntryCost(MaxPayload) = %d, want 83 072 (docs/deployment.md quotes it)", c)
	}
}

func TestDeriveStreamCap(t *testing.T) {
	const me = report.MaxPayload
	for _, tc := range []struct {
		name    string
		req     CapRequest
		entries int64
		why     string // part of Why, or of the error when entries is 0
	}{
		{"lab: 2 GiB lowers the default 100 000", CapRequest{2 * gib, me, 0.25, 100000, false}, 6461, "maxmemory"},
		{"64 MiB", CapRequest{64 << 20, me, 0.25, 100000, false}, 200, "maxmemory"},
		{"16 GiB, half", CapRequest{16 * gib, me, 0.5, 100000, false}, 100000, "-max-len"},
		{"explicit max-len that fits", CapRequest{2 * gib, me, 0.25, 5000, true}, 5000, "-max-len"},
		{"explicit max-len over the budget", CapRequest{2 * gib, me, 0.25, 100000, true}, 0, "-max-len 100000 entries of up to 65536 bytes take up to 8307283072 bytes in Redis, over 0.25 of maxmemory 2147483648 (536870912 bytes, 6461 entries)"},
		{"no maxmemory", CapRequest{0, me, 0.25, 100000, true}, 100000, "nothing bounds"},
		{"maxmemory too small", CapRequest{16 << 20, me, 0.25, 100000, false}, 0, "holds 49 entries"},
		{"small reports only", CapRequest{64 << 20, 1024, 0.25, 100000, false}, 6897, "maxmemory"},
		{"fraction 0", CapRequest{2 * gib, me, 0, 100000, false}, 0, "fraction 0"},
		{"fraction 1", CapRequest{2 * gib, me, 1, 100000, false}, 0, "fraction 1"},
		{"max-len 0", CapRequest{2 * gib, me, 0.25, 0, true}, 0, "-max-len 0"},
		{"negative maxmemory", CapRequest{-1, me, 0.25, 100, true}, 0, "maxmemory -1"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, err := DeriveStreamCap(tc.req)
			if tc.entries == 0 {
				if err == nil || !strings.Contains(err.Error(), tc.why) {
					t.Fatalf("got %+v, %v; want an error naming %q", c, err, tc.why)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if c.Entries != tc.entries || !strings.Contains(c.Why, tc.why) {
				t.Errorf("got %d entries (%s), want %d (%s)", c.Entries, c.Why, tc.entries, tc.why)
			}
			// the bound itself: one node more than the cap, all at the worst
			if c.MaxMemory > 0 && (c.Entries+1)*c.EntryCost > c.Budget {
				t.Errorf("%d entries × %d bytes exceed the budget %d", c.Entries+1, c.EntryCost, c.Budget)
			}
		})
	}
}

type fakeMem struct {
	n   int64
	err error
}

func (f *fakeMem) MaxMemory(context.Context) (int64, error) { return f.n, f.err }

// TestCapWatchFollowsMaxMemory: a CONFIG SET maxmemory reaches the cap at
// the next check; an explicit -max-len the new maxmemory cannot hold is
// lowered, not kept; a failed read or an impossible maxmemory keeps the
// cap in force.
func TestCapWatchFollowsMaxMemory(t *testing.T) {
	mem := &fakeMem{n: 2 * gib}
	req := CapRequest{MaxEntry: report.MaxPayload, Fraction: 0.25, MaxLen: 5000, Explicit: true}
	cur, err := startCap(context.Background(), mem, req)
	if err != nil {
		t.Fatal(err)
	}
	var set []int64
	w := &capWatch{mem: mem, req: req, cur: cur, log: slog.New(slog.DiscardHandler),
		warn: func(*slog.Logger, string, ...any) {}, set: func(c StreamCap) { set = append(set, c.Entries) }}
	steps := []struct {
		name string
		mem  fakeMem
		want int64
	}{
		{"unchanged", fakeMem{n: 2 * gib}, 5000},
		{"lowered to 1 GiB: max-len no longer fits", fakeMem{n: gib}, 3230},
		{"read fails", fakeMem{err: errors.New("NOPERM")}, 3230},
		{"too small to hold the stream", fakeMem{n: 1 << 20}, 3230},
		{"raised again", fakeMem{n: 4 * gib}, 5000},
		{"unlimited", fakeMem{n: 0}, 5000},
	}
	for _, s := range steps {
		*mem = s.mem
		if c := w.check(context.Background()); c.Entries != s.want {
			t.Errorf("%s: cap %d, want %d", s.name, c.Entries, s.want)
		}
	}
	if want := []int64{3230, 5000, 5000}; len(set) != len(want) || set[0] != want[0] || set[1] != want[1] || set[2] != want[2] {
		t.Errorf("caps set %v, want %v", set, want)
	}
}

// TestStartCapNeedsMaxMemory: a relay that cannot read maxmemory (an ACL
// without +info|memory) does not start: its stream would be unbounded in
// bytes.
func TestStartCapNeedsMaxMemory(t *testing.T) {
	_, err := startCap(context.Background(), &fakeMem{err: errors.New("NOPERM")}, CapRequest{MaxEntry: 1, Fraction: 0.25, MaxLen: 1})
	if !errors.Is(err, errNoMaxMemory) || !strings.Contains(err.Error(), "+info|memory") {
		t.Fatalf("err %v: want errNoMaxMemory naming the ACL", err)
	}
}

// TestSetMaxLenReachesAppends: the cap the watch sets is the one the next
// XADD carries.
func TestSetMaxLenReachesAppends(t *testing.T) {
	e := startRelay(t, nil)
	c := e.client("uid:1001")
	if _, err := c.Append(ctx5(t), "", []byte(`{}`), testMAC, 0); err != nil {
		t.Fatal(err)
	}
	e.srv.SetMaxLen(200)
	if _, err := c.Append(ctx5(t), "", []byte(`{}`), testMAC, 0); err != nil {
		t.Fatal(err)
	}
	got := e.redis.entries()
	if len(got) != 2 || got[0].maxLen != 100000 || got[1].maxLen != 200 {
		t.Fatalf("appended %+v: want caps 100000 then 200", got)
	}
}
