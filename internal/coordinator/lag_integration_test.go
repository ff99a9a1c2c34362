//go:build integration

package coordinator

import (
	"context"
	"fmt"
	"os"
	"testing"
	"time"

	"github.com/isched/isched/internal/testutil"
)

// TestWarnsAboutReportsTrimmedUnread: reports appended beyond the ingest
// stream's MAXLEN while the coordinator is away are lost; on the real Redis,
// the coordinator counts them at its first tick.
func TestWarnsAboutReportsTrimmedUnread(t *testing.T) {
	r := testutil.NeedRedis(t)
	ctx := context.Background()
	st := r.Client(t, "coordinator", fmt.Sprintf("lagit%d", os.Getpid()))
	k := st.Keys()
	t.Cleanup(func() {
		_ = st.Del(context.Background(), k.Ingest(), k.Leader(), k.Sessions(), k.Lineages())
	})
	// the group exists and has read what there was (a coordinator ran before)
	if err := st.EnsureGroup(ctx, k.Ingest(), group); err != nil {
		t.Fatal(err)
	}
	if _, err := st.Append(ctx, k.Ingest(), []byte("x"), "m", 100); err != nil {
		t.Fatal(err)
	}
	if _, err := st.ReadGroup(ctx, k.Ingest(), group, "old", 10, 10*time.Millisecond); err != nil {
		t.Fatal(err)
	}
	const added = 600
	for range added {
		if _, err := st.Append(ctx, k.Ingest(), []byte("x"), "m", 100); err != nil {
			t.Fatal(err)
		}
	}
	l, err := st.Lag(ctx, k.Ingest(), group)
	if err != nil {
		t.Fatal(err)
	}
	want := added - l.Length
	m := NewMetrics()
	c := New(Config{ID: "lagtest", Tick: 100 * time.Millisecond}, st, nil, m)
	c.Start(ctx)
	t.Cleanup(func() { _ = c.Close(context.Background()) })
	trimmed := func() float64 {
		fams, err := m.Registry.Gather()
		if err != nil {
			t.Fatal(err)
		}
		for _, f := range fams {
			if f.GetName() == "isched_coordinator_ingest_trimmed_unread_total" {
				return f.GetMetric()[0].GetCounter().GetValue()
			}
		}
		t.Fatal("no isched_coordinator_ingest_trimmed_unread_total")
		return 0
	}
	testutil.Eventually(t, 10*time.Second, 50*time.Millisecond, "the trimmed reports counted", func() bool {
		return trimmed() >= float64(want)
	})
	if got := trimmed(); got != float64(want) {
		t.Fatalf("trimmed unread: %v, want %d (stream kept %d of %d)", got, want, l.Length, added)
	}
}
