//go:build integration

package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/isched/isched/internal/report"
	"github.com/isched/isched/internal/stream"
	"github.com/isched/isched/internal/testutil"
)

// senderResult is what testdata/relaysender prints.
type senderResult struct {
	Accepted  int64  `json:"accepted"`
	Throttled int64  `json:"throttled"`
	Err       string `json:"err"`
}

// runSender runs testdata/relaysender as who and decodes its result.
func runSender(t *testing.T, bin, who string, args ...string) senderResult {
	t.Helper()
	out, err := exec.Command("runuser", append([]string{"-u", who, "--", bin}, args...)...).Output()
	var r senderResult
	if jerr := json.Unmarshal(out, &r); err != nil || jerr != nil {
		t.Fatalf("relaysender as %s: %v %v: %q", who, err, jerr, out)
	}
	return r
}

// TestRelayFloodAsBobUnderMaxmemory (issue 26, item 2, on the real cluster's
// MUNGE): bob, with nothing but his own MUNGE identity, floods the real
// isched-relay with reports of the largest size on four connections until
// it has accepted four times Redis's maxmemory (64 MiB here, noeviction);
// alice sends her reports while the stream is at its cap. Before, the
// relay's cap was 100 000 entries (~6.25 GiB at 64 KiB): Redis refused
// every write (OOM) after ~800 (TestFloodNeverReachesRedisOOM, the same
// flood with the old cap). Now used_memory stays below maxmemory in every
// sample, no write gets OOM, and alice's reports are all accepted. The
// relay runs with a ration of 64 MiB/s a uid so the flood takes seconds:
// the bound holds whatever the ration.
func TestRelayFloodAsBobUnderMaxmemory(t *testing.T) {
	besideOthers(t)
	testutil.NeedSlurm(t) // MUNGE and the test users
	const maxMemory = 64 << 20
	r := testutil.StartSmallRedis(t, maxMemory)
	sender := testutil.Binary(t, "isched-relaysender", "./internal/e2e/testdata/relaysender")
	cluster := fmt.Sprintf("flood%d", time.Now().UnixNano()%1e6)
	dir := t.TempDir()
	env := append(os.Environ(), "ISCHED_REDIS_ADDR="+r.Addr, "ISCHED_REDIS_USER=reporter", "ISCHED_REDIS_PASSWORD_FILE="+r.PasswordFile(),
		"ISCHED_CLUSTER="+cluster)
	addr := startRelayProc(t, filepath.Join(dir, "relay.log"), env,
		"-uid-bytes-per-sec", strconv.Itoa(64<<20), "-uid-byte-burst", strconv.Itoa(64<<20),
		"-uid-entries-per-sec", "5000", "-uid-entry-burst", "5000")
	keys, err := stream.NewKeys(cluster)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	var sampler testutil.MemSampler
	sampCtx, stopSampling := context.WithCancel(ctx)
	sampled := make(chan struct{})
	go sampler.Run(sampCtx, r.Admin, maxMemory, sampled)

	const flood = 4 * maxMemory / report.MaxPayload // reports of the largest size
	args := []string{"-relay", addr, "-relay-uid", strconv.Itoa(os.Getuid()), "-cluster", cluster}
	bobDone := make(chan senderResult, 1)
	go func() {
		bobDone <- runSender(t, sender, "bob", append(args, "-size", strconv.Itoa(report.MaxPayload), "-n", strconv.Itoa(flood), "-conns", "4")...)
	}()
	// alice's turn once bob's flood has filled the stream to its cap
	capRE := "max_len="
	var capN int64
	testutil.Eventually(t, 2*time.Minute, 100*time.Millisecond, "the stream at the relay's cap", func() bool {
		if capN == 0 {
			b, _ := os.ReadFile(filepath.Join(dir, "relay.log"))
			if i := strings.Index(string(b), capRE); i >= 0 {
				capN, _ = strconv.ParseInt(strings.Fields(string(b[i+len(capRE):]))[0], 10, 64)
			}
		}
		n, _ := r.Admin.XLen(ctx, keys.Ingest()).Result()
		return capN > 0 && n >= capN
	})
	alice := runSender(t, sender, "alice", append(args, "-size", "600", "-n", "50")...)
	bob := <-bobDone
	stopSampling()
	<-sampled

	stats, err := r.Admin.Info(ctx, "memory", "errorstats").Result()
	if err != nil {
		t.Fatal(err)
	}
	peak := testutil.InfoField(t, stats, "used_memory_peak")
	t.Logf("relay cap %d entries; bob: %d of %d-byte reports accepted (%.1f × maxmemory), %d throttled; alice: %d of 50",
		capN, bob.Accepted, report.MaxPayload, float64(bob.Accepted*report.MaxPayload)/maxMemory, bob.Throttled, alice.Accepted)
	t.Logf("used_memory: %d samples, max %d (%.1f%% of maxmemory), Redis's peak %d",
		sampler.Samples.Load(), sampler.Max.Load(), 100*float64(sampler.Max.Load())/maxMemory, peak)
	if bob.Err != "" || bob.Accepted < flood {
		t.Errorf("bob's flood: %d of %d accepted, err %q: want all (a refusal other than throttling is a failed write)", bob.Accepted, flood, bob.Err)
	}
	if alice.Err != "" || alice.Accepted != 50 {
		t.Errorf("alice: %d of 50 accepted, err %q", alice.Accepted, alice.Err)
	}
	if err := sampler.Err(); err != nil {
		t.Errorf("sampling used_memory: %v", err)
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
}
