//go:build integration

package relay

import (
	"context"
	"net"
	"strconv"
	"strings"
	"testing"

	"github.com/isched/isched/internal/relayproto"
	"github.com/isched/isched/internal/stream"
	"github.com/isched/isched/internal/testutil"
)

// benchPayload is about a sample report's size (~600 bytes).
var benchPayload = []byte(`{"v":1,"kind":"sample","ts_ms":1800000000000,"sample":{"x":"` + strings.Repeat("x", 540) + `"}}`)

// benchReporter opens the dev cluster's Redis as the reporter on a key of
// its own, deleted at the end.
func benchReporter(b *testing.B) (*stream.Client, string) {
	r := testutil.NeedRedis(b)
	cluster := "relay-bench"
	cfg, err := stream.ConfigFromEnv(func(k string) string {
		return map[string]string{"ISCHED_REDIS_ADDR": r.Addr, "ISCHED_REDIS_PASSWORD_FILE": r.PasswordFile("reporter"), "ISCHED_CLUSTER": cluster}[k]
	}, "reporter")
	if err != nil {
		b.Fatal(err)
	}
	rep, err := stream.Open(context.Background(), cfg)
	if err != nil {
		b.Fatal(err)
	}
	keys, _ := stream.NewKeys(cluster)
	admin := r.Client(b, "admin", cluster)
	b.Cleanup(func() { _ = admin.Del(context.Background(), keys.Ingest()); _ = rep.Close() })
	return rep, keys.Ingest()
}

// rates reports reports/s and µs/report (wall time over all goroutines).
func rates(b *testing.B) {
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "reports/s")
	b.ReportMetric(float64(b.Elapsed().Microseconds())/float64(b.N), "µs/report")
}

// BenchmarkDirectXADD: one wrapper's appends straight to Redis (what a
// job does without the relay), one at a time as the reporter sends them.
func BenchmarkDirectXADD(b *testing.B) {
	rep, key := benchReporter(b)
	ctx := context.Background()
	b.ResetTimer()
	for b.Loop() {
		if _, err := rep.Append(ctx, key, benchPayload, testMAC, 100000); err != nil {
			b.Fatal(err)
		}
	}
	rates(b)
}

// BenchmarkRelayAppend: the same through the relay (TCP frame, checks,
// ration, XADD, reply), one connection, the credential checked once.
func BenchmarkRelayAppend(b *testing.B) {
	c := benchRelay(b)(0)
	ctx := context.Background()
	b.ResetTimer()
	for b.Loop() {
		if _, err := c.Append(ctx, "", benchPayload, testMAC, 0); err != nil {
			b.Fatal(err)
		}
	}
	rates(b)
}

// BenchmarkRelayAppendParallel: many wrappers (connections of distinct
// uids) at once through one relay.
func BenchmarkRelayAppendParallel(b *testing.B) {
	c := benchRelay(b)
	ctx := context.Background()
	next := make(chan int, 1024)
	for i := range 1024 {
		next <- 1000 + i
	}
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		cl := c(<-next)
		for pb.Next() {
			if _, err := cl.Append(ctx, "", benchPayload, testMAC, 0); err != nil {
				b.Error(err)
				return
			}
		}
	})
	rates(b)
}

// BenchmarkDirectXADDParallel is BenchmarkRelayAppendParallel straight to Redis.
func BenchmarkDirectXADDParallel(b *testing.B) {
	rep, key := benchReporter(b)
	ctx := context.Background()
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			if _, err := rep.Append(ctx, key, benchPayload, testMAC, 100000); err != nil {
				b.Error(err)
				return
			}
		}
	})
	rates(b)
}

// benchRelay starts a relay (credentials checked by fakeVerifier: MUNGE is
// once per connection, not per report) with a ration that never binds; it
// returns a client maker, one connection per uid.
func benchRelay(b *testing.B) func(uid int) *relayproto.Client {
	rep, key := benchReporter(b)
	cfg := DefaultConfig(key)
	cfg.Ration = Ration{EntriesPerSec: 1e9, EntryBurst: 1e9, BytesPerSec: 1e12, ByteBurst: 1e12}
	srv, err := NewServer(cfg, fakeVerifier{}, rep, nil, nil, nil)
	if err != nil {
		b.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { _ = srv.Serve(ctx, ln); close(done) }()
	b.Cleanup(func() { cancel(); <-done })
	return func(uid int) *relayproto.Client {
		c := &relayproto.Client{Addr: ln.Addr().String(), Cred: func(context.Context) (string, error) { return "uid:" + strconv.Itoa(uid), nil }}
		b.Cleanup(func() { _ = c.Close() })
		return c
	}
}
