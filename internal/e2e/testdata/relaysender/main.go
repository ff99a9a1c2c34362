// Command relaysender is the sending half of TestRelayFloodAsBobUnderMaxmemory
// (internal/e2e/relayflood_integration_test.go): run as a test user, it
// sends reports of a given size through isched-relay with that user's real
// MUNGE credential, on several connections, until n were accepted; a
// throttled report waits as the relay says (as a wrapper does). It prints
// {"accepted":N,"throttled":M,"err":"..."}: err is the first refusal or
// failure other than throttling (an OOM from Redis among them).
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/isched/isched/internal/auth"
	"github.com/isched/isched/internal/relayproto"
)

// mac is a well-formed MAC: the relay checks its form, the coordinator
// (not here) its value.
const mac = "00112233445566778899aabbccddeeff00112233445566778899aabbccddeeff"

type result struct {
	Accepted  int64  `json:"accepted"`
	Throttled int64  `json:"throttled"`
	Err       string `json:"err,omitempty"`
}

func main() {
	addr := flag.String("relay", "", "isched-relay's address")
	relayUID := flag.Int("relay-uid", 0, "the relay's uid")
	cluster := flag.String("cluster", "", "cluster name")
	size := flag.Int("size", 600, "bytes of each report")
	n := flag.Int64("n", 10, "reports to have accepted")
	conns := flag.Int("conns", 1, "connections")
	timeout := flag.Duration("timeout", 3*time.Minute, "give up after")
	flag.Parse()
	ctx, cancel := context.WithTimeout(context.Background(), *timeout)
	defer cancel()
	payload := []byte(`"` + strings.Repeat("x", max(*size-2, 0)) + `"`)
	res := send(ctx, *addr, *cluster, *relayUID, payload, *n, *conns)
	_ = json.NewEncoder(os.Stdout).Encode(res)
}

// send runs conns senders until n reports were accepted, one failed, or
// ctx ended.
func send(ctx context.Context, addr, cluster string, relayUID int, payload []byte, n int64, conns int) result {
	var accepted, throttled atomic.Int64
	var first atomic.Value
	var wg sync.WaitGroup
	for range conns {
		c := &relayproto.Client{Addr: addr, Cred: func(ctx context.Context) (string, error) {
			return relayproto.Credential(ctx, auth.ExecMunger{}, cluster, relayUID, time.Now())
		}}
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer c.Close()
			for accepted.Load() < n && first.Load() == nil {
				_, err := c.Append(ctx, "", payload, mac, 0)
				var ref *relayproto.Refused
				switch {
				case err == nil:
					accepted.Add(1)
				case errors.As(err, &ref) && ref.Code == relayproto.CodeThrottled:
					throttled.Add(1)
					time.Sleep(time.Duration(ref.RetryMS) * time.Millisecond)
				default:
					first.CompareAndSwap(nil, fmt.Sprintf("after %d accepted: %v", accepted.Load(), err))
					return
				}
			}
		}()
	}
	wg.Wait()
	r := result{Accepted: accepted.Load(), Throttled: throttled.Load()}
	if e, ok := first.Load().(string); ok {
		r.Err = e
	}
	return r
}
