//go:build integration

package relay

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/isched/isched/internal/relayproto"
	"github.com/isched/isched/internal/report"
	"github.com/isched/isched/internal/stream"
	"github.com/isched/isched/internal/testutil"
)

// smallRedis is testutil's SmallRedis with the reporter's client.
type smallRedis struct{ testutil.SmallRedis }

func startSmallRedis(t *testing.T, maxMemory int64) smallRedis {
	return smallRedis{testutil.StartSmallRedis(t, maxMemory)}
}

// reporter opens the server as the reporter user, as the relay does.
func (r smallRedis) reporter(t *testing.T, cluster string) *stream.Client {
	t.Helper()
	env := map[string]string{"ISCHED_REDIS_ADDR": r.Addr, "ISCHED_REDIS_PASSWORD_FILE": r.PasswordFile(), "ISCHED_CLUSTER": cluster}
	cfg, err := stream.ConfigFromEnv(func(k string) string { return env[k] }, "reporter")
	if err != nil {
		t.Fatal(err)
	}
	c, err := stream.Open(context.Background(), cfg)
	if err != nil {
		t.Fatalf("redis as the reporter: %v", err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// TestFloodNeverReachesRedisOOM (issue 26, item 2): on a Redis of 64 MiB
// (noeviction), eight uids flood the relay with reports of the largest
// size at their full ration (the default one) until it has accepted four times maxmemory;
// with the cap of before (an entry count, 100 000) nothing of it would be
// trimmed and Redis would refuse writes (OOM) for everyone after ~800.
// The relay's cap, derived from maxmemory read as the reporter (the
// documented ACL), keeps used_memory below maxmemory in every sample and
// at Redis's own peak; no write gets OOM; alice's reports, sent while the
// stream is at its cap, are all accepted.
func TestFloodNeverReachesRedisOOM(t *testing.T) {
	const maxMemory = 64 << 20
	const flooders, aliceN = 8, 100
	const target = 4 * maxMemory // bytes of reports to accept
	r := startSmallRedis(t, maxMemory)
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	keys, _ := stream.NewKeys("memcap")
	rep := r.reporter(t, keys.Cluster)

	cfg := DefaultConfig(keys.Ingest())
	sc, err := startCap(ctx, rep, CapRequest{MaxEntry: cfg.MaxEntry, Fraction: DefaultStreamFraction, MaxLen: cfg.MaxLen})
	if err != nil {
		t.Fatalf("the cap from maxmemory, read as the reporter: %v", err)
	}
	if sc.MaxMemory != maxMemory || sc.Entries >= cfg.MaxLen {
		t.Fatalf("cap %+v: want maxmemory %d read and a cap below -max-len %d", sc, maxMemory, cfg.MaxLen)
	}
	cfg.MaxLen = sc.Entries
	cfg.Ration = DefaultRation // 2 MiB/s a uid, 16 MiB at once: 8 uids spend their bursts, then their rates
	srv, err := NewServer(cfg, fakeVerifier{}, rep, nil, NewMetrics(), nil)
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	sctx, stopSrv := context.WithCancel(context.Background())
	served := make(chan struct{})
	go func() { _ = srv.Serve(sctx, ln); close(served) }()
	t.Cleanup(func() { stopSrv(); <-served })
	client := func(uid int) *relayproto.Client {
		c := &relayproto.Client{Addr: ln.Addr().String(), Cred: func(context.Context) (string, error) { return "uid:" + strconv.Itoa(uid), nil }}
		t.Cleanup(func() { _ = c.Close() })
		return c
	}

	var sampler testutil.MemSampler
	sampCtx, stopSampling := context.WithCancel(ctx)
	sampled := make(chan struct{})
	go sampler.Run(sampCtx, r.Admin, maxMemory, sampled)

	big := []byte(`"` + strings.Repeat("x", report.MaxPayload-2) + `"`)
	var accepted, throttled atomic.Int64
	aliceDone := make(chan struct{})
	full := make(chan struct{}) // closed once maxmemory's worth was accepted
	var fullOnce sync.Once
	var wg sync.WaitGroup
	floodErr := make(chan error, flooders)
	for i := range flooders {
		c := client(2001 + i)
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				n := accepted.Load()
				if n*int64(len(big)) >= maxMemory {
					fullOnce.Do(func() { close(full) })
				}
				select {
				case <-aliceDone:
					if n*int64(len(big)) >= target {
						return
					}
				default:
				}
				_, err := c.Append(ctx, "", big, testMAC, 0)
				var ref *relayproto.Refused
				switch {
				case err == nil:
					accepted.Add(1)
				case errors.As(err, &ref) && ref.Code == relayproto.CodeThrottled:
					throttled.Add(1)
					time.Sleep(time.Duration(ref.RetryMS) * time.Millisecond) // what a wrapper does: wait as told
				default:
					floodErr <- fmt.Errorf("flooder uid %d after %d accepted: %w", 2001+i, n, err)
					return
				}
			}
		}()
	}

	// alice reports while the stream is at its cap and the flood goes on
	var aliceErr error
	var aliceIDs []string
	select {
	case <-full:
	case err := <-floodErr:
		t.Fatalf("before alice's turn: %v", err)
	case <-ctx.Done():
		t.Fatalf("the flood did not reach maxmemory's worth (%d accepted): %v", accepted.Load(), ctx.Err())
	}
	alice := client(1001)
	for i := range aliceN {
		id, err := alice.Append(ctx, "", []byte(fmt.Sprintf(`{"alice":%d,"pad":"%s"}`, i, strings.Repeat("a", 560))), testMAC, 0)
		if err != nil {
			aliceErr = fmt.Errorf("alice's report %d: %w", i, err)
			break
		}
		aliceIDs = append(aliceIDs, id)
	}
	close(aliceDone)
	wg.Wait()
	stopSampling()
	<-sampled
	close(floodErr)
	for err := range floodErr {
		t.Errorf("a write failed (OOM?): %v", err)
	}
	if aliceErr != nil {
		t.Errorf("%v", aliceErr)
	}
	if err := sampler.Err(); err != nil {
		t.Errorf("sampling used_memory: %v", err)
	}

	n := accepted.Load()
	stats, err := r.Admin.Info(ctx, "memory", "errorstats").Result()
	if err != nil {
		t.Fatal(err)
	}
	peak := testutil.InfoField(t, stats, "used_memory_peak")
	xlen, _ := r.Admin.XLen(ctx, keys.Ingest()).Result()
	streamBytes, _ := r.Admin.MemoryUsage(ctx, keys.Ingest(), 0).Result()
	t.Logf("cap %d entries (%s; budget %d of maxmemory %d, %d bytes an entry at worst)", sc.Entries, sc.Why, sc.Budget, sc.MaxMemory, sc.EntryCost)
	t.Logf("flood: %d reports of %d bytes accepted (%.1f × maxmemory), %d throttled; alice: %d of %d accepted",
		n, len(big), float64(n*int64(len(big)))/maxMemory, throttled.Load(), len(aliceIDs), aliceN)
	t.Logf("used_memory: %d samples, max %d (%.1f%% of maxmemory), Redis's peak %d; stream at the end: %d entries, %d bytes",
		sampler.Samples.Load(), sampler.Max.Load(), 100*float64(sampler.Max.Load())/maxMemory, peak, xlen, streamBytes)

	// what was accepted would not fit if nothing trimmed it: with the old
	// cap (100 000 entries) nothing of it would have been trimmed
	if n*int64(len(big)) < target || n >= 100000 {
		t.Errorf("%d reports accepted: want ≥ %d bytes' worth, under the old cap of 100 000", n, target)
	}
	if sampler.Samples.Load() < 10 {
		t.Errorf("%d samples of used_memory: too few to say anything", sampler.Samples.Load())
	}
	if over := sampler.Over.Load(); over > 0 || peak >= maxMemory {
		t.Errorf("used_memory reached maxmemory %d: %d samples at or over it, max %d, peak %d", maxMemory, over, sampler.Max.Load(), peak)
	}
	if strings.Contains(stats, "errorstat_OOM") {
		t.Errorf("Redis refused writes for memory: %s", stats[strings.Index(stats, "errorstat_OOM"):])
	}
	if len(aliceIDs) != aliceN {
		t.Errorf("alice: %d of %d reports accepted", len(aliceIDs), aliceN)
	}
	if xlen > sc.Entries+100 { // MAXLEN ~ trims whole nodes of ≤ 100 entries
		t.Errorf("stream holds %d entries, cap %d", xlen, sc.Entries)
	}
}
