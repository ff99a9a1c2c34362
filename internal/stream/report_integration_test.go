//go:build integration

package stream_test

import (
	"context"
	"os"
	"path/filepath"
	"reflect"
	"testing"

	"github.com/isched/isched/internal/report"
	"github.com/isched/isched/internal/testutil"
)

// TestEveryReportKindRoundTrips sends one envelope of every kind (the
// schema's golden examples) through the real Redis as the reporter user and
// reads it back as the coordinator, decoded and equal.
func TestEveryReportKindRoundTrips(t *testing.T) {
	testEveryReportKindRoundTrips(t, testutil.NeedRedis(t))
}

// TestRedisClusterEveryReportKindRoundTrips: the same on the dev Redis Cluster (keys spread
// over three masters; make cluster-up starts it).
func TestRedisClusterEveryReportKindRoundTrips(t *testing.T) {
	testEveryReportKindRoundTrips(t, testutil.NeedRedisCluster(t))
}

func testEveryReportKindRoundTrips(t *testing.T, r testutil.Redis) {
	ctx := context.Background()
	rep := open(t, r, "reporter", false)
	coord := open(t, r, "coordinator", true)
	k := rep.Keys()
	t.Cleanup(func() { _ = coord.Del(ctx, k.Ingest()) })
	files, err := filepath.Glob("../report/testdata/golden/*.json")
	if err != nil || len(files) < 9 {
		t.Fatalf("golden envelopes: %v (%d files, want one per kind)", err, len(files))
	}
	kinds := map[report.Kind]bool{}
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		want, err := report.Decode(b)
		if err != nil {
			t.Fatalf("%s: %v", f, err)
		}
		payload, err := report.Encode(want)
		if err != nil {
			t.Fatal(err)
		}
		id, err := rep.Append(ctx, k.Ingest(), payload, "mac-"+string(want.Kind), 1000)
		if err != nil {
			t.Fatalf("reporter XADD %s: %v", want.Kind, err)
		}
		got, err := coord.Range(ctx, k.Ingest(), id, id, 1)
		if err != nil || len(got) != 1 {
			t.Fatalf("read back %s: %v %d", want.Kind, err, len(got))
		}
		env, err := report.Decode(got[0].Payload)
		if err != nil {
			t.Fatalf("decode %s read back: %v", want.Kind, err)
		}
		if !reflect.DeepEqual(env, want) || got[0].MAC != "mac-"+string(want.Kind) {
			t.Errorf("%s changed on the way through Redis", want.Kind)
		}
		kinds[want.Kind] = true
	}
	for _, k := range []report.Kind{report.KindStart, report.KindSample, report.KindCheckpoint, report.KindSignal, report.KindEnd,
		report.KindSnapshot, report.KindJobs, report.KindAction, report.KindResult} {
		if !kinds[k] {
			t.Errorf("kind %s not covered", k)
		}
	}
}
